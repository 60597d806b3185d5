//! The default attention kernels, composed from `matmul`, `binary`, `unary`, `reduce` and
//! `where_cond`: they hold the whole `[batch.., L, S]` scores (and, backward, three more
//! score-sized intermediates), which is what the CPU backend's blocked kernel avoids.

use super::super::attention::{Attention, AttentionShapes, check_views};
use super::super::{Backend, BinaryOp, CmpOp, ReduceOp, UnaryOp, View};
use crate::layout::Layout;
use crate::shape::Shape;
use crate::storage::{Buffer, CpuStorage, Storage};
use crate::{DType, Result, Scalar};

/// The contiguous layout of `shape`.
fn dense(shape: Shape) -> Layout {
    Layout::contiguous(shape)
}

/// One `value` in `dtype`, read through a layout that broadcasts it to `shape`.
fn splat<B: Backend + ?Sized>(b: &B, value: f64, dtype: DType, shape: &Shape) -> Result<(Storage, Layout)> {
    let one = b.full(1, Scalar::Float(value), dtype)?;
    let layout = dense(Shape::from(vec![1; shape.rank()])).broadcast_to("scaled_dot_product_attention", shape)?;
    Ok((one, layout))
}

/// The masked, scaled scores `[batch.., L, S]`, contiguous, `-inf` where a key is excluded.
fn scores<B: Backend + ?Sized>(
    b: &B,
    [q, k]: [View<'_>; 2],
    mask: Option<View<'_>>,
    spec: &Attention,
    shapes: &AttentionShapes,
) -> Result<Storage> {
    let op = "scaled_dot_product_attention";
    let dtype = q.0.dtype();
    let shape = shapes.scores();
    let r = shape.rank();
    let kt = k.1.transposed(r - 2, r - 1);
    let raw = b.matmul(q, (k.0, &kt))?;
    let (sc, sl) = splat(b, spec.scale, dtype, &shape)?;
    let mut s = b.binary(BinaryOp::Mul, (&raw, &dense(shape.clone())), (&sc, &sl))?;
    let (neg, nl) = splat(b, f64::NEG_INFINITY, dtype, &shape)?;
    if let Some((m, ml)) = mask {
        s = if m.dtype() == DType::U8 {
            b.where_cond((m, ml), (&s, &dense(shape.clone())), (&neg, &nl))?
        } else {
            b.binary(BinaryOp::Add, (&s, &dense(shape.clone())), (m, ml))?
        };
    }
    if spec.causal {
        let (l, n) = (shapes.l, shapes.s);
        let keep = Buffer::<u8>::from_fn(op, l * n, |p| u8::from(p % n <= p / n))?;
        let keep = b.upload(CpuStorage::from(keep))?;
        let kl = dense(Shape::from([l, n].as_slice())).broadcast_to(op, &shape)?;
        s = b.where_cond((&keep, &kl), (&s, &dense(shape.clone())), (&neg, &nl))?;
    }
    Ok(s)
}

/// The output and log-sum-exp as `softmax(s) @ v` and `m + ln sum e^(s - m)`, with rows of
/// only `-inf` set to 0 and `-inf`.
pub(crate) fn forward<B: Backend + ?Sized>(
    b: &B,
    [q, k, v]: [View<'_>; 3],
    mask: Option<View<'_>>,
    spec: &Attention,
) -> Result<[Storage; 2]> {
    let shapes = check_views(
        [(q.0.dtype(), q.1), (k.0.dtype(), k.1), (v.0.dtype(), v.1)],
        mask.map(|(s, l)| (s.dtype(), l)),
        None,
    )?;
    let dtype = q.0.dtype();
    let shape = shapes.scores();
    let whole = dense(shape.clone());
    let s = scores(b, [q, k], mask, spec, &shapes)?;
    let r = shape.rank();
    let row = dense(shapes.with_last(&[shapes.l, 1]));
    let per_row = row.broadcast_to("scaled_dot_product_attention", &shape)?;
    let max = b.reduce(ReduceOp::Max, (&s, &whole), &[r - 1])?;
    let dead = b.compare_scalar(CmpOp::Eq, (&max, &row), Scalar::Float(f64::NEG_INFINITY))?;
    let (zero, zl) = splat(b, 0.0, dtype, row.shape())?;
    let shift = b.where_cond((&dead, &row), (&zero, &zl), (&max, &row))?;
    let shifted = b.binary(BinaryOp::Sub, (&s, &whole), (&shift, &per_row))?;
    let e = b.unary(UnaryOp::Exp, (&shifted, &whole))?;
    let sum = b.reduce(ReduceOp::Sum, (&e, &whole), &[r - 1])?;
    let log_sum = b.unary(UnaryOp::Log, (&sum, &row))?;
    let lse = b.binary(BinaryOp::Add, (&log_sum, &row), (&shift, &row))?;
    let p = b.binary(BinaryOp::Div, (&e, &whole), (&sum, &per_row))?;
    let (zs, zsl) = splat(b, 0.0, dtype, &shape)?;
    let dead_rows = row.broadcast_to("scaled_dot_product_attention", &shape)?;
    let p = b.where_cond((&dead, &dead_rows), (&zs, &zsl), (&p, &whole))?;
    let out = b.matmul((&p, &whole), v)?;
    Ok([out, lse])
}

/// The gradients with respect to query, key and value, from the probabilities recomputed as
/// `e^(s - lse)`: `dv = P^T g`, `dS = P * (g v^T - rowsum(g * out))`, `dq = scale dS k`,
/// `dk = scale dS^T q`.
pub(crate) fn backward<B: Backend + ?Sized>(
    b: &B,
    [q, k, v]: [View<'_>; 3],
    mask: Option<View<'_>>,
    [out, lse, grad]: [View<'_>; 3],
    spec: &Attention,
) -> Result<[Storage; 3]> {
    let views = [(q.0.dtype(), q.1), (k.0.dtype(), k.1), (v.0.dtype(), v.1)];
    let saved = [(out.0.dtype(), out.1), (lse.0.dtype(), lse.1), (grad.0.dtype(), grad.1)];
    let shapes = check_views(views, mask.map(|(s, l)| (s.dtype(), l)), Some(saved))?;
    let dtype = q.0.dtype();
    let shape = shapes.scores();
    let r = shape.rank();
    let whole = dense(shape.clone());
    let s = scores(b, [q, k], mask, spec, &shapes)?;
    // A row with nothing to attend to has lse = -inf; +inf in its place makes its
    // probabilities e^(s - inf) = 0.
    let lse_row = lse.1.unsqueezed(r - 1);
    let dead = b.compare_scalar(CmpOp::Eq, (lse.0, &lse_row), Scalar::Float(f64::NEG_INFINITY))?;
    let row = dense(shapes.with_last(&[shapes.l, 1]));
    let (inf, il) = splat(b, f64::INFINITY, dtype, row.shape())?;
    let safe = b.where_cond((&dead, &row), (&inf, &il), (lse.0, &lse_row))?;
    let per_row = row.broadcast_to("scaled_dot_product_attention", &shape)?;
    let shifted = b.binary(BinaryOp::Sub, (&s, &whole), (&safe, &per_row))?;
    let p = b.unary(UnaryOp::Exp, (&shifted, &whole))?;
    let pt = whole.transposed(r - 2, r - 1);
    let dv = b.matmul((&p, &pt), grad)?;
    let vt = v.1.transposed(r - 2, r - 1);
    let dp = b.matmul(grad, (v.0, &vt))?;
    let go = b.binary(BinaryOp::Mul, grad, out)?;
    let out_whole = dense(shapes.output());
    let d = b.reduce(ReduceOp::Sum, (&go, &out_whole), &[r - 1])?;
    let centred = b.binary(BinaryOp::Sub, (&dp, &whole), (&d, &per_row))?;
    let ds = b.binary(BinaryOp::Mul, (&p, &whole), (&centred, &whole))?;
    let dq = b.matmul((&ds, &whole), k)?;
    let dk = b.matmul((&ds, &pt), q)?;
    let scale = |x: Storage, sh: Shape| -> Result<Storage> {
        let (sc, sl) = splat(b, spec.scale, dtype, &sh)?;
        b.binary(BinaryOp::Mul, (&x, &dense(sh)), (&sc, &sl))
    };
    let dq = scale(dq, q.1.shape().clone())?;
    let dk = scale(dk, k.1.shape().clone())?;
    Ok([dq, dk, dv])
}
