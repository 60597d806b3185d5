//! The geometry of the sliding-window kernels (convolutions, `unfold`, `fold`) as a backend
//! receives it: two spatial dimensions, every size resolved (`crate::conv` turns PyTorch's
//! arguments into these), and the checks that views fit it.

use super::validate;
use crate::layout::Layout;
use crate::shape::{MAX_NUMEL, Shape};
use crate::storage::Storage;
use crate::{Error, Result};
use std::borrow::Cow;

/// Where a kernel visits a 2-d input.
///
/// Output position `(y, x)` and kernel tap `(i, j)` read input row
/// `y * stride[0] + i * dilation[0] - padding[0]` and column
/// `x * stride[1] + j * dilation[1] - padding[1]`; positions outside the input read zero.
/// `output` is given rather than derived, so that padding after the input may differ from
/// `padding` (PyTorch's `"same"` with an even kernel, a transposed convolution's
/// `output_padding`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SlidingWindow {
    /// The input's spatial extents `[h, w]`.
    pub input: [usize; 2],
    /// The number of kernel positions along each dimension.
    pub output: [usize; 2],
    /// The kernel's extents.
    pub kernel: [usize; 2],
    /// The step between kernel positions.
    pub stride: [usize; 2],
    /// Implicit zeros before the input along each dimension.
    pub padding: [usize; 2],
    /// The spacing between kernel taps.
    pub dilation: [usize; 2],
}

impl SlidingWindow {
    /// The number of kernel positions, `output[0] * output[1]`.
    pub fn positions(&self) -> usize {
        self.output[0] * self.output[1]
    }

    /// The number of kernel taps, `kernel[0] * kernel[1]`.
    pub fn taps(&self) -> usize {
        self.kernel[0] * self.kernel[1]
    }

    /// An error naming `op` unless strides, dilations and kernel extents are positive and
    /// every index the window can produce fits in `i64` arithmetic.
    pub fn check(&self, op: &'static str) -> Result<()> {
        let fits = (0..2).all(|d| {
            let reach = (self.output[d].max(1) as u128 - 1) * self.stride[d] as u128
                + (self.kernel[d].max(1) as u128 - 1) * self.dilation[d] as u128;
            reach < (1 << 60) && self.padding[d] < (1 << 60) && self.input[d] < (1 << 60)
        });
        let positive = self.stride.iter().chain(&self.dilation).chain(&self.kernel).all(|&v| v > 0);
        if !fits || !positive {
            return Err(Error::invalid(op, format!("invalid sliding window {self:?}")));
        }
        Ok(())
    }
}

/// The geometry of a 2-d convolution: `[N, in_channels, h, w]` input, `[out_channels,
/// in_channels / groups, kh, kw]` weight, `[N, out_channels, oh, ow]` output, with the
/// window of [`SlidingWindow`]. The batch size comes from the operands.
///
/// A transposed convolution is described by the geometry of the convolution it transposes:
/// its input has that convolution's output shape and its result the input shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvGeometry {
    /// Channels of the convolution's input.
    pub in_channels: usize,
    /// Channels of the convolution's output.
    pub out_channels: usize,
    /// Channel groups; divides both channel counts.
    pub groups: usize,
    /// Where the kernel visits the input.
    pub window: SlidingWindow,
}

impl ConvGeometry {
    /// `[batch, in_channels, h, w]`.
    pub fn input_shape(&self, batch: usize) -> Shape {
        let [h, w] = self.window.input;
        Shape::from([batch, self.in_channels, h, w])
    }

    /// `[batch, out_channels, oh, ow]`.
    pub fn output_shape(&self, batch: usize) -> Shape {
        let [h, w] = self.window.output;
        Shape::from([batch, self.out_channels, h, w])
    }

    /// `[out_channels, in_channels / groups, kh, kw]`.
    pub fn weight_shape(&self) -> Shape {
        let [kh, kw] = self.window.kernel;
        Shape::from([self.out_channels, self.in_channels / self.groups.max(1), kh, kw])
    }

    /// An error naming `op` unless the groups divide both channel counts and the window is
    /// valid ([`SlidingWindow::check`]).
    pub fn check(&self, op: &'static str) -> Result<()> {
        self.window.check(op)?;
        if self.groups == 0
            || !self.in_channels.is_multiple_of(self.groups)
            || !self.out_channels.is_multiple_of(self.groups)
        {
            return Err(Error::invalid(op, format!("invalid channel groups in {self:?}")));
        }
        Ok(())
    }
}

