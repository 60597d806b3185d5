//! The default bodies of the heavy [`Backend`](crate::backend::Backend) kernels, composed from the elementwise,
//! reduction and creation kernels: a new backend computes every operation once it has
//! those, and replaces these one by one with fused kernels. They allocate intermediates
//! (softmax four full-size ones, matmul one of `m * k * n` elements per batch, the
//! convolutions their column matrices), which is why the CPU backend overrides every one of
//! them. The sliding-window kernels (convolutions, `unfold`, `fold`) are in `compose/conv.rs`.

pub(super) mod attention;
pub(super) mod conv;
pub(super) mod layer_norm;
pub(super) mod lstm;
pub(super) mod norm;
pub(super) mod pool;
pub(super) mod unscale;

use super::kernels::Kernels;
use super::{BinaryOp, CmpOp, ReduceOp, Target, UnaryOp, View, validate};
use crate::layout::{Layout, Strides};
use crate::ops::loss::{ClassLoss, ClassScores, LossReduction};
use crate::shape::Shape;
use crate::storage::{Buffer, CpuStorage, Storage};
use crate::{Error, Result, Scalar};

/// The contiguous layout of the result of a reduction over `dim` of `shape`.
fn reduced(shape: &Shape, dim: usize) -> Layout {
    let mut dims = shape.dims().to_vec();
    dims[dim] = 1;
    Layout::contiguous(Shape::from(dims))
}

/// Softmax along `dim` as `e^(x - max) / sum e^(x - max)`, and log-softmax as
/// `(x - max) - ln(sum e^(x - max))`. This agrees with the CPU kernel wherever a row's
/// maximum is finite (`-inf` entries give 0, and a row of only `-inf` is NaN in both); a
/// row holding `+inf` is NaN throughout here.
pub(super) fn softmax<B: Kernels + ?Sized>(b: &B, (s, l): View<'_>, dim: usize, log: bool) -> Result<Storage> {
    validate::dim("softmax", l, dim)?;
    let whole = Layout::contiguous(l.shape().clone());
    let row = reduced(l.shape(), dim);
    // One value per row, read by every element of the row.
    let per_row = row.broadcast_to("softmax", l.shape())?;
    let max = b.reduce(ReduceOp::Max, (s, l), &[dim])?;
    let shifted = b.binary(BinaryOp::Sub, (s, l), (&max, &per_row))?;
    let exp = b.unary(UnaryOp::Exp, (&shifted, &whole))?;
    let sum = b.reduce(ReduceOp::Sum, (&exp, &whole), &[dim])?;
    if log {
        let log_sum = b.unary(UnaryOp::Log, (&sum, &row))?;
        b.binary(BinaryOp::Sub, (&shifted, &whole), (&log_sum, &per_row))
    } else {
        b.binary(BinaryOp::Div, (&exp, &whole), (&sum, &per_row))
    }
}

/// `a @ b` as the sum over `k` of the broadcast product `[batch.., m, k, n]`.
pub(super) fn matmul<B: Kernels + ?Sized>(b: &B, (sa, la): View<'_>, (sb, lb): View<'_>) -> Result<Storage> {
    validate::matmul(la, lb)?;
    let r = la.rank();
    let (m, k, n) = (la.shape()[r - 2], la.shape()[r - 1], lb.shape()[r - 1]);
    let mut dims = la.shape().dims()[..r - 2].to_vec();
    dims.extend([m, k, n]);
    let shape = Shape::from(dims);
    // a[.., i, p] at [.., i, p, j] for every j; b[.., p, j] at [.., i, p, j] for every i.
    let mut stride_a = Strides::from_slice(la.strides());
    stride_a.push(0);
    let mut stride_b = Strides::from_slice(&lb.strides()[..r - 2]);
    stride_b.extend([0, lb.strides()[r - 2], lb.strides()[r - 1]]);
    let a4 = Layout::new(shape.clone(), stride_a, la.offset())?;
    let b4 = Layout::new(shape.clone(), stride_b, lb.offset())?;
    let products = b.binary(BinaryOp::Mul, (sa, &a4), (sb, &b4))?;
    // `[batch.., m, 1, n]` in row-major order is `[batch.., m, n]`.
    b.reduce(ReduceOp::Sum, (&products, &Layout::contiguous(shape)), &[r - 1])
}

/// `a @ b` copied into `dst`: the product, then one copy.
pub(super) fn matmul_into<B: Kernels + ?Sized>(b: &B, x: View<'_>, y: View<'_>, (dst, ld): Target<'_>) -> Result<()> {
    let product = b.matmul(x, y)?;
    b.copy_inplace(dst, ld, (&product, &Layout::contiguous(ld.shape().clone())))
}

