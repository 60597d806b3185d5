//! The fused classification loss of class-index targets and its gradient: one row of `C`
//! scores per target, rows in parallel.
//!
//! Forward reads each row twice (the maximum, then the exponentials summed together with the
//! row's sum for the smoothing term, into a scratch row that stays in L1) and writes only the
//! row's loss; backward writes the exponentials once and scales them in place into
//! `w * (softmax - q)`. Scores whose class
//! dimension is not innermost (`[N, C, d1, ..]`, or a strided view) are first copied into
//! rows, and the gradient is moved back into the scores' shape at the end.

use super::contiguous::Contiguous;
use super::reduce::{MaxC, SumC, reduce_row, reduced_last};
use super::unary::map;
use crate::backend::validate;
use crate::dtype::{Element, FloatElement};
use crate::host::iter::{GRAIN_CHEAP, GRAIN_COSTLY, par_chunks, rows_per_task, threads};
use crate::layout::Layout;
use crate::ops::loss::{ClassLoss, ClassScores, LossReduction};
use crate::storage::{Buffer, CpuStorage};
use crate::{Error, Result};
use multiversion::multiversion;

/// Accumulator lanes of the fused sum loops.
const LANES: usize = 16;

/// The constants of a row's smoothed target `q = hit * onehot(t) + spread`.
#[derive(Clone, Copy)]
struct Smoothing<T> {
    /// `1 - e`.
    hit: T,
    /// `e / C`; zero exactly when there is no smoothing, so that no smoothing term (which
    /// may be infinite for a row holding `-inf`) is ever multiplied by it.
    spread: T,
}

impl<T: FloatElement> Smoothing<T> {
    fn new(loss: &ClassLoss, classes: usize) -> Self {
        let e = loss.label_smoothing;
        let spread = if e > 0.0 { T::from_f64(e / classes as f64) } else { T::ZERO };
        Smoothing { hit: T::from_f64(1.0 - e), spread }
    }

    fn smooths(self) -> bool {
        self.spread != T::ZERO
    }
}

/// Writes `e^(row - max)` into `out` and returns `(sum_c e^(row[c] - max), sum_c (row[c] - max))`,
/// in one pass. The row's tail is padded to a whole block, so that short rows (a handful of
/// classes, the common case) take the vector loop too instead of one scalar exponential per
/// class.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn exp_shifted<T: FloatElement>(row: &[T], out: &mut [T], max: T) -> (T, T) {
    let n = row.len().min(out.len());
    let (row, out) = (&row[..n], &mut out[..n]);
    let mut exps = [T::ZERO; LANES];
    let mut shifts = [T::ZERO; LANES];
    let (xs, x_tail) = row.as_chunks::<LANES>();
    let (os, o_tail) = out.as_chunks_mut::<LANES>();
    for (x, o) in xs.iter().zip(os) {
        // As in softmax: blocks whose exponentials are all normal take the cheaper one.
        let mut normal = true;
        for &v in x {
            normal &= v - max >= T::EXP_NORMAL_MIN;
        }
        if normal {
            for i in 0..LANES {
                let s = x[i] - max;
                o[i] = s.exp_normal_where(fma_clone!());
                exps[i] = exps[i] + o[i];
                shifts[i] = shifts[i] + s;
            }
        } else {
            for i in 0..LANES {
                let s = x[i] - max;
                o[i] = s.exp();
                exps[i] = exps[i] + o[i];
                shifts[i] = shifts[i] + s;
            }
        }
    }
    let live = x_tail.len();
    if live > 0 {
        // Padding lanes hold `max`: their shift is 0, and their exponential is dropped.
        let mut x = [max; LANES];
        x[..live].copy_from_slice(x_tail);
        let mut e = [T::ZERO; LANES];
        for i in 0..LANES {
            let s = x[i] - max;
            e[i] = s.exp();
            exps[i] = exps[i] + if i < live { e[i] } else { T::ZERO };
            shifts[i] = shifts[i] + s;
        }
        o_tail.copy_from_slice(&e[..live]);
    }
    let mut w = LANES;
    while w > 1 {
        w /= 2;
        for i in 0..w {
            exps[i] = exps[i] + exps[i + w];
            shifts[i] = shifts[i] + shifts[i + w];
        }
    }
    (exps[0], shifts[0])
}

