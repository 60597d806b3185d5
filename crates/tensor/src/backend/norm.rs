//! Per-channel normalisation, the kernel under batch, group and instance norm: what it
//! computes and the checks on its operands.
//!
//! The input is read as `[outer, C, inner]`. Each of the `C` channels gathers the
//! `m = outer * inner` elements it sees; its statistics are their mean and *biased*
//! variance, and the output is
//! `y = (x - mean[c]) / sqrt(var[c] + eps) * weight[c] + bias[c]`, with an absent weight
//! read as 1 and an absent bias as 0.
//!
//! Batch norm of `[N, C, *]` is this with `outer = N`; group norm with `G` groups reads
//! the input as `[1, N * G, (C / G) * prod(*)]`, one "channel" per sample and group, and
//! applies its per-channel affine afterwards.
//!
//! The backward, for an incoming gradient `g` of `y`, returns `(grad_input, sum_c g,
//! sum_c g * xhat)` with `xhat = (x - mean) * invstd`: the last two are the bias's and the
//! weight's gradients, and
//! `grad_input = weight * invstd * (g - sum g / m - xhat * sum(g * xhat) / m)`.

use super::validate;
use crate::layout::Layout;
use crate::storage::Storage;
use crate::{DType, Error, Result};

/// The name of the per-channel normalisation in errors.
pub(crate) const OP: &str = "channel_norm";

/// `[outer, C, inner]` of a checked input view, after checking that it is a rank-3 float
/// view fitting its storage, and that every per-channel operand is `[C]` of its dtype and
/// fits its storage. `grad`, when given, must match the input's shape and dtype.
pub(crate) fn check(
    (s, l): (&Storage, &Layout),
    grad: Option<(&Storage, &Layout)>,
    per_channel: &[(&str, &Storage, &Layout)],
) -> Result<[usize; 3]> {
    validate::view(OP, s, l)?;
    let dtype = s.dtype();
    if !matches!(dtype, DType::F32 | DType::F64) {
        return Err(Error::dtype(OP, format!("the input must be float, got {dtype}")));
    }
    let &[outer, c, inner] = l.shape().dims() else {
        return Err(Error::shape(OP, format!("the input must be read as [outer, C, inner], got shape {}", l.shape())));
    };
    if let Some((gs, gl)) = grad {
        validate::view(OP, gs, gl)?;
        validate::same_shape(OP, l, gl)?;
        if gs.dtype() != dtype {
            return Err(Error::dtype(OP, format!("the input is {dtype} but the gradient is {}", gs.dtype())));
        }
    }
    for &(what, ps, pl) in per_channel {
        validate::view(OP, ps, pl)?;
        if pl.shape().dims() != [c] {
            return Err(Error::shape(OP, format!("the {what} must have shape [{c}], got {}", pl.shape())));
        }
        if ps.dtype() != dtype {
            return Err(Error::dtype(OP, format!("the input is {dtype} but the {what} is {}", ps.dtype())));
        }
    }
    Ok([outer, c, inner])
}
