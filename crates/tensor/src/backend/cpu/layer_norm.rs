//! The fused layer normalisation (see `ops/layer_norm.rs`) and its gradient.
//!
//! Forward makes, rows in parallel, two passes per row for the statistics (the sum, then
//! the sum of squared deviations from the mean, in `f64` lanes, so that data far from
//! zero does not cancel) and one that writes `(x - mean) * rstd * w + b`. Backward makes,
//! blocks of rows in parallel, one pass per row for each of its two sums, one that adds
//! the row to its block's `f64` column sums for the parameters' gradients (the row is in
//! cache by then), and one that writes the input's gradient; the blocks' column sums are
//! then added in block order. Each lane-wise sum has a loop of its own: the compiler
//! vectorises a loop with one accumulator array, and turned two into scalar code. The blocks
//! are fixed by the shape, never by the thread count, so the parameters' gradients come
//! out bitwise the same on any number of threads.
//!
//! The 16-bit floats are read and written directly: each element is widened to `f32` as
//! it is loaded and each result rounded once, so no widened copy of an operand is made.
//! A strided operand is copied into row-major order first.

use super::contiguous::Contiguous;
use crate::dtype::{Element, FloatElement};
use crate::host::iter::{GRAIN_CHEAP, par_chunks, rows_per_task};
use crate::layout::Layout;
use crate::ops::layer_norm::OP;
use crate::storage::{Buffer, CpuStorage};
use crate::{DType, Error, Result};
use multiversion::multiversion;
use std::sync::OnceLock;

/// Accumulator lanes of the sum loops.
const LANES: usize = 8;

/// The type a kernel computes in: `f32` for `f32` and the 16-bit floats, `f64` for `f64`.
trait Compute: FloatElement {
    /// `v` widened (or kept).
    fn load<T: Element>(v: T) -> Self;
    /// `self` rounded once to `T`.
    fn store<T: Element>(self) -> T;
}

impl Compute for f32 {
    #[inline(always)]
    fn load<T: Element>(v: T) -> f32 {
        v.to_f32()
    }
    #[inline(always)]
    fn store<T: Element>(self) -> T {
        T::from_f32(self)
    }
}

impl Compute for f64 {
    #[inline(always)]
    fn load<T: Element>(v: T) -> f64 {
        v.to_f64()
    }
    #[inline(always)]
    fn store<T: Element>(self) -> T {
        T::from_f64(self)
    }
}

/// The sum of `row`'s elements, in `f64` lanes.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn row_sum<T: Element, A: Compute>(row: &[T]) -> f64 {
    // One accumulator array per function: with the sum and the sum of squares in one
    // loop, the compiler paired each lane's two into scalar code (the forward ran at
    // 0.28 of PyTorch's speed at `[2048, 256]`).
    let mut acc = [0.0f64; LANES];
    let (blocks, tail) = row.as_chunks::<LANES>();
    for b in blocks {
        for i in 0..LANES {
            acc[i] += A::load(b[i]).to_f64();
        }
    }
    for (i, &v) in tail.iter().enumerate() {
        acc[i] += A::load(v).to_f64();
    }
    acc.iter().sum()
}

/// The sum of the squares of `row`'s elements minus `shift`, in `f64` lanes.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn squared_deviations<T: Element, A: Compute>(row: &[T], shift: f64) -> f64 {
    let mut acc = [0.0f64; LANES];
    let (blocks, tail) = row.as_chunks::<LANES>();
    for b in blocks {
        for i in 0..LANES {
            let d = A::load(b[i]).to_f64() - shift;
            acc[i] += d * d;
        }
    }
    for (i, &v) in tail.iter().enumerate() {
        let d = A::load(v).to_f64() - shift;
        acc[i] += d * d;
    }
    acc.iter().sum()
}

/// `out = ((x - mean) * rstd) * w + b`, each result rounded once.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn normalize_row<T: Element, A: Compute>(out: &mut [T], x: &[T], [mean, rstd]: [A; 2], w: &[A], b: &[A]) {
    for (((o, &v), &wj), &bj) in out.iter_mut().zip(x).zip(w).zip(b) {
        *o = (((A::load(v) - mean) * rstd) * wj + bj).store();
    }
}