/// `value` where the mask is set, as `where(mask, full(value), src)`.
pub(super) fn masked_fill<B: Kernels + ?Sized>(
    b: &B,
    (s, l): View<'_>,
    mask: View<'_>,
    value: Scalar,
) -> Result<Storage> {
    validate::same_shape("masked_fill", l, mask.1)?;
    let fill = b.full(l.numel(), value, s.dtype())?;
    b.where_cond(mask, (&fill, &Layout::contiguous(l.shape().clone())), (s, l))
}

/// ReLU's gradient as `masked_fill(grad, output <= 0, 0)`.
pub(super) fn relu_backward<B: Kernels + ?Sized>(b: &B, grad: View<'_>, (o, lo): View<'_>) -> Result<Storage> {
    validate::same_shape("relu_backward", grad.1, lo)?;
    let clamped = b.compare_scalar(CmpOp::Le, (o, lo), Scalar::Float(0.0))?;
    b.masked_fill(grad, (&clamped, &Layout::contiguous(lo.shape().clone())), Scalar::Float(0.0))
}

/// The triangle as `where(keep, src, 0)`, with the `[rows, cols]` mask `keep` built on the
/// host and uploaded.
pub(super) fn triangle<B: Kernels + ?Sized>(b: &B, (s, l): View<'_>, diagonal: i64, upper: bool) -> Result<Storage> {
    let rank = l.rank();
    if rank < 2 {
        return Err(Error::shape("tril", format!("expected at least 2 dimensions, got shape {}", l.shape())));
    }
    let (rows, cols) = (l.shape()[rank - 2], l.shape()[rank - 1]);
    let keep = Buffer::<u8>::from_fn("tril", rows * cols, |p| {
        let offset = (p % cols) as i64 - (p / cols) as i64;
        (if upper { offset >= diagonal } else { offset <= diagonal }) as u8
    })?;
    let keep = b.upload(CpuStorage::from(keep))?;
    let keep_layout = Layout::contiguous(Shape::from([rows, cols].as_slice())).broadcast_to("tril", l.shape())?;
    let zeros = b.full(l.numel(), Scalar::Int(0), s.dtype())?;
    b.where_cond((&keep, &keep_layout), (s, l), (&zeros, &Layout::contiguous(l.shape().clone())))
}

/// The targets of a class loss, read on the host once: the class of each row (0 for an
/// ignored row, so that it can index), which rows are ignored, and how many count.
struct ClassRows {
    /// `i64`, one per row, in the layout `rows`.
    classes: Storage,
    /// `u8`, set on ignored rows, in the layout `rows`.
    ignored: Storage,
    /// The scores' shape with the class dimension 1, contiguous: one entry per row.
    rows: Layout,
    counted: usize,
}

fn class_rows<B: Kernels + ?Sized>(b: &B, l: &Layout, target: View<'_>, loss: &ClassLoss) -> Result<ClassRows> {
    let op = loss.name();
    let class_dim = ClassLoss::class_dim(l.rank());
    let host = b.download(target)?;
    let targets = host
        .as_slice::<i64>()
        .ok_or_else(|| Error::dtype(op, format!("class-index targets must be i64, got {}", host.dtype())))?;
    let counted = validate::class_targets(loss, targets, l.shape()[class_dim])?;
    let classes = Buffer::<i64>::from_fn(op, targets.len(), |i| if loss.ignores(targets[i]) { 0 } else { targets[i] })?;
    let ignored = Buffer::<u8>::from_fn(op, targets.len(), |i| u8::from(loss.ignores(targets[i])))?;
    let mut dims = l.shape().dims().to_vec();
    dims[class_dim] = 1;
    Ok(ClassRows {
        classes: b.upload(CpuStorage::from(classes))?,
        ignored: b.upload(CpuStorage::from(ignored))?,
        rows: Layout::contiguous(Shape::from(dims)),
        counted,
    })
}

