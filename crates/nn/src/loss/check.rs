//! Argument checks shared by the losses, so that mistakes are errors naming the loss and the
//! shapes or dtypes rather than a failure deep inside an operation.

use ember_autograd::Var;
use ember_tensor::{Error, Result};

/// `input` must be float.
pub(crate) fn float_input(op: &'static str, input: &Var) -> Result<()> {
    if !input.dtype().is_float() {
        return Err(Error::dtype(op, format!("the input must be float, got {}", input.dtype())));
    }
    Ok(())
}

/// For elementwise losses: float input and target of one shape.
pub(crate) fn pointwise(op: &'static str, input: &Var, target: &Var) -> Result<()> {
    float_input(op, input)?;
    if !target.dtype().is_float() {
        return Err(Error::dtype(op, format!("the target must be float, got {}", target.dtype())));
    }
    if input.shape() != target.shape() {
        return Err(Error::shape(
            op,
            format!("the input has shape {:?} but the target {:?}; they must match", input.shape(), target.shape()),
        ));
    }
    Ok(())
}
