//! Fused softmax and log-softmax: one read for the maximum, one pass that exponentiates and
//! sums, one pass that normalises, per row, rows in parallel. A row of up to a few thousand
//! elements stays in L1 between the passes.

use super::reduce::{MaxC, reduce_row, reduced_last};
use super::unary::map;
use crate::dtype::FloatElement;
use crate::host::iter::{GRAIN_COSTLY, par_chunks, rows_per_task, threads};
use crate::layout::Layout;
use crate::storage::{Buffer, CpuStorage};
use crate::{Error, Result};
use multiversion::multiversion;

/// Accumulator lanes of the fused exponentiate-and-sum loop.
const LANES: usize = 16;

/// Writes `exp(row - max)` into `out` and returns its sum, in one pass.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn exp_shifted_sum<T: FloatElement>(row: &[T], out: &mut [T], max: T) -> T {
    let n = row.len().min(out.len());
    let (row, out) = (&row[..n], &mut out[..n]);
    let mut acc = [T::ZERO; LANES];
    let (xs, x_tail) = row.as_chunks::<LANES>();
    let (os, o_tail) = out.as_chunks_mut::<LANES>();
    for (x, o) in xs.iter().zip(os) {
        // Blocks whose shifted values all stay where e^x is normal (nearly all of them)
        // take the cheaper exponential; NaN fails the test and takes the general one.
        let mut normal = true;
        for &v in x {
            normal &= v - max >= T::EXP_NORMAL_MIN;
        }
        if normal {
            for i in 0..LANES {
                let e = (x[i] - max).exp_normal_where(fma_clone!());
                o[i] = e;
                acc[i] = acc[i] + e;
            }
        } else {
            for i in 0..LANES {
                let e = (x[i] - max).exp();
                o[i] = e;
                acc[i] = acc[i] + e;
            }
        }
    }
    let mut tail = T::ZERO;
    for (&x, o) in x_tail.iter().zip(o_tail) {
        let e = (x - max).exp();
        *o = e;
        tail = tail + e;
    }
    let mut w = LANES;
    while w > 1 {
        w /= 2;
        for i in 0..w {
            acc[i] = acc[i] + acc[i + w];
        }
    }
    acc[0] + tail
}

#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn scale<T: FloatElement>(out: &mut [T], k: T) {
    for o in out.iter_mut() {
        *o = *o * k;
    }
}

#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn log_shift<T: FloatElement>(row: &[T], out: &mut [T], m: T, lse: T) {
    for (o, &x) in out.iter_mut().zip(row) {
        *o = (x - m) - lse;
    }
}

fn softmax_row<T: FloatElement>(row: &[T], out: &mut [T], log: bool) {
    let max = reduce_row(row, MaxC);
    // A row of -inf (fully masked) has no finite maximum; shifting by 0 keeps it NaN-free
    // where PyTorch would also produce NaN only for log of zero.
    let m = if max.is_finite() { max } else { T::ZERO };
    let sum = exp_shifted_sum(row, out, m);
    if log {
        // (x - m) - ln(sum), not x - (m + ln(sum)): in f32, m + ln(sum) rounds to the
        // precision of m, which for logits near 1e4 costs several digits.
        log_shift(row, out, m, sum.ln());
    } else {
        scale(out, T::ONE / sum);
    }
}

fn rows<T: FloatElement>(src: &[T], n_rows: usize, len: usize, log: bool) -> Result<Buffer<T>> {
    let mut out = Buffer::<T>::uninit("softmax", n_rows * len)?;
    if len == 0 {
        return Ok(out);
    }
    let per = rows_per_task(n_rows, len, GRAIN_COSTLY);
    if n_rows > per && threads() > 1 {
        par_chunks(&mut out, per * len, |ci, chunk| {
            for (i, o) in chunk.chunks_mut(len).enumerate() {
                let r = ci * per + i;
                softmax_row(&src[r * len..(r + 1) * len], o, log);
            }
        });
    } else {
        for (r, o) in out.chunks_mut(len).enumerate() {
            softmax_row(&src[r * len..(r + 1) * len], o, log);
        }
    }
    Ok(out)
}

fn typed<T: FloatElement>(src: &[T], l: &Layout, dim: usize, log: bool) -> Result<Buffer<T>> {
    let (pl, kept, len) = reduced_last(l, &[dim]);
    let last = dim + 1 == l.rank();
    match pl.contiguous_range() {
        Some(r) if last => rows(&src[r], kept, len, log),
        _ => {
            // Compute in the layout with `dim` last, then move `dim` back into place.
            let tmp = map("softmax", src, &pl, GRAIN_COSTLY, |v| v)?;
            let out = rows(&tmp, kept, len, log)?;
            let rank = l.rank();
            let mut inv: Vec<usize> = (0..rank - 1).collect();
            inv.insert(dim, rank - 1);
            let back = Layout::contiguous(pl.shape().clone()).permuted(&inv);
            map("softmax", &out, &back, GRAIN_COSTLY, |v| v)
        }
    }
}

/// Softmax (or log-softmax with `log`) of `(src, l)` along `dim`.
pub(crate) fn softmax(src: &CpuStorage, l: &Layout, dim: usize, log: bool) -> Result<CpuStorage> {
    match src {
        CpuStorage::F32(s) => Ok(typed(s, l, dim, log)?.into()),
        CpuStorage::F64(s) => Ok(typed(s, l, dim, log)?.into()),
        _ => Err(Error::dtype("softmax", format!("softmax needs a float tensor, got {}", src.dtype()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(row: &[f32], log: bool) -> Vec<f64> {
        let m = row.iter().map(|&v| v as f64).fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = row.iter().map(|&v| (v as f64 - m).exp()).sum();
        row.iter().map(|&v| if log { v as f64 - m - s.ln() } else { (v as f64 - m).exp() / s }).collect()
    }

    #[test]
    fn rows_of_every_length_match_naive() {
        // Lengths around the 16-lane fused loop and its tail; several rows so that the
        // parallel split is exercised too.
        for len in (1..70).chain([1000, 1024, 1031]) {
            let n_rows = 40;
            let src: Vec<f32> = (0..n_rows * len).map(|i| ((i * 7919) % 1009) as f32 * 0.02 - 10.0).collect();
            for log in [false, true] {
                let out = rows(&src, n_rows, len, log).unwrap();
                for r in 0..n_rows {
                    let want = naive(&src[r * len..(r + 1) * len], log);
                    for (g, w) in out[r * len..(r + 1) * len].iter().zip(&want) {
                        assert!((*g as f64 - w).abs() < 2e-6 * (1.0 + w.abs()), "len {len} log {log}: {g} vs {w}");
                    }
                }
            }
        }
    }

    #[test]
    fn masked_and_nan_rows() {
        let src = [f32::NEG_INFINITY, f32::NEG_INFINITY, 0.0, f32::NEG_INFINITY, 1.0, f32::NAN];
        let out = rows(&src, 3, 2, false).unwrap();
        assert!(out[0].is_nan() && out[1].is_nan(), "a fully masked row is NaN, as in PyTorch");
        assert_eq!((out[2], out[3]), (1.0, 0.0));
        assert!(out[4].is_nan() && out[5].is_nan());
    }
}
