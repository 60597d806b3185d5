//! The geometry of the sliding-window kernels (convolutions, `unfold`, `fold`) as a backend
//! receives it: two spatial dimensions, every size resolved (`conv_geometry` and its
//! siblings turn PyTorch's arguments into these).

use crate::shape::Shape;
use crate::{Error, Result};

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