/// The per-row losses as `-((1 - e) * s[t] + (e / C) * sum_c s[c])` from the log-softmax
/// `s`, gathered at the targets, zero on ignored rows, then reduced.
pub(super) fn class_loss<B: Kernels + ?Sized>(
    b: &B,
    (s, l): View<'_>,
    (t, lt): View<'_>,
    loss: &ClassLoss,
) -> Result<Storage> {
    validate::class_loss(loss, (s.dtype(), l), (t.dtype(), lt), None)?;
    let rows = class_rows(b, l, (t, lt), loss)?;
    let (class_dim, k) = (ClassLoss::class_dim(l.rank()), &rows.rows);
    let whole = Layout::contiguous(l.shape().clone());
    let log_probs;
    let scores: View<'_> = match loss.scores {
        ClassScores::Logits => {
            log_probs = b.softmax((s, l), class_dim, true)?;
            (&log_probs, &whole)
        }
        ClassScores::LogProbs => (s, l),
    };
    let e = loss.label_smoothing;
    let kept = if l.shape()[class_dim] == 0 {
        // No classes: every target was ignored (else `class_rows` refused it), and there is
        // nothing to gather from.
        b.full(k.numel(), Scalar::Int(0), s.dtype())?
    } else if e > 0.0 {
        let picked = b.gather(scores, class_dim, (&rows.classes, k))?;
        let classes = l.shape()[class_dim] as f64;
        let total = b.reduce(ReduceOp::Sum, scores, &[class_dim])?;
        let picked = b.unary(UnaryOp::MulScalar(Scalar::Float(1.0 - e)), (&picked, k))?;
        let total = b.unary(UnaryOp::MulScalar(Scalar::Float(e / classes)), (&total, k))?;
        b.binary(BinaryOp::Add, (&picked, k), (&total, k))?
    } else {
        b.gather(scores, class_dim, (&rows.classes, k))?
    };
    let per_row = b.unary(UnaryOp::Neg, (&kept, k))?;
    let zeros = b.full(k.numel(), Scalar::Int(0), s.dtype())?;
    let per_row = b.where_cond((&rows.ignored, k), (&zeros, k), (&per_row, k))?;
    match loss.reduction {
        // One value per row in row order, which is the target's shape.
        LossReduction::None => Ok(per_row),
        LossReduction::Sum => b.reduce(ReduceOp::Sum, (&per_row, k), &all_dims(k)),
        LossReduction::Mean => {
            let sum = b.reduce(ReduceOp::Sum, (&per_row, k), &all_dims(k))?;
            let one = Layout::contiguous(Shape::scalar());
            let count = b.full(1, Scalar::Float(rows.counted as f64), s.dtype())?;
            // No counted row gives 0 / 0 = NaN, as in PyTorch.
            b.binary(BinaryOp::Div, (&sum, &one), (&count, &one))
        }
    }
}

/// The gradient `w * (softmax(x) - q)` (logits) or `-w * q` (log-probabilities) with the
/// smoothed one-hot `q` made by `scatter_add` and the row weights `w` from the incoming
/// gradient, zero on ignored rows.
pub(super) fn class_loss_backward<B: Kernels + ?Sized>(
    b: &B,
    (s, l): View<'_>,
    (t, lt): View<'_>,
    (g, lg): View<'_>,
    loss: &ClassLoss,
) -> Result<Storage> {
    let op = loss.name();
    validate::class_loss(loss, (s.dtype(), l), (t.dtype(), lt), Some((g.dtype(), lg)))?;
    let rows = class_rows(b, l, (t, lt), loss)?;
    let (class_dim, k) = (ClassLoss::class_dim(l.rank()), &rows.rows);
    let (dtype, whole) = (s.dtype(), Layout::contiguous(l.shape().clone()));
    if whole.numel() == 0 {
        return b.full(0, Scalar::Int(0), dtype);
    }
    let e = loss.label_smoothing;
    let classes = l.shape()[class_dim] as f64;
    let uniform = b.full(whole.numel(), Scalar::Float(e / classes), dtype)?;
    let hit = b.full(k.numel(), Scalar::Float(1.0 - e), dtype)?;
    let q = b.scatter_add((&uniform, &whole), class_dim, (&rows.classes, k), (&hit, k))?;

    // The incoming gradient, one value per row (contiguous, or one value read by every row).
    let g = b.cast((g, lg), dtype)?;
    let mut w = match loss.reduction {
        LossReduction::None => g,
        LossReduction::Sum | LossReduction::Mean => {
            let every_row = Layout::contiguous(Shape::from(vec![1; k.rank()])).broadcast_to(op, k.shape())?;
            b.cast((&g, &every_row), dtype)?
        }
    };
    if loss.reduction == LossReduction::Mean {
        w = b.unary(UnaryOp::DivScalar(Scalar::Float(rows.counted as f64)), (&w, k))?;
    }
    let per_class = k.broadcast_to(op, l.shape())?;
    let out = match loss.scores {
        ClassScores::Logits => {
            let p = b.softmax((s, l), class_dim, false)?;
            let d = b.binary(BinaryOp::Sub, (&p, &whole), (&q, &whole))?;
            b.binary(BinaryOp::Mul, (&d, &whole), (&w, &per_class))?
        }
        ClassScores::LogProbs => {
            let d = b.binary(BinaryOp::Mul, (&q, &whole), (&w, &per_class))?;
            b.unary(UnaryOp::Neg, (&d, &whole))?
        }
    };
    // Ignored rows get exactly 0, also where their scores are not finite.
    let zeros = b.full(whole.numel(), Scalar::Int(0), dtype)?;
    b.where_cond((&rows.ignored, &per_class), (&zeros, &whole), (&out, &whole))
}

/// Every dimension of `l`, for a reduction to one value.
fn all_dims(l: &Layout) -> Vec<usize> {
    (0..l.rank()).collect()
}
