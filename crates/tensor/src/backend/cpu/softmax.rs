//! Fused softmax and log-softmax: one read for the maximum, one pass that exponentiates and
//! sums, one pass that normalises, per row, rows in parallel.

use super::iter::GRAIN_COSTLY;
use super::reduce::{MaxC, SumC, reduce_row, reduced_last};
use super::unary::map;
use crate::dtype::FloatElement;
use crate::layout::Layout;
use crate::storage::{Buffer, CpuStorage};
use crate::{Error, Result};
use multiversion::multiversion;
use rayon::prelude::*;

#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn exp_shifted<T: FloatElement>(row: &[T], out: &mut [T], max: T) {
    for (o, &x) in out.iter_mut().zip(row) {
        *o = (x - max).exp();
    }
}

#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn scale<T: FloatElement>(out: &mut [T], k: T) {
    for o in out.iter_mut() {
        *o = *o * k;
    }
}

#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn shift<T: FloatElement>(row: &[T], out: &mut [T], k: T) {
    for (o, &x) in out.iter_mut().zip(row) {
        *o = x - k;
    }
}

fn softmax_row<T: FloatElement>(row: &[T], out: &mut [T], log: bool) {
    let max = reduce_row(row, MaxC);
    // A row of -inf (fully masked) has no finite maximum; shifting by 0 keeps it NaN-free
    // where PyTorch would also produce NaN only for log of zero.
    let m = if max.is_finite() { max } else { T::ZERO };
    exp_shifted(row, out, m);
    let sum = reduce_row(out, SumC);
    if log {
        shift(row, out, m + sum.ln());
    } else {
        scale(out, T::ONE / sum);
    }
}

fn rows<T: FloatElement>(src: &[T], n_rows: usize, len: usize, log: bool) -> Result<Buffer<T>> {
    let mut out = Buffer::<T>::uninit("softmax", n_rows * len)?;
    if len == 0 {
        return Ok(out);
    }
    let per = (GRAIN_COSTLY / len).max(1);
    if n_rows > per && rayon::current_num_threads() > 1 {
        out.par_chunks_mut(per * len).enumerate().for_each(|(ci, chunk)| {
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
