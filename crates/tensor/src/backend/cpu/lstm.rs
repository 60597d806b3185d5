//! The LSTM step kernels (see `ops/lstm.rs`): each batch row's gates, state and
//! gradients in one pass, rows in parallel when the batch is large.

use super::contiguous::Contiguous;
use crate::dtype::FloatElement;
use crate::host::iter::{GRAIN_COSTLY, par_for, rows_per_task};
use crate::layout::Layout;
use crate::ops::lstm::LSTM_SLOTS;
use crate::storage::{Buffer, CpuStorage};
use crate::{Error, Result};
use multiversion::multiversion;

fn sigmoid<T: FloatElement>(x: T) -> T {
    T::ONE / (T::ONE + (-x).exp())
}

/// The typed slices of float storages of one dtype.
pub(super) fn slices<'a, T: FloatElement>(op: &'static str, s: &[&'a CpuStorage]) -> Result<Vec<&'a [T]>> {
    s.iter()
        .map(|s| s.as_slice::<T>().ok_or_else(|| Error::dtype(op, format!("unexpected dtype {}", s.dtype()))))
        .collect()
}

/// Runs `f(first_row, rows)` over blocks of the `b` batch rows, in parallel when there is
/// enough work (`per_row` values computed per row). Rows are independent, so the split
/// never changes a result.
fn by_rows(b: usize, per_row: usize, f: impl Fn(usize, usize) + Sync) {
    let rows = rows_per_task(b, per_row, GRAIN_COSTLY).max(1);
    par_for(b.div_ceil(rows), |t| {
        let r0 = t * rows;
        f(r0, rows.min(b - r0));
    });
}

#[derive(Clone, Copy)]
pub(super) struct Out<T>(pub(super) *mut T);
// SAFETY: each task writes a disjoint set of rows.
unsafe impl<T> Send for Out<T> {}
unsafe impl<T> Sync for Out<T> {}

impl<T> Out<T> {
    /// The pointer to element `i`; a method, so that closures capture the whole `Out`
    /// (which is `Sync`), not its raw-pointer field. Computing it is safe; writing through
    /// it is the caller's `unsafe`, inside the buffer.
    pub(super) fn at(self, i: usize) -> *mut T {
        self.0.wrapping_add(i)
    }
}

/// One row's gates and state: `p = pa + pg` (`4h` values), the previous cell state `c`,
/// into the seven slot rows. Every loop runs over slices cut to the same length `h` and
/// calls the activations directly (no function pointers), so each becomes one vector loop.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
pub(super) fn forward_row<T: FloatElement>(pa: &[T], pg: &[T], c: &[T], out: [&mut [T]; LSTM_SLOTS]) {
    let h = c.len();
    let [si, sf, sg, so, sc, sh, stc] = out;
    let (pa, pg) = (&pa[..4 * h], &pg[..4 * h]);
    let gate = |k: usize| (&pa[k * h..(k + 1) * h], &pg[k * h..(k + 1) * h]);
    let ((ai, gi), (af, gf), (ag, gg), (ao, go)) = (gate(0), gate(1), gate(2), gate(3));
    let (si, sf, sg, so) = (&mut si[..h], &mut sf[..h], &mut sg[..h], &mut so[..h]);
    for j in 0..h {
        si[j] = sigmoid(ai[j] + gi[j]);
    }
    for j in 0..h {
        sf[j] = sigmoid(af[j] + gf[j]);
    }
    for j in 0..h {
        sg[j] = (ag[j] + gg[j]).tanh();
    }
    for j in 0..h {
        so[j] = sigmoid(ao[j] + go[j]);
    }
    let (sc, sh, stc) = (&mut sc[..h], &mut sh[..h], &mut stc[..h]);
    for j in 0..h {
        let cn = sf[j] * c[j] + si[j] * sg[j];
        let t = cn.tanh();
        sc[j] = cn;
        stc[j] = t;
        sh[j] = so[j] * t;
    }
}

fn forward_typed<T: FloatElement>(a: &[T], gi: &[T], c: &[T], b: usize, h: usize) -> Result<Buffer<T>> {
    let mut out = Buffer::<T>::uninit("lstm_cell", LSTM_SLOTS * b * h)?;
    let dst = Out(out.as_mut_ptr());
    by_rows(b, 8 * h, |r0, n| {
        for r in r0..r0 + n {
            // SAFETY: row `r` of each slot belongs to this task alone, and lies inside the
            // `7 * b * h` buffer; the seven rows are disjoint.
            let rows = std::array::from_fn(|k| unsafe { std::slice::from_raw_parts_mut(dst.at(k * b * h + r * h), h) });
            forward_row(&a[r * 4 * h..(r + 1) * 4 * h], &gi[r * 4 * h..(r + 1) * 4 * h], &c[r * h..(r + 1) * h], rows);
        }
    });
    Ok(out)
}

/// See [`crate::backend::Backend::lstm_cell`]; operands validated.
pub(crate) fn forward(
    (a, la): (&CpuStorage, &Layout),
    (gi, lgi): (&CpuStorage, &Layout),
    (c, lc): (&CpuStorage, &Layout),
    (b, h): (usize, usize),
) -> Result<CpuStorage> {
    let op = "lstm_cell";
    fn go<T: FloatElement>(
        op: &'static str,
        s: [(&CpuStorage, &Layout); 3],
        (b, h): (usize, usize),
    ) -> Result<Buffer<T>> {
        let t = slices::<T>(op, &[s[0].0, s[1].0, s[2].0])?;
        let a = Contiguous::of(op, t[0], s[0].1, GRAIN_COSTLY)?;
        let gi = Contiguous::of(op, t[1], s[1].1, GRAIN_COSTLY)?;
        let c = Contiguous::of(op, t[2], s[2].1, GRAIN_COSTLY)?;
        forward_typed(a.slice(), gi.slice(), c.slice(), b, h)
    }
    let s = [(a, la), (gi, lgi), (c, lc)];
    match a {
        CpuStorage::F32(_) => Ok(go::<f32>(op, s, (b, h))?.into()),
        CpuStorage::F64(_) => Ok(go::<f64>(op, s, (b, h))?.into()),
        _ => Err(Error::dtype(op, format!("the operands must be float, got {}", a.dtype()))),
    }
}

struct Grads<'a, T> {
    y: &'a [T],
    gy: Option<&'a [T]>,
    dh: &'a [T],
    dc: &'a [T],
    c: &'a [T],
}

