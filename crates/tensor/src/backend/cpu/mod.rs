//! The CPU backend: contiguous fast paths, strided fallbacks, parallel loops above a size
//! threshold (the caller plus helper threads that stay awake between kernels, see
//! `host::team`; `rayon` inside its own pool), SIMD through runtime-dispatched multiversioned loops, and
//! `gemm` for matrix products (split into blocks over the same threads) and for
//! convolutions (on column matrices built a block at a time, `conv.rs` and `im2col.rs`).

/// Whether the multiversioned kernel clone this expands in was compiled for FMA (AVX-512
/// implies it, though the clone's target does not name it): there the softmax
/// exponentials take [`crate::dtype::FloatElement::exp_normal_where`]'s fused form, and
/// elsewhere, where a fused step would be a library call, the unfused one. Only
/// meaningful inside a `#[multiversion]` function.
macro_rules! fma_clone {
    () => {
        multiversion::target::target_cfg_f!(any(target_feature = "fma", target_feature = "avx512f"))
    };
}

mod attention;
pub(crate) mod binary;
mod block;
mod channel_norm;
mod class_loss;
mod contiguous;
mod conv;
mod conv_direct;
mod conv_direct_grad;
mod conv_pieces;
mod conv_winograd;
mod im2col;
mod index;
mod join;
mod layer_norm;
mod lstm;
mod lstm_sequence;
mod mat;
mod matmul;
#[cfg(target_arch = "x86_64")]
mod matmul_amx;
#[cfg(target_arch = "x86_64")]
mod matmul_avx2;
#[cfg(target_arch = "x86_64")]
mod matmul_bf16;
mod matmul_lowp;
mod norm;
pub(crate) mod optim;
mod pool;
mod reduce;
mod softmax;
mod transpose;
pub(crate) mod unary;
mod unscale;

use crate::backend::validate::conv::{Role, check_views, check_window_view};
use crate::backend::validate::layer_norm as layer_norm_check;
use crate::backend::validate::norm as norm_check;
use crate::backend::validate::pool::{check_gather_planes, check_planes, check_scatter_planes};
use crate::backend::widen::{self, Narrow, Operand, low_of, operands};
use crate::backend::{AdamState, Backend, BinaryOp, CmpOp, ReduceOp, RmsPropState, Target, UnaryOp, View, validate};
use crate::dtype::Element;
use crate::host::{float_mode, random};
use crate::layout::Layout;
use crate::ops::attention::{Attention, check_laid_out, check_views as check_attention_views};
use crate::ops::conv::{ConvGeometry, SlidingWindow};
use crate::ops::layer_norm::OP as LAYER_NORM;
use crate::ops::loss::ClassLoss;
use crate::ops::lstm::{LstmRun, check_backward, check_forward, check_sequence, check_sequence_backward};
use crate::ops::norm::OP as NORM;
use crate::ops::optim::{AdamStep, RmsPropStep, SgdStep};
use crate::ops::pool::{PoolWindows, Resample};
use crate::random::Distribution;
use crate::storage::{Buffer, CpuStorage, Storage};
use crate::{DType, Device, Error, Result, Scalar};

/// The CPU backend.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuBackend;

// The backend is public: a storage of another device handed to it is an error, not a
// reinterpretation.
fn cpu(s: &Storage) -> Result<&CpuStorage> {
    s.as_cpu().ok_or_else(|| foreign(s))
}

fn cpu_mut(s: &mut Storage) -> Result<&mut CpuStorage> {
    match s.device() {
        Device::Cpu => s.as_cpu_mut().ok_or_else(|| Error::invalid("cpu", "expected a CPU storage")),
        _ => Err(foreign(s)),
    }
}

fn foreign(s: &Storage) -> Error {
    Error::Device { device: s.device().to_string(), msg: "the CPU backend was given a storage of this device".into() }
}

fn wrap(r: Result<CpuStorage>) -> Result<Storage> {
    r.map(Storage::Cpu)
}

// Every method validates its views first (see `validate`): the backend is public, and a
// layout from safe code may not fit the storage it is applied to.
//
// Every method that computes with float values (arithmetic, conversions, comparisons) runs
// inside a `float_mode::Scope`, which gives the calling thread the kernels' treatment of
// subnormals and gives the caller back its own when the method returns. Methods that only
// move or fill data do without: moving a value does not look at whether it is subnormal.
impl Backend for CpuBackend {
    fn device(&self) -> Device {
        Device::Cpu
    }

    fn full(&self, numel: usize, value: Scalar, dtype: DType) -> Result<Storage> {
        fn go<T: Element>(n: usize, v: Scalar) -> Result<CpuStorage> {
            let b = if v.is_zero_bits() {
                Buffer::<T>::zeros("full", n)?
            } else {
                Buffer::full("full", n, v.to_element())?
            };
            Ok(T::into_storage(b))
        }
        wrap(match dtype {
            DType::U8 => go::<u8>(numel, value),
            DType::I64 => go::<i64>(numel, value),
            DType::F16 => go::<half::f16>(numel, value),
            DType::BF16 => go::<half::bf16>(numel, value),
            DType::F32 => go::<f32>(numel, value),
            DType::F64 => go::<f64>(numel, value),
        })
    }

    // Inlined: every tensor made from host data on the CPU comes through here.
    #[inline]
    fn upload(&self, data: CpuStorage) -> Result<Storage> {
        Ok(Storage::Cpu(data))
    }

