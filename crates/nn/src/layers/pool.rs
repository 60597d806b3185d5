//! Pooling layers ([`MaxPool1d`], [`MaxPool2d`], [`AvgPool1d`], [`AvgPool2d`],
//! [`AdaptiveAvgPool1d`], [`AdaptiveAvgPool2d`], [`AdaptiveMaxPool2d`]) and the functional
//! forms, with PyTorch's arguments and defaults. The layers hold no parameters and behave
//! the same in training and evaluation.

use super::activation::stateless_module;
use super::arg_builders::arg_builders;
use crate::module::Module;
use ember_autograd::Var;
use ember_tensor::ops::pool::{AvgPoolArgs, MaxPoolArgs};
use ember_tensor::{Result, Spatial, Tensor};

macro_rules! max_pool_layer {
    ($name:ident, $d:literal, $torch:literal) => {
        #[doc = concat!("Max pooling over ", $d, " spatial dimension(s), PyTorch's `nn.", $torch, "`: the stride")]
        /// defaults to the kernel size, no padding, dilation 1, floor rounding.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name {
            /// The pooling arguments.
            pub args: MaxPoolArgs<$d>,
        }

        impl $name {
            /// A max pool with windows of `kernel_size`.
            pub fn new(kernel_size: impl Spatial<$d>) -> Self {
                $name { args: MaxPoolArgs::new(kernel_size) }
            }
            arg_builders! {field args;
                /// Sets the stride.
                stride(impl Spatial<$d>);
                /// Sets the padding (at most half the kernel size).
                padding(impl Spatial<$d>);
                /// Sets the dilation.
                dilation(impl Spatial<$d>);
                /// Sets `ceil_mode`.
                ceil_mode(bool);
            }
            /// The pooled values and the `i64` flat positions of the maxima in their planes
            /// (PyTorch's `return_indices=True`).
            pub fn forward_with_indices(&self, x: &Var) -> Result<(Var, Tensor)> {
                x.max_pool_with_indices(&self.args)
            }
        }

        stateless_module!($name, |self, x| Ok(x.max_pool_with_indices(&self.args)?.0));
    };
}

max_pool_layer!(MaxPool1d, 1, "MaxPool1d");
max_pool_layer!(MaxPool2d, 2, "MaxPool2d");

macro_rules! avg_pool_layer {
    ($name:ident, $d:literal, $torch:literal) => {
        #[doc = concat!("Average pooling over ", $d, " spatial dimension(s), PyTorch's `nn.", $torch, "`: the")]
        /// stride defaults to the kernel size, no padding, floor rounding, padding counted
        /// in the divisor.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name {
            /// The pooling arguments.
            pub args: AvgPoolArgs<$d>,
        }

        impl $name {
            /// An average pool with windows of `kernel_size`.
            pub fn new(kernel_size: impl Spatial<$d>) -> Self {
                $name { args: AvgPoolArgs::new(kernel_size) }
            }
            arg_builders! {field args;
                /// Sets the stride.
                stride(impl Spatial<$d>);
                /// Sets the padding (at most half the kernel size).
                padding(impl Spatial<$d>);
                /// Sets `ceil_mode`.
                ceil_mode(bool);
                /// Sets `count_include_pad`.
                count_include_pad(bool);
            }
        }

        stateless_module!($name, |self, x| x.avg_pool(&self.args));
    };
}

avg_pool_layer!(AvgPool1d, 1, "AvgPool1d");
avg_pool_layer!(AvgPool2d, 2, "AvgPool2d");

impl AvgPool2d {
    arg_builders! {field args;
        /// Sets `divisor_override`: every window is divided by it.
        divisor_override(usize);
    }
}

/// Adaptive average pooling of `[N, C, L]` (or `[C, L]`) to `output_size` positions,
/// PyTorch's `nn.AdaptiveAvgPool1d`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdaptiveAvgPool1d {
    /// The output length.
    pub output_size: usize,
}

impl AdaptiveAvgPool1d {
    /// Pools to `output_size` positions.
    pub fn new(output_size: usize) -> Self {
        AdaptiveAvgPool1d { output_size }
    }
}

stateless_module!(AdaptiveAvgPool1d, |self, x| x.adaptive_avg_pool1d(self.output_size));

