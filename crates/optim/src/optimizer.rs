//! The [`Optimizer`] trait and the checks its implementations share.

use crate::OptimizerState;
use ember_autograd::Var;
use ember_tensor::{Error, Result};

/// An optimizer over a fixed list of parameters.
///
/// Each optimizer owns one parameter list (PyTorch's single parameter group); give
/// different parameters different settings with several optimizers over disjoint lists.
/// The trait is object safe, so schedulers and training loops can take `&mut dyn Optimizer`.
pub trait Optimizer {
    /// Updates every parameter that requires grad and has a gradient, in place on its value
    /// and without recording history. The others keep their value and their state (step
    /// count, moments, momentum buffer): those without a gradient (PyTorch's
    /// `p.grad is None`), and those that do not require grad (frozen with
    /// [`Var::freeze`] or `requires_grad_(false)`), even when a stale gradient is still set;
    /// PyTorch would step the latter.
    fn step(&mut self) -> Result<()>;

    /// Sets the gradients of this optimizer's parameters to none (PyTorch's
    /// `zero_grad(set_to_none=True)`); other parameters keep theirs.
    fn zero_grad(&self) {
        for p in self.params() {
            p.zero_grad();
        }
    }

    /// The learning rate the next step uses.
    fn lr(&self) -> f64;

    /// Sets the learning rate of the next steps (what a scheduler does). Unlike the
    /// constructors it does not validate: a negative or NaN value is the caller's choice.
    fn set_lr(&mut self, lr: f64);

    /// The parameters, in the order they were given.
    fn params(&self) -> &[Var];

    /// The hyperparameters and per-parameter state, copied (see [`OptimizerState`]).
    fn state_dict(&self) -> OptimizerState;

    /// Replaces the hyperparameters and per-parameter state with those of `state`, taken
    /// from an optimizer of the same kind over parameters of the same shapes. On error
    /// nothing changes; the message names the entry that does not fit.
    fn load_state_dict(&mut self, state: &OptimizerState) -> Result<()>;
}

/// A hyperparameter that must be a finite number at least zero (PyTorch's `0.0 <= x` checks,
/// which also refuse NaN).
pub(crate) fn non_negative(op: &'static str, name: &str, v: f64) -> Result<()> {
    if v >= 0.0 && v.is_finite() {
        Ok(())
    } else {
        Err(Error::invalid(op, format!("{name} must be a finite number >= 0, got {v}")))
    }
}

/// A hyperparameter in `[0, 1)`, like Adam's betas and RMSprop's alpha.
pub(crate) fn unit_interval(op: &'static str, name: &str, v: f64) -> Result<()> {
    if (0.0..1.0).contains(&v) { Ok(()) } else { Err(Error::invalid(op, format!("{name} must be in [0, 1), got {v}"))) }
}