/// `out = out * k - u`.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn scale_shift<T: FloatElement>(out: &mut [T], k: T, u: T) {
    for o in out.iter_mut() {
        *o = *o * k - u;
    }
}

/// The row's maximum, or 0 when it is not finite (a row of `-inf`), as softmax shifts. A
/// short row takes a plain loop: the wide multi-accumulator reduction costs more to set up
/// and combine than a few classes take to compare.
fn shift_of<T: FloatElement>(row: &[T]) -> T {
    let max = if row.len() < LANES { row.iter().fold(T::LOWEST, |m, &v| m.max_nan(v)) } else { reduce_row(row, MaxC) };
    if max.is_finite() { max } else { T::ZERO }
}

/// The loss of one row of logits with target `t`:
/// `lse - (1 - e) * s[t] - (e / C) * sum_c s[c]` with `s = row - max` and `lse` the
/// log-sum-exp of `s` (the smoothed target's weights sum to 1, so `lse` appears once).
fn logits_row<T: FloatElement>(row: &[T], scratch: &mut [T], t: usize, q: Smoothing<T>) -> T {
    let m = shift_of(row);
    let (sum, shifted) = exp_shifted(row, scratch, m);
    let lse = sum.ln();
    let picked = lse - q.hit * (row[t] - m);
    if q.smooths() { picked - q.spread * shifted } else { picked }
}

/// The loss of one row of log-probabilities with target `t`.
fn log_probs_row<T: FloatElement>(row: &[T], t: usize, q: Smoothing<T>) -> T {
    let picked = -(q.hit * row[t]);
    if q.smooths() { picked - q.spread * reduce_row(row, SumC) } else { picked }
}

/// The gradient of one row of logits, `w * (softmax(row) - q)`.
fn logits_grad_row<T: FloatElement>(row: &[T], out: &mut [T], t: usize, w: T, q: Smoothing<T>) {
    let m = shift_of(row);
    let (sum, _) = exp_shifted(row, out, m);
    scale_shift(out, w / sum, w * q.spread);
    out[t] = out[t] - w * q.hit;
}

/// The gradient of one row of log-probabilities, `-w * q`.
fn log_probs_grad_row<T: FloatElement>(out: &mut [T], t: usize, w: T, q: Smoothing<T>) {
    out.fill(-(w * q.spread));
    out[t] = out[t] - w * q.hit;
}

/// The scores as `n_rows` contiguous rows of `classes` elements in target order, with the
/// layout that reads them so (the class dimension moved last).
struct Rows<'a, T: Element> {
    data: Contiguous<'a, T>,
    layout: Layout,
    n_rows: usize,
    classes: usize,
}

fn rows_of<'a, T: Element>(op: &'static str, src: &'a [T], l: &Layout) -> Result<Rows<'a, T>> {
    let (layout, n_rows, classes) = reduced_last(l, &[ClassLoss::class_dim(l.rank())]);
    Ok(Rows { data: Contiguous::of(op, src, &layout, GRAIN_CHEAP)?, layout, n_rows, classes })
}

/// Runs `f(row_index, out_chunk)` over chunks of `out` holding `per_row` elements per row,
/// `rows_per_task` rows at a time, in parallel when there are enough rows.
fn for_rows<T: Send>(out: &mut [T], n_rows: usize, per_row: usize, classes: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    let per = rows_per_task(n_rows, classes, GRAIN_COSTLY);
    if n_rows > per && threads() > 1 {
        par_chunks(out, per * per_row, |ci, chunk| f(ci * per, chunk));
    } else {
        f(0, out);
    }
}