/// `sum(g * w)` and `sum(g * w * xhat)` of one row, in `f64` lanes, each in a loop of
/// its own (see `row_sum`).
fn grad_row_sums<T: Element, A: Compute>(x: &[T], g: &[T], stats: [A; 2], w: &[A]) -> [f64; 2] {
    [weighted_sum::<T, A>(g, w), weighted_xhat_sum::<T, A>(x, g, stats, w)]
}

/// `sum(g * w)` of one row, in `f64` lanes.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn weighted_sum<T: Element, A: Compute>(g: &[T], w: &[A]) -> f64 {
    let n = g.len();
    let mut acc = [0.0f64; LANES];
    let (gc, gt) = g.as_chunks::<LANES>();
    let (wc, wt) = w[..n].as_chunks::<LANES>();
    for (gv, wb) in gc.iter().zip(wc) {
        // The products in `A` first, widened after (see `weighted_xhat_sum`).
        let mut gh = [A::ZERO; LANES];
        for i in 0..LANES {
            gh[i] = A::load(gv[i]) * wb[i];
        }
        for i in 0..LANES {
            acc[i] += gh[i].to_f64();
        }
    }
    for (i, (&gv, &wj)) in gt.iter().zip(wt).enumerate() {
        acc[i] += (A::load(gv) * wj).to_f64();
    }
    acc.iter().sum()
}

/// `sum(g * w * xhat)` of one row, in `f64` lanes.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn weighted_xhat_sum<T: Element, A: Compute>(x: &[T], g: &[T], [mean, rstd]: [A; 2], w: &[A]) -> f64 {
    let n = x.len();
    let mut acc = [0.0f64; LANES];
    let (xc, xt) = x.as_chunks::<LANES>();
    let (gc, gt) = g[..n].as_chunks::<LANES>();
    let (wc, wt) = w[..n].as_chunks::<LANES>();
    for ((xb, gv), wb) in xc.iter().zip(gc).zip(wc) {
        // The products in `A` first, widened after: in one expression the compiler
        // vectorised only pairs of lanes.
        let (mut gh, mut xhat) = ([A::ZERO; LANES], [A::ZERO; LANES]);
        for i in 0..LANES {
            gh[i] = A::load(gv[i]) * wb[i];
            xhat[i] = (A::load(xb[i]) - mean) * rstd;
        }
        for i in 0..LANES {
            acc[i] += gh[i].to_f64() * xhat[i].to_f64();
        }
    }
    for (i, ((&xv, &gv), &wj)) in xt.iter().zip(gt).zip(wt).enumerate() {
        let xhat = (A::load(xv) - mean) * rstd;
        acc[i] += (A::load(gv) * wj).to_f64() * xhat.to_f64();
    }
    acc.iter().sum()
}

/// Adds one row's `g * xhat` to the column sums `gw` and its `g` to `gb`: the parameters'
/// gradients, taken while the row is in cache.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn add_columns<T: Element, A: Compute>(x: &[T], g: &[T], [mean, rstd]: [A; 2], gw: &mut [f64], gb: &mut [f64]) {
    for (((&xv, &gv), gwj), gbj) in x.iter().zip(g).zip(gw.iter_mut()).zip(gb.iter_mut()) {
        let gi = A::load(gv);
        let xhat = (A::load(xv) - mean) * rstd;
        *gwj += (gi * xhat).to_f64();
        *gbj += gi.to_f64();
    }
}

/// `out = rstd * (g * w - c1 - xhat * c2)` for one row, `c1` and `c2` the row's means of
/// `g * w` and `g * w * xhat`.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn grad_row<T: Element, A: Compute>(out: &mut [T], x: &[T], g: &[T], [mean, rstd]: [A; 2], w: &[A], [c1, c2]: [A; 2]) {
    for (((o, &xv), &gv), &wj) in out.iter_mut().zip(x).zip(g).zip(w) {
        let xhat = (A::load(xv) - mean) * rstd;
        *o = (rstd * (A::load(gv) * wj - c1 - xhat * c2)).store();
    }
}