/// The elements of a row the backward handles as one block of fixed-size arrays: 16 `f32`
/// fill one AVX-512 register.
const BACKWARD_BLOCK: usize = 16;

/// One element's backward: from its slot values `y` and their gradients `gy` (all zero,
/// and not read, unless `GY`), `dh`, `dc` and the previous cell state `c`, the four gate
/// gradients and `dc_prev`.
#[inline(always)]
fn backward_element<T: FloatElement, const GY: bool>(
    y: [T; LSTM_SLOTS],
    gy: [T; LSTM_SLOTS],
    dh: T,
    dc: T,
    c: T,
) -> [T; 5] {
    let [i, f, g, o, _, _, tc] = y;
    let [gi, gf, gg, go, gc, gh, gtc] = gy;
    // Without slot gradients the additions are left out rather than made with zeros: the
    // compiler may not drop `x + 0` (it turns -0 into +0).
    let plus = |x: T, g: T| if GY { x + g } else { x };
    let dh_t = plus(dh, gh);
    let dc_t = plus(dc, gc) + plus(dh_t * o, gtc) * (T::ONE - tc * tc);
    [
        plus(dc_t * g, gi) * i * (T::ONE - i),
        plus(dc_t * c, gf) * f * (T::ONE - f),
        plus(dc_t * i, gg) * (T::ONE - g * g),
        plus(dh_t * tc, go) * o * (T::ONE - o),
        dc_t * f,
    ]
}

