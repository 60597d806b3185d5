//! The default bodies of the LSTM kernels (see `ops/lstm.rs`): a step composed from
//! elementwise kernels on strided views of the gates and slots, each intermediate a
//! separate `[B, H]` buffer; a whole sequence composed from a product and a step kernel
//! per step.

use crate::backend::kernels::Kernels;
use crate::backend::{BinaryOp, UnaryOp, View};
use crate::layout::Layout;
use crate::ops::lstm::{LSTM_SLOTS, LstmRun};
use crate::shape::Shape;
use crate::storage::Storage;
use crate::{Result, Scalar};
use smallvec::smallvec;

/// `[B, H]` views of one storage.
struct Frame {
    /// `[B, H]`, contiguous.
    bh: Layout,
    /// `[1, B, H]`, contiguous, for joining slots.
    slot: Layout,
}

impl Frame {
    fn new(b: usize, h: usize) -> Frame {
        Frame { bh: Layout::contiguous(Shape::from([b, h])), slot: Layout::contiguous(Shape::from([1, b, h])) }
    }

    /// Gate `k` (columns `k*H..(k+1)*H`) of a `[B, 4H]` view.
    fn gate(&self, l: &Layout, k: usize) -> Result<Layout> {
        let (s0, s1) = (l.strides()[0], l.strides()[1]);
        let h = self.bh.shape().dims()[1];
        Layout::new(self.bh.shape().clone(), smallvec![s0, s1], l.offset() + k * h * s1)
    }

    /// Slot `k` of a `[7, B, H]` view.
    fn slot_of(&self, l: &Layout, k: usize) -> Result<Layout> {
        let s = l.strides();
        Layout::new(self.bh.shape().clone(), smallvec![s[1], s[2]], l.offset() + k * s[0])
    }
}

pub(crate) fn forward<B: Kernels + ?Sized>(
    be: &B,
    a: View<'_>,
    gi: View<'_>,
    c: View<'_>,
    (b, h): (usize, usize),
) -> Result<Storage> {
    let fr = Frame::new(b, h);
    let p = be.binary(BinaryOp::Add, a, gi)?;
    let pl = Layout::contiguous(Shape::from([b, 4 * h]));
    let gate = |k: usize, op: UnaryOp| -> Result<Storage> { be.unary(op, (&p, &fr.gate(&pl, k)?)) };
    let (i, f, g, o) =
        (gate(0, UnaryOp::Sigmoid)?, gate(1, UnaryOp::Sigmoid)?, gate(2, UnaryOp::Tanh)?, gate(3, UnaryOp::Sigmoid)?);
    let bh = &fr.bh;
    let fc = be.binary(BinaryOp::Mul, (&f, bh), c)?;
    let ig = be.binary(BinaryOp::Mul, (&i, bh), (&g, bh))?;
    let c_new = be.binary(BinaryOp::Add, (&fc, bh), (&ig, bh))?;
    let tc = be.unary(UnaryOp::Tanh, (&c_new, bh))?;
    let h_new = be.binary(BinaryOp::Mul, (&o, bh), (&tc, bh))?;
    let slots = [&i, &f, &g, &o, &c_new, &h_new, &tc];
    let views: Vec<View<'_>> = slots.iter().map(|s| (*s, &fr.slot)).collect();
    be.cat(&views, 0)
}