/// What an operand of a convolution kernel is, which fixes the shape it must have.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Role {
    /// `[N, in_channels, h, w]`.
    Input,
    /// `[N, out_channels, oh, ow]`.
    Output,
    /// `[out_channels, in_channels / groups, kh, kw]`.
    Weight,
    /// `[channels]`.
    Bias(usize),
}

impl Role {
    fn shape(self, geom: &ConvGeometry, batch: usize) -> Shape {
        match self {
            Role::Input => geom.input_shape(batch),
            Role::Output => geom.output_shape(batch),
            Role::Weight => geom.weight_shape(),
            Role::Bias(n) => Shape::from([n]),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Role::Input => "input",
            Role::Output => "output gradient",
            Role::Weight => "weight",
            Role::Bias(_) => "bias",
        }
    }
}

/// An error unless a tensor of `shape` may exist.
pub(crate) fn check_numel(op: &'static str, shape: &Shape) -> Result<()> {
    if shape.checked_numel().is_none_or(|n| n > MAX_NUMEL) {
        return Err(Error::shape(op, format!("the result of shape {shape} has too many elements")));
    }
    Ok(())
}

/// The checks every backend makes before a convolution kernel: the geometry is valid, every
/// view fits its storage, all share one float dtype, and each has the shape its [`Role`]
/// gives for the batch size of the first view's leading dimension; and the `result` role's
/// shape may exist. Returns the batch size and the validated layouts, in order.
pub(crate) fn check_views<'a>(
    op: &'static str,
    geom: &ConvGeometry,
    views: &[(&Storage, &'a Layout, Role)],
    result: Role,
) -> Result<(usize, Vec<Cow<'a, Layout>>)> {
    geom.check(op)?;
    let mut layouts = Vec::with_capacity(views.len());
    for (s, l, _) in views {
        layouts.push(validate::view(op, s, l)?);
    }
    let batch = layouts.first().and_then(|l| l.shape().first().copied()).unwrap_or(0);
    let dtype = views.first().map(|v| v.0.dtype()).unwrap_or(crate::DType::F32);
    for ((s, _, role), l) in views.iter().zip(&layouts) {
        let want = role.shape(geom, batch);
        check_numel(op, &want)?;
        if *l.shape() != want {
            return Err(Error::shape(op, format!("expected the {} of shape {want}, got {}", role.name(), l.shape())));
        }
        if !s.dtype().is_float() || s.dtype() != dtype {
            return Err(Error::dtype(
                op,
                format!("expected float operands of one dtype, got {dtype} and {} ({})", s.dtype(), role.name()),
            ));
        }
    }
    check_numel(op, &result.shape(geom, batch))?;
    Ok((batch, layouts))
}

/// The checks before `unfold` (`columns` false: `input` is `[N, C, h, w]`) or `fold`
/// (`columns` true: `input` is `[N, C * kh * kw, positions]`): a valid window, a view that
/// fits its storage, a float dtype and the shape the window gives. Returns `(N, C)` and the
/// validated layout.
pub(crate) fn check_window_view<'a>(
    op: &'static str,
    window: &SlidingWindow,
    s: &Storage,
    l: &'a Layout,
    columns: bool,
) -> Result<(usize, usize, Cow<'a, Layout>)> {
    window.check(op)?;
    let l = validate::view(op, s, l)?;
    if !s.dtype().is_float() {
        return Err(Error::dtype(op, format!("expected a float input, got {}", s.dtype())));
    }
    let dims = l.shape().dims();
    let (taps, [h, w]) = (window.taps(), window.input);
    let fits = if columns {
        dims.len() == 3 && dims[1].is_multiple_of(taps) && dims[2] == window.positions()
    } else {
        dims.len() == 4 && dims[2..] == [h, w]
    };
    if !fits {
        return Err(Error::shape(op, format!("an input of shape {} does not fit the window {window:?}", l.shape())));
    }
    let (batch, channels) = if columns { (dims[0], dims[1] / taps) } else { (dims[0], dims[1]) };
    let result = if columns {
        Shape::from([batch, channels, h, w])
    } else {
        Shape::from(vec![batch, channels.saturating_mul(taps), window.positions()])
    };
    check_numel(op, &result)?;
    Ok((batch, channels, l))
}