/// The backward of a block of batch rows of one step, `c.len() / h` rows of `h` elements:
/// each slot's rows `y[k]` and their gradients `gy[k]` (if any), `dh`, `dc` and the
/// previous cell state `c`, all `[rows, h]`, into the `[rows, 4h]` gate gradients `dp` and
/// `dc_prev`.
///
/// One call covers a whole block of rows, and the slots are taken apart by name, not
/// through array maps: called once per row with the slots as mapped arrays (maps the
/// compiler did not inline), the sequence backward of an `LSTM(28, 256)` at batch 64 took
/// about a seventh longer on one thread. Each row runs in blocks of
/// [`BACKWARD_BLOCK`] elements computed into local arrays and then stored: written as one
/// loop over the seventeen input and five output slices, the compiler guarded its vector
/// loop with overlap checks between them and ran much of the row in its scalar copy
/// instead. Each element's arithmetic is the same either way. Without slot gradients (a
/// whole sequence's backward adds the state's own into `dh` and `dc` first) a separate
/// copy of the loop reads none.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
pub(super) fn backward_rows<T: FloatElement>(
    h: usize,
    y: [&[T]; LSTM_SLOTS],
    gy: Option<[&[T]; LSTM_SLOTS]>,
    (dh, dc, c): (&[T], &[T], &[T]),
    dp: &mut [T],
    dc_prev: &mut [T],
) {
    if h == 0 {
        return;
    }
    let [yi, yf, yg, yo, _, _, ytc] = y;
    for (r, (dpr, dcr)) in dp.chunks_exact_mut(4 * h).zip(dc_prev.chunks_exact_mut(h)).enumerate() {
        let at = r * h..(r + 1) * h;
        let (pi, rest) = dpr.split_at_mut(h);
        let (pf, rest) = rest.split_at_mut(h);
        let (pg, po) = rest.split_at_mut(h);
        let y = [&yi[at.clone()], &yf[at.clone()], &yg[at.clone()], &yo[at.clone()], &ytc[at.clone()]];
        let s = [&dh[at.clone()], &dc[at.clone()], &c[at.clone()]];
        let out = [pi, pf, pg, po, dcr];
        match gy {
            Some(gy) => backward_one_row::<T, true>(y, gy.map(|g| &g[at.clone()]), s, out),
            None => backward_one_row::<T, false>(y, [&[]; LSTM_SLOTS], s, out),
        }
    }
}

/// One row of [`backward_rows`]: the gates and `tanh(c)` `y = [i, f, g, o, tc]`, the seven
/// slot gradients `gy` (empty unless `GY`), `[dh, dc, c]`, into
/// `[d_i, d_f, d_g, d_o, dc_prev]`, all `h` long.
#[inline(always)]
fn backward_one_row<T: FloatElement, const GY: bool>(
    y: [&[T]; 5],
    gy: [&[T]; LSTM_SLOTS],
    s: [&[T]; 3],
    out: [&mut [T]; 5],
) {
    const B: usize = BACKWARD_BLOCK;
    let [yi, yf, yg, yo, ytc] = y;
    let [dh, dc, c] = s;
    let [pi, pf, pg, po, pc] = out;
    let h = pc.len();
    let blocks = h / B;
    // The slot gradients' blocks; none are read unless `GY`.
    #[inline(always)]
    fn chunks<T, const GY: bool>(g: &[T], h: usize) -> &[[T; BACKWARD_BLOCK]] {
        if GY { g[..h].as_chunks::<BACKWARD_BLOCK>().0 } else { &[] }
    }
    let [gi, gf, gg, go, gc, gh, gtc] = gy;
    {
        let (yi, yf, yg, yo, ytc) = (
            yi[..h].as_chunks::<B>().0,
            yf[..h].as_chunks::<B>().0,
            yg[..h].as_chunks::<B>().0,
            yo[..h].as_chunks::<B>().0,
            ytc[..h].as_chunks::<B>().0,
        );
        let (gi, gf, gg, go) =
            (chunks::<T, GY>(gi, h), chunks::<T, GY>(gf, h), chunks::<T, GY>(gg, h), chunks::<T, GY>(go, h));
        let (gc, gh, gtc) = (chunks::<T, GY>(gc, h), chunks::<T, GY>(gh, h), chunks::<T, GY>(gtc, h));
        let (dh, dc, c) = (dh[..h].as_chunks::<B>().0, dc[..h].as_chunks::<B>().0, c[..h].as_chunks::<B>().0);
        let (pi, pf, pg, po, pc) = (
            pi[..h].as_chunks_mut::<B>().0,
            pf[..h].as_chunks_mut::<B>().0,
            pg[..h].as_chunks_mut::<B>().0,
            po[..h].as_chunks_mut::<B>().0,
            pc[..h].as_chunks_mut::<B>().0,
        );
        for q in 0..blocks {
            let mut o = [[T::ZERO; B]; 5];
            for l in 0..B {
                let y = [yi[q][l], yf[q][l], yg[q][l], yo[q][l], T::ZERO, T::ZERO, ytc[q][l]];
                let g = if GY {
                    [gi[q][l], gf[q][l], gg[q][l], go[q][l], gc[q][l], gh[q][l], gtc[q][l]]
                } else {
                    [T::ZERO; LSTM_SLOTS]
                };
                let [a, b, d, e, f] = backward_element::<T, GY>(y, g, dh[q][l], dc[q][l], c[q][l]);
                (o[0][l], o[1][l], o[2][l], o[3][l], o[4][l]) = (a, b, d, e, f);
            }
            (pi[q], pf[q], pg[q], po[q], pc[q]) = (o[0], o[1], o[2], o[3], o[4]);
        }
    }
    for j in blocks * B..h {
        let y = [yi[j], yf[j], yg[j], yo[j], T::ZERO, T::ZERO, ytc[j]];
        let g = if GY { [gi[j], gf[j], gg[j], go[j], gc[j], gh[j], gtc[j]] } else { [T::ZERO; LSTM_SLOTS] };
        let [a, b, d, e, f] = backward_element::<T, GY>(y, g, dh[j], dc[j], c[j]);
        (pi[j], pf[j], pg[j], po[j], pc[j]) = (a, b, d, e, f);
    }
}

