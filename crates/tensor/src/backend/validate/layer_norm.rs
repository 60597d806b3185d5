//! The checks on the operands of layer normalisation
//! ([`Backend::layer_norm`](crate::backend::Backend::layer_norm) and its backward).

use super::{same_shape, view};
use crate::backend::View;
use crate::ops::layer_norm::OP;
use crate::{DType, Error, Result};

/// The operands of one layer-normalisation call besides the input.
pub(crate) struct Operands<'a> {
    /// The incoming gradient (backward only): the input's shape and dtype.
    pub grad: Option<View<'a>>,
    /// The per-row `mean` and `rstd` (backward only): `rows` elements of the input's
    /// compute dtype each.
    pub stats: Option<[View<'a>; 2]>,
    /// The named per-element parameters: `n` elements each, of the input's dtype or, for a
    /// 16-bit input, `f32`.
    pub params: Vec<(&'static str, View<'a>)>,
}

/// The number of rows of a float `input` read as `[rows, n]`, after checking that every
/// view fits its storage and that the operands agree with it (see [`Operands`]).
pub(crate) fn check((s, l): View<'_>, n: usize, operands: &Operands<'_>) -> Result<usize> {
    view(OP, s, l)?;
    let dtype = s.dtype();
    if !dtype.is_float() {
        return Err(Error::dtype(OP, format!("the input must be float, got {dtype}")));
    }
    if n == 0 || !l.numel().is_multiple_of(n) {
        return Err(Error::shape(
            OP,
            format!("the input of shape {} cannot be read as rows of {n} normalized elements", l.shape()),
        ));
    }
    let rows = l.numel() / n;
    if let Some((gs, gl)) = operands.grad {
        view(OP, gs, gl)?;
        same_shape(OP, l, gl)?;
        if gs.dtype() != dtype {
            return Err(Error::dtype(OP, format!("the input is {dtype} but the gradient is {}", gs.dtype())));
        }
    }
    for (what, (ss, sl)) in ["mean", "rstd"].into_iter().zip(operands.stats.iter().flatten()) {
        view(OP, ss, sl)?;
        if sl.numel() != rows || ss.dtype() != dtype.compute_dtype() {
            return Err(Error::shape(
                OP,
                format!(
                    "the {what} must have {rows} {} elements, got {} of {}",
                    dtype.compute_dtype(),
                    sl.numel(),
                    ss.dtype()
                ),
            ));
        }
    }
    for &(what, (ps, pl)) in &operands.params {
        view(OP, ps, pl)?;
        if pl.numel() != n {
            return Err(Error::shape(OP, format!("the {what} must have {n} elements, got shape {}", pl.shape())));
        }
        let pd = ps.dtype();
        if pd != dtype && !(dtype.is_half() && pd == DType::F32) {
            return Err(Error::dtype(OP, format!("the input is {dtype} but the {what} is {pd}")));
        }
    }
    Ok(rows)
}
