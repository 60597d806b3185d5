//! The fused per-channel normalisation (see `ops/norm.rs`) and its gradient, channels
//! in parallel.
//!
//! Forward makes one pass over the input for the statistics (sums of `x - k` and
//! `(x - k)^2` in `f64` lanes, with `k` the channel's first element, so that f32 data far
//! from zero does not cancel) and one pass that writes `x * a[c] + b[c]`. Backward makes one
//! pass for the two per-channel sums (`sum g` and `sum g * (x - mean)`) and one that writes
//! `g * a[c] + x * p[c] + q[c]`. A strided input is copied into row-major order first.

use super::contiguous::Contiguous;
use crate::dtype::{Element, FloatElement};
use crate::host::iter::{GRAIN_CHEAP, fill_chunks, par_chunks, rows_per_task};
use crate::layout::Layout;
use crate::ops::norm::OP;
use crate::storage::{Buffer, CpuStorage};
use crate::{Error, Result};
use multiversion::multiversion;

/// Accumulator lanes of the sum loops.
const LANES: usize = 8;

/// Runs shorter than this take a plain loop: a dispatched vector loop costs more to enter
/// than a few elements take (rank-2 inputs have runs of one element).
const SHORT_RUN: usize = 16;

/// Two sums in `LANES` lanes each.
type Sums = [[f64; LANES]; 2];

/// Adds `x - k` and `(x - k)^2` of `block` into `acc`.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn shifted_sums<T: Element>(block: &[T], k: f64, acc: &mut Sums) {
    let (blocks, tail) = block.as_chunks::<LANES>();
    for b in blocks {
        // The deviations first, then each sum in a loop of its own: with both sums in one
        // loop the compiler paired each lane's two into scalar code.
        let mut d = [0.0f64; LANES];
        for i in 0..LANES {
            d[i] = b[i].to_f64() - k;
        }
        for i in 0..LANES {
            acc[0][i] += d[i];
        }
        for i in 0..LANES {
            acc[1][i] += d[i] * d[i];
        }
    }
    for (i, v) in tail.iter().enumerate() {
        let d = v.to_f64() - k;
        acc[0][i] += d;
        acc[1][i] += d * d;
    }
}

/// Adds `g` and `g * (x - mean)` of two blocks into `acc`.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn grad_sums<T: Element>(x: &[T], g: &[T], mean: f64, acc: &mut Sums) {
    let n = x.len().min(g.len());
    let (xs, x_tail) = x[..n].as_chunks::<LANES>();
    let (gs, g_tail) = g[..n].as_chunks::<LANES>();
    for (xb, gb) in xs.iter().zip(gs) {
        // Each sum in a loop of its own (see `shifted_sums`).
        let (mut gv, mut d) = ([0.0f64; LANES], [0.0f64; LANES]);
        for i in 0..LANES {
            gv[i] = gb[i].to_f64();
            d[i] = xb[i].to_f64() - mean;
        }
        for i in 0..LANES {
            acc[0][i] += gv[i];
        }
        for i in 0..LANES {
            acc[1][i] += gv[i] * d[i];
        }
    }
    for (i, (xv, gv)) in x_tail.iter().zip(g_tail).enumerate() {
        let gv = gv.to_f64();
        acc[0][i] += gv;
        acc[1][i] += gv * (xv.to_f64() - mean);
    }
}

/// `out = x * a + b`.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn scale_shift<T: FloatElement>(out: &mut [T], x: &[T], a: T, b: T) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = v * a + b;
    }
}

/// `out = g * a + x * p + q`.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn grad_combine<T: FloatElement>(out: &mut [T], g: &[T], x: &[T], [a, p, q]: [T; 3]) {
    for ((o, &gv), &xv) in out.iter_mut().zip(g).zip(x) {
        *o = gv * a + xv * p + q;
    }
}

