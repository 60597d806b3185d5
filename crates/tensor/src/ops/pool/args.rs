//! The arguments of pooling and interpolation as a caller gives them (PyTorch's keyword
//! arguments, with builders).

use crate::ops::conv::Spatial;
use crate::{Error, Result};

/// The arguments of `max_pool1d` / `max_pool2d` (PyTorch's names and defaults: the stride
/// defaults to the kernel size, no padding, dilation 1, floor rounding).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MaxPoolArgs<const D: usize> {
    /// The window's extents.
    pub kernel_size: [usize; D],
    /// The step between windows; `None` is the kernel size.
    pub stride: Option<[usize; D]>,
    /// Implicit `-inf` on both sides, at most half the kernel size.
    pub padding: [usize; D],
    /// The spacing between the window's taps.
    pub dilation: [usize; D],
    /// Round the output size up, keeping a last window that starts inside the input or the
    /// left padding.
    pub ceil_mode: bool,
}

impl<const D: usize> MaxPoolArgs<D> {
    /// A window of `kernel_size`, with the other arguments at their defaults.
    pub fn new(kernel_size: impl Spatial<D>) -> Self {
        MaxPoolArgs {
            kernel_size: kernel_size.spatial(),
            stride: None,
            padding: [0; D],
            dilation: [1; D],
            ceil_mode: false,
        }
    }
    /// Sets the stride.
    pub fn stride(mut self, stride: impl Spatial<D>) -> Self {
        self.stride = Some(stride.spatial());
        self
    }
    /// Sets the padding.
    pub fn padding(mut self, padding: impl Spatial<D>) -> Self {
        self.padding = padding.spatial();
        self
    }
    /// Sets the dilation.
    pub fn dilation(mut self, dilation: impl Spatial<D>) -> Self {
        self.dilation = dilation.spatial();
        self
    }
    /// Sets `ceil_mode`.
    pub fn ceil_mode(mut self, on: bool) -> Self {
        self.ceil_mode = on;
        self
    }
}

/// The arguments of `avg_pool1d` / `avg_pool2d` (PyTorch's names and defaults: the stride
/// defaults to the kernel size, no padding, floor rounding, padding counted in the divisor,
/// no divisor override).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AvgPoolArgs<const D: usize> {
    /// The window's extents.
    pub kernel_size: [usize; D],
    /// The step between windows; `None` is the kernel size.
    pub stride: Option<[usize; D]>,
    /// Implicit zeros on both sides, at most half the kernel size.
    pub padding: [usize; D],
    /// Round the output size up (see [`MaxPoolArgs::ceil_mode`]).
    pub ceil_mode: bool,
    /// Divide by the window's size including padding (but not the part of a `ceil_mode`
    /// window past the padding); else by the number of input elements it covers.
    pub count_include_pad: bool,
    /// Divide every window by this instead (2-d only in PyTorch).
    pub divisor_override: Option<usize>,
}

impl<const D: usize> AvgPoolArgs<D> {
    /// A window of `kernel_size`, with the other arguments at their defaults.
    pub fn new(kernel_size: impl Spatial<D>) -> Self {
        AvgPoolArgs {
            kernel_size: kernel_size.spatial(),
            stride: None,
            padding: [0; D],
            ceil_mode: false,
            count_include_pad: true,
            divisor_override: None,
        }
    }
    /// Sets the stride.
    pub fn stride(mut self, stride: impl Spatial<D>) -> Self {
        self.stride = Some(stride.spatial());
        self
    }
    /// Sets the padding.
    pub fn padding(mut self, padding: impl Spatial<D>) -> Self {
        self.padding = padding.spatial();
        self
    }
    /// Sets `ceil_mode`.
    pub fn ceil_mode(mut self, on: bool) -> Self {
        self.ceil_mode = on;
        self
    }
    /// Sets `count_include_pad`.
    pub fn count_include_pad(mut self, on: bool) -> Self {
        self.count_include_pad = on;
        self
    }
    /// Sets `divisor_override`.
    pub fn divisor_override(mut self, divisor: usize) -> Self {
        self.divisor_override = Some(divisor);
        self
    }
}

/// How `interpolate` computes its samples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum InterpolateMode {
    /// PyTorch's legacy `"nearest"`: source index `floor(dst * scale)`, where `scale` is
    /// `1 / scale_factor` when a scale factor is used, else `input / output`.
    #[default]
    Nearest,
    /// `"linear"`, for `[N, C, L]` inputs.
    Linear,
    /// `"bilinear"`, for `[N, C, H, W]` inputs.
    Bilinear,
}

impl InterpolateMode {
    pub(super) fn name(self) -> &'static str {
        match self {
            InterpolateMode::Nearest => "nearest",
            InterpolateMode::Linear => "linear",
            InterpolateMode::Bilinear => "bilinear",
        }
    }
}

impl std::str::FromStr for InterpolateMode {
    type Err = Error;

    /// PyTorch's mode strings: `"nearest"`, `"linear"`, `"bilinear"`.
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "nearest" => Ok(InterpolateMode::Nearest),
            "linear" => Ok(InterpolateMode::Linear),
            "bilinear" => Ok(InterpolateMode::Bilinear),
            other => Err(Error::invalid("interpolate", format!("unsupported mode '{other}'"))),
        }
    }
}

/// The arguments of `interpolate` (PyTorch's `F.interpolate`): exactly one of `size` and
/// `scale_factor` (one value for every spatial dimension, or one each).
///
/// ```
/// use ember_tensor::ops::pool::{InterpolateArgs, InterpolateMode};
/// let up = InterpolateArgs::scale_factor([2.0]).mode(InterpolateMode::Bilinear).align_corners(false);
/// assert_eq!(up.scale_factor, Some(vec![2.0]));
/// let to = InterpolateArgs::size([7, 9]);
/// assert_eq!(to.mode, InterpolateMode::Nearest);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InterpolateArgs {
    /// The output's spatial size.
    pub size: Option<Vec<usize>>,
    /// The factor each spatial dimension is scaled by (the size is rounded down).
    pub scale_factor: Option<Vec<f64>>,
    /// The sampling mode.
    pub mode: InterpolateMode,
    /// For the linear modes: map the corner pixels' centres onto each other (`true`) or the
    /// corners themselves (`false`, the default). Must be `None` for `Nearest`.
    pub align_corners: Option<bool>,
    /// With a scale factor: compute the source positions from the rounded output size
    /// (`true`) rather than from the factor itself (the default).
    pub recompute_scale_factor: Option<bool>,
}

impl InterpolateArgs {
    /// An output of `size` (one value for every spatial dimension, or one each).
    pub fn size(size: impl Into<Vec<usize>>) -> Self {
        InterpolateArgs { size: Some(size.into()), ..Default::default() }
    }
    /// An output scaled by `scale_factor` (one value for every spatial dimension, or one
    /// each).
    pub fn scale_factor(scale_factor: impl Into<Vec<f64>>) -> Self {
        InterpolateArgs { scale_factor: Some(scale_factor.into()), ..Default::default() }
    }
    /// Sets the mode.
    pub fn mode(mut self, mode: InterpolateMode) -> Self {
        self.mode = mode;
        self
    }
    /// Sets `align_corners`.
    pub fn align_corners(mut self, on: bool) -> Self {
        self.align_corners = Some(on);
        self
    }
    /// Sets `recompute_scale_factor`.
    pub fn recompute_scale_factor(mut self, on: bool) -> Self {
        self.recompute_scale_factor = Some(on);
        self
    }
}
