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

/// One element's backward: from its slot values `y` and their gradients `gy`, `dh`, `dc`
/// and the previous cell state `c`, the four gate gradients and `dc_prev`.
#[inline(always)]
fn backward_element<T: FloatElement>(y: [T; LSTM_SLOTS], gy: [T; LSTM_SLOTS], dh: T, dc: T, c: T) -> [T; 5] {
    let [i, f, g, o, _, _, tc] = y;
    let [gi, gf, gg, go, gc, gh, gtc] = gy;
    let dh_t = dh + gh;
    let dc_t = dc + gc + (dh_t * o + gtc) * (T::ONE - tc * tc);
    [
        (dc_t * g + gi) * i * (T::ONE - i),
        (dc_t * c + gf) * f * (T::ONE - f),
        (dc_t * i + gg) * (T::ONE - g * g),
        (dh_t * tc + go) * o * (T::ONE - o),
        dc_t * f,
    ]
}

/// One row of the backward: the slot rows `y`, their gradients `gy` (zeros if none), `dh`, `dc`
/// and `c`, into the `4h` gate gradients `dp` and `dc_prev`.
///
/// The row runs in blocks of [`BACKWARD_BLOCK`] elements computed into local arrays and
/// then stored: written as one loop over the seventeen input and five output slices, the
/// compiler guarded its vector loop with overlap checks between them and ran much of the
/// row in its scalar copy instead. Each element's arithmetic is the same either way.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
pub(super) fn backward_row<T: FloatElement>(
    y: [&[T]; LSTM_SLOTS],
    gy: [&[T]; LSTM_SLOTS],
    (dh, dc, c): (&[T], &[T], &[T]),
    dp: &mut [T],
    dc_prev: &mut [T],
) {
    const B: usize = BACKWARD_BLOCK;
    let h = c.len();
    let (y, gy) = (y.map(|s| &s[..h]), gy.map(|s| &s[..h]));
    let (dh, dc) = (&dh[..h], &dc[..h]);
    let (dp_i, rest) = dp[..4 * h].split_at_mut(h);
    let (dp_f, rest) = rest.split_at_mut(h);
    let (dp_g, dp_o) = rest.split_at_mut(h);
    let mut outs = [dp_i, dp_f, dp_g, dp_o, &mut dc_prev[..h]];
    let blocks = h / B;
    {
        let yb = y.map(|s| s.as_chunks::<B>().0);
        let gb = gy.map(|s| s.as_chunks::<B>().0);
        let (dhb, dcb, cb) = (dh.as_chunks::<B>().0, dc.as_chunks::<B>().0, c.as_chunks::<B>().0);
        let mut ob = outs.each_mut().map(|s| s.as_chunks_mut::<B>().0);
        for q in 0..blocks {
            let (yq, gq) = (yb.map(|s| &s[q]), gb.map(|s| &s[q]));
            let (dhq, dcq, cq) = (&dhb[q], &dcb[q], &cb[q]);
            let mut o = [[T::ZERO; B]; 5];
            for l in 0..B {
                let r = backward_element(yq.map(|s| s[l]), gq.map(|s| s[l]), dhq[l], dcq[l], cq[l]);
                for (k, v) in r.into_iter().enumerate() {
                    o[k][l] = v;
                }
            }
            for (dst, v) in ob.iter_mut().zip(o) {
                dst[q] = v;
            }
        }
    }
    for j in blocks * B..h {
        let r = backward_element(y.map(|s| s[j]), gy.map(|s| s[j]), dh[j], dc[j], c[j]);
        for (dst, v) in outs.iter_mut().zip(r) {
            dst[j] = v;
        }
    }
}

/// Row `r` of slot `k` of a `[7, b, h]` buffer.
fn slot_row<T>(all: &[T], k: usize, r: usize, b: usize, h: usize) -> &[T] {
    &all[(k * b + r) * h..(k * b + r + 1) * h]
}

fn backward_typed<T: FloatElement>(s: Grads<'_, T>, b: usize, h: usize) -> Result<(Buffer<T>, Buffer<T>)> {
    let op = "lstm_cell_backward";
    let mut dp = Buffer::<T>::uninit(op, b * 4 * h)?;
    let mut dcp = Buffer::<T>::uninit(op, b * h)?;
    let (dst_p, dst_c) = (Out(dp.as_mut_ptr()), Out(dcp.as_mut_ptr()));
    by_rows(b, 12 * h, |r0, n| {
        // Without slot gradients, the row function reads zeros.
        let zeros = vec![T::ZERO; if s.gy.is_some() { 0 } else { h }];
        for r in r0..r0 + n {
            let y = std::array::from_fn(|k| slot_row(s.y, k, r, b, h));
            let gy = std::array::from_fn(|k| s.gy.map_or(&zeros[..], |g| slot_row(g, k, r, b, h)));
            let one = r * h..(r + 1) * h;
            // SAFETY: row `r` of both outputs belongs to this task alone and lies inside
            // the `[b, 4h]` and `[b, h]` buffers.
            let (dp, dc_prev) = unsafe {
                (
                    std::slice::from_raw_parts_mut(dst_p.at(r * 4 * h), 4 * h),
                    std::slice::from_raw_parts_mut(dst_c.at(r * h), h),
                )
            };
            backward_row(y, gy, (&s.dh[one.clone()], &s.dc[one.clone()], &s.c[one]), dp, dc_prev);
        }
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