/// The loss of every row, then reduced.
fn forward_typed<T: FloatElement>(src: &[T], l: &Layout, targets: &[i64], loss: &ClassLoss) -> Result<Buffer<T>> {
    let op = loss.name();
    let rows = rows_of(op, src, l)?;
    let counted = validate::class_targets(loss, targets, rows.classes)?;
    let q = Smoothing::<T>::new(loss, rows.classes);
    let data = rows.data.slice();
    let c = rows.classes;
    let mut per_row = Buffer::<T>::uninit(op, rows.n_rows)?;
    for_rows(&mut per_row, rows.n_rows, 1, c, |first, chunk| {
        // Where the exponentials go: one row's worth per task, reused row after row.
        let mut scratch = match loss.scores {
            ClassScores::Logits => vec![T::ZERO; c],
            ClassScores::LogProbs => Vec::new(),
        };
        for (i, o) in chunk.iter_mut().enumerate() {
            let r = first + i;
            let t = targets[r];
            *o = if loss.ignores(t) {
                T::ZERO
            } else {
                // Checked above: a target that is not ignored is a class.
                let row = &data[r * c..(r + 1) * c];
                match loss.scores {
                    ClassScores::Logits => logits_row(row, &mut scratch, t as usize, q),
                    ClassScores::LogProbs => log_probs_row(row, t as usize, q),
                }
            };
        }
    });
    let total = || per_row.iter().fold(0.0f64, |acc, v| acc + v.to_f64());
    Ok(match loss.reduction {
        LossReduction::None => per_row,
        // Summed in row order in f64: the same bits whatever the number of threads.
        LossReduction::Sum => Buffer::full(op, 1, T::from_f64(total()))?,
        // No counted row gives 0 / 0 = NaN, as in PyTorch.
        LossReduction::Mean => Buffer::full(op, 1, T::from_f64(total() / counted as f64))?,
    })
}

/// The gradient with respect to the scores, in the scores' shape.
fn backward_typed<T: FloatElement>(
    src: &[T],
    l: &Layout,
    targets: &[i64],
    grad: &[T],
    loss: &ClassLoss,
) -> Result<Buffer<T>> {
    let op = loss.name();
    let rows = rows_of(op, src, l)?;
    let counted = validate::class_targets(loss, targets, rows.classes)?;
    let q = Smoothing::<T>::new(loss, rows.classes);
    let (data, c) = (rows.data.slice(), rows.classes);
    let weight = |r: usize| match loss.reduction {
        LossReduction::None => grad[r],
        LossReduction::Sum => grad[0],
        LossReduction::Mean => grad[0] / T::from_f64(counted as f64),
    };
    let mut out = Buffer::<T>::uninit(op, rows.n_rows * c)?;
    if c > 0 {
        for_rows(&mut out, rows.n_rows, c, c, |first, chunk| {
            for (i, o) in chunk.chunks_mut(c).enumerate() {
                let r = first + i;
                let t = targets[r];
                if loss.ignores(t) {
                    o.fill(T::ZERO);
                    continue;
                }
                let w = weight(r);
                match loss.scores {
                    ClassScores::Logits => logits_grad_row(&data[r * c..(r + 1) * c], o, t as usize, w, q),
                    ClassScores::LogProbs => log_probs_grad_row(o, t as usize, w, q),
                }
            }
        });
    }
    let class_dim = ClassLoss::class_dim(l.rank());
    if class_dim + 1 == l.rank() {
        return Ok(out);
    }
    // Move the class dimension back from last into place.
    let rank = l.rank();
    let mut inv: Vec<usize> = (0..rank - 1).collect();
    inv.insert(class_dim, rank - 1);
    let back = Layout::contiguous(rows.layout.shape().clone()).permuted(&inv);
    map(op, &out, &back, GRAIN_CHEAP, |v| v)
}

/// The scores' and targets' elements, or a dtype error (the operands were validated, so
/// this only guards the dispatch).
fn typed<'a, T: Element, U: Element>(
    op: &'static str,
    scores: &'a CpuStorage,
    other: &'a CpuStorage,
) -> Result<(&'a [T], &'a [U])> {
    match (scores.as_slice::<T>(), other.as_slice::<U>()) {
        (Some(s), Some(o)) => Ok((s, o)),
        _ => Err(Error::dtype(op, format!("unexpected dtypes {} and {}", scores.dtype(), other.dtype()))),
    }
}

/// [`ClassLoss`] of validated operands.
pub(crate) fn forward(s: &CpuStorage, l: &Layout, t: &CpuStorage, lt: &Layout, loss: &ClassLoss) -> Result<CpuStorage> {
    let op = loss.name();
    match s {
        CpuStorage::F32(_) => {
            let (s, t) = typed::<f32, i64>(op, s, t)?;
            let t = Contiguous::of(op, t, lt, GRAIN_CHEAP)?;
            Ok(forward_typed(s, l, t.slice(), loss)?.into())
        }
        CpuStorage::F64(_) => {
            let (s, t) = typed::<f64, i64>(op, s, t)?;
            let t = Contiguous::of(op, t, lt, GRAIN_CHEAP)?;
            Ok(forward_typed(s, l, t.slice(), loss)?.into())
        }
        _ => Err(Error::dtype(op, format!("the input must be float, got {}", s.dtype()))),
    }
}

