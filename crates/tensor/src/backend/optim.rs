//! The fused optimizer updates a backend provides: their hyperparameters and the state
//! tensors they update.
//!
//! Each update writes one parameter and its state in one pass over the data, in the
//! parameter's dtype, with PyTorch's update rule rounded like ATen's CPU kernels (the same
//! operations in the same order), so that trajectories match PyTorch's. The derived
//! constants (bias corrections, the decoupled shrink factor) are computed in `f64` from
//! these fields, as PyTorch computes them in Python floats, and then rounded to the dtype.

use super::{View, validate};
use crate::dtype::DType;
use crate::layout::Layout;
use crate::storage::Storage;
use crate::{Error, Result};
use std::ops::Range;

/// A storage updated in place, with the layout through which the update addresses it.
pub type Target<'a> = (&'a mut Storage, &'a Layout);

/// One step of stochastic gradient descent (PyTorch's `SGD`). With `d = g + weight_decay·p`:
/// without momentum `p -= lr·d`; with momentum the buffer becomes `d` on its first step and
/// `momentum·b + (1 - dampening)·d` afterwards, and `p -= lr·b`, or `p -= lr·(d +
/// momentum·b)` with Nesterov momentum.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdStep {
    /// Learning rate.
    pub lr: f64,
    /// Momentum factor; 0 turns momentum off (and then no buffer may be given).
    pub momentum: f64,
    /// Dampening of the gradient's contribution to the momentum buffer.
    pub dampening: f64,
    /// Nesterov momentum.
    pub nesterov: bool,
    /// L2 penalty added to the gradient; 0 skips the addition (so an infinite parameter does
    /// not turn the gradient into NaN, as in PyTorch).
    pub weight_decay: f64,
    /// The momentum buffer has no history yet: it is set to the decayed gradient, undampened,
    /// instead of being updated (its old contents are ignored).
    pub fresh_buffer: bool,
}

/// One step of Adam or AdamW (PyTorch's `Adam` and `AdamW`). With `d = g + weight_decay·p`
/// (coupled decay only): `m = lerp(m, d, 1 - beta1)`, `v = beta2·v + (1 - beta2)·d²`, with
/// AMSGrad `vmax = max(vmax, v)` (NaN propagating); then, decoupled, `p *= 1 -
/// lr·weight_decay`, and `p -= lr/(1 - beta1^t) · m / (√v̂ / √(1 - beta2^t) + eps)` where `v̂`
/// is `v`, or `vmax` with AMSGrad.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamStep {
    /// Learning rate.
    pub lr: f64,
    /// Decay rate of the running average of the gradient.
    pub beta1: f64,
    /// Decay rate of the running average of the squared gradient.
    pub beta2: f64,
    /// Added to the denominator for numerical stability.
    pub eps: f64,
    /// Weight decay; 0 turns it off.
    pub weight_decay: f64,
    /// Decoupled weight decay (AdamW) rather than an L2 penalty added to the gradient.
    pub decoupled: bool,
    /// Normalise by the running maximum of the second moment (needs its state).
    pub amsgrad: bool,
    /// The step being taken, counting from 1: the bias corrections use it.
    pub step: u64,
}

/// The state tensors [`AdamStep`] updates.
#[derive(Debug)]
pub struct AdamState<'a> {
    /// Running average of the gradient.
    pub exp_avg: Target<'a>,
    /// Running average of the squared gradient.
    pub exp_avg_sq: Target<'a>,
    /// Running maximum of `exp_avg_sq`: present exactly when `amsgrad` is on.
    pub max_exp_avg_sq: Option<Target<'a>>,
}

/// One step of RMSprop (PyTorch's `RMSprop`). With `d = g + weight_decay·p`:
/// `s = alpha·s + (1 - alpha)·d²`; centered, also `ḡ = lerp(ḡ, d, 1 - alpha)` and `a = √(s -
/// ḡ²) + eps`, else `a = √s + eps`; then `p -= lr·d/a`, or with momentum `b = momentum·b +
/// d/a` and `p -= lr·b`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RmsPropStep {
    /// Learning rate.
    pub lr: f64,
    /// Smoothing constant of the running averages.
    pub alpha: f64,
    /// Added to the denominator for numerical stability.
    pub eps: f64,
    /// L2 penalty added to the gradient; 0 turns it off.
    pub weight_decay: f64,
    /// Momentum factor; 0 turns momentum off.
    pub momentum: f64,
    /// Normalise by an estimate of the gradient's variance (needs the `grad_avg` state).
    pub centered: bool,
}

/// The state tensors [`RmsPropStep`] updates.
#[derive(Debug)]
pub struct RmsPropState<'a> {
    /// Running average of the squared gradient.
    pub square_avg: Target<'a>,
    /// Running average of the gradient: present exactly when `centered` is on.
    pub grad_avg: Option<Target<'a>>,
    /// Momentum buffer: present exactly when `momentum > 0`.
    pub momentum_buffer: Option<Target<'a>>,
}

// ---- The checks every backend makes before an update ----