fn backward_typed<'a, T: FloatElement>(s: Grads<'a, T>, b: usize, h: usize) -> Result<(Buffer<T>, Buffer<T>)> {
    let op = "lstm_cell_backward";
    let mut dp = Buffer::<T>::uninit(op, b * 4 * h)?;
    let mut dcp = Buffer::<T>::uninit(op, b * h)?;
    let (dst_p, dst_c) = (Out(dp.as_mut_ptr()), Out(dcp.as_mut_ptr()));
    by_rows(b, 12 * h, |r0, n| {
        // Rows `r0..r0 + n` of slot `k`: one contiguous block of the `[7, b, h]` buffer.
        let rows = |all: &'a [T], k: usize| &all[(k * b + r0) * h..(k * b + r0 + n) * h];
        let y = std::array::from_fn(|k| rows(s.y, k));
        let gy = s.gy.map(|g| std::array::from_fn(|k| rows(g, k)));
        let one = r0 * h..(r0 + n) * h;
        // SAFETY: rows `r0..r0 + n` of both outputs belong to this task alone and lie
        // inside the `[b, 4h]` and `[b, h]` buffers.
        let (dp, dc_prev) = unsafe {
            (
                std::slice::from_raw_parts_mut(dst_p.at(r0 * 4 * h), n * 4 * h),
                std::slice::from_raw_parts_mut(dst_c.at(r0 * h), n * h),
            )
        };
        backward_rows(h, y, gy, (&s.dh[one.clone()], &s.dc[one.clone()], &s.c[one]), dp, dc_prev);
    });
    Ok((dp, dcp))
}