/// Adaptive average pooling of `[N, C, H, W]` (or `[C, H, W]`) to `output_size`, PyTorch's
/// `nn.AdaptiveAvgPool2d`.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::{AdaptiveAvgPool2d, Module};
/// use ember_tensor::Tensor;
/// let x = Var::new(Tensor::randn([2, 8, 7, 5])?);
/// assert_eq!(AdaptiveAvgPool2d::new(1).forward(&x)?.shape().dims(), &[2, 8, 1, 1]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdaptiveAvgPool2d {
    /// The output's `[h, w]`.
    pub output_size: [usize; 2],
}

impl AdaptiveAvgPool2d {
    /// Pools to `output_size` (one value for both dimensions, or `[h, w]`).
    pub fn new(output_size: impl Spatial<2>) -> Self {
        AdaptiveAvgPool2d { output_size: output_size.spatial() }
    }
}

stateless_module!(AdaptiveAvgPool2d, |self, x| x.adaptive_avg_pool2d(self.output_size));

/// Adaptive max pooling of `[N, C, H, W]` (or `[C, H, W]`) to `output_size`, PyTorch's
/// `nn.AdaptiveMaxPool2d`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdaptiveMaxPool2d {
    /// The output's `[h, w]`.
    pub output_size: [usize; 2],
}

impl AdaptiveMaxPool2d {
    /// Pools to `output_size` (one value for both dimensions, or `[h, w]`).
    pub fn new(output_size: impl Spatial<2>) -> Self {
        AdaptiveMaxPool2d { output_size: output_size.spatial() }
    }
    /// The pooled values and the flat positions of the maxima (PyTorch's
    /// `return_indices=True`).
    pub fn forward_with_indices(&self, x: &Var) -> Result<(Var, Tensor)> {
        x.adaptive_max_pool_with_indices(self.output_size)
    }
}

stateless_module!(AdaptiveMaxPool2d, |self, x| x.adaptive_max_pool2d(self.output_size));

/// 1-d max pooling (PyTorch's `F.max_pool1d`).
pub fn max_pool1d(x: &Var, args: &MaxPoolArgs<1>) -> Result<Var> {
    x.max_pool1d(args)
}

/// 2-d max pooling (PyTorch's `F.max_pool2d`).
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::functional as F;
/// use ember_tensor::Tensor;
/// let x = Var::new(Tensor::randn([4, 6, 24, 24])?);
/// let y = F::max_pool2d(&x, &F::MaxPoolArgs::new(2))?;
/// assert_eq!(y.shape().dims(), &[4, 6, 12, 12]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn max_pool2d(x: &Var, args: &MaxPoolArgs<2>) -> Result<Var> {
    x.max_pool2d(args)
}

/// 1-d max pooling with the positions of the maxima.
pub fn max_pool1d_with_indices(x: &Var, args: &MaxPoolArgs<1>) -> Result<(Var, Tensor)> {
    x.max_pool_with_indices(args)
}

/// 2-d max pooling with the positions of the maxima (PyTorch's
/// `F.max_pool2d(..., return_indices=True)`).
pub fn max_pool2d_with_indices(x: &Var, args: &MaxPoolArgs<2>) -> Result<(Var, Tensor)> {
    x.max_pool_with_indices(args)
}

/// 1-d average pooling (PyTorch's `F.avg_pool1d`).
pub fn avg_pool1d(x: &Var, args: &AvgPoolArgs<1>) -> Result<Var> {
    x.avg_pool1d(args)
}

/// 2-d average pooling (PyTorch's `F.avg_pool2d`).
pub fn avg_pool2d(x: &Var, args: &AvgPoolArgs<2>) -> Result<Var> {
    x.avg_pool2d(args)
}

/// 1-d adaptive average pooling (PyTorch's `F.adaptive_avg_pool1d`).
pub fn adaptive_avg_pool1d(x: &Var, output_size: usize) -> Result<Var> {
    x.adaptive_avg_pool1d(output_size)
}

/// 2-d adaptive average pooling (PyTorch's `F.adaptive_avg_pool2d`).
pub fn adaptive_avg_pool2d(x: &Var, output_size: impl Spatial<2>) -> Result<Var> {
    x.adaptive_avg_pool2d(output_size.spatial())
}

/// 2-d adaptive max pooling (PyTorch's `F.adaptive_max_pool2d`).
pub fn adaptive_max_pool2d(x: &Var, output_size: impl Spatial<2>) -> Result<Var> {
    x.adaptive_max_pool2d(output_size.spatial())
}

/// 2-d adaptive max pooling with the positions of the maxima.
pub fn adaptive_max_pool2d_with_indices(x: &Var, output_size: impl Spatial<2>) -> Result<(Var, Tensor)> {
    x.adaptive_max_pool_with_indices(output_size.spatial())
}