    fn download(&self, (s, l): View<'_>) -> Result<CpuStorage> {
        let l = validate::view("download", s, l)?;
        binary::cast(cpu(s)?, &l, s.dtype())
    }

    fn cast(&self, (s, l): View<'_>, dtype: DType) -> Result<Storage> {
        let _mode = float_mode::enter();
        let l = validate::view("to_dtype", s, l)?;
        wrap(binary::cast(cpu(s)?, &l, dtype))
    }

    fn unary(&self, op: UnaryOp, (s, l): View<'_>) -> Result<Storage> {
        let op = if s.dtype().is_half() { widen::scalar_as_pytorch(op, s.dtype()) } else { op };
        let _mode = float_mode::enter();
        // The layout stays a plain reference when it fits (see `validate::fits`): moving the
        // `Cow` that `validate::view` returns stalled on its own just-written words, a
        // measurable share of an operation on a small tensor.
        let anchored;
        let l = if validate::fits(s, l) {
            l
        } else {
            anchored = validate::view(op.name(), s, l)?;
            &*anchored
        };
        unary::unary(op, cpu(s)?, l)
    }

    fn binary(&self, op: BinaryOp, (a, la): View<'_>, (b, lb): View<'_>) -> Result<Storage> {
        let _mode = float_mode::enter();
        let (la, lb) = (validate::view(op.name(), a, la)?, validate::view(op.name(), b, lb)?);
        validate::same_shape(op.name(), &la, &lb)?;
        wrap(binary::binary(op, cpu(a)?, &la, cpu(b)?, &lb))
    }

    fn compare(&self, op: CmpOp, (a, la): View<'_>, (b, lb): View<'_>) -> Result<Storage> {
        let _mode = float_mode::enter();
        let (la, lb) = (validate::view(op.name(), a, la)?, validate::view(op.name(), b, lb)?);
        validate::same_shape(op.name(), &la, &lb)?;
        wrap(binary::compare(op, cpu(a)?, &la, cpu(b)?, &lb))
    }

    fn compare_scalar(&self, op: CmpOp, (a, la): View<'_>, scalar: Scalar) -> Result<Storage> {
        let _mode = float_mode::enter();
        let la = validate::view(op.name(), a, la)?;
        wrap(binary::compare_scalar(op, cpu(a)?, &la, scalar))
    }

    fn where_cond(&self, (c, lc): View<'_>, (a, la): View<'_>, (b, lb): View<'_>) -> Result<Storage> {
        let lc = validate::view("where", c, lc)?;
        let (la, lb) = (validate::view("where", a, la)?, validate::view("where", b, lb)?);
        validate::same_shape("where", &lc, &la)?;
        validate::same_shape("where", &lc, &lb)?;
        wrap(binary::where_cond(cpu(c)?, &lc, cpu(a)?, &la, cpu(b)?, &lb))
    }

    fn unary_inplace(&self, op: UnaryOp, dst: &mut Storage, layout: &Layout) -> Result<()> {
        let op = if dst.dtype().is_half() { widen::scalar_as_pytorch(op, dst.dtype()) } else { op };
        let _mode = float_mode::enter();
        let l = validate::view(op.name(), dst, layout)?;
        unary::unary_inplace(op, cpu_mut(dst)?, &l)
    }

    fn binary_inplace(&self, op: BinaryOp, dst: &mut Storage, layout: &Layout, (s, ls): View<'_>) -> Result<()> {
        let _mode = float_mode::enter();
        let (ld, ls) = (validate::view(op.name(), dst, layout)?, validate::view(op.name(), s, ls)?);
        validate::same_shape(op.name(), &ld, &ls)?;
        binary::binary_inplace(op, cpu_mut(dst)?, &ld, cpu(s)?, &ls)
    }

    fn copy_inplace(&self, dst: &mut Storage, layout: &Layout, (s, ls): View<'_>) -> Result<()> {
        let _mode = float_mode::enter();
        let (ld, ls) = (validate::view("copy_", dst, layout)?, validate::view("copy_", s, ls)?);
        validate::same_shape("copy_", &ld, &ls)?;
        binary::copy_inplace(cpu_mut(dst)?, &ld, cpu(s)?, &ls)
    }

    fn fill_inplace(&self, dst: &mut Storage, layout: &Layout, value: Scalar) -> Result<()> {
        let l = validate::view("fill_", dst, layout)?;
        binary::fill_inplace(cpu_mut(dst)?, &l, value)
    }

