//! Refusals of parameters too large to hold, named for the layer and the parameter.
//!
//! A layer's parameters come from the initialisers and creation functions (`uniform`,
//! `normal`, `ones`), whose refusals name themselves: a user who asked for a
//! `Linear(2^40, 8)` should read which layer and which parameter could not be held.

use ember_tensor::storage::check_allocatable;
use ember_tensor::{DType, Error, Result};

/// Renames an error from creating a parameter to `op`, the layer and the parameter's
/// state-dict name (`"Linear.weight"`), keeping its kind: an allocation the system refused
/// stays [`Error::Alloc`], a count beyond ember's element limit stays a shape error.
pub(crate) fn named(op: &'static str) -> impl FnOnce(Error) -> Error {
    move |e| match e {
        Error::Alloc { elements, dtype, .. } => Error::Alloc { op, elements, dtype },
        Error::Shape { msg, .. } => Error::Shape { op, msg },
        other => other,
    }
}

/// Renames a parameter's refusal (an error [`named`] gave, its op holding a `.`) from a
/// submodule to `op`, the enclosing layer and the submodule (`"TransformerEncoderLayer.linear1"`);
/// the submodule's own argument errors (`embed_dim must be divisible by num_heads`) pass
/// unchanged, as PyTorch raises them from the submodule.
pub(crate) fn within(op: &'static str) -> impl FnOnce(Error) -> Error {
    move |e| match e {
        Error::Alloc { op: inner, elements, dtype } if inner.contains('.') => Error::Alloc { op, elements, dtype },
        Error::Shape { op: inner, msg } if inner.contains('.') => Error::Shape { op, msg: format!("{inner}: {msg}") },
        other => other,
    }
}

/// An error naming `op` unless `elements` parameters of `dtype` in all (`None`: a count
/// that overflowed) can be allocated, checked before any is built. For layers whose
/// parameter count grows with an argument that costs nothing to pass (`num_layers`): each
/// parameter alone may be small, so only their total shows the request cannot be held, and
/// building them one by one would run the process out of memory instead.
pub(crate) fn reserve_total(op: &'static str, elements: Option<usize>, dtype: DType) -> Result<()> {
    let elements = elements.ok_or_else(|| Error::shape(op, "the parameters have too many elements in all"))?;
    check_allocatable(op, elements, dtype)
}