/// Per-channel sums over `[outer, c, inner]` data, channels in parallel: `block(ch, start,
/// len, acc)` adds the block of channel `ch` that starts at `start`.
fn channel_sums([outer, c, inner]: [usize; 3], block: impl Fn(usize, usize, usize, &mut Sums) + Sync) -> Vec<[f64; 2]> {
    let mut sums = vec![[0.0f64; 2]; c];
    let per_task = rows_per_task(c, outer * inner, GRAIN_CHEAP);
    par_chunks(&mut sums, per_task, |i, chunk| {
        for (j, out) in chunk.iter_mut().enumerate() {
            let ch = i * per_task + j;
            let mut acc: Sums = [[0.0; LANES]; 2];
            for o in 0..outer {
                block(ch, (o * c + ch) * inner, inner, &mut acc);
            }
            *out = [acc[0].iter().sum(), acc[1].iter().sum()];
        }
    });
    sums
}

/// Fills `out` (`[outer, c, inner]`, contiguous) run by run: `run(ch, start, out_run)` writes
/// the elements from `start` on, all of channel `ch`. Large outputs are split over threads.
fn per_channel_runs<T: Element>(out: &mut [T], [_, c, inner]: [usize; 3], run: impl Fn(usize, usize, &mut [T]) + Sync) {
    fill_chunks(out, GRAIN_CHEAP, |start, chunk| {
        let mut done = 0;
        while done < chunk.len() {
            let pos = start + done;
            let len = (inner - pos % inner).min(chunk.len() - done);
            run((pos / inner) % c, pos, &mut chunk[done..done + len]);
            done += len;
        }
    });
}

fn forward_typed<T: FloatElement>(
    x: &[T],
    dims: [usize; 3],
    weight: Option<&[T]>,
    bias: Option<&[T]>,
    eps: f64,
) -> Result<[Buffer<T>; 3]> {
    let [outer, c, inner] = dims;
    let m = (outer * inner) as f64;
    let sums = channel_sums(dims, |ch, start, len, acc| {
        // Zero-size planes (`inner == 0`) still reach here once per outer index, with nothing
        // to shift by.
        let k = if inner > 0 { x[ch * inner].to_f64() } else { 0.0 };
        let block = &x[start..start + len];
        if len < SHORT_RUN {
            for v in block {
                let d = v.to_f64() - k;
                acc[0][0] += d;
                acc[1][0] += d * d;
            }
        } else {
            shifted_sums(block, k, acc);
        }
    });
    let mut mean = Buffer::<T>::uninit(OP, c)?;
    let mut var = Buffer::<T>::uninit(OP, c)?;
    // `x * a + b` per channel, with `a = weight * invstd` and `b = bias - mean * a`.
    let mut coef = Vec::with_capacity(c);
    for (ch, [s, q]) in sums.iter().enumerate() {
        let shift = if inner > 0 && outer > 0 { x[ch * inner].to_f64() } else { 0.0 };
        let d = s / m;
        let v = (q / m - d * d).max(0.0);
        let mu = shift + d;
        let invstd = 1.0 / (v + eps).sqrt();
        let a = weight.map_or(1.0, |w| w[ch].to_f64()) * invstd;
        let b = bias.map_or(0.0, |b| b[ch].to_f64()) - mu * a;
        mean[ch] = T::from_f64(mu);
        var[ch] = T::from_f64(v);
        coef.push((T::from_f64(a), T::from_f64(b)));
    }
    let mut out = Buffer::<T>::uninit(OP, x.len())?;
    per_channel_runs(&mut out, dims, |ch, start, run| {
        let (a, b) = coef[ch];
        let src = &x[start..start + run.len()];
        if run.len() < SHORT_RUN {
            for (o, &v) in run.iter_mut().zip(src) {
                *o = v * a + b;
            }
        } else {
            scale_shift(run, src, a, b);
        }
    });
    Ok([out, mean, var])
}