/// A per-element parameter of `n` elements as the compute type, or `n` copies of
/// `absent`.
fn per_element<A: Compute>(p: Option<(&CpuStorage, &Layout)>, n: usize, absent: f64) -> Result<Vec<A>> {
    fn read<T: Element, A: Compute>(s: &CpuStorage, l: &Layout) -> Result<Vec<A>> {
        Ok(dense::<T>((s, l))?.slice().iter().map(|&v| A::load(v)).collect())
    }
    let Some((s, l)) = p else { return Ok(vec![A::from_f64(absent); n]) };
    match s.dtype() {
        DType::F32 => read::<f32, A>(s, l),
        DType::F64 => read::<f64, A>(s, l),
        DType::BF16 => read::<half::bf16, A>(s, l),
        DType::F16 => read::<half::f16, A>(s, l),
        d => Err(Error::dtype(OP, format!("the parameters must be float, got {d}"))),
    }
}

/// The elements of a checked view of dtype `T`, in row-major order.
fn dense<'a, T: Element>((s, l): (&'a CpuStorage, &Layout)) -> Result<Contiguous<'a, T>> {
    let slice = s.as_slice::<T>().ok_or_else(|| Error::dtype(OP, format!("unexpected dtype {}", s.dtype())))?;
    Contiguous::of(OP, slice, l, GRAIN_CHEAP)
}

/// `values` as a storage of `dtype` (a float dtype).
fn storage_of(values: impl ExactSizeIterator<Item = f64>, dtype: DType) -> Result<CpuStorage> {
    fn fill<T: Element>(values: impl ExactSizeIterator<Item = f64>) -> Result<CpuStorage> {
        let mut out = Buffer::<T>::uninit(OP, values.len())?;
        for (o, v) in out.iter_mut().zip(values) {
            *o = T::from_f64(v);
        }
        Ok(T::into_storage(out))
    }
    match dtype {
        DType::F32 => fill::<f32>(values),
        DType::F64 => fill::<f64>(values),
        DType::BF16 => fill::<half::bf16>(values),
        DType::F16 => fill::<half::f16>(values),
        d => Err(Error::dtype(OP, format!("the parameters must be float, got {d}"))),
    }
}

/// The rows of `[rows, n]` data, `per_task` at a time: `f(first_row, chunk)` for the
/// consecutive chunks of `out`, which holds `per_row` entries a row.
fn by_rows<O: Send>(out: &mut [O], per_row: usize, rows: usize, f: impl Fn(usize, &mut [O]) + Sync) {
    let per_task = rows_per_task(rows, per_row.max(1), GRAIN_CHEAP);
    par_chunks(out, per_task * per_row.max(1), |i, chunk| f(i * per_task, chunk));
}

fn forward_typed<T: Element, A: Compute>(x: &[T], n: usize, [w, b]: [&[A]; 2], eps: f64) -> Result<[CpuStorage; 3]> {
    let rows = x.len() / n;
    let mut stats = vec![[A::ZERO; 2]; rows];
    // Statistics cost a pass of reading: their tasks are sized by the rows they read.
    let per_task = rows_per_task(rows, n, GRAIN_CHEAP);
    par_chunks(&mut stats, per_task, |i, chunk| {
        for (k, s) in chunk.iter_mut().enumerate() {
            let r = i * per_task + k;
            let row = &x[r * n..(r + 1) * n];
            let mean = row_sum::<T, A>(row) / n as f64;
            let var = squared_deviations::<T, A>(row, mean) / n as f64;
            *s = [A::from_f64(mean), A::from_f64(1.0 / (var + eps).sqrt())];
        }
    });
    let mut out = Buffer::<T>::uninit(OP, x.len())?;
    by_rows(&mut out, n, rows, |first, chunk| {
        for (k, o) in chunk.chunks_mut(n).enumerate() {
            let r = first + k;
            normalize_row(o, &x[r * n..(r + 1) * n], stats[r], w, b);
        }
    });
    let mut mean = Buffer::<A>::uninit(OP, rows)?;
    let mut rstd = Buffer::<A>::uninit(OP, rows)?;
    for ((m, s), st) in mean.iter_mut().zip(rstd.iter_mut()).zip(&stats) {
        [*m, *s] = *st;
    }
    Ok([T::into_storage(out), A::into_storage(mean), A::into_storage(rstd)])
}

