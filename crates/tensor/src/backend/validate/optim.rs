//! The checks every backend makes before a fused optimizer update
//! ([`Backend::sgd_step`](crate::backend::Backend::sgd_step) and its siblings): every
//! operand fits its storage, is contiguous and has the parameter's shape and dtype, and the
//! optional state is given exactly when the settings use it.

use super::view;
use crate::backend::{AdamState, RmsPropState, Target, View};
use crate::dtype::DType;
use crate::layout::Layout;
use crate::ops::optim::{AdamStep, RmsPropStep, SgdStep};
use crate::storage::Storage;
use crate::{Error, Result};
use std::ops::Range;

/// The element range a contiguous operand of an update occupies, after checking that it
/// fits its storage, has the parameter's dtype and shape, and is contiguous.
fn operand(op: &'static str, what: &str, s: &Storage, l: &Layout, dtype: DType, like: &Layout) -> Result<Range<usize>> {
    let l = view(op, s, l)?;
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

/// Checks an SGD step's operands (see [`crate::backend::Backend::sgd_step`]).
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
/// [`crate::backend::Backend::adam_step`]).
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

/// Checks an RMSprop step's operands (see [`crate::backend::Backend::rmsprop_step`]).
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
