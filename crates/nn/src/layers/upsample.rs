//! [`Upsample`] and the functional [`interpolate`].

use super::activation::stateless_module;
use super::arg_builders::arg_builders;
use crate::module::Module;
use ember_autograd::Var;
use ember_tensor::Result;
use ember_tensor::ops::pool::{InterpolateArgs, InterpolateMode};

/// Resamples `[N, C, L]` or `[N, C, H, W]` inputs to a size or by a scale factor, PyTorch's
/// `nn.Upsample` (modes `nearest`, the default, `linear` and `bilinear`).
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::{Module, Upsample};
/// use ember_tensor::{InterpolateMode, Tensor};
/// let x = Var::new(Tensor::randn([1, 3, 4, 4])?);
/// let up = Upsample::scale_factor(2.0).mode(InterpolateMode::Bilinear).align_corners(true);
/// assert_eq!(up.forward(&x)?.shape().dims(), &[1, 3, 8, 8]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Upsample {
    /// The interpolation's arguments.
    pub args: InterpolateArgs,
}

impl Upsample {
    /// Resamples to `size` (one value for every spatial dimension, or one each).
    pub fn size(size: impl Into<Vec<usize>>) -> Self {
        Upsample { args: InterpolateArgs::size(size) }
    }
    /// Scales every spatial dimension by `factor`.
    pub fn scale_factor(factor: f64) -> Self {
        Upsample { args: InterpolateArgs::scale_factor([factor]) }
    }
    /// Scales each spatial dimension by its own factor.
    pub fn scale_factors(factors: impl Into<Vec<f64>>) -> Self {
        Upsample { args: InterpolateArgs::scale_factor(factors) }
    }
    arg_builders! {field args;
        /// Sets the mode.
        mode(InterpolateMode);
        /// Sets `align_corners` (linear modes only).
        align_corners(bool);
        /// Sets `recompute_scale_factor`.
        recompute_scale_factor(bool);
    }
}

stateless_module!(Upsample, |self, x| x.interpolate(&self.args));

/// Resamples `[N, C, L]` or `[N, C, H, W]` inputs (PyTorch's `F.interpolate`).
pub fn interpolate(x: &Var, args: &InterpolateArgs) -> Result<Var> {
    x.interpolate(args)
}
