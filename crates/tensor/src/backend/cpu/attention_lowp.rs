//! The attention kernel of `attention.rs` for 16-bit operands (bf16), without widening
//! them: the blocks, the online softmax and the task split are the `f32` kernel's, and the
//! products run on the low-precision product (`matmul_lowp::sum_f32`, with the kernel
//! `Lowp::best` picks for the matrix product), which multiplies 16-bit operands and sums
//! in `f32`.
//!
//! The rounding points are PyTorch's CPU flash attention's for reduced precision:
//!
//! - Forward: the scores `scale * q k^T` are `f32` sums of the 16-bit `q` and `k`; mask,
//!   running maximum and sum and the exponentials are `f32`; each block's probabilities
//!   `e^(s - m)` are rounded to the operands' dtype for the `P @ v` product, whose `f32`
//!   sums are added into an `f32` output accumulator. The output is rounded once at the
//!   end; the log-sum-exp stays `f32`.
//! - Backward: `D = rowsum(dO * O)` and the recomputed probabilities `P = e^(s - lse)` are
//!   `f32`; `P` rounded to 16 bits multiplies `dO` (`dv += P^T dO`); `dP = dO v^T` is an
//!   `f32` sum; `dS = P * (dP - D)` is `f32` and rounded to 16 bits for `dq += scale dS k`
//!   and `dk += scale dS^T q`. `dq`, `dk` and `dv` accumulate in `f32` (a chunk's `dk`, `dv`
//!   partials too) and are rounded once at the end.

use super::attention::{BK, BQ, Dims, Mask, Out, exp_sub, row_max, run_tasks, score_grad, sum_chunks};
use super::block::Mat;
use super::matmul_lowp::{Kernel, LowpFloat, sum_f32};
use crate::Result;
use crate::dtype::Element;
use crate::host::iter::threads;
use crate::ops::attention::{Attention, OP};
use crate::storage::Buffer;
use multiversion::multiversion;

/// `sums[m, n] = a[m, k] @ b[k, n]` in `f32` by `kernel` (`sums` row-major, contiguous);
/// each operand is a slice starting at its first element, with its row and column strides.
///
/// # Panics
/// If an operand does not hold every element its strides address: the callers derive the
/// strides from the slices they pass, so this is an internal invariant.
#[allow(clippy::too_many_arguments)]
fn product<T: LowpFloat>(
    kernel: Kernel,
    m: usize,
    n: usize,
    k: usize,
    (a, ars, acs): (&[T], usize, usize),
    (b, brs, bcs): (&[T], usize, usize),
    sums: &mut [f32],
) {
    if m == 0 || n == 0 {
        return;
    }
    let sums = &mut sums[..m * n];
    if k == 0 {
        sums.fill(0.0);
        return;
    }
    let reach = |rows: usize, cols: usize, rs: usize, cs: usize| (rows - 1) * rs + (cols - 1) * cs + 1;
    assert!(a.len() >= reach(m, k, ars, acs) && b.len() >= reach(k, n, brs, bcs), "attention: operand too short");
    let am = Mat { ptr: a.as_ptr(), rs: ars as isize, cs: acs as isize };
    let bm = Mat { ptr: b.as_ptr(), rs: brs as isize, cs: bcs as isize };
    // SAFETY: the assertion keeps every addressed element inside its slice, `sums` is a
    // unique borrow of `m * n` elements, and `kernel` is the one `Lowp::best` chose for `T`.
    unsafe { sum_f32(kernel, m, n, k, &am, &bm, sums) }
}

/// `dst += a * src`.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn add_scaled(dst: &mut [f32], src: &[f32], a: f32) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d += a * s;
    }
}

/// `x *= a`.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn scale_all(x: &mut [f32], a: f32) {
    for v in x {
        *v *= a;
    }
}

/// A float mask entry as the `f32` scores add it.
fn widen<T: Element>(x: T) -> f32 {
    x.to_f64() as f32
}