pub(crate) fn backward<B: Kernels + ?Sized>(
    be: &B,
    y: View<'_>,
    gy: Option<View<'_>>,
    dh: View<'_>,
    dc: View<'_>,
    c: View<'_>,
    (b, h): (usize, usize),
) -> Result<[Storage; 2]> {
    let fr = Frame::new(b, h);
    let bh = &fr.bh;
    let dtype = c.0.dtype();
    let ys: Vec<Layout> = (0..7).map(|k| fr.slot_of(y.1, k)).collect::<Result<_>>()?;
    let slot = |k: usize| -> View<'_> { (y.0, &ys[k]) };
    let gys: Option<Vec<Layout>> = gy.map(|g| (0..7).map(|k| fr.slot_of(g.1, k)).collect::<Result<_>>()).transpose()?;
    let ones = be.full(b * h, Scalar::Float(1.0), dtype)?;
    let mul = |x: View<'_>, z: View<'_>| be.binary(BinaryOp::Mul, x, z);
    let add = |x: View<'_>, z: View<'_>| be.binary(BinaryOp::Add, x, z);
    // `x + gy[k]`, or a copy of `x` without slot gradients.
    let plus_gy = |x: View<'_>, k: usize| -> Result<Storage> {
        match (&gy, &gys) {
            (Some(g), Some(l)) => add(x, (g.0, &l[k])),
            _ => be.cast(x, dtype),
        }
    };
    let one_minus = |x: View<'_>| be.binary(BinaryOp::Sub, (&ones, bh), x);
    // x * (1 - x), the sigmoid's derivative from its output.
    let dsig = |x: View<'_>| -> Result<Storage> { mul(x, (&one_minus(x)?, bh)) };
    // (`d * slot(k)` plus the slot gradient `gy[k]`) times `deriv`.
    let gate = |d: &Storage, with: View<'_>, k: usize, deriv: &Storage| -> Result<Storage> {
        let prod = mul((d, bh), with)?;
        mul((&plus_gy((&prod, bh), k)?, bh), (deriv, bh))
    };

    let dh_t = plus_gy(dh, 5)?;
    let dtc = plus_gy((&mul((&dh_t, bh), slot(3))?, bh), 6)?;
    let tc2 = mul(slot(6), slot(6))?;
    let dc_from_h = mul((&dtc, bh), (&one_minus((&tc2, bh))?, bh))?;
    let dc_t = add((&plus_gy(dc, 4)?, bh), (&dc_from_h, bh))?;
    let dp_i = gate(&dc_t, slot(2), 0, &dsig(slot(0))?)?;
    let dp_f = gate(&dc_t, c, 1, &dsig(slot(1))?)?;
    let g2 = mul(slot(2), slot(2))?;
    let dp_g = gate(&dc_t, slot(0), 2, &one_minus((&g2, bh))?)?;
    let dp_o = gate(&dh_t, slot(6), 3, &dsig(slot(3))?)?;
    let dc_prev = mul((&dc_t, bh), slot(1))?;
    let dp = be.cat(&[(&dp_i, bh), (&dp_f, bh), (&dp_g, bh), (&dp_o, bh)], 1)?;
    Ok([dp, dc_prev])
}

/// `[B, W]` rows of step `t` of a `[T, .., B, W]` view, skipping `skip` blocks of its
/// second dimension (a slot of `[T, 7, B, H]` or `[T, 2, B, H]`; 0 for `[T, B, W]`).
fn step_rows(l: &Layout, t: usize, skip: usize) -> Result<Layout> {
    let (s, d) = (l.strides(), l.shape().dims());
    let r = l.rank();
    let offset = l.offset() + t * s[0] + if r == 4 { skip * s[1] } else { 0 };
    Layout::new(Shape::from([d[r - 2], d[r - 1]]), smallvec![s[r - 2], s[r - 1]], offset)
}