fn backward_typed<T: FloatElement>(
    x: &[T],
    g: &[T],
    dims: [usize; 3],
    [mean, var]: [&[T]; 2],
    weight: Option<&[T]>,
    eps: f64,
) -> Result<[Buffer<T>; 3]> {
    let [outer, c, inner] = dims;
    let m = (outer * inner) as f64;
    let sums = channel_sums(dims, |ch, start, len, acc| {
        let mu = mean[ch].to_f64();
        let (xb, gb) = (&x[start..start + len], &g[start..start + len]);
        if len < SHORT_RUN {
            for (xv, gv) in xb.iter().zip(gb) {
                let gv = gv.to_f64();
                acc[0][0] += gv;
                acc[1][0] += gv * (xv.to_f64() - mu);
            }
        } else {
            grad_sums(xb, gb, mu, acc);
        }
    });
    let mut sum_g = Buffer::<T>::uninit(OP, c)?;
    let mut sum_g_xhat = Buffer::<T>::uninit(OP, c)?;
    // grad = a * (g - sum_g / m - xhat * sum_g_xhat / m) with a = weight * invstd, expanded
    // into g * a + x * p + q.
    let mut coef = Vec::with_capacity(c);
    for (ch, [sg, sgd]) in sums.iter().enumerate() {
        let invstd = 1.0 / (var[ch].to_f64() + eps).sqrt();
        let sgx = sgd * invstd;
        let a = weight.map_or(1.0, |w| w[ch].to_f64()) * invstd;
        let p = -a * invstd * sgx / m;
        let q = -a * sg / m - p * mean[ch].to_f64();
        sum_g[ch] = T::from_f64(*sg);
        sum_g_xhat[ch] = T::from_f64(sgx);
        coef.push([T::from_f64(a), T::from_f64(p), T::from_f64(q)]);
    }
    let mut out = Buffer::<T>::uninit(OP, x.len())?;
    per_channel_runs(&mut out, dims, |ch, start, run| {
        let k = coef[ch];
        let end = start + run.len();
        let (gs, xs) = (&g[start..end], &x[start..end]);
        if run.len() < SHORT_RUN {
            for ((o, &gv), &xv) in run.iter_mut().zip(gs).zip(xs) {
                *o = gv * k[0] + xv * k[1] + k[2];
            }
        } else {
            grad_combine(run, gs, xs, k);
        }
    });
    Ok([out, sum_g, sum_g_xhat])
}

/// The elements of a checked view of dtype `T`, in row-major order.
fn dense<'a, T: Element>((s, l): (&'a CpuStorage, &Layout)) -> Result<Contiguous<'a, T>> {
    let slice = s.as_slice::<T>().ok_or_else(|| Error::dtype(OP, format!("unexpected dtype {}", s.dtype())))?;
    Contiguous::of(OP, slice, l, GRAIN_CHEAP)
}

/// A checked view of the per-channel operand, if given.
type Operand<'a> = Option<(&'a CpuStorage, &'a Layout)>;

fn into_storages<T: Element>(bufs: [Buffer<T>; 3]) -> [CpuStorage; 3] {
    bufs.map(T::into_storage)
}

/// [`crate::backend::Backend::channel_norm`] of checked operands of shape `dims`.
pub(crate) fn forward(
    x: (&CpuStorage, &Layout),
    dims: [usize; 3],
    weight: Operand<'_>,
    bias: Operand<'_>,
    eps: f64,
) -> Result<[CpuStorage; 3]> {
    fn go<T: FloatElement>(
        x: (&CpuStorage, &Layout),
        dims: [usize; 3],
        weight: Operand<'_>,
        bias: Operand<'_>,
        eps: f64,
    ) -> Result<[CpuStorage; 3]> {
        let x = dense::<T>(x)?;
        let w = weight.map(dense::<T>).transpose()?;
        let b = bias.map(dense::<T>).transpose()?;
        let out = forward_typed(x.slice(), dims, w.as_ref().map(|w| w.slice()), b.as_ref().map(|b| b.slice()), eps)?;
        Ok(into_storages(out))
    }
    match x.0 {
        CpuStorage::F32(_) => go::<f32>(x, dims, weight, bias, eps),
        CpuStorage::F64(_) => go::<f64>(x, dims, weight, bias, eps),
        s => Err(Error::dtype(OP, format!("the input must be float, got {}", s.dtype()))),
    }
}