/// The gradient of [`ClassLoss`] with respect to the scores, for validated operands.
pub(crate) fn backward(
    (s, l): (&CpuStorage, &Layout),
    (t, lt): (&CpuStorage, &Layout),
    (g, lg): (&CpuStorage, &Layout),
    loss: &ClassLoss,
) -> Result<CpuStorage> {
    fn go<T: FloatElement>(
        op: &'static str,
        (s, l): (&CpuStorage, &Layout),
        t: &Contiguous<'_, i64>,
        (g, lg): (&CpuStorage, &Layout),
        loss: &ClassLoss,
    ) -> Result<Buffer<T>> {
        let (s, g) = typed::<T, T>(op, s, g)?;
        let g = Contiguous::of(op, g, lg, GRAIN_CHEAP)?;
        backward_typed(s, l, t.slice(), g.slice(), loss)
    }
    let op = loss.name();
    let targets = t.as_slice::<i64>().ok_or_else(|| Error::dtype(op, "class-index targets must be i64"))?;
    let t = Contiguous::of(op, targets, lt, GRAIN_CHEAP)?;
    match s {
        CpuStorage::F32(_) => Ok(go::<f32>(op, (s, l), &t, (g, lg), loss)?.into()),
        CpuStorage::F64(_) => Ok(go::<f64>(op, (s, l), &t, (g, lg), loss)?.into()),
        _ => Err(Error::dtype(op, format!("the input must be float, got {}", s.dtype()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(loss, gradient)` of one row of logits in f64, directly from the definitions.
    fn naive(row: &[f32], t: usize, e: f64, w: f64) -> (f64, Vec<f64>) {
        let m = row.iter().map(|&v| v as f64).fold(f64::NEG_INFINITY, f64::max);
        let lse = m + row.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln();
        let lp: Vec<f64> = row.iter().map(|&v| v as f64 - lse).collect();
        let c = row.len() as f64;
        let loss = -((1.0 - e) * lp[t] + e / c * lp.iter().sum::<f64>());
        let grad =
            lp.iter().enumerate().map(|(i, l)| w * (l.exp() - e / c - if i == t { 1.0 - e } else { 0.0 })).collect();
        (loss, grad)
    }

    #[test]
    fn rows_of_every_length_match_naive() {
        // Lengths around the 16-lane loops and their tails.
        for len in (1..70).chain([1000, 1031]) {
            let row: Vec<f32> = (0..len).map(|i| ((i * 7919) % 1009) as f32 * 0.02 - 10.0).collect();
            for e in [0.0, 0.3] {
                let loss = ClassLoss {
                    scores: ClassScores::Logits,
                    label_smoothing: e,
                    ignore_index: None,
                    reduction: LossReduction::None,
                };
                let q = Smoothing::<f32>::new(&loss, len);
                let t = len / 2;
                let (want, want_grad) = naive(&row, t, e, 0.5);
                let got = logits_row(&row, &mut vec![0.0; len], t, q) as f64;
                assert!((got - want).abs() < 2e-6 * (1.0 + want.abs()), "len {len} e {e}: {got} vs {want}");
                let mut out = vec![0.0f32; len];
                logits_grad_row(&row, &mut out, t, 0.5, q);
                for (g, w) in out.iter().zip(&want_grad) {
                    assert!((*g as f64 - w).abs() < 1e-6, "len {len} e {e}: gradient {g} vs {w}");
                }
            }
        }
    }

    #[test]
    fn masked_logits() {
        // A logit of -inf is a class that cannot occur: no loss from it without smoothing
        // and no gradient into it; with smoothing, its -inf log-probability makes the loss
        // infinite, as in PyTorch.
        let row = [f32::NEG_INFINITY, 0.0, 1.0];
        let plain = Smoothing { hit: 1.0f32, spread: 0.0 };
        let want = (1.0 + (-1.0f32).exp()).ln();
        assert!((logits_row(&row, &mut [0.0; 3], 2, plain) - want).abs() < 1e-6);
        let mut out = [9.0f32; 3];
        logits_grad_row(&row, &mut out, 2, 1.0, plain);
        assert_eq!(out[0], 0.0);
        let smooth = Smoothing { hit: 0.9f32, spread: 0.1 / 3.0 };
        assert_eq!(logits_row(&row, &mut [0.0; 3], 2, smooth), f32::INFINITY);
    }
}