/// The element range a contiguous operand of an update occupies, after checking that it
/// fits its storage, has the parameter's dtype and shape, and is contiguous.
fn operand(op: &'static str, what: &str, s: &Storage, l: &Layout, dtype: DType, like: &Layout) -> Result<Range<usize>> {
    let l = validate::view(op, s, l)?;
    if s.dtype() != dtype {
        return Err(Error::dtype(op, format!("{what} is {}, but the parameter is {dtype}", s.dtype())));
    }
    if l.shape() != like.shape() {
        return Err(Error::shape(op, format!("{what} has shape {}, but the parameter {}", l.shape(), like.shape())));
    }
    l.contiguous_range()
        .ok_or_else(|| Error::invalid(op, format!("{what} must be contiguous (strides {:?})", l.strides())))
}

/// The parameter's element range, after checking that it fits its storage, is float and is
/// contiguous.
fn param_range(op: &'static str, s: &Storage, l: &Layout) -> Result<Range<usize>> {
    let dtype = s.dtype();
    if !dtype.is_float() {
        return Err(Error::dtype(op, format!("only f32 and f64 parameters can be updated, got {dtype}")));
    }
    operand(op, "the parameter", s, l, dtype, l)
}

/// Checks an optional state against the update's setting, and its layout against the
/// parameter's; the element range for a present one.
fn optional(
    op: &'static str,
    what: &str,
    t: &Option<Target<'_>>,
    wanted: bool,
    dtype: DType,
    like: &Layout,
) -> Result<Option<Range<usize>>> {
    match (t, wanted) {
        (Some((s, l)), true) => operand(op, what, s, l, dtype, like).map(Some),
        (None, false) => Ok(None),
        (Some(_), false) => Err(Error::invalid(op, format!("{what} was given, but the settings do not use it"))),
        (None, true) => Err(Error::invalid(op, format!("the settings need {what}, which was not given"))),
    }
}

/// The element ranges of an SGD step's operands.
pub(crate) struct SgdRanges {
    pub(crate) param: Range<usize>,
    pub(crate) grad: Range<usize>,
    pub(crate) buffer: Option<Range<usize>>,
}

/// Checks an SGD step's operands (see [`super::Backend::sgd_step`]).
pub(crate) fn check_sgd(
    (p, lp): (&Storage, &Layout),
    (g, lg): View<'_>,
    buffer: &Option<Target<'_>>,
    hp: &SgdStep,
) -> Result<SgdRanges> {
    let op = "sgd_step";
    let param = param_range(op, p, lp)?;
    let dtype = p.dtype();
    let grad = operand(op, "the gradient", g, lg, dtype, lp)?;
    let buffer = optional(op, "a momentum buffer", buffer, hp.momentum != 0.0, dtype, lp)?;
    Ok(SgdRanges { param, grad, buffer })
}

/// The element ranges of an Adam step's operands.
pub(crate) struct AdamRanges {
    pub(crate) param: Range<usize>,
    pub(crate) grad: Range<usize>,
    pub(crate) exp_avg: Range<usize>,
    pub(crate) exp_avg_sq: Range<usize>,
    pub(crate) max_exp_avg_sq: Option<Range<usize>>,
}

/// Checks an Adam or AdamW step's operands and step count (see
/// [`super::Backend::adam_step`]).
pub(crate) fn check_adam(
    (p, lp): (&Storage, &Layout),
    (g, lg): View<'_>,
    st: &AdamState<'_>,
    hp: &AdamStep,
) -> Result<AdamRanges> {
    let op = "adam_step";
    let param = param_range(op, p, lp)?;
    let dtype = p.dtype();
    let grad = operand(op, "the gradient", g, lg, dtype, lp)?;
    let exp_avg = operand(op, "exp_avg", st.exp_avg.0, st.exp_avg.1, dtype, lp)?;
    let exp_avg_sq = operand(op, "exp_avg_sq", st.exp_avg_sq.0, st.exp_avg_sq.1, dtype, lp)?;
    let max_exp_avg_sq = optional(op, "max_exp_avg_sq", &st.max_exp_avg_sq, hp.amsgrad, dtype, lp)?;
    if hp.step == 0 {
        return Err(Error::invalid(op, "the step count starts at 1"));
    }
    Ok(AdamRanges { param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq })
}

/// The element ranges of an RMSprop step's operands.
pub(crate) struct RmsPropRanges {
    pub(crate) param: Range<usize>,
    pub(crate) grad: Range<usize>,
    pub(crate) square_avg: Range<usize>,
    pub(crate) grad_avg: Option<Range<usize>>,
    pub(crate) momentum_buffer: Option<Range<usize>>,
}

/// Checks an RMSprop step's operands (see [`super::Backend::rmsprop_step`]).
pub(crate) fn check_rmsprop(
    (p, lp): (&Storage, &Layout),
    (g, lg): View<'_>,
    st: &RmsPropState<'_>,
    hp: &RmsPropStep,
) -> Result<RmsPropRanges> {
    let op = "rmsprop_step";
    let param = param_range(op, p, lp)?;
    let dtype = p.dtype();
    let grad = operand(op, "the gradient", g, lg, dtype, lp)?;
    let square_avg = operand(op, "square_avg", st.square_avg.0, st.square_avg.1, dtype, lp)?;
    let grad_avg = optional(op, "grad_avg", &st.grad_avg, hp.centered, dtype, lp)?;
    let momentum_buffer = optional(op, "a momentum buffer", &st.momentum_buffer, hp.momentum > 0.0, dtype, lp)?;
    Ok(RmsPropRanges { param, grad, square_avg, grad_avg, momentum_buffer })
}