    fn reduce(&self, op: ReduceOp, (s, l): View<'_>, dims: &[usize]) -> Result<Storage> {
        if let Some(low) = low_of([s]) {
            return widen::reduce(self, low, op, (s, l), dims);
        }
        let _mode = float_mode::enter();
        let name = op.name();
        let l = validate::view(name, s, l)?;
        validate::sorted_dims(name, &l, dims)?;
        if matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin) && dims.len() != 1 {
            return Err(Error::invalid(name, format!("expected exactly one dimension, got {dims:?}")));
        }
        wrap(reduce::reduce(op, cpu(s)?, &l, dims))
    }

    fn softmax(&self, (s, l): View<'_>, dim: usize, log: bool) -> Result<Storage> {
        if let Some(low) = low_of([s]) {
            let [a] = operands(self, [(s, l)])?;
            return self.softmax(a.view(), dim, log)?.narrow(self, low);
        }
        let _mode = float_mode::enter();
        let l = validate::view("softmax", s, l)?;
        validate::dim("softmax", &l, dim)?;
        wrap(softmax::softmax(cpu(s)?, &l, dim, log))
    }

    fn class_loss(&self, (s, l): View<'_>, (t, lt): View<'_>, loss: &ClassLoss) -> Result<Storage> {
        if let Some(low) = low_of([s, t]) {
            let [x, y] = operands(self, [(s, l), (t, lt)])?;
            return self.class_loss(x.view(), y.view(), loss)?.narrow(self, low);
        }
        let _mode = float_mode::enter();
        let op = loss.name();
        let (l, lt) = (validate::view(op, s, l)?, validate::view(op, t, lt)?);
        validate::class_loss(loss, (s.dtype(), &l), (t.dtype(), &lt), None)?;
        wrap(class_loss::forward(cpu(s)?, &l, cpu(t)?, &lt, loss))
    }

    fn lstm_cell(
        &self,
        (a, la): View<'_>,
        (g, lg): View<'_>,
        (c, lc): View<'_>,
        bh: (usize, usize),
    ) -> Result<Storage> {
        if let Some(low) = low_of([a, g, c]) {
            let [x, y, z] = operands(self, [(a, la), (g, lg), (c, lc)])?;
            return self.lstm_cell(x.view(), y.view(), z.view(), bh)?.narrow(self, low);
        }
        let _mode = float_mode::enter();
        let op = "lstm_cell";
        let (la, lg, lc) = (validate::view(op, a, la)?, validate::view(op, g, lg)?, validate::view(op, c, lc)?);
        if check_forward((a.dtype(), &la), (g.dtype(), &lg), (c.dtype(), &lc))? != bh {
            return Err(Error::shape(op, format!("the operands do not have batch and hidden sizes {bh:?}")));
        }
        wrap(lstm::forward((cpu(a)?, &la), (cpu(g)?, &lg), (cpu(c)?, &lc), bh))
    }

    fn lstm_cell_backward(
        &self,
        (y, ly): View<'_>,
        gy: Option<View<'_>>,
        (dh, ldh): View<'_>,
        (dc, ldc): View<'_>,
        (c, lc): View<'_>,
        bh: (usize, usize),
    ) -> Result<[Storage; 2]> {
        if let Some(low) = low_of([y, dh, dc, c].into_iter().chain(gy.map(|(s, _)| s))) {
            let [y, dh, dc, c] = operands(self, [(y, ly), (dh, ldh), (dc, ldc), (c, lc)])?;
            let gy = Operand::optional(self, gy)?;
            let gy = gy.as_ref().map(Operand::view);
            return self.lstm_cell_backward(y.view(), gy, dh.view(), dc.view(), c.view(), bh)?.narrow(self, low);
        }
        let _mode = float_mode::enter();
        let op = "lstm_cell_backward";
        let ly = validate::view(op, y, ly)?;
        let gy = gy.map(|(s, l)| validate::view(op, s, l).map(|l| (s, l))).transpose()?;
        let (ldh, ldc, lc) = (validate::view(op, dh, ldh)?, validate::view(op, dc, ldc)?, validate::view(op, c, lc)?);
        let checked = check_backward(
            (y.dtype(), &ly),
            gy.as_ref().map(|(s, l)| (s.dtype(), &**l)),
            (dh.dtype(), &ldh),
            (dc.dtype(), &ldc),
            (c.dtype(), &lc),
        )?;
        if checked != bh {
            return Err(Error::shape(op, format!("the operands do not have batch and hidden sizes {bh:?}")));
        }
        let gy = gy.as_ref().map(|(s, l)| Ok::<_, Error>((cpu(s)?, &**l))).transpose()?;
        let [dp, dcp] = lstm::backward((cpu(y)?, &ly), gy, (cpu(dh)?, &ldh), (cpu(dc)?, &ldc), (cpu(c)?, &lc), bh)?;
        Ok([Storage::Cpu(dp), Storage::Cpu(dcp)])
    }

    fn lstm_sequence(
        &self,
        (gi, lgi): View<'_>,
        (w, lw): View<'_>,
        (h0, lh): View<'_>,
        (c0, lc): View<'_>,
        run: &LstmRun,
    ) -> Result<Storage> {
        if let Some(low) = low_of([gi, w, h0, c0]) {
            let [a, b, c, d] = operands(self, [(gi, lgi), (w, lw), (h0, lh), (c0, lc)])?;
            return self.lstm_sequence(a.view(), b.view(), c.view(), d.view(), run)?.narrow(self, low);
        }
        let _mode = float_mode::enter();
        let op = "lstm_sequence";
        let (lgi, lw) = (validate::view(op, gi, lgi)?, validate::view(op, w, lw)?);
        let (lh, lc) = (validate::view(op, h0, lh)?, validate::view(op, c0, lc)?);
        let checked =
            check_sequence((gi.dtype(), &lgi), (w.dtype(), &lw), (h0.dtype(), &lh), (c0.dtype(), &lc), run.reverse)?;
        if checked != *run {
            return Err(Error::shape(op, format!("the operands do not fit the run {run:?}")));
        }
        wrap(lstm_sequence::forward([(cpu(gi)?, &lgi), (cpu(w)?, &lw), (cpu(h0)?, &lh), (cpu(c0)?, &lc)], run))
    }

    fn lstm_sequence_backward(
        &self,
        (y, ly): View<'_>,
        (gy, lgy): View<'_>,
        (w, lw): View<'_>,
        (c0, lc): View<'_>,
        run: &LstmRun,
    ) -> Result<[Storage; 3]> {
        if let Some(low) = low_of([y, gy, w, c0]) {
            let [a, b, c, d] = operands(self, [(y, ly), (gy, lgy), (w, lw), (c0, lc)])?;
            return self.lstm_sequence_backward(a.view(), b.view(), c.view(), d.view(), run)?.narrow(self, low);
        }
        let _mode = float_mode::enter();
        let op = "lstm_sequence_backward";
        let (ly, lgy) = (validate::view(op, y, ly)?, validate::view(op, gy, lgy)?);
        let (lw, lc) = (validate::view(op, w, lw)?, validate::view(op, c0, lc)?);
        let checked = check_sequence_backward(
            (y.dtype(), &ly),
            (gy.dtype(), &lgy),
            (w.dtype(), &lw),
            (c0.dtype(), &lc),
            run.reverse,
        )?;
        if checked != *run {
            return Err(Error::shape(op, format!("the operands do not fit the run {run:?}")));
        }
        let grads = lstm_sequence::backward([(cpu(y)?, &ly), (cpu(gy)?, &lgy), (cpu(w)?, &lw), (cpu(c0)?, &lc)], run)?;
        Ok(grads.map(Storage::Cpu))
    }

    fn class_loss_backward(
        &self,
        (s, l): View<'_>,
        (t, lt): View<'_>,
        (g, lg): View<'_>,
        loss: &ClassLoss,
    ) -> Result<Storage> {
        if let Some(low) = low_of([s, t, g]) {
            let [x, y, z] = operands(self, [(s, l), (t, lt), (g, lg)])?;
            return self.class_loss_backward(x.view(), y.view(), z.view(), loss)?.narrow(self, low);
        }
        let _mode = float_mode::enter();
        let op = loss.name();
        let (l, lt, lg) = (validate::view(op, s, l)?, validate::view(op, t, lt)?, validate::view(op, g, lg)?);
        validate::class_loss(loss, (s.dtype(), &l), (t.dtype(), &lt), Some((g.dtype(), &lg)))?;
        wrap(class_loss::backward((cpu(s)?, &l), (cpu(t)?, &lt), (cpu(g)?, &lg), loss))
    }

    fn attention(&self, qkv: [View<'_>; 3], mask: Option<View<'_>>, spec: &Attention) -> Result<[Storage; 2]> {
        let views = qkv.map(|(s, l)| (s.dtype(), l));
        let out = check_attention_views(views, mask.map(|(s, l)| (s.dtype(), l)), None)?.output();
        self.attention_laid_out(qkv, mask, spec, &Layout::contiguous(out))
    }

    fn attention_laid_out(
        &self,
        [q, k, v]: [View<'_>; 3],
        mask: Option<View<'_>>,
        spec: &Attention,
        out: &Layout,
    ) -> Result<[Storage; 2]> {
        if let Some(low) = low_of([q.0, k.0, v.0].into_iter().chain(mask.map(|(s, _)| s))) {
            let [q, k, v] = operands(self, [q, k, v])?;
            let mask = Operand::optional(self, mask)?;
            let m = mask.as_ref().map(Operand::view);
            let [out, lse] = self.attention_laid_out([q.view(), k.view(), v.view()], m, spec, out)?;
            // The log-sum-exp stays f32 (as PyTorch keeps it): the backward recomputes the
            // probabilities from it, which bf16's 8 bits would put off by percents.
            return Ok([out.narrow(self, low)?, lse]);
        }
        let _mode = float_mode::enter();
        let op = crate::ops::attention::OP;
        let (lq, lk, lv) =
            (validate::view(op, q.0, q.1)?, validate::view(op, k.0, k.1)?, validate::view(op, v.0, v.1)?);
        let lm = mask.map(|(s, l)| validate::view(op, s, l)).transpose()?;
        let views = [(q.0.dtype(), &*lq), (k.0.dtype(), &*lk), (v.0.dtype(), &*lv)];
        let shapes = check_attention_views(views, mask.zip(lm.as_deref()).map(|((s, _), l)| (s.dtype(), l)), None)?;
        check_laid_out("output", out, &shapes.output())?;
        let m = mask.zip(lm.as_deref()).map(|((s, _), l)| Ok::<_, Error>((cpu(s)?, l))).transpose()?;
        let [out, lse] = attention::forward((cpu(q.0)?, &lq), (cpu(k.0)?, &lk), (cpu(v.0)?, &lv), m, spec, out)?;
        Ok([Storage::Cpu(out), Storage::Cpu(lse)])
    }

    fn attention_backward(
        &self,
        qkv: [View<'_>; 3],
        mask: Option<View<'_>>,
        saved: [View<'_>; 3],
        spec: &Attention,
    ) -> Result<[Storage; 3]> {
        let contiguous = |i: usize| Layout::contiguous(qkv[i].1.shape().clone());
        let (lq, lk, lv) = (contiguous(0), contiguous(1), contiguous(2));
        self.attention_backward_laid_out(qkv, mask, saved, spec, [&lq, &lk, &lv])
    }

    fn attention_backward_laid_out(
        &self,
        [q, k, v]: [View<'_>; 3],
        mask: Option<View<'_>>,
        [o, lse, g]: [View<'_>; 3],
        spec: &Attention,
        grads: [&Layout; 3],
    ) -> Result<[Storage; 3]> {
        let all = [q, k, v, o, lse, g];
        if let Some(low) = low_of(all.iter().map(|v| v.0).chain(mask.map(|(s, _)| s))) {
            let [q, k, v, o, lse, g] = operands(self, all)?;
            let mask = Operand::optional(self, mask)?;
            let m = mask.as_ref().map(Operand::view);
            return self
                .attention_backward_laid_out(
                    [q.view(), k.view(), v.view()],
                    m,
                    [o.view(), lse.view(), g.view()],
                    spec,
                    grads,
                )?
                .narrow(self, low);
        }
        let _mode = float_mode::enter();
        let op = crate::ops::attention::OP;
        let ls: Vec<_> = [q, k, v, o, lse, g].iter().map(|(s, l)| validate::view(op, s, l)).collect::<Result<_>>()?;
        let lm = mask.map(|(s, l)| validate::view(op, s, l)).transpose()?;
        let d = |i: usize| [q, k, v, o, lse, g][i].0.dtype();
        check_attention_views(
            [(d(0), &*ls[0]), (d(1), &*ls[1]), (d(2), &*ls[2])],
            mask.zip(lm.as_deref()).map(|((s, _), l)| (s.dtype(), l)),
            Some([(d(3), &*ls[3]), (d(4), &*ls[4]), (d(5), &*ls[5])]),
        )?;
        for (i, what) in ["query gradient", "key gradient", "value gradient"].into_iter().enumerate() {
            check_laid_out(what, grads[i], ls[i].shape())?;
        }
        let m = mask.zip(lm.as_deref()).map(|((s, _), l)| Ok::<_, Error>((cpu(s)?, l))).transpose()?;
        let hs = [cpu(q.0)?, cpu(k.0)?, cpu(v.0)?, cpu(o.0)?, cpu(lse.0)?, cpu(g.0)?];
        let ops = std::array::from_fn(|i| (hs[i], &*ls[i]));
        let [dq, dk, dv] = attention::backward(ops, m, spec, grads)?;
        Ok([Storage::Cpu(dq), Storage::Cpu(dk), Storage::Cpu(dv)])
    }

    fn matmul(&self, (a, la): View<'_>, (b, lb): View<'_>) -> Result<Storage> {
        // f16 has no kernel of its own on x86 without AVX512-FP16: widening the whole
        // operands once beat widening slice by slice inside each block (`matmul_lowp`) when
        // measured. bf16 runs its own kernel.
        if let Some(low @ DType::F16) = low_of([a, b]) {
            let [x, y] = operands(self, [(a, la), (b, lb)])?;
            return self.matmul(x.view(), y.view())?.narrow(self, low);
        }
        let _mode = float_mode::enter();
        let (la, lb) = (validate::view("matmul", a, la)?, validate::view("matmul", b, lb)?);
        validate::matmul(&la, &lb)?;
        wrap(matmul::matmul(cpu(a)?, &la, cpu(b)?, &lb))
    }

    fn matmul_into(&self, (a, la): View<'_>, (b, lb): View<'_>, (dst, ld): Target<'_>) -> Result<()> {
        // Written in place for f32 and f64 into a contiguous destination; anything else is
        // the product copied in.
        if ld.is_contiguous() && matches!(dst.dtype(), DType::F32 | DType::F64) {
            let _mode = float_mode::enter();
            let (la, lb) = (validate::view("matmul", a, la)?, validate::view("matmul", b, lb)?);
            validate::matmul(&la, &lb)?;
            let ldv = validate::view("matmul", dst, ld)?;
            let r = la.rank();
            let fits = ldv.rank() == r
                && ldv.shape()[..r - 1] == la.shape()[..r - 1]
                && ldv.shape()[r - 1] == lb.shape()[r - 1];
            if !fits {
                return Err(Error::shape(
                    "matmul_into",
                    format!("the product of {:?} and {:?} does not fit {:?}", la.shape(), lb.shape(), ldv.shape()),
                ));
            }
            if matmul::matmul_into(cpu(a)?, &la, cpu(b)?, &lb, cpu_mut(dst)?, &ldv) {
                return Ok(());
            }
        }
        let product = self.matmul((a, la), (b, lb))?;
        self.copy_inplace(dst, ld, (&product, &Layout::contiguous(ld.shape().clone())))
    }

    fn index_select(&self, (s, l): View<'_>, dim: usize, (i, li): View<'_>) -> Result<Storage> {
        let (l, li) = (validate::view("index_select", s, l)?, validate::view("index_select", i, li)?);
        validate::dim("index_select", &l, dim)?;
        wrap(index::index_select(cpu(s)?, &l, dim, cpu(i)?, &li))
    }

    fn gather(&self, (s, l): View<'_>, dim: usize, (i, li): View<'_>) -> Result<Storage> {
        let (l, li) = (validate::view("gather", s, l)?, validate::view("gather", i, li)?);
        validate::dim("gather", &l, dim)?;
        validate::index_within("gather", &li, &l, dim, "input")?;
        wrap(index::gather(cpu(s)?, &l, dim, cpu(i)?, &li))
    }

    fn scatter_add(&self, (d, ld): View<'_>, dim: usize, (i, li): View<'_>, (s, ls): View<'_>) -> Result<Storage> {
        if let Some(low) = low_of([d, s]) {
            let [x, y] = operands(self, [(d, ld), (s, ls)])?;
            return self.scatter_add(x.view(), dim, (i, li), y.view())?.narrow(self, low);
        }
        let _mode = float_mode::enter();
        let ld = validate::view("scatter_add", d, ld)?;
        let (li, ls) = (validate::view("scatter_add", i, li)?, validate::view("scatter_add", s, ls)?);
        validate::dim("scatter_add", &ld, dim)?;
        validate::index_within("scatter_add", &li, &ld, dim, "destination")?;
        // Every position of the index reads the source at the same position.
        validate::index_within("scatter_add", &li, &ls, usize::MAX, "source")?;
        wrap(index::scatter_add(cpu(d)?, &ld, dim, cpu(i)?, &li, cpu(s)?, &ls))
    }

    fn masked_fill(&self, (s, l): View<'_>, (m, lm): View<'_>, value: Scalar) -> Result<Storage> {
        let (l, lm) = (validate::view("masked_fill", s, l)?, validate::view("masked_fill", m, lm)?);
        validate::same_shape("masked_fill", &l, &lm)?;
        wrap(index::masked_fill(cpu(s)?, &l, cpu(m)?, &lm, value))
    }

    fn relu_backward(&self, (g, lg): View<'_>, (o, lo): View<'_>) -> Result<Storage> {
        let (lg, lo) = (validate::view("relu_backward", g, lg)?, validate::view("relu_backward", o, lo)?);
        validate::same_shape("relu_backward", &lg, &lo)?;
        wrap(binary::relu_backward(cpu(g)?, &lg, cpu(o)?, &lo))
    }

    fn triangle(&self, (s, l): View<'_>, diagonal: i64, upper: bool) -> Result<Storage> {
        let l = validate::view("tril", s, l)?;
        if l.rank() < 2 {
            return Err(Error::shape("tril", format!("expected at least 2 dimensions, got shape {}", l.shape())));
        }
        wrap(index::triangle(cpu(s)?, &l, diagonal, upper))
    }

    fn conv2d(
        &self,
        (sx, lx): View<'_>,
        (sw, lw): View<'_>,
        bias: Option<View<'_>>,
        geom: &ConvGeometry,
    ) -> Result<Storage> {
        if let Some(low) = low_of([sx, sw].into_iter().chain(bias.map(|(s, _)| s))) {
            let [x, w] = operands(self, [(sx, lx), (sw, lw)])?;
            let b = Operand::optional(self, bias)?;
            return self.conv2d(x.view(), w.view(), b.as_ref().map(Operand::view), geom)?.narrow(self, low);
        }
        let _mode = float_mode::enter();
        let mut views = vec![(sx, lx, Role::Input), (sw, lw, Role::Weight)];
        if let Some((sb, lb)) = bias {
            views.push((sb, lb, Role::Bias(geom.out_channels)));
        }
        let (n, l) = check_views("conv2d", geom, &views, Role::Output)?;
        let bias = bias.map(|(sb, _)| Ok::<_, Error>((cpu(sb)?, &*l[2]))).transpose()?;
        wrap(conv::conv2d((cpu(sx)?, &l[0]), (cpu(sw)?, &l[1]), bias, geom, n))
    }

    fn conv_transpose2d(
        &self,
        (sy, ly): View<'_>,
        (sw, lw): View<'_>,
        bias: Option<View<'_>>,
        geom: &ConvGeometry,
    ) -> Result<Storage> {
        if let Some(low) = low_of([sy, sw].into_iter().chain(bias.map(|(s, _)| s))) {
            let [y, w] = operands(self, [(sy, ly), (sw, lw)])?;
            let b = Operand::optional(self, bias)?;
            return self.conv_transpose2d(y.view(), w.view(), b.as_ref().map(Operand::view), geom)?.narrow(self, low);
        }
        let _mode = float_mode::enter();
        let mut views = vec![(sy, ly, Role::Output), (sw, lw, Role::Weight)];
        if let Some((sb, lb)) = bias {
            views.push((sb, lb, Role::Bias(geom.in_channels)));
        }
        let (n, l) = check_views("conv_transpose2d", geom, &views, Role::Input)?;
        let bias = bias.map(|(sb, _)| Ok::<_, Error>((cpu(sb)?, &*l[2]))).transpose()?;
        wrap(conv::conv_transpose2d((cpu(sy)?, &l[0]), (cpu(sw)?, &l[1]), bias, geom, n))
    }

    fn conv2d_weight_grad(&self, (sx, lx): View<'_>, (sy, ly): View<'_>, geom: &ConvGeometry) -> Result<Storage> {
        if let Some(low) = low_of([sx, sy]) {
            return widen::conv2d_weight_grad(self, low, (sx, lx), (sy, ly), geom);
        }
        let _mode = float_mode::enter();
        let views = [(sx, lx, Role::Input), (sy, ly, Role::Output)];
        let (n, l) = check_views("conv2d_weight_grad", geom, &views, Role::Weight)?;
        wrap(conv::conv2d_weight_grad((cpu(sx)?, &l[0]), (cpu(sy)?, &l[1]), geom, n))
    }

    fn unfold(&self, (s, l): View<'_>, window: &SlidingWindow) -> Result<Storage> {
        let (n, c, l) = check_window_view("unfold", window, s, l, false)?;
        wrap(im2col::unfold(cpu(s)?, &l, window, (n, c)))
    }

    fn fold(&self, (s, l): View<'_>, window: &SlidingWindow) -> Result<Storage> {
        if let Some(low) = low_of([s]) {
            let [a] = operands(self, [(s, l)])?;
            return self.fold(a.view(), window)?.narrow(self, low);
        }
        let _mode = float_mode::enter();
        let (n, c, l) = check_window_view("fold", window, s, l, true)?;
        wrap(im2col::fold(cpu(s)?, &l, window, (n, c)))
    }

    fn channel_norm(
        &self,
        x: View<'_>,
        weight: Option<View<'_>>,
        bias: Option<View<'_>>,
        eps: f64,
    ) -> Result<[Storage; 3]> {
        if let Some(low) = low_of([x.0].into_iter().chain(weight.map(|v| v.0)).chain(bias.map(|v| v.0))) {
            return widen::channel_norm(self, low, x, weight, bias, eps);
        }
        let _mode = float_mode::enter();
        let named = [("weight", weight), ("bias", bias)];
        let per_channel: Vec<_> = named.iter().filter_map(|&(n, v)| v.map(|(s, l)| (n, s, l))).collect();
        let dims = norm_check::check(x, None, &per_channel)?;
        let lx = validate::view(NORM, x.0, x.1)?;
        let (lw, lb) = (checked(weight)?, checked(bias)?);
        let w = weight.zip(lw.as_ref()).map(|((s, _), l)| Ok::<_, Error>((cpu(s)?, l))).transpose()?;
        let b = bias.zip(lb.as_ref()).map(|((s, _), l)| Ok::<_, Error>((cpu(s)?, l))).transpose()?;
        let out = channel_norm::forward((cpu(x.0)?, &lx), dims, w, b, eps)?;
        Ok(out.map(Storage::Cpu))
    }

    fn channel_norm_backward(
        &self,
        x: View<'_>,
        grad: View<'_>,
        mean: View<'_>,
        var: View<'_>,
        weight: Option<View<'_>>,
        eps: f64,
    ) -> Result<[Storage; 3]> {
        if let Some(low) = low_of([x.0, grad.0, mean.0, var.0].into_iter().chain(weight.map(|v| v.0))) {
            return widen::channel_norm_backward(self, low, [x, grad, mean, var], weight, eps);
        }
        let _mode = float_mode::enter();
        let mut per_channel = vec![("mean", mean.0, mean.1), ("variance", var.0, var.1)];
        per_channel.extend(weight.map(|(s, l)| ("weight", s, l)));
        let dims = norm_check::check(x, Some(grad), &per_channel)?;
        let view = |(s, l): View<'_>| validate::view(NORM, s, l).map(|l| l.into_owned());
        let (lx, lg, lm, lv) = (view(x)?, view(grad)?, view(mean)?, view(var)?);
        let lw = checked(weight)?;
        let w = weight.zip(lw.as_ref()).map(|((s, _), l)| Ok::<_, Error>((cpu(s)?, l))).transpose()?;
        let stats = [(cpu(mean.0)?, &lm), (cpu(var.0)?, &lv)];
        let out = channel_norm::backward((cpu(x.0)?, &lx), (cpu(grad.0)?, &lg), dims, stats, w, eps)?;
        Ok(out.map(Storage::Cpu))
    }

    fn layer_norm(
        &self,
        x: View<'_>,
        n: usize,
        weight: Option<View<'_>>,
        bias: Option<View<'_>>,
        eps: f64,
    ) -> Result<[Storage; 3]> {
        // 16-bit elements are widened inside the kernel's loops: no widened copies.
        let params = [("weight", weight), ("bias", bias)].into_iter().filter_map(|(w, v)| v.map(|v| (w, v))).collect();
        layer_norm_check::check(x, n, &layer_norm_check::Operands { grad: None, stats: None, params })?;
        let _mode = float_mode::enter();
        let lx = validate::view(LAYER_NORM, x.0, x.1)?;
        let (lw, lb) = (checked_param(weight)?, checked_param(bias)?);
        let w = weight.zip(lw.as_ref()).map(|((s, _), l)| Ok::<_, Error>((cpu(s)?, l))).transpose()?;
        let b = bias.zip(lb.as_ref()).map(|((s, _), l)| Ok::<_, Error>((cpu(s)?, l))).transpose()?;
        Ok(layer_norm::forward((cpu(x.0)?, &lx), n, w, b, eps)?.map(Storage::Cpu))
    }

    fn layer_norm_backward(
        &self,
        x: View<'_>,
        grad: View<'_>,
        n: usize,
        mean: View<'_>,
        rstd: View<'_>,
        weight: Option<View<'_>>,
    ) -> Result<[Storage; 3]> {
        let params = weight.map(|w| ("weight", w)).into_iter().collect();
        let operands = layer_norm_check::Operands { grad: Some(grad), stats: Some([mean, rstd]), params };
        layer_norm_check::check(x, n, &operands)?;
        let _mode = float_mode::enter();
        let view = |(s, l): View<'_>| validate::view(LAYER_NORM, s, l).map(|l| l.into_owned());
        let (lx, lg, lm, lr) = (view(x)?, view(grad)?, view(mean)?, view(rstd)?);
        let lw = checked_param(weight)?;
        let w = weight.zip(lw.as_ref()).map(|((s, _), l)| Ok::<_, Error>((cpu(s)?, l))).transpose()?;
        let stats = [(cpu(mean.0)?, &lm), (cpu(rstd.0)?, &lr)];
        Ok(layer_norm::backward((cpu(x.0)?, &lx), (cpu(grad.0)?, &lg), n, stats, w)?.map(Storage::Cpu))
    }

    fn max_pool2d(&self, (s, l): View<'_>, windows: &PoolWindows) -> Result<(Storage, Storage)> {
        if let Some(low) = low_of([s]) {
            let [a] = operands(self, [(s, l)])?;
            return self.max_pool2d(a.view(), windows)?.narrow(self, low);
        }
        windows.check("max_pool2d")?;
        let l = check_planes("max_pool2d", s, l, windows.input(), windows.output(), None)?;
        let _mode = float_mode::enter();
        let (values, index) = pool::max_pool2d(cpu(s)?, &l, windows)?;
        Ok((Storage::Cpu(values), Storage::Cpu(index)))
    }

    fn gather_planes(&self, (s, l): View<'_>, (si, li): View<'_>) -> Result<Storage> {
        let (l, li) = check_gather_planes(s, l, si, li)?;
        wrap(pool::gather_planes((cpu(s)?, &l), (cpu(si)?, &li)))
    }

    fn scatter_planes(&self, (s, l): View<'_>, (si, li): View<'_>, plane: [usize; 2]) -> Result<Storage> {
        // 16-bit gradients run natively: each plane is summed in f32 and rounded once.
        let (l, li) = check_scatter_planes(s, l, si, li, plane)?;
        let _mode = float_mode::enter();
        wrap(pool::scatter_planes((cpu(s)?, &l), (cpu(si)?, &li), plane))
    }

    fn resample2d(&self, (s, l): View<'_>, map: &Resample) -> Result<Storage> {
        if let Some(low) = low_of([s]) {
            let [a] = operands(self, [(s, l)])?;
            return self.resample2d(a.view(), map)?.narrow(self, low);
        }
        map.check("resample2d")?;
        let l = check_planes("resample2d", s, l, map.input(), map.output(), None)?;
        let _mode = float_mode::enter();
        wrap(pool::resample2d(cpu(s)?, &l, map))
    }

    fn random(&self, numel: usize, dist: Distribution, dtype: DType) -> Result<Storage> {
        if dtype.is_half() {
            return self.random(numel, dist, DType::F32)?.narrow(self, dtype);
        }
        let _mode = float_mode::enter();
        wrap(random::random(numel, dist, dtype))
    }

    fn randperm(&self, n: usize) -> Result<Storage> {
        wrap(random::randperm(n))
    }

    fn cat(&self, srcs: &[View<'_>], dim: usize) -> Result<Storage> {
        let (layouts, shape) = validate::cat(srcs, dim)?;
        let views: Vec<(&CpuStorage, &Layout)> =
            srcs.iter().zip(&layouts).map(|((s, _), l)| Ok((cpu(s)?, &**l))).collect::<Result<_>>()?;
        wrap(join::cat(&views, dim, &shape))
    }

    fn power_sum(&self, (s, l): View<'_>, p: f64) -> Result<f64> {
        if low_of([s]).is_some() {
            let [a] = operands(self, [(s, l)])?;
            return self.power_sum(a.view(), p);
        }
        let _mode = float_mode::enter();
        let l = validate::view("power_sum", s, l)?;
        norm::power_sum(cpu(s)?, &l, p)
    }

    fn sgd_step(&self, param: Target<'_>, grad: View<'_>, buffer: Option<Target<'_>>, hp: &SgdStep) -> Result<()> {
        if widen::any_low([&*param.0, grad.0].into_iter().chain(buffer.as_ref().map(|b| &*b.0))) {
            return widen::sgd_step(self, param, grad, buffer, hp);
        }
        let _mode = float_mode::enter();
        optim::sgd_step(param, grad, buffer, hp)
    }

    fn adam_step(&self, param: Target<'_>, grad: View<'_>, state: AdamState<'_>, hp: &AdamStep) -> Result<()> {
        let max = state.max_exp_avg_sq.as_ref().map(|t| &*t.0);
        if widen::any_low([&*param.0, grad.0, &*state.exp_avg.0, &*state.exp_avg_sq.0].into_iter().chain(max)) {
            return widen::adam_step(self, param, grad, state, hp);
        }
        let _mode = float_mode::enter();
        optim::adam_step(param, grad, state, hp)
    }

    fn rmsprop_step(&self, param: Target<'_>, grad: View<'_>, state: RmsPropState<'_>, hp: &RmsPropStep) -> Result<()> {
        let optional = [&state.grad_avg, &state.momentum_buffer];
        let extra = optional.into_iter().filter_map(|t| t.as_ref().map(|t| &*t.0));
        if widen::any_low([&*param.0, grad.0, &*state.square_avg.0].into_iter().chain(extra)) {
            return widen::rmsprop_step(self, param, grad, state, hp);
        }
        let _mode = float_mode::enter();
        optim::rmsprop_step(param, grad, state, hp)
    }

    fn non_finite_check_and_unscale(&self, (g, l): Target<'_>, inv_scale: f32) -> Result<bool> {
        let _mode = float_mode::enter();
        unscale::non_finite_check_and_unscale(g, l, inv_scale)
    }
}

/// The layout to run a kernel with for an optional per-channel operand (see
/// `validate::view`).
fn checked(v: Option<View<'_>>) -> Result<Option<Layout>> {
    v.map(|(s, l)| validate::view(NORM, s, l).map(|l| l.into_owned())).transpose()
}

/// The layout to run the layer-norm kernel with for an optional parameter (see
/// `validate::view`).
fn checked_param(v: Option<View<'_>>) -> Result<Option<Layout>> {
    v.map(|(s, l)| validate::view(LAYER_NORM, s, l).map(|l| l.into_owned())).transpose()
}
