//! The default bodies of the per-channel normalisation kernels (see `ops/norm.rs`):
//! channel sums by `reduce` over the outer and inner dimensions, per-channel values
//! broadcast back with stride-0 layouts. They allocate a few full-size intermediates.

use crate::backend::kernels::Kernels;
use crate::backend::validate::norm::check;
use crate::backend::{BinaryOp, ReduceOp, UnaryOp, View};
use crate::layout::Layout;
use crate::shape::Shape;
use crate::storage::Storage;
use crate::{Result, Scalar};
use smallvec::smallvec;

/// The layouts the compositions need for an input of shape `[outer, c, inner]`.
struct Frame {
    /// The full shape, contiguous.
    full: Layout,
    /// `[c]`, contiguous.
    channels: Layout,
    /// Elements per channel.
    m: usize,
}

impl Frame {
    fn new([outer, c, inner]: [usize; 3]) -> Frame {
        Frame {
            full: Layout::contiguous(Shape::from([outer, c, inner])),
            channels: Layout::contiguous(Shape::from([c])),
            m: outer * inner,
        }
    }

    /// A `[c]` view broadcast over the full shape.
    fn spread(&self, per_channel: &Layout) -> Result<Layout> {
        let stride = per_channel.strides().first().copied().unwrap_or(0);
        Layout::new(self.full.shape().clone(), smallvec![0, stride, 0], per_channel.offset())
    }

    fn c(&self) -> usize {
        self.channels.numel()
    }
}

/// The per-channel mean of a full-shape view, as a contiguous `[c]` storage.
fn channel_mean<B: Kernels + ?Sized>(b: &B, f: &Frame, x: View<'_>) -> Result<Storage> {
    let sum = b.reduce(ReduceOp::Sum, x, &[0, 2])?;
    scale(b, f, &sum, 1.0 / f.m as f64)
}

/// A contiguous `[c]` storage times `k`.
fn scale<B: Kernels + ?Sized>(b: &B, f: &Frame, s: &Storage, k: f64) -> Result<Storage> {
    let k = b.full(f.c(), Scalar::Float(k), s.dtype())?;
    b.binary(BinaryOp::Mul, (s, &f.channels), (&k, &f.channels))
}

/// `1 / sqrt(var + eps)` of a contiguous `[c]` storage.
fn inv_std<B: Kernels + ?Sized>(b: &B, f: &Frame, var: View<'_>, eps: f64) -> Result<Storage> {
    let eps = b.full(f.c(), Scalar::Float(eps), var.0.dtype())?;
    let shifted = b.binary(BinaryOp::Add, var, (&eps, &f.channels))?;
    b.unary(UnaryOp::Rsqrt, (&shifted, &f.channels))
}

/// `a op (per-channel v)` over the full shape.
fn with_channel<B: Kernels + ?Sized>(
    b: &B,
    f: &Frame,
    op: BinaryOp,
    a: &Storage,
    (v, lv): View<'_>,
) -> Result<Storage> {
    b.binary(op, (a, &f.full), (v, &f.spread(lv)?))
}

pub(crate) fn channel_norm<B: Kernels + ?Sized>(
    b: &B,
    input: View<'_>,
    weight: Option<View<'_>>,
    bias: Option<View<'_>>,
    eps: f64,
) -> Result<[Storage; 3]> {
    let per_channel: Vec<_> =
        [("weight", weight), ("bias", bias)].into_iter().filter_map(|(n, v)| v.map(|(s, l)| (n, s, l))).collect();
    let f = Frame::new(check(input, None, &per_channel)?);
    let x = b.cast(input, input.0.dtype())?;
    let mean = channel_mean(b, &f, (&x, &f.full))?;
    let centred = with_channel(b, &f, BinaryOp::Sub, &x, (&mean, &f.channels))?;
    let squares = b.unary(UnaryOp::Square, (&centred, &f.full))?;
    let var = channel_mean(b, &f, (&squares, &f.full))?;
    let invstd = inv_std(b, &f, (&var, &f.channels), eps)?;
    let mut y = with_channel(b, &f, BinaryOp::Mul, &centred, (&invstd, &f.channels))?;
    if let Some(w) = weight {
        y = with_channel(b, &f, BinaryOp::Mul, &y, w)?;
    }
    if let Some(bias) = bias {
        y = with_channel(b, &f, BinaryOp::Add, &y, bias)?;
    }
    Ok([y, mean, var])
}

pub(crate) fn channel_norm_backward<B: Kernels + ?Sized>(
    b: &B,
    input: View<'_>,
    grad: View<'_>,
    mean: View<'_>,
    var: View<'_>,
    weight: Option<View<'_>>,
    eps: f64,
) -> Result<[Storage; 3]> {
    let mut per_channel = vec![("mean", mean.0, mean.1), ("variance", var.0, var.1)];
    per_channel.extend(weight.map(|(s, l)| ("weight", s, l)));
    let f = Frame::new(check(input, Some(grad), &per_channel)?);
    let x = b.cast(input, input.0.dtype())?;
    let g = b.cast(grad, grad.0.dtype())?;
    let invstd = inv_std(b, &f, var, eps)?;
    let centred = with_channel(b, &f, BinaryOp::Sub, &x, mean)?;
    let xhat = with_channel(b, &f, BinaryOp::Mul, &centred, (&invstd, &f.channels))?;
    let sum_g = b.reduce(ReduceOp::Sum, (&g, &f.full), &[0, 2])?;
    let g_xhat = b.binary(BinaryOp::Mul, (&g, &f.full), (&xhat, &f.full))?;
    let sum_g_xhat = b.reduce(ReduceOp::Sum, (&g_xhat, &f.full), &[0, 2])?;
    // g - sum g / m - xhat * sum(g xhat) / m, then times weight * invstd.
    let mean_g = scale(b, &f, &sum_g, 1.0 / f.m as f64)?;
    let mean_g_xhat = scale(b, &f, &sum_g_xhat, 1.0 / f.m as f64)?;
    let shifted = with_channel(b, &f, BinaryOp::Sub, &g, (&mean_g, &f.channels))?;
    let along = with_channel(b, &f, BinaryOp::Mul, &xhat, (&mean_g_xhat, &f.channels))?;
    let inner = b.binary(BinaryOp::Sub, (&shifted, &f.full), (&along, &f.full))?;
    let k = match weight {
        Some(w) => b.binary(BinaryOp::Mul, (&invstd, &f.channels), w)?,
        None => invstd,
    };
    let gx = with_channel(b, &f, BinaryOp::Mul, &inner, (&k, &f.channels))?;
    Ok([gx, sum_g, sum_g_xhat])
}
