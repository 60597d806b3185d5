//! Inference mode: PyTorch's `torch.inference_mode`, `no_grad` with fewer obligations.
//!
//! Inside [`inference_mode`] (or while an [`InferenceModeGuard`] lives) operations record
//! no graph, as under [`no_grad`](crate::no_grad), and every `Var` made there is an
//! *inference tensor* ([`Var::is_inference`]): its storage counts no in-place writes (no
//! version bumps, and no work for re-execution's epochs), because no graph will ever read
//! it. In exchange, once inference mode is over, an inference tensor may not enter a graph:
//!
//! - as an input of an operation that records history (grad mode on and an input requires
//!   grad), it is an error naming the operation;
//! - [`Var::set_value`] on it is an error;
//! - [`Var::requires_grad_`]`(true)` on it is an error, inside inference mode too: an
//!   inference tensor never requires grad in ember, and [`Var::param`] inside inference mode
//!   makes one that does not (PyTorch lets it require grad, and then refuses every
//!   operation on it; ember's operations of one input cannot fail, so none may need to).
//!
//! An operation on an inference tensor that records nothing (under `no_grad`, or when no
//! input requires grad) is fine, and a copy made outside inference mode ([`Var::copy`],
//! PyTorch's `clone()`) is a normal tensor that autograd may use. Views share their base's
//! storage, so a view of an inference tensor is one too, and a view of a normal tensor made
//! inside inference mode stays normal, as in PyTorch.
//!
//! Inference mode is thread-local and nests; while it is active it wins over
//! [`enable_grad`](crate::enable_grad) (grad mode reads as on, but nothing is recorded).
//! [`InferenceModeGuard::with_mode`]`(false)` turns it off inside, like
//! `torch.inference_mode(False)`. Guards restore the previous state when dropped, also while
//! unwinding from a panic.
//!
//! Two differences from PyTorch. An operation whose backward reads nothing (`add`) refuses
//! an inference tensor too when it would require grad: ember keeps every recorded input for
//! re-execution ([`Var::forward`](crate::Var::forward)), and an inference tensor's writes
//! are not counted. And in-place writes made through a tensor are not checked ([`Tensor`]
//! methods know nothing of autograd): an inference tensor written in place through
//! `var.value()` outside inference mode is not an error, its version just does not move.
//!
//! The mode is an engine extension switched on per thread: operations reach it through the
//! thread-local check they already make for extensions, so with inference mode off an
//! operation costs what it did, and inside it an operation costs what it costs under
//! `no_grad`.
//!
//! ```
//! use ember_autograd::{inference_mode, Var};
//! use ember_tensor::{DType, Tensor};
//! let w = Var::param(Tensor::ones([2], DType::F32)?);
//! let y = inference_mode(|| w.mul_scalar(2.0));
//! assert!(y.is_inference() && !y.requires_grad());
//! // Saving it for backward is an error...
//! let err = y.mul(&w).unwrap_err().to_string();
//! assert!(err.contains("mul") && err.contains("Inference tensors cannot be saved for backward"), "{err}");
//! // ...a copy made outside inference mode is a normal tensor.
//! let z = y.copy();
//! assert!(!z.is_inference());
//! z.mul(&w)?.sum_all().backward()?;
//! assert_eq!(w.grad().map(|g| g.to_vec::<f32>()).transpose()?, Some(vec![2.0, 2.0]));
//! # Ok::<(), ember_tensor::Error>(())
//! ```

use crate::extension::{Extension, Feature, ids};
use crate::grad_mode::set_grad_enabled;
use crate::var::Var;
use ember_tensor::{Error, Tensor};
use std::marker::PhantomData;
use std::sync::Arc;

/// Inference mode as an engine extension: it has no hooks; its thread bit sends operations
/// to [`crate::ops`]'s inference path, and its node flag marks inference tensors.
struct Inference;

impl Extension for Inference {}

static FEATURE: Feature = Feature::new(ids::INFERENCE, &Inference);

pub(crate) use crate::var::{INFERENCE_BIT, INFERENCE_FLAG};

/// Whether inference mode is active on this thread (PyTorch's
/// `torch.is_inference_mode_enabled()`).
pub fn is_inference_mode_enabled() -> bool {
    crate::var::in_inference_mode()
}

/// Turns inference mode on (or, with [`InferenceModeGuard::with_mode`], off) until dropped,
/// then restores the previous inference and grad modes.
///
/// Like the grad-mode guards it belongs to the thread that made it (neither `Send` nor
/// `Sync`).
///
/// ```compile_fail
/// fn assert_send<T: Send>(_: T) {}
/// assert_send(ember_autograd::InferenceModeGuard::new());
/// ```
#[must_use = "inference mode is restored when the guard is dropped"]
pub struct InferenceModeGuard {
    prev_inference: bool,
    prev_grad: bool,
    _not_send: PhantomData<*const ()>,
}

impl InferenceModeGuard {
    /// Turns inference mode on for this thread (grad mode off).
    pub fn new() -> Self {
        Self::with_mode(true)
    }

    /// Sets inference mode to `enabled` for this thread, and grad mode to the opposite, as
    /// PyTorch's `torch.inference_mode(mode)` does.
    pub fn with_mode(enabled: bool) -> Self {
        let prev_inference = is_inference_mode_enabled();
        let prev_grad = set_grad_enabled(!enabled);
        FEATURE.set_active(enabled);
        InferenceModeGuard { prev_inference, prev_grad, _not_send: PhantomData }
    }
}

impl Default for InferenceModeGuard {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for InferenceModeGuard {
    fn drop(&mut self) {
        FEATURE.set_active(self.prev_inference);
        set_grad_enabled(self.prev_grad);
    }
}

/// Runs `f` in inference mode (PyTorch's `with torch.inference_mode():`); see the
/// [module docs](self).
pub fn inference_mode<R>(f: impl FnOnce() -> R) -> R {
    let _g = InferenceModeGuard::new();
    f()
}

/// The `Var` for `out`, computed from `inputs` by an operation that records nothing while
/// an input is an inference tensor or inference mode is active (`in_mode`).
///
/// A result with storage of its own is an inference tensor inside inference mode (its
/// storage stops counting writes) and a normal one outside; a result sharing an inference
/// input's storage (a view) is an inference tensor anywhere; a view of a normal tensor is
/// normal.
#[inline]
pub(crate) fn unrecorded(inputs: &[&Var], out: Tensor, in_mode: bool) -> Var {
    // The common case, inside inference mode: a fresh result.
    if in_mode && Arc::strong_count(out.storage()) == 1 {
        out.storage().untrack();
        return Var::leaf_with(out, INFERENCE_FLAG);
    }
    unrecorded_otherwise(inputs, out)
}

/// [`unrecorded`] outside inference mode, or for a result that shares its storage.
#[cold]
fn unrecorded_otherwise(inputs: &[&Var], out: Tensor) -> Var {
    let of_inference = inputs.iter().any(|v| v.is_inference() && Arc::ptr_eq(v.value().storage(), out.storage()));
    Var::leaf_with(out, if of_inference { INFERENCE_FLAG } else { 0 })
}

/// The error for an inference tensor given to an operation `op` that records history.
#[cold]
pub(crate) fn saved_for_backward(op: &str) -> Error {
    Error::autograd(format!(
        "{op}: Inference tensors cannot be saved for backward (an input was made inside inference_mode). To work \
         around you can make a clone (Var::copy outside inference mode) to get a normal tensor and use it in autograd."
    ))
}