/// Rows per block of the backward: enough for a cheap task's grain, and no more than
/// [`MAX_BLOCKS`] blocks, whose column sums are held until they are added up. Fixed by the
/// shape alone.
fn rows_per_block(rows: usize, n: usize) -> usize {
    (GRAIN_CHEAP / n.max(1)).max(rows.div_ceil(MAX_BLOCKS)).max(1)
}

/// The most blocks (and column-sum partials) of one backward.
const MAX_BLOCKS: usize = 64;

fn backward_typed<T: Element, A: Compute>(
    x: &[T],
    g: &[T],
    n: usize,
    [mean, rstd]: [&[A]; 2],
    w: &[A],
    param_dtype: DType,
) -> Result<[CpuStorage; 3]> {
    let rows = x.len() / n.max(1);
    let stats = |r: usize| [mean[r], rstd[r]];
    let per_block = rows_per_block(rows, n);
    // Each block's column sums `[gw.., gb..]`, set once by the task that owns the block.
    let partials: Vec<OnceLock<Vec<f64>>> = (0..rows.div_ceil(per_block)).map(|_| OnceLock::new()).collect();
    let mut gx = Buffer::<T>::uninit(OP, x.len())?;
    par_chunks(&mut gx, per_block * n.max(1), |b, chunk| {
        let mut cols = vec![0.0f64; 2 * n];
        let (gw, gb) = cols.split_at_mut(n);
        for (k, o) in chunk.chunks_mut(n).enumerate() {
            let r = b * per_block + k;
            let (xr, gr) = (&x[r * n..(r + 1) * n], &g[r * n..(r + 1) * n]);
            let [s1, s2] = grad_row_sums(xr, gr, stats(r), w);
            add_columns::<T, A>(xr, gr, stats(r), gw, gb);
            let c = [A::from_f64(s1 / n as f64), A::from_f64(s2 / n as f64)];
            grad_row(o, xr, gr, stats(r), w, c);
        }
        // The block is this task's alone, so the cell is empty.
        let _ = partials[b].set(cols);
    });
    let mut sums = vec![0.0f64; 2 * n];
    for part in partials.iter().filter_map(OnceLock::get) {
        for (s, &p) in sums.iter_mut().zip(part) {
            *s += p;
        }
    }
    let gw = storage_of(sums[..n].iter().copied(), param_dtype)?;
    let gb = storage_of(sums[n..].iter().copied(), param_dtype)?;
    Ok([T::into_storage(gx), gw, gb])
}

/// A checked view of a per-element parameter, if given.
pub(crate) type Param<'a> = Option<(&'a CpuStorage, &'a Layout)>;

/// [`crate::backend::Backend::layer_norm`] of checked operands, the input read as rows of
/// `n`.
pub(crate) fn forward(
    x: (&CpuStorage, &Layout),
    n: usize,
    weight: Param<'_>,
    bias: Param<'_>,
    eps: f64,
) -> Result<[CpuStorage; 3]> {
    fn go<T: Element, A: Compute>(
        x: (&CpuStorage, &Layout),
        n: usize,
        weight: Param<'_>,
        bias: Param<'_>,
        eps: f64,
    ) -> Result<[CpuStorage; 3]> {
        let x = dense::<T>(x)?;
        let (w, b) = (per_element::<A>(weight, n, 1.0)?, per_element::<A>(bias, n, 0.0)?);
        forward_typed::<T, A>(x.slice(), n, [&w, &b], eps)
    }
    match x.0.dtype() {
        DType::F32 => go::<f32, f32>(x, n, weight, bias, eps),
        DType::F64 => go::<f64, f64>(x, n, weight, bias, eps),
        DType::BF16 => go::<half::bf16, f32>(x, n, weight, bias, eps),
        DType::F16 => go::<half::f16, f32>(x, n, weight, bias, eps),
        d => Err(Error::dtype(OP, format!("the input must be float, got {d}"))),
    }
}