/// [`crate::backend::Backend::channel_norm_backward`] of checked operands of shape `dims`.
pub(crate) fn backward(
    x: (&CpuStorage, &Layout),
    g: (&CpuStorage, &Layout),
    dims: [usize; 3],
    [mean, var]: [(&CpuStorage, &Layout); 2],
    weight: Operand<'_>,
    eps: f64,
) -> Result<[CpuStorage; 3]> {
    fn go<T: FloatElement>(
        x: (&CpuStorage, &Layout),
        g: (&CpuStorage, &Layout),
        dims: [usize; 3],
        [mean, var]: [(&CpuStorage, &Layout); 2],
        weight: Operand<'_>,
        eps: f64,
    ) -> Result<[CpuStorage; 3]> {
        let (x, g) = (dense::<T>(x)?, dense::<T>(g)?);
        let (mean, var) = (dense::<T>(mean)?, dense::<T>(var)?);
        let w = weight.map(dense::<T>).transpose()?;
        let stats = [mean.slice(), var.slice()];
        let out = backward_typed(x.slice(), g.slice(), dims, stats, w.as_ref().map(|w| w.slice()), eps)?;
        Ok(into_storages(out))
    }
    match x.0 {
        CpuStorage::F32(_) => go::<f32>(x, g, dims, [mean, var], weight, eps),
        CpuStorage::F64(_) => go::<f64>(x, g, dims, [mean, var], weight, eps),
        s => Err(Error::dtype(OP, format!("the input must be float, got {}", s.dtype()))),
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

    fn close(a: [Storage; 3], b: [Storage; 3], tol: f64) -> Vec<Vec<f64>> {
        let (a, b) = (values(a), values(b));
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.len(), y.len());
            for (p, q) in x.iter().zip(y) {
                assert!((p - q).abs() <= tol * (1.0 + q.abs()), "{p} vs {q}");
            }
        }
        a
    }

    /// The fused kernel agrees with the composed default on strided views, with and without
    /// an affine part, for short (rank-2) and long runs, in both float dtypes.
    #[test]
    fn fused_kernel_matches_composition() {
        for (dims, dtype, tol) in
            [([5usize, 3, 1], DType::F64, 1e-12), ([4, 3, 40], DType::F64, 1e-12), ([4, 3, 40], DType::F32, 2e-5)]
        {
            let [n, c, s] = dims;
            let randn = |shape: &[usize]| Tensor::randn(shape.to_vec()).unwrap().to_dtype(dtype);
            let x = randn(&[c, n, s]).mul_scalar(3.0).add_scalar(100.0).transpose(0, 1).unwrap();
            let (g, w, b) = (randn(&[n, c, s]), randn(&[c]), randn(&[c]));
            let mean = Tensor::zeros([c], dtype).unwrap();
            let var = Tensor::zeros([c], dtype).unwrap();
            for affine in [false, true] {
                x.read(|xv| {
                    w.read(|wv| {
                        b.read(|bv| {
                            let (wv, bv) = if affine { (Some(wv), Some(bv)) } else { (None, None) };
                            let fused = CpuBackend.channel_norm(xv, wv, bv, 1e-5).unwrap();
                            let composed = compose::norm::channel_norm(&CpuBackend, xv, wv, bv, 1e-5).unwrap();
                            let stats = close(fused, composed, tol);
                            mean.copy_(&Tensor::from_vec(stats[1].clone(), [c]).unwrap()).unwrap();
                            var.copy_(&Tensor::from_vec(stats[2].clone(), [c]).unwrap()).unwrap();
                        })
                    })
                });
                x.read(|xv| {
                    g.read(|gv| {
                        mean.read(|mv| {
                            var.read(|vv| {
                                w.read(|wv| {
                                    let wv = affine.then_some(wv);
                                    let fused = CpuBackend.channel_norm_backward(xv, gv, mv, vv, wv, 1e-5).unwrap();
                                    let composed =
                                        compose::norm::channel_norm_backward(&CpuBackend, xv, gv, mv, vv, wv, 1e-5)
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
}