/// The default whole-sequence forward (see [`Backend::lstm_sequence`](crate::backend::Backend::lstm_sequence)): per step, the
/// product of the previous hidden state with `w_hh^T` and one [`Backend::lstm_cell`](crate::backend::Backend::lstm_cell); the
/// steps' slots are joined at the end.
pub(crate) fn sequence<B: Kernels + ?Sized>(
    be: &B,
    gi: View<'_>,
    w_hh: View<'_>,
    h0: View<'_>,
    c0: View<'_>,
    run: &LstmRun,
) -> Result<Storage> {
    let (b, h) = (run.batch, run.hidden);
    let w_t = w_hh.1.transposed(0, 1);
    let gates = Layout::contiguous(Shape::from([b, 4 * h]));
    let fr = Frame::new(b, h);
    let step = Layout::contiguous(Shape::from([LSTM_SLOTS, b, h]));
    let (h_slot, c_slot) = (fr.slot_of(&step, 5)?, fr.slot_of(&step, 4)?);
    // In the order the steps run.
    let mut ran: Vec<Storage> = Vec::with_capacity(run.steps);
    for t in run.order() {
        let (hv, cv) = match ran.last() {
            Some(p) => ((p, &h_slot), (p, &c_slot)),
            None => (h0, c0),
        };
        let a = be.matmul(hv, (w_hh.0, &w_t))?;
        let y = be.lstm_cell((&a, &gates), (gi.0, &step_rows(gi.1, t, 0)?), cv, (b, h))?;
        ran.push(y);
    }
    if run.reverse {
        ran.reverse();
    }
    let one = Layout::contiguous(Shape::from([1, LSTM_SLOTS, b, h]));
    let views: Vec<View<'_>> = ran.iter().map(|s| (s, &one)).collect();
    be.cat(&views, 0)
}

/// The default whole-sequence backward (see [`Backend::lstm_sequence_backward`](crate::backend::Backend::lstm_sequence_backward)): per step
/// from the last to run, the state gradient `gs` (`[T, 2, B, H]`) added to the one from the
/// next step, one [`Backend::lstm_cell_backward`](crate::backend::Backend::lstm_cell_backward) and the product of its gate gradients with
/// `w_hh`.
pub(crate) fn sequence_backward<B: Kernels + ?Sized>(
    be: &B,
    y: View<'_>,
    gs: View<'_>,
    w_hh: View<'_>,
    c0: View<'_>,
    run: &LstmRun,
) -> Result<[Storage; 3]> {
    let (b, h) = (run.batch, run.hidden);
    let dtype = c0.0.dtype();
    let fr = Frame::new(b, h);
    let gates = Layout::contiguous(Shape::from([b, 4 * h]));
    let slots = |v: View<'_>, t: usize| -> Result<Layout> {
        let s = v.1.strides();
        Layout::new(Shape::from([LSTM_SLOTS, b, h]), smallvec![s[1], s[2], s[3]], v.1.offset() + t * s[0])
    };
    let (mut dh, mut dc) = (be.full(b * h, Scalar::Float(0.0), dtype)?, be.full(b * h, Scalar::Float(0.0), dtype)?);
    let order: Vec<usize> = run.order().collect();
    // In the reverse of the order the steps ran.
    let mut da: Vec<Storage> = Vec::with_capacity(run.steps);
    for (n, &t) in order.iter().enumerate().rev() {
        let yl = slots(y, t)?;
        let c_prev = match n {
            0 => None,
            _ => Some(step_rows(y.1, order[n - 1], 4)?),
        };
        let cv = c_prev.as_ref().map_or(c0, |l| (y.0, l));
        let dc_t = be.binary(BinaryOp::Add, (&dc, &fr.bh), (gs.0, &step_rows(gs.1, t, 0)?))?;
        let dh_t = be.binary(BinaryOp::Add, (&dh, &fr.bh), (gs.0, &step_rows(gs.1, t, 1)?))?;
        let [a, dcp] = be.lstm_cell_backward((y.0, &yl), None, (&dh_t, &fr.bh), (&dc_t, &fr.bh), cv, (b, h))?;
        dh = be.matmul((&a, &gates), w_hh)?;
        dc = dcp;
        da.push(a);
    }
    if !run.reverse {
        da.reverse();
    }
    let one = Layout::contiguous(Shape::from([1, b, 4 * h]));
    let views: Vec<View<'_>> = da.iter().map(|s| (s, &one)).collect();
    Ok([be.cat(&views, 0)?, dh, dc])
}