/// [`crate::backend::Backend::layer_norm_backward`] of checked operands, the input read as
/// rows of `n`.
pub(crate) fn backward(
    x: (&CpuStorage, &Layout),
    g: (&CpuStorage, &Layout),
    n: usize,
    [mean, rstd]: [(&CpuStorage, &Layout); 2],
    weight: Param<'_>,
) -> Result<[CpuStorage; 3]> {
    fn go<T: Element, A: Compute>(
        x: (&CpuStorage, &Layout),
        g: (&CpuStorage, &Layout),
        n: usize,
        [mean, rstd]: [(&CpuStorage, &Layout); 2],
        weight: Param<'_>,
    ) -> Result<[CpuStorage; 3]> {
        let (xs, gs) = (dense::<T>(x)?, dense::<T>(g)?);
        let (m, s) = (dense::<A>(mean)?, dense::<A>(rstd)?);
        let w = per_element::<A>(weight, n, 1.0)?;
        let param_dtype = weight.map_or(T::DTYPE, |(s, _)| s.dtype());
        backward_typed::<T, A>(xs.slice(), gs.slice(), n, [m.slice(), s.slice()], &w, param_dtype)
    }
    match x.0.dtype() {
        DType::F32 => go::<f32, f32>(x, g, n, [mean, rstd], weight),
        DType::F64 => go::<f64, f64>(x, g, n, [mean, rstd], weight),
        DType::BF16 => go::<half::bf16, f32>(x, g, n, [mean, rstd], weight),
        DType::F16 => go::<half::f16, f32>(x, g, n, [mean, rstd], weight),
        d => Err(Error::dtype(OP, format!("the input must be float, got {d}"))),
    }
}

#[cfg(test)]
mod tests {
    use crate::backend::cpu::CpuBackend;
    use crate::backend::{Backend, compose};
    use crate::storage::Storage;
    use crate::{DType, Shape, Tensor};

    fn values(s: [Storage; 3]) -> Vec<Vec<f64>> {
        s.into_iter()
            .map(|s| {
                let n = s.len();
                Tensor::from_storage(s, Shape::from([n])).to_dtype(DType::F64).to_vec::<f64>().unwrap_or_default()
            })
            .collect()
    }

