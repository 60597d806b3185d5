//! Anomaly mode: NaN and Inf in backward, traced to the operation that produced them.
//!
//! While anomaly mode is on (a thread-local switch, like grad mode), every node created
//! records where its forward was called (a captured backtrace), and every backward output
//! is checked for NaN and Inf. The first non-finite gradient fails the backward with the
//! operation's name and that forward backtrace.
//!
//! ```
//! use ember_autograd::{detect_anomaly, Var};
//! use ember_tensor::Tensor;
//! let x = Var::param(Tensor::from_vec(vec![0.0f64, 1.0], [2])?);
//! let err = detect_anomaly(|| x.sqrt().sum_all().backward()).unwrap_err();
//! assert!(err.to_string().contains("sqrt"), "{err}");
//! # Ok::<(), ember_tensor::Error>(())
//! ```

use crate::extension::{Extension, Feature, ids};
use crate::node::NodeRef;
use crate::op::Grads;
use crate::var::Var;
use ember_tensor::{Error, Result};
use std::marker::PhantomData;

/// Anomaly mode as an engine extension, active on the threads where it is on: it records
/// where nodes are created and checks every backward result.
struct Anomaly;

static FEATURE: Feature = Feature::new(ids::ANOMALY, &Anomaly);

/// Where a node's forward was created, kept in its extension slot.
#[derive(Default)]
struct CreatedAt(String);

impl Extension for Anomaly {
    fn on_record(&self, var: &Var) {
        if !var.is_leaf() {
            let site = std::backtrace::Backtrace::force_capture().to_string();
            *var.node.extras().get_or_insert_with(Default::default).slot_or_default::<CreatedAt>() = CreatedAt(site);
        }
    }
    fn after_backward(&self, _: u64, node: &NodeRef, grads: &mut Result<Grads>) {
        if let Ok(g) = grads
            && let Err(e) = check(node, g)
        {
            *grads = Err(e);
        }
    }
}

/// Whether anomaly mode is on for this thread.
pub fn is_anomaly_enabled() -> bool {
    FEATURE.is_active()
}

/// Turns anomaly mode on until dropped, then restores the previous setting.
///
/// Anomaly mode is per thread, so the guard is neither `Send` nor `Sync`.
///
/// ```compile_fail
/// fn assert_send<T: Send>(_: T) {}
/// assert_send(ember_autograd::AnomalyGuard::new());
/// ```
#[must_use = "anomaly mode is restored when the guard is dropped"]
pub struct AnomalyGuard {
    prev: bool,
    _not_send: PhantomData<*const ()>,
}

impl AnomalyGuard {
    /// Turns anomaly mode on for this thread.
    pub fn new() -> Self {
        let prev = is_anomaly_enabled();
        FEATURE.set_active(true);
        AnomalyGuard { prev, _not_send: PhantomData }
    }
}

impl Default for AnomalyGuard {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for AnomalyGuard {
    fn drop(&mut self) {
        FEATURE.set_active(self.prev);
    }
}

/// Runs `f` (forward and backward) with anomaly mode on (PyTorch's
/// `torch.autograd.detect_anomaly()`): nodes created inside record where their forward was
/// called, and the first backward node that produces a NaN or Inf gradient fails the
/// backward with its operation's name and that creation site. Anomaly mode is per thread;
/// [`AnomalyGuard`] is the scoped form. It costs a backtrace per node and a scan of every
/// gradient, so use it to debug, not to train.
///
/// ```
/// use ember_autograd::{detect_anomaly, Var};
/// use ember_tensor::Tensor;
/// let x = Var::param(Tensor::from_vec(vec![0.0f64, 4.0], [2])?);
/// // d sqrt(x)/dx = 1 / (2 sqrt(x)) is infinite at 0.
/// let err = detect_anomaly(|| x.sqrt().sum_all().backward()).unwrap_err().to_string();
/// assert!(err.contains("function 'sqrt'") && err.contains("inf"), "{err}");
/// assert!(err.contains("Forward created at:"), "{err}");
/// // Outside anomaly mode the same backward succeeds and leaves the Inf in the gradient.
/// x.sqrt().sum_all().backward()?;
/// assert!(x.grad().unwrap().to_vec::<f64>()?[0].is_infinite());
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn detect_anomaly<R>(f: impl FnOnce() -> R) -> R {
    let _g = AnomalyGuard::new();
    f()
}

/// Fails on NaN or Inf in the gradients a node's backward returned.
fn check(node: &NodeRef, grads: &Grads) -> Result<()> {
    for (k, g) in grads.iter().enumerate() {
        let Some(g) = g else { continue };
        let values = g.value().to_vec_f64()?;
        let bad = if values.iter().any(|v| v.is_nan()) {
            Some("nan")
        } else if values.iter().any(|v| v.is_infinite()) {
            Some("inf")
        } else {
            None
        };
        if let Some(kind) = bad {
            let name = node.name().map(|n| format!(" (node '{n}')")).unwrap_or_default();
            let site = node
                .extras()
                .as_ref()
                .and_then(|e| e.slot::<CreatedAt>())
                .map(|c| c.0.clone())
                .unwrap_or_else(|| "not recorded: the forward ran outside anomaly mode".into());
            return Err(Error::autograd(format!(
                "function '{}'{name} returned {kind} values in its gradient for input {k}.\nForward created at:\n{site}",
                node.op.name()
            )));
        }
    }
    Ok(())
}
