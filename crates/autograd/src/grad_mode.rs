//! Grad mode: whether operations record history for backward.
//!
//! Grad mode is thread-local, like PyTorch's: disabling it on one thread leaves others
//! recording. Under [`no_grad`] (or while a [`NoGradGuard`] lives) operations compute values
//! only; their results are leaves without history. Guards restore the previous mode when
//! dropped, including while unwinding from a panic, and nest freely.
//!
//! ```
//! use ember_autograd::{no_grad, is_grad_enabled, Var};
//! use ember_tensor::Tensor;
//! let w = Var::param(Tensor::ones([2], ember_tensor::DType::F32)?);
//! let y = no_grad(|| w.mul_scalar(2.0));
//! assert!(!y.requires_grad() && y.is_leaf());
//! assert!(is_grad_enabled());
//! # Ok::<(), ember_tensor::Error>(())
//! ```

use std::cell::Cell;
use std::marker::PhantomData;

thread_local! {
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
}

/// Whether operations on this thread record history.
pub fn is_grad_enabled() -> bool {
    GRAD_ENABLED.with(|g| g.get())
}

/// Sets grad mode on this thread, returning the previous mode.
pub(crate) fn set_grad_enabled(on: bool) -> bool {
    GRAD_ENABLED.with(|g| g.replace(on))
}

/// Disables grad mode until dropped, then restores the previous mode.
///
/// Grad mode is per thread, so the guard is neither `Send` nor `Sync`: dropped on another
/// thread it would restore that thread's mode instead of its own.
///
/// ```compile_fail
/// fn assert_send<T: Send>(_: T) {}
/// assert_send(ember_autograd::NoGradGuard::new());
/// ```
#[must_use = "grad mode is restored when the guard is dropped"]
pub struct NoGradGuard {
    prev: bool,
    _not_send: PhantomData<*const ()>,
}

impl NoGradGuard {
    /// Disables grad mode on this thread.
    pub fn new() -> Self {
        NoGradGuard { prev: set_grad_enabled(false), _not_send: PhantomData }
    }
}

impl Default for NoGradGuard {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for NoGradGuard {
    fn drop(&mut self) {
        set_grad_enabled(self.prev);
    }
}

/// Enables grad mode until dropped (inside a `no_grad` region), then restores it.
///
/// Like [`NoGradGuard`], it belongs to the thread that made it (neither `Send` nor `Sync`).
///
/// ```compile_fail
/// fn assert_send<T: Send>(_: T) {}
/// assert_send(ember_autograd::EnableGradGuard::new());
/// ```
#[must_use = "grad mode is restored when the guard is dropped"]
pub struct EnableGradGuard {
    prev: bool,
    _not_send: PhantomData<*const ()>,
}

impl EnableGradGuard {
    /// Enables grad mode on this thread.
    pub fn new() -> Self {
        EnableGradGuard { prev: set_grad_enabled(true), _not_send: PhantomData }
    }
}

impl Default for EnableGradGuard {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for EnableGradGuard {
    fn drop(&mut self) {
        set_grad_enabled(self.prev);
    }
}

/// Sets grad mode to `on` until dropped.
pub(crate) struct GradModeGuard {
    prev: bool,
    _not_send: PhantomData<*const ()>,
}

impl GradModeGuard {
    pub(crate) fn new(on: bool) -> Self {
        GradModeGuard { prev: set_grad_enabled(on), _not_send: PhantomData }
    }
}

impl Drop for GradModeGuard {
    fn drop(&mut self) {
        set_grad_enabled(self.prev);
    }
}

/// Runs `f` with grad mode disabled (PyTorch's `with torch.no_grad():`).
pub fn no_grad<R>(f: impl FnOnce() -> R) -> R {
    let _g = NoGradGuard::new();
    f()
}

/// Runs `f` with grad mode enabled, e.g. inside a `no_grad` region.
pub fn enable_grad<R>(f: impl FnOnce() -> R) -> R {
    let _g = EnableGradGuard::new();
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guards_nest_and_restore() {
        assert!(is_grad_enabled());
        no_grad(|| {
            assert!(!is_grad_enabled());
            enable_grad(|| assert!(is_grad_enabled()));
            let _g = NoGradGuard::new();
            assert!(!is_grad_enabled());
        });
        assert!(is_grad_enabled());
    }

    #[test]
    fn restored_after_panic() {
        let r = std::panic::catch_unwind(|| no_grad(|| panic!("inside no_grad")));
        assert!(r.is_err());
        assert!(is_grad_enabled());
    }

    #[test]
    fn thread_local() {
        let _g = NoGradGuard::new();
        let other = std::thread::spawn(is_grad_enabled).join().unwrap_or(false);
        assert!(other);
        assert!(!is_grad_enabled());
    }
}
