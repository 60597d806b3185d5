//! The default bodies of the heavy [`Backend`] kernels, composed from the elementwise,
//! reduction and creation kernels: a new backend computes every operation once it has
//! those, and replaces these one by one with fused kernels. They allocate intermediates
//! (softmax four full-size ones, matmul one of `m * k * n` elements per batch, the
//! convolutions their column matrices), which is why the CPU backend overrides every one of
//! them. The sliding-window kernels (convolutions, `unfold`, `fold`) are in `compose/conv.rs`.

pub(super) mod conv;

use super::{Backend, BinaryOp, ReduceOp, UnaryOp, View, validate};
use crate::layout::{Layout, Strides};
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
pub(super) fn softmax<B: Backend + ?Sized>(b: &B, (s, l): View<'_>, dim: usize, log: bool) -> Result<Storage> {
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
pub(super) fn matmul<B: Backend + ?Sized>(b: &B, (sa, la): View<'_>, (sb, lb): View<'_>) -> Result<Storage> {
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

/// `value` where the mask is set, as `where(mask, full(value), src)`.
pub(super) fn masked_fill<B: Backend + ?Sized>(
    b: &B,
    (s, l): View<'_>,
    mask: View<'_>,
    value: Scalar,
) -> Result<Storage> {
    validate::same_shape("masked_fill", l, mask.1)?;
    let fill = b.full(l.numel(), value, s.dtype())?;
    b.where_cond(mask, (&fill, &Layout::contiguous(l.shape().clone())), (s, l))
}

/// The triangle as `where(keep, src, 0)`, with the `[rows, cols]` mask `keep` built on the
/// host and uploaded.
pub(super) fn triangle<B: Backend + ?Sized>(b: &B, (s, l): View<'_>, diagonal: i64, upper: bool) -> Result<Storage> {
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