    /// The results agree within `tol` (relative), and have one dtype each.
    fn close(a: [Storage; 3], b: [Storage; 3], tol: f64) -> Vec<Vec<f64>> {
        let dtypes = |s: &[Storage; 3]| s.iter().map(Storage::dtype).collect::<Vec<_>>();
        assert_eq!(dtypes(&a), dtypes(&b));
        let (a, b) = (values(a), values(b));
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.len(), y.len());
            for (p, q) in x.iter().zip(y) {
                assert!((p - q).abs() <= tol * (1.0 + q.abs()), "{p} vs {q}");
            }
        }
        a
    }

    /// The fused kernel agrees with the composed default on a strided input far from zero,
    /// with every affine variant, in every float dtype, 16-bit inputs with 16-bit and with
    /// `f32` parameters: the output in the input's dtype, the statistics and the parameters'
    /// gradients as the default gives them.
    #[test]
    fn fused_kernel_matches_composition() {
        let cases = [
            (DType::F64, DType::F64, 1e-12),
            (DType::F32, DType::F32, 1e-5),
            (DType::BF16, DType::BF16, 1e-2),
            (DType::BF16, DType::F32, 1e-2),
            (DType::F16, DType::F32, 2e-3),
        ];
        let (rows, n) = (6usize, 40usize);
        for (dtype, param, tol) in cases {
            let randn = |shape: &[usize], d: DType| Tensor::randn(shape.to_vec()).unwrap().to_dtype(d);
            let x = randn(&[n, rows], dtype).mul_scalar(3.0).add_scalar(50.0).transpose(0, 1).unwrap();
            let g = randn(&[rows, n], dtype);
            let (w, b) = (randn(&[n], param), randn(&[n], param));
            for (affine_w, affine_b) in [(false, false), (true, false), (false, true), (true, true)] {
                let stats = x.read(|xv| {
                    w.read(|wv| {
                        b.read(|bv| {
                            let (wv, bv) = (affine_w.then_some(wv), affine_b.then_some(bv));
                            let fused = CpuBackend.layer_norm(xv, n, wv, bv, 1e-5).unwrap();
                            let composed = compose::layer_norm::layer_norm(&CpuBackend, xv, n, wv, bv, 1e-5).unwrap();
                            close(fused, composed, tol)
                        })
                    })
                });
                let compute = dtype.compute_dtype();
                let mean = Tensor::from_vec(stats[1].clone(), [rows]).unwrap().to_dtype(compute);
                let rstd = Tensor::from_vec(stats[2].clone(), [rows]).unwrap().to_dtype(compute);
                x.read(|xv| {
                    g.read(|gv| {
                        mean.read(|mv| {
                            rstd.read(|rv| {
                                w.read(|wv| {
                                    let wv = affine_w.then_some(wv);
                                    let fused = CpuBackend.layer_norm_backward(xv, gv, n, mv, rv, wv).unwrap();
                                    let composed =
                                        compose::layer_norm::layer_norm_backward(&CpuBackend, xv, gv, n, mv, rv, wv)
                                            .unwrap();
                                    close(fused, composed, tol * 10.0);
                                })
                            })
                        })
                    })
                });
            }
        }
    }

    /// With rows enough for several blocks of column sums (and a ragged last block), the
    /// parameters' gradients still match the composition's sums down every row.
    #[test]
    fn parameter_gradients_over_several_blocks() {
        let (rows, n) = (9001usize, 12usize);
        assert!(rows.div_ceil(super::rows_per_block(rows, n)) > 2);
        let randn = |shape: &[usize]| Tensor::randn(shape.to_vec()).unwrap().to_dtype(DType::F64);
        let (x, g, w) = (randn(&[rows, n]).add_scalar(5.0), randn(&[rows, n]), randn(&[n]));
        let mean = x.mean(1, false).unwrap();
        let var = x.sub(&mean.unsqueeze(1).unwrap()).unwrap().square().mean(1, false).unwrap();
        let rstd = var.add_scalar(1e-5).rsqrt();
        let all = [&x, &g, &mean, &rstd, &w].map(|t| t.storage().read());
        let (xv, gv, mv) = ((&*all[0], x.layout()), (&*all[1], g.layout()), (&*all[2], mean.layout()));
        let (rv, wv) = ((&*all[3], rstd.layout()), (&*all[4], w.layout()));
        let fused = CpuBackend.layer_norm_backward(xv, gv, n, mv, rv, Some(wv)).unwrap();
        let composed = compose::layer_norm::layer_norm_backward(&CpuBackend, xv, gv, n, mv, rv, Some(wv)).unwrap();
        close(fused, composed, 1e-10);
    }

    /// Wrong operands are errors naming the operation, never reads out of bounds.
    #[test]
    fn bad_operands_are_refused() {
        let x = Tensor::randn([3, 4]).unwrap();
        let w64 = Tensor::ones([4], DType::F64).unwrap();
        let short = Tensor::ones([3], DType::F32).unwrap();
        x.read(|xv| {
            assert!(CpuBackend.layer_norm(xv, 5, None, None, 1e-5).unwrap_err().to_string().contains("layer_norm"));
            assert!(CpuBackend.layer_norm(xv, 0, None, None, 1e-5).is_err());
            w64.read(|wv| assert!(CpuBackend.layer_norm(xv, 4, Some(wv), None, 1e-5).is_err()));
            short.read(|sv| assert!(CpuBackend.layer_norm(xv, 4, None, Some(sv), 1e-5).is_err()));
        });
    }
}