/// See [`crate::backend::Backend::lstm_cell_backward`]; operands validated.
pub(crate) fn backward(
    y: (&CpuStorage, &Layout),
    gy: Option<(&CpuStorage, &Layout)>,
    dh: (&CpuStorage, &Layout),
    dc: (&CpuStorage, &Layout),
    c: (&CpuStorage, &Layout),
    (b, h): (usize, usize),
) -> Result<[CpuStorage; 2]> {
    let op = "lstm_cell_backward";
    fn go<T: FloatElement>(
        op: &'static str,
        [y, dh, dc, c]: [(&CpuStorage, &Layout); 4],
        gy: Option<(&CpuStorage, &Layout)>,
        (b, h): (usize, usize),
    ) -> Result<[CpuStorage; 2]>
    where
        CpuStorage: From<Buffer<T>>,
    {
        fn view<'a, T: FloatElement>(op: &'static str, (s, l): (&'a CpuStorage, &Layout)) -> Result<Contiguous<'a, T>> {
            let t = slices::<T>(op, &[s])?;
            Contiguous::of(op, t[0], l, GRAIN_COSTLY)
        }
        let (y, dh, dc, c) = (view(op, y)?, view(op, dh)?, view(op, dc)?, view(op, c)?);
        let gy = gy.map(|g| view(op, g)).transpose()?;
        let grads =
            Grads { y: y.slice(), gy: gy.as_ref().map(|g| g.slice()), dh: dh.slice(), dc: dc.slice(), c: c.slice() };
        let (dp, dcp) = backward_typed(grads, b, h)?;
        Ok([dp.into(), dcp.into()])
    }
    match y.0 {
        CpuStorage::F32(_) => go::<f32>(op, [y, dh, dc, c], gy, (b, h)),
        CpuStorage::F64(_) => go::<f64>(op, [y, dh, dc, c], gy, (b, h)),
        _ => Err(Error::dtype(op, format!("the operands must be float, got {}", y.0.dtype()))),
    }
}

#[cfg(test)]
mod tests {
    use crate::backend::cpu::CpuBackend;
    use crate::backend::{Backend, compose};
    use crate::storage::Storage;
    use crate::{Result, Tensor};

    /// A `[rows, cols]` f64 tensor of varied values.
    fn values(rows: usize, cols: usize, seed: f64) -> Result<Tensor> {
        let v: Vec<f64> = (0..rows * cols).map(|i| ((i as f64 + seed) * 0.7).sin() * 1.5).collect();
        Tensor::from_vec(v, [rows, cols])
    }

    fn to_vec(s: &Storage) -> Vec<f64> {
        s.as_cpu().and_then(|c| c.as_slice::<f64>()).map(<[f64]>::to_vec).unwrap_or_default()
    }

    fn assert_close(a: &[f64], b: &[f64]) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-12, "{x} vs {y}");
        }
    }

    #[test]
    fn kernels_match_the_default_composition() -> Result<()> {
        let (b, h) = (3, 5);
        // A transposed product exercises the non-contiguous read.
        let a = values(4 * h, b, 1.0)?.t()?;
        let gi = values(b, 4 * h, 2.0)?;
        let c = values(b, h, 3.0)?;
        let fused = a.read3(&gi, &c, |va, vg, vc| CpuBackend.lstm_cell(va, vg, vc, (b, h)))?;
        let composed = a.read3(&gi, &c, |va, vg, vc| compose::lstm::forward(&CpuBackend, va, vg, vc, (b, h)))?;
        assert_close(&to_vec(&fused), &to_vec(&composed));

        let y = Tensor::lstm_cell(&a, &gi, &c)?;
        let gy = values(7 * b, h, 4.0)?.reshape([7, b, h])?;
        let (dh, dc) = (values(b, h, 5.0)?, values(b, h, 6.0)?);
        for gy in [Some(&gy), None] {
            let (dp, dcp) = Tensor::lstm_cell_backward(&y, gy, &dh, &dc, &c)?;
            // Distinct storages, read by one thread: nesting the read locks is safe here.
            let [ep, ec] = y.read3(&dh, &dc, |vy, vdh, vdc| {
                c.read(|vc| match gy {
                    Some(g) => g.read(|vg| compose::lstm::backward(&CpuBackend, vy, Some(vg), vdh, vdc, vc, (b, h))),
                    None => compose::lstm::backward(&CpuBackend, vy, None, vdh, vdc, vc, (b, h)),
                })
            })?;
            assert_close(&dp.to_vec::<f64>()?, &to_vec(&ep));
            assert_close(&dcp.to_vec::<f64>()?, &to_vec(&ec));
        }
        Ok(())
    }

    #[test]
    fn shapes_that_do_not_fit_are_errors_naming_the_op() -> Result<()> {
        let c = values(2, 3, 0.0)?;
        let err = Tensor::lstm_cell(&values(2, 11, 0.0)?, &values(2, 12, 0.0)?, &c).unwrap_err().to_string();
        assert!(err.contains("lstm_cell") && err.contains("[2, 12]"), "{err}");
        let y = Tensor::lstm_cell(&values(2, 12, 0.0)?, &values(2, 12, 1.0)?, &c)?;
        let err = Tensor::lstm_cell_backward(&y, None, &values(2, 4, 0.0)?, &c, &c).unwrap_err().to_string();
        assert!(err.contains("lstm_cell_backward") && err.contains("dh"), "{err}");
        Ok(())
    }
}
