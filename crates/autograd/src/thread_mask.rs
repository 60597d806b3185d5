//! The thread's mask of active engine features (see `extension.rs`): one byte, read by
//! every recorded operation.
//!
//! It lives apart from `extension.rs`, importing nothing of the crate, so that the core
//! (`var.rs`) can read a bit of it without joining the extension mechanism's imports: a
//! leaf made in inference mode is an inference tensor.

use std::cell::Cell;

/// The features' numbers: bit `1 << id` in a thread's mask, bit `1 << (16 + id)` in a
/// node's flags. At most 8.
pub(crate) mod ids {
    /// Times operations and backward nodes (`profiler`).
    pub(crate) const PROFILER: u8 = 0;
    /// Packs the values new nodes save, substitutes them in backward (`saved_hooks`).
    pub(crate) const SAVED_HOOKS: u8 = 1;
    /// Collects the parameters a checkpointed segment reads (`checkpoint`).
    pub(crate) const CHECKPOINT: u8 = 2;
    /// Records creation sites and checks backward results (`anomaly`).
    pub(crate) const ANOMALY: u8 = 3;
    /// Grad and post-accumulate hooks on nodes (`hooks`).
    pub(crate) const GRAD_HOOKS: u8 = 4;
    /// Backward plans kept on a static graph's root (`static_mode`).
    pub(crate) const BACKWARD_PLAN: u8 = 5;
    /// Gradient routers, whose gradient goes where they are told (`router`).
    pub(crate) const ROUTER: u8 = 6;
    /// Inference mode, and the inference tensors it makes (`inference_mode`).
    pub(crate) const INFERENCE: u8 = 7;
}

thread_local! {
    static ACTIVE: Cell<u8> = const { Cell::new(0) };
}

/// The bits of the features active on this thread.
#[inline(always)]
pub(crate) fn active() -> u8 {
    ACTIVE.with(|a| a.get())
}

/// Sets (`on`) or clears `bit` in this thread's mask.
#[inline]
pub(crate) fn set(bit: u8, on: bool) {
    ACTIVE.with(|a| a.set(if on { a.get() | bit } else { a.get() & !bit }));
}
