//! Regression losses: squared error, absolute error, Huber.

use super::Reduction;
use super::check::pointwise;
use ember_autograd::autocast::{self, policy};
use ember_autograd::{IntoVar, Var};
use ember_tensor::{Error, Result};

/// The squared error `(input - target)^2`, reduced; PyTorch's `F.mse_loss`. Input and target
/// are float of one shape.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::{mse_loss, Reduction};
/// use ember_tensor::Tensor;
/// let x = Var::new(Tensor::from_vec(vec![1.0f32, 2.0], [2])?);
/// let y = Tensor::from_vec(vec![0.0f32, 4.0], [2])?;
/// assert_eq!(mse_loss(&x, &y, Reduction::Mean)?.item()?, 2.5);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn mse_loss(input: &Var, target: impl IntoVar, reduction: Reduction) -> Result<Var> {
    let target = target.into_var();
    if let Some(r) = autocast::run_cast(&policy::POINTWISE_LOSS, [Some(input), Some(&target)], |c| {
        mse_loss(c.or(0, input), c.or(1, &target), reduction)
    }) {
        return r;
    }
    pointwise("mse_loss", input, &target)?;
    Ok(reduction.apply(input.sub(&target)?.square()))
}

/// The absolute error `|input - target|`, reduced; PyTorch's `F.l1_loss` (gradient 0 where
/// they are equal).
pub fn l1_loss(input: &Var, target: impl IntoVar, reduction: Reduction) -> Result<Var> {
    let target = target.into_var();
    if let Some(r) = autocast::run_cast(&policy::POINTWISE_LOSS, [Some(input), Some(&target)], |c| {
        l1_loss(c.or(0, input), c.or(1, &target), reduction)
    }) {
        return r;
    }
    pointwise("l1_loss", input, &target)?;
    Ok(reduction.apply(input.sub(&target)?.abs()))
}

/// The options of [`huber_loss`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HuberOptions {
    /// How the per-element losses combine (default [`Reduction::Mean`]).
    pub reduction: Reduction,
    /// Where the loss turns from quadratic to linear (default 1, must be positive).
    pub delta: f64,
}

impl Default for HuberOptions {
    fn default() -> Self {
        HuberOptions { reduction: Reduction::Mean, delta: 1.0 }
    }
}

/// The Huber loss, PyTorch's `F.huber_loss`: with `d = input - target`, `d^2 / 2` where
/// `|d| < delta` and `delta (|d| - delta / 2)` elsewhere.
pub fn huber_loss(input: &Var, target: impl IntoVar, options: HuberOptions) -> Result<Var> {
    let target = target.into_var();
    if let Some(r) = autocast::run_cast(&policy::POINTWISE_LOSS, [Some(input), Some(&target)], |c| {
        huber_loss(c.or(0, input), c.or(1, &target), options)
    }) {
        return r;
    }
    pointwise("huber_loss", input, &target)?;
    let delta = options.delta;
    if !(delta > 0.0 && delta.is_finite()) {
        return Err(Error::invalid("huber_loss", format!("delta must be positive and finite, got {delta}")));
    }
    let d = input.sub(&target)?;
    let a = d.abs();
    let quadratic = d.square().mul_scalar(0.5);
    let linear = a.sub_scalar(0.5 * delta).mul_scalar(delta);
    let loss = a.lt_scalar(delta).where_cond(&quadratic, &linear)?;
    Ok(options.reduction.apply(loss))
}