/// The output (rounded to `T`) and `f32` per-row log-sum-exp of contiguous 16-bit
/// operands, their products summed by `kernel`.
pub(super) fn forward<T: LowpFloat + Element>(
    (q, k, v): (&[T], &[T], &[T]),
    mask: &Mask<'_, T>,
    d: Dims,
    spec: &Attention,
    kernel: Kernel,
) -> Result<(Buffer<T>, Buffer<f32>)> {
    let mut out = Buffer::<T>::zeros(OP, d.batch * d.l * d.ev)?;
    let mut lse = Buffer::<f32>::zeros(OP, d.batch * d.l)?;
    let blocks = d.l.div_ceil(BQ);
    let (po, pl) = (Out(out.as_mut_ptr()), Out(lse.as_mut_ptr()));
    let scale = spec.scale as f32;
    let neg = f32::NEG_INFINITY;
    let task = |t: usize| {
        let (b, qb) = (t / blocks, t % blocks);
        let i0 = qb * BQ;
        let rows = BQ.min(d.l - i0);
        // SAFETY: task (b, qb) alone writes rows i0..i0 + rows of batch b.
        let (orows, lrow) = unsafe { (po.part((b * d.l + i0) * d.ev, rows * d.ev), pl.part(b * d.l + i0, rows)) };
        let qm = &q[(b * d.l + i0) * d.e..];
        let width = BK.min(d.s);
        let (mut s, mut p) = (vec![0f32; rows * width], vec![T::ZERO; rows * width]);
        let (mut acc, mut pv) = (vec![0f32; rows * d.ev], vec![0f32; rows * d.ev]);
        let (mut m, mut sum) = (vec![neg; rows], vec![0f32; rows]);
        let keys = d.keys(i0, rows, spec.causal);
        for j0 in (0..keys).step_by(BK) {
            let cols = BK.min(keys - j0);
            let (s, p) = (&mut s[..rows * cols], &mut p[..rows * cols]);
            product(kernel, rows, cols, d.e, (qm, d.e, 1), (&k[(b * d.s + j0) * d.e..], 1, d.e), s);
            scale_all(s, scale);
            mask.apply(s, b, (i0, rows), (j0, cols), spec.causal, widen);
            for r in 0..rows {
                let row = &mut s[r * cols..(r + 1) * cols];
                let top = row_max(row);
                let new_m = top.max(m[r]);
                if new_m == neg {
                    // Nothing seen yet in this row: its probabilities are all 0.
                    row.fill(0.0);
                    continue;
                }
                let add = exp_sub(row, new_m);
                if m[r] != new_m {
                    let corr = if m[r] == neg { 0.0 } else { (m[r] - new_m).exp() };
                    sum[r] *= corr;
                    scale_all(&mut acc[r * d.ev..(r + 1) * d.ev], corr);
                    m[r] = new_m;
                }
                sum[r] += add;
            }
            // The sums above use the f32 probabilities; the product reads them rounded.
            T::narrow(s, p);
            product(kernel, rows, d.ev, cols, (p, cols, 1), (&v[(b * d.s + j0) * d.ev..], d.ev, 1), &mut pv);
            add_scaled(&mut acc, &pv, 1.0);
        }
        for r in 0..rows {
            let row = &mut acc[r * d.ev..(r + 1) * d.ev];
            if sum[r] > 0.0 {
                scale_all(row, 1.0 / sum[r]);
                lrow[r] = m[r] + sum[r].ln();
            } else {
                // No key to attend to: the output stays 0.
                row.fill(0.0);
                lrow[r] = neg;
            }
            T::narrow(row, &mut orows[r * d.ev..(r + 1) * d.ev]);
        }
    };
    let task_work = BQ.min(d.l).saturating_mul(d.s).saturating_mul(d.e + d.ev);
    run_tasks(d.batch * blocks, d.work(), task_work, task);
    Ok((out, lse))
}

/// The contiguous operands of the backward: 16-bit tensors and the `f32` log-sum-exp.
pub(super) struct Saved<'a, T> {
    pub q: &'a [T],
    pub k: &'a [T],
    pub v: &'a [T],
    pub out: &'a [T],
    pub lse: &'a [f32],
    pub grad: &'a [T],
}

