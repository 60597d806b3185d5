//! The one switch the hot path reads for the optional features that watch operations being
//! applied: the profiler, saved-tensor hooks, checkpoint's capture of parameters and anomaly
//! mode's creation sites.
//!
//! Each feature sets its bit while it is active on this thread. `ops::apply` reads the
//! whole byte once (a thread-local load and a branch) and only when a bit is set takes the
//! slow path below, so none of the features costs anything when unused.

use crate::node::Op;
use crate::var::Var;
use ember_tensor::Result;
use std::cell::Cell;

/// The profiler records operations ([`crate::profiler`]).
pub(crate) const PROFILING: u8 = 1;
/// Saved-tensor hooks pack the values new nodes save ([`crate::saved_hooks`]).
pub(crate) const SAVED_HOOKS: u8 = 2;
/// A checkpointed segment is running its forward and collects the parameters it reads
/// ([`crate::checkpoint`]).
pub(crate) const CAPTURE: u8 = 4;
/// Anomaly mode: new nodes record where they were created ([`crate::anomaly`]).
pub(crate) const ANOMALY: u8 = 8;

thread_local! {
    static ACTIVE: Cell<u8> = const { Cell::new(0) };
}

/// The bits of the features active on this thread.
#[inline(always)]
pub(crate) fn active() -> u8 {
    ACTIVE.with(|a| a.get())
}

/// Sets or clears one feature's bit.
pub(crate) fn set(flag: u8, on: bool) {
    ACTIVE.with(|a| a.set(if on { a.get() | flag } else { a.get() & !flag }));
}

/// `ops::apply` while a feature is active: lets checkpoint see the inputs, times the
/// operation for the profiler, records where the node was created in anomaly mode and packs
/// what the new node saves.
#[cold]
#[inline(never)]
pub(crate) fn apply_instrumented<O: Op>(op: O, inputs: &[&Var]) -> Result<Var> {
    let flags = active();
    if flags & CAPTURE != 0 {
        crate::checkpoint::capture(inputs);
    }
    let timer = (flags & PROFILING != 0).then(|| crate::profiler::begin(op.name(), crate::profiler::Phase::Forward));
    let result = crate::ops::apply_plain(op, inputs);
    if flags & ANOMALY != 0
        && let Ok(var) = &result
        && !var.is_leaf()
        && let Some(site) = crate::anomaly::creation_site()
    {
        var.node.extras().get_or_insert_with(Default::default).created_at = Some(site);
    }
    if flags & SAVED_HOOKS != 0
        && let Ok(var) = &result
    {
        crate::saved_hooks::pack_node(var);
    }
    if let Some(t) = timer {
        crate::profiler::end(t);
    }
    result
}
