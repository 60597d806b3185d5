//! The arguments of convolutions, transposed convolutions and `unfold`/`fold`, as a caller
//! gives them (PyTorch's keyword arguments, with builders).

use crate::{Error, Result};

/// A per-dimension argument given either once for every spatial dimension (`3`) or per
/// dimension (`[3, 5]`), as PyTorch's `int or tuple` arguments.
pub trait Spatial<const D: usize> {
    /// The value for each spatial dimension.
    fn spatial(self) -> [usize; D];
}

impl<const D: usize> Spatial<D> for usize {
    fn spatial(self) -> [usize; D] {
        [self; D]
    }
}

impl<const D: usize> Spatial<D> for [usize; D] {
    fn spatial(self) -> [usize; D] {
        self
    }
}

/// The implicit zero padding of a convolution: PyTorch's `padding` argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Padding<const D: usize> {
    /// This many zeros on both sides of each spatial dimension.
    Explicit([usize; D]),
    /// As much padding as keeps the output the size of the input (PyTorch's `"same"`): a
    /// total of `dilation * (kernel - 1)` per dimension, the odd zero going after the input.
    /// Only for stride 1.
    Same,
    /// No padding (PyTorch's `"valid"`).
    Valid,
}

impl<const D: usize> Default for Padding<D> {
    fn default() -> Self {
        Padding::Explicit([0; D])
    }
}

impl<const D: usize> From<usize> for Padding<D> {
    fn from(p: usize) -> Self {
        Padding::Explicit([p; D])
    }
}

impl<const D: usize> From<[usize; D]> for Padding<D> {
    fn from(p: [usize; D]) -> Self {
        Padding::Explicit(p)
    }
}

impl<const D: usize> std::str::FromStr for Padding<D> {
    type Err = Error;

    /// `"same"` or `"valid"`, PyTorch's padding strings.
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "same" => Ok(Padding::Same),
            "valid" => Ok(Padding::Valid),
            other => Err(Error::invalid(
                "padding",
                format!("invalid padding string {other:?}, expected \"same\" or \"valid\""),
            )),
        }
    }
}

/// The arguments of a `D`-dimensional convolution besides its operands (PyTorch's
/// `stride`, `padding`, `dilation` and `groups`). The defaults are PyTorch's: stride 1, no
/// padding, dilation 1, one group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvArgs<const D: usize> {
    /// The step between kernel positions.
    pub stride: [usize; D],
    /// The implicit zeros around the input.
    pub padding: Padding<D>,
    /// The spacing between kernel taps.
    pub dilation: [usize; D],
    /// Input and output channels are split into this many groups, each convolved with its
    /// own part of the weight (`groups == in_channels` is a depthwise convolution).
    pub groups: usize,
}

impl<const D: usize> Default for ConvArgs<D> {
    fn default() -> Self {
        ConvArgs { stride: [1; D], padding: Padding::default(), dilation: [1; D], groups: 1 }
    }
}

impl<const D: usize> ConvArgs<D> {
    /// With `stride` (one value for every dimension, or one per dimension).
    pub fn stride(mut self, stride: impl Spatial<D>) -> Self {
        self.stride = stride.spatial();
        self
    }

    /// With `padding`: a number, one per dimension, [`Padding::Same`] or [`Padding::Valid`].
    pub fn padding(mut self, padding: impl Into<Padding<D>>) -> Self {
        self.padding = padding.into();
        self
    }

    /// With `dilation`.
    pub fn dilation(mut self, dilation: impl Spatial<D>) -> Self {
        self.dilation = dilation.spatial();
        self
    }

    /// With `groups`.
    pub fn groups(mut self, groups: usize) -> Self {
        self.groups = groups;
        self
    }
}

/// The arguments of a `D`-dimensional transposed convolution besides its operands
/// (PyTorch's `stride`, `padding`, `output_padding`, `groups` and `dilation`), with
/// PyTorch's defaults (1, 0, 0, 1, 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvTransposeArgs<const D: usize> {
    /// The stride of the convolution this transposes.
    pub stride: [usize; D],
    /// The padding of the convolution this transposes: that many rows and columns are
    /// removed from each side of the output.
    pub padding: [usize; D],
    /// Extra rows and columns added to one side of the output, to reach the input size of
    /// a strided convolution whose output size rounded down; smaller than the stride or
    /// the dilation.
    pub output_padding: [usize; D],
    /// The spacing between kernel taps.
    pub dilation: [usize; D],
    /// The number of channel groups.
    pub groups: usize,
}

impl<const D: usize> Default for ConvTransposeArgs<D> {
    fn default() -> Self {
        ConvTransposeArgs { stride: [1; D], padding: [0; D], output_padding: [0; D], dilation: [1; D], groups: 1 }
    }
}

impl<const D: usize> ConvTransposeArgs<D> {
    /// With `stride`.
    pub fn stride(mut self, stride: impl Spatial<D>) -> Self {
        self.stride = stride.spatial();
        self
    }

    /// With `padding`.
    pub fn padding(mut self, padding: impl Spatial<D>) -> Self {
        self.padding = padding.spatial();
        self
    }

    /// With `output_padding`.
    pub fn output_padding(mut self, output_padding: impl Spatial<D>) -> Self {
        self.output_padding = output_padding.spatial();
        self
    }

    /// With `dilation`.
    pub fn dilation(mut self, dilation: impl Spatial<D>) -> Self {
        self.dilation = dilation.spatial();
        self
    }

    /// With `groups`.
    pub fn groups(mut self, groups: usize) -> Self {
        self.groups = groups;
        self
    }
}

/// The arguments of `unfold` (im2col) and `fold` (col2im): PyTorch's `kernel_size`,
/// `dilation`, `padding` and `stride`, over two spatial dimensions.
///
/// ```
/// use ember_tensor::ops::conv::UnfoldArgs;
/// let args = UnfoldArgs::new([2, 3]).stride(2).padding([1, 0]);
/// assert_eq!((args.kernel_size, args.stride, args.padding), ([2, 3], [2, 2], [1, 0]));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UnfoldArgs {
    /// The extent of each block.
    pub kernel_size: [usize; 2],
    /// The spacing between the elements of a block (default 1).
    pub dilation: [usize; 2],
    /// Implicit zeros on both sides of each spatial dimension (default 0).
    pub padding: [usize; 2],
    /// The step between blocks (default 1).
    pub stride: [usize; 2],
}

impl UnfoldArgs {
    /// Blocks of `kernel_size`, with dilation 1, no padding and stride 1.
    pub fn new(kernel_size: impl Spatial<2>) -> Self {
        UnfoldArgs { kernel_size: kernel_size.spatial(), dilation: [1, 1], padding: [0, 0], stride: [1, 1] }
    }

    /// With `dilation`.
    pub fn dilation(mut self, dilation: impl Spatial<2>) -> Self {
        self.dilation = dilation.spatial();
        self
    }

    /// With `padding`.
    pub fn padding(mut self, padding: impl Spatial<2>) -> Self {
        self.padding = padding.spatial();
        self
    }

    /// With `stride`.
    pub fn stride(mut self, stride: impl Spatial<2>) -> Self {
        self.stride = stride.spatial();
        self
    }
}
