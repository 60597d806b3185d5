//! The parameter list an optimizer owns, and the per-step view of one parameter: its value
//! and gradient as tensors the fused kernels can take.

use ember_autograd::Var;
use ember_tensor::{Error, Result, Tensor};
use std::collections::HashSet;

/// Checks a parameter list the way PyTorch does when an optimizer is built: not empty, only
/// float leaves, no parameter twice (a duplicate would be updated twice per step).
pub(crate) fn check_params(op: &'static str, params: impl IntoIterator<Item = Var>) -> Result<Vec<Var>> {
    let params: Vec<Var> = params.into_iter().collect();
    if params.is_empty() {
        return Err(Error::invalid(op, "the parameter list is empty"));
    }
    let mut seen = HashSet::with_capacity(params.len());
    for (i, p) in params.iter().enumerate() {
        if !p.is_leaf() {
            return Err(Error::invalid(
                op,
                format!("parameter {i} is the result of an operation ({}); only leaves can be optimized", p.op_name()),
            ));
        }
        if !p.dtype().is_float() {
            return Err(Error::dtype(
                op,
                format!("parameter {i} is {}; only f32 and f64 parameters can be optimized", p.dtype()),
            ));
        }
        if !seen.insert(p.id()) {
            return Err(Error::invalid(op, format!("parameter {i} appears more than once in the parameter list")));
        }
    }
    Ok(params)
}

/// One parameter taking part in a step.
pub(crate) struct Slot {
    /// The tensor the kernels update: the parameter's value itself, or a contiguous copy of
    /// a strided value that [`Slot::finish`] writes back.
    pub value: Tensor,
    /// The gradient, contiguous, of the value's dtype, sharing no storage with the value.
    pub grad: Tensor,
    /// The parameter's value when it is not contiguous (so `value` is a copy of it).
    strided: Option<Tensor>,
    /// The parameter's position in the optimizer's list, for messages.
    index: usize,
    /// The operation, for messages.
    op: &'static str,
}

impl Slot {
    /// The slots of the parameters a step updates, with their positions in `params`. Every
    /// parameter is checked before any is changed, so a bad one leaves all of them as they
    /// were.
    pub fn prepare_all(op: &'static str, params: &[Var]) -> Result<Vec<(usize, Slot)>> {
        let mut slots = Vec::with_capacity(params.len());
        for (i, p) in params.iter().enumerate() {
            if let Some(slot) = Slot::prepare(op, i, p)? {
                slots.push((i, slot));
            }
        }
        Ok(slots)
    }

    /// The parameter as the kernels need it, or `None` when this step skips it: it does not
    /// require grad (frozen, or `requires_grad_(false)`), even with a stale gradient left from
    /// before, or it has no gradient (PyTorch's `p.grad is None`).
    ///
    /// PyTorch steps any parameter whose `.grad` is set; ember also skips those that stopped
    /// requiring grad, so that freezing a parameter keeps it bit-identical however its
    /// gradient was left.
    pub fn prepare(op: &'static str, index: usize, param: &Var) -> Result<Option<Slot>> {
        if !param.requires_grad() {
            return Ok(None);
        }
        let Some(grad) = param.grad() else {
            return Ok(None);
        };
        let value = param.value();
        if !value.dtype().is_float() {
            return Err(Error::dtype(
                op,
                format!("parameter {index} is {}; only f32 and f64 parameters can be optimized", value.dtype()),
            ));
        }
        if grad.dtype() != value.dtype() {
            return Err(Error::dtype(
                op,
                format!("parameter {index} is {} but its gradient is {}", value.dtype(), grad.dtype()),
            ));
        }
        if grad.shape() != value.shape() {
            return Err(Error::shape(
                op,
                format!("parameter {index} has shape {:?} but its gradient {:?}", value.shape(), grad.shape()),
            ));
        }
        // The kernels read operands as flat slices, and refuse an operand aliasing the
        // updated tensor; both cases are rare (a broadcast gradient, a gradient set to the
        // value itself), so a copy there keeps the common path free of allocations.
        let grad = if !grad.is_contiguous() || grad.shares_storage(&value) { grad.copy() } else { grad };
        let (value, strided) = if value.is_contiguous() { (value, None) } else { (value.copy(), Some(value)) };
        Ok(Some(Slot { value, grad, strided, index, op }))
    }

    /// Checks that a state tensor still fits the parameter, whose value may have been
    /// replaced (`Var::set_value`) with another shape or dtype since the state was made.
    pub fn check_state(&self, name: &str, state: &Tensor) -> Result<()> {
        let v = &self.value;
        if state.shape() != v.shape() || state.dtype() != v.dtype() {
            return Err(Error::shape(
                self.op,
                format!(
                    "parameter {} is now {} of shape {:?} but its {name} state is {} of shape {:?}; \
                     was its value replaced? Rebuild the optimizer for the new parameter",
                    self.index,
                    v.dtype(),
                    v.shape(),
                    state.dtype(),
                    state.shape()
                ),
            ));
        }
        Ok(())
    }

    /// Writes a strided parameter's updated copy back into it.
    pub fn finish(self) -> Result<()> {
        match self.strided {
            Some(target) => target.copy_(&self.value),
            None => Ok(()),
        }
    }
}
