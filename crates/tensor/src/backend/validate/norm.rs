//! The checks on the operands of the per-channel normalisation
//! ([`Backend::channel_norm`](crate::backend::Backend::channel_norm) and its backward).

use super::{same_shape, view};
use crate::layout::Layout;
use crate::ops::norm::OP;
use crate::storage::Storage;
use crate::{DType, Error, Result};

/// `[outer, C, inner]` of a checked input view, after checking that it is a rank-3 float
/// view fitting its storage, and that every per-channel operand is `[C]` of its dtype and
/// fits its storage. `grad`, when given, must match the input's shape and dtype.
pub(crate) fn check(
    (s, l): (&Storage, &Layout),
    grad: Option<(&Storage, &Layout)>,
    per_channel: &[(&str, &Storage, &Layout)],
) -> Result<[usize; 3]> {
    view(OP, s, l)?;
    let dtype = s.dtype();
    if !matches!(dtype, DType::F32 | DType::F64) {
        return Err(Error::dtype(OP, format!("the input must be float, got {dtype}")));
    }
    let &[outer, c, inner] = l.shape().dims() else {
        return Err(Error::shape(OP, format!("the input must be read as [outer, C, inner], got shape {}", l.shape())));
    };
    if let Some((gs, gl)) = grad {
        view(OP, gs, gl)?;
        same_shape(OP, l, gl)?;
        if gs.dtype() != dtype {
            return Err(Error::dtype(OP, format!("the input is {dtype} but the gradient is {}", gs.dtype())));
        }
    }
    for &(what, ps, pl) in per_channel {
        view(OP, ps, pl)?;
        if pl.shape().dims() != [c] {
            return Err(Error::shape(OP, format!("the {what} must have shape [{c}], got {}", pl.shape())));
        }
        if ps.dtype() != dtype {
            return Err(Error::dtype(OP, format!("the input is {dtype} but the {what} is {}", ps.dtype())));
        }
    }
    Ok([outer, c, inner])
}