/// The gradients (rounded to `T`) with respect to query, key and value, their products
/// summed by `kernel`.
pub(super) fn backward<T: LowpFloat + Element>(
    x: &Saved<'_, T>,
    mask: &Mask<'_, T>,
    d: Dims,
    spec: &Attention,
    kernel: Kernel,
) -> Result<[Buffer<T>; 3]> {
    let blocks = d.l.div_ceil(BQ);
    // As the f32 kernel: enough chunks for every thread, each of whole query blocks.
    let chunks = (4 * threads()).div_ceil(d.batch.max(1)).clamp(1, blocks.max(1));
    let per_chunk = blocks.div_ceil(chunks);
    let chunks = blocks.div_ceil(per_chunk.max(1)).max(1);
    let mut dq = Buffer::<T>::zeros(OP, d.batch * d.l * d.e)?;
    let mut dk = Buffer::<f32>::zeros(OP, d.batch * chunks * d.s * d.e)?;
    let mut dv = Buffer::<f32>::zeros(OP, d.batch * chunks * d.s * d.ev)?;
    let (pq, pk, pv) = (Out(dq.as_mut_ptr()), Out(dk.as_mut_ptr()), Out(dv.as_mut_ptr()));
    let scale = spec.scale as f32;
    let task = |t: usize| {
        let (b, c) = (t / chunks, t % chunks);
        // SAFETY: chunk (b, c) alone writes partial sum b * chunks + c of dk and dv.
        let (dkp, dvp) = unsafe { (pk.part(t * d.s * d.e, d.s * d.e), pv.part(t * d.s * d.ev, d.s * d.ev)) };
        let (height, width) = (BQ.min(d.l), BK.min(d.s));
        let (mut p, mut ds) = (vec![0f32; height * width], vec![0f32; height * width]);
        let (mut p16, mut ds16) = (vec![T::ZERO; height * width], vec![T::ZERO; height * width]);
        let mut tmp = vec![0f32; height.max(width) * d.e.max(d.ev)];
        let mut dq_acc = vec![0f32; height * d.e];
        let (mut wg, mut wo) = (vec![0f32; d.ev], vec![0f32; d.ev]);
        let mut dd = [0f32; BQ];
        for qb in c * per_chunk..((c + 1) * per_chunk).min(blocks) {
            let i0 = qb * BQ;
            let rows = BQ.min(d.l - i0);
            // SAFETY: query block qb of batch b belongs to this chunk alone.
            let dqm = unsafe { pq.part((b * d.l + i0) * d.e, rows * d.e) };
            let qm = &x.q[(b * d.l + i0) * d.e..(b * d.l + i0 + rows) * d.e];
            let gm = &x.grad[(b * d.l + i0) * d.ev..(b * d.l + i0 + rows) * d.ev];
            let om = &x.out[(b * d.l + i0) * d.ev..(b * d.l + i0 + rows) * d.ev];
            let lse = &x.lse[b * d.l + i0..b * d.l + i0 + rows];
            for r in 0..rows {
                T::widen(&gm[r * d.ev..(r + 1) * d.ev], &mut wg);
                T::widen(&om[r * d.ev..(r + 1) * d.ev], &mut wo);
                dd[r] = wg.iter().zip(&wo).map(|(g, o)| g * o).sum();
            }
            let dq_acc = &mut dq_acc[..rows * d.e];
            dq_acc.fill(0.0);
            let keys = d.keys(i0, rows, spec.causal);
            for j0 in (0..keys).step_by(BK) {
                let cols = BK.min(keys - j0);
                let (p, ds) = (&mut p[..rows * cols], &mut ds[..rows * cols]);
                let (p16, ds16) = (&mut p16[..rows * cols], &mut ds16[..rows * cols]);
                let km = &x.k[(b * d.s + j0) * d.e..];
                let vm = &x.v[(b * d.s + j0) * d.ev..];
                product(kernel, rows, cols, d.e, (qm, d.e, 1), (km, 1, d.e), p);
                scale_all(p, scale);
                mask.apply(p, b, (i0, rows), (j0, cols), spec.causal, widen);
                for r in 0..rows {
                    let row = &mut p[r * cols..(r + 1) * cols];
                    if lse[r] == f32::NEG_INFINITY {
                        row.fill(0.0);
                    } else {
                        exp_sub(row, lse[r]);
                    }
                }
                T::narrow(p, p16);
                // dv[j0..] += P^T dO
                product(kernel, cols, d.ev, rows, (p16, 1, cols), (gm, d.ev, 1), &mut tmp);
                add_scaled(&mut dvp[j0 * d.ev..(j0 + cols) * d.ev], &tmp[..cols * d.ev], 1.0);
                // dS = P * (dO v^T - D)
                product(kernel, rows, cols, d.ev, (gm, d.ev, 1), (vm, 1, d.ev), ds);
                for r in 0..rows {
                    score_grad(&mut ds[r * cols..(r + 1) * cols], &p[r * cols..(r + 1) * cols], dd[r]);
                }
                T::narrow(ds, ds16);
                product(kernel, rows, d.e, cols, (ds16, cols, 1), (km, d.e, 1), &mut tmp);
                add_scaled(dq_acc, &tmp[..rows * d.e], scale);
                product(kernel, cols, d.e, rows, (ds16, 1, cols), (qm, d.e, 1), &mut tmp);
                add_scaled(&mut dkp[j0 * d.e..(j0 + cols) * d.e], &tmp[..cols * d.e], scale);
            }
            T::narrow(dq_acc, dqm);
        }
    };
    let task_work = (per_chunk * BQ).min(d.l).saturating_mul(d.s).saturating_mul(2 * (d.e + d.ev));
    run_tasks(d.batch * chunks, d.work(), task_work, task);
    Ok([dq, narrow(&sum_chunks(dk, chunks, d.s * d.e)?)?, narrow(&sum_chunks(dv, chunks, d.s * d.ev)?)?])
}

/// `f32` sums rounded once to `T`.
fn narrow<T: LowpFloat + Element>(sums: &[f32]) -> Result<Buffer<T>> {
    let mut out = Buffer::<T>::zeros(OP, sums.len())?;
    T::narrow(sums, &mut out);
    Ok(out)
}
