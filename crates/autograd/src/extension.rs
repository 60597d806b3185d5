//! Engine extensions: the one way optional features plug into the core.
//!
//! The core (nodes, `Var`, operations, value versions, the backward engine) names none of
//! the optional features: grad hooks, saved-tensor hooks, checkpointing, the profiler,
//! anomaly mode, gradient routers, cached backward plans and inference mode. Each feature is a [`Feature`]:
//! a number from [`ids`], and a static value implementing [`Extension`], whose methods are
//! the core's hook points (all default to doing nothing). A feature switches itself on in
//! one of two ways, and the core calls its hooks only then:
//!
//! - **on a thread** ([`Feature::set_active`]): its bit in this thread's mask is set while
//!   it is active. Recording an operation reads the whole mask once (one thread-local load
//!   and a branch, [`active`]) and takes the instrumented path ([`Applying`]) only when a bit
//!   is set; a backward call reads it once per call, and runs each node through
//!   [`backward_node`] only when a bit is set.
//! - **on a node** ([`Feature::flag`]): its bit in the node's extension flags is set. The
//!   engine reads the node's flags (one relaxed load) and calls the node hooks of the
//!   features flagged there; with no flag set, nothing else happens.
//!
//! A feature keeps its per-node data in a typed slot of the node's extras
//! (`node::Extras::slot`), which the node stores without knowing it.
//!
//! Features register themselves the first time they switch on, so the core holds no list
//! of them; an unused feature costs nothing. See docs/design.md, 'Engine and extensions'.

use crate::backward_ctx::{BackwardCtx, SavedSource};
use crate::node::{EXTENSION_SHIFT, NodeRef};
use crate::op::Grads;
use crate::var::Var;
use ember_tensor::Result;
use std::any::Any;
use std::sync::{Arc, OnceLock};

pub(crate) use crate::thread_mask::{active, ids};

/// The hook points of the core. A feature implements those it needs; the core calls them
/// only while the feature is active on the thread (recording and backward hooks) or
/// flagged on the node (node hooks).
pub(crate) trait Extension: Sync + 'static {
    /// Recording: an operation named `op` is about to run on `inputs`. The returned token
    /// is handed to [`Extension::after_apply`].
    fn before_apply(&self, _op: &str, _inputs: &[&Var]) -> u64 {
        0
    }
    /// Recording: the operation made the node `var` (once per node it made).
    fn on_record(&self, _var: &Var) {}
    /// Recording: the operation ended, successfully or not.
    fn after_apply(&self, _token: u64) {}

    /// Backward: a backward call begins; the token goes to [`Extension::exit_run`].
    fn enter_run(&self) -> u64 {
        0
    }
    /// Backward: the backward call ended, successfully or not.
    fn exit_run(&self, _token: u64) {}
    /// Backward: `node`'s operation is about to compute its gradients.
    fn before_backward(&self, _node: &NodeRef) -> u64 {
        0
    }
    /// Backward: `node`'s operation computed `grads` (which the hook may turn into an error).
    fn after_backward(&self, _token: u64, _node: &NodeRef, _grads: &mut Result<Grads>) {}

    /// Node: whether a backward must deliver `node`'s gradient even if no leaf beyond it
    /// needs one (a hook watches it).
    fn wants_grad(&self, _node: &NodeRef) -> bool {
        false
    }
    /// Node: the gradient arriving at `node`, which the hook may replace.
    fn on_grad(&self, _node: &NodeRef, grad: Var) -> Result<Var> {
        Ok(grad)
    }
    /// Node: a leaf's `.grad` was updated.
    fn after_accumulate(&self, _node: &NodeRef) -> Result<()> {
        Ok(())
    }
    /// Node: `Some(target)` if `node` passes its gradient on, unchanged, to a node chosen
    /// now (`None` inside: to none) instead of its recorded inputs. Read once per backward.
    fn redirect(&self, _node: &NodeRef) -> Option<Option<Var>> {
        None
    }
    /// Node: backward has run through `node` without `retain_graph`.
    fn on_release(&self, _node: &NodeRef) {}
    /// Node: the backward plan kept for this root, if any.
    fn cached_plan(&self, _root: &NodeRef) -> Option<Arc<dyn Any + Send + Sync>> {
        None
    }
    /// Node: a backward plan just prepared for this root.
    fn keep_plan(&self, _root: &NodeRef, _plan: &Arc<dyn Any + Send + Sync>) {}
    /// Node: the storage version of a value the feature dropped (`node::VALUE_AWAY`).
    fn away_version(&self, _node: &NodeRef) -> Option<u64> {
        None
    }
    /// Node: what backward reads instead of input `i` (whose versions were `versions` when
    /// `node` was created), if the feature keeps a substitute.
    fn saved_input(&self, _node: &NodeRef, _i: usize, _versions: (u64, u64), _input: &NodeRef) -> Option<Result<Var>> {
        None
    }
    /// Node: what backward reads instead of `node`'s own output, if the feature keeps one.
    fn saved_output(&self, _node: &NodeRef) -> Option<Result<Var>> {
        None
    }
}

/// An optional feature: its number and its hooks.
pub(crate) struct Feature {
    id: u8,
    hooks: &'static dyn Extension,
}

static REGISTRY: [OnceLock<&'static dyn Extension>; 8] = [const { OnceLock::new() }; 8];

impl Feature {
    /// The feature numbered `id` (one of [`ids`]) with these hooks.
    pub(crate) const fn new(id: u8, hooks: &'static dyn Extension) -> Feature {
        Feature { id, hooks }
    }

    fn register(&self) {
        REGISTRY[self.id as usize].get_or_init(|| self.hooks);
    }

    /// The feature's bit in a thread's mask.
    pub(crate) const fn bit(&self) -> u8 {
        1 << self.id
    }

    /// The feature's flag on nodes.
    pub(crate) const fn node_flag(&self) -> u32 {
        1 << (EXTENSION_SHIFT + self.id as u32)
    }

    /// Switches the feature on or off on this thread.
    pub(crate) fn set_active(&self, on: bool) {
        if on {
            self.register();
        }
        crate::thread_mask::set(self.bit(), on);
    }

    /// Whether the feature is active on this thread.
    pub(crate) fn is_active(&self) -> bool {
        active() & self.bit() != 0
    }

    /// Sets or clears the feature's flag on `node`.
    pub(crate) fn flag(&self, node: &NodeRef, on: bool) {
        if on {
            self.register();
        }
        node.set(self.node_flag(), on);
    }
}

/// Calls `f` with the hooks of each feature in `mask`, in increasing number.
#[inline]
fn each(mask: u8, mut f: impl FnMut(usize, &'static dyn Extension)) {
    let mut m = mask;
    while m != 0 {
        let k = m.trailing_zeros() as usize;
        m &= m - 1;
        if let Some(e) = REGISTRY[k].get() {
            f(k, *e);
        }
    }
}

/// [`each`] in decreasing number, so that hooks nest: the first to begin ends last.
fn each_rev(mask: u8, mut f: impl FnMut(usize, &'static dyn Extension)) {
    let mut m = mask;
    while m != 0 {
        let k = 7 - m.leading_zeros() as usize;
        m &= !(1 << k);
        if let Some(e) = REGISTRY[k].get() {
            f(k, *e);
        }
    }
}

/// The instrumented path of recording, shared by operations, custom functions and
/// checkpoints: [`Applying::begin`] before the operation runs, [`Applying::recorded`] for
/// each node it makes; dropping it ends the operation for the hooks (also on an error).
/// Only taken when [`active`] is not zero.
pub(crate) struct Applying {
    active: u8,
    tokens: [u64; 8],
}

impl Applying {
    /// The operation `op` is about to run on `inputs`.
    pub(crate) fn begin(op: &str, inputs: &[&Var]) -> Applying {
        let active = active();
        let mut tokens = [0; 8];
        each(active, |k, e| tokens[k] = e.before_apply(op, inputs));
        Applying { active, tokens }
    }

    /// The operation made `var`.
    pub(crate) fn recorded(&self, var: &Var) {
        each(self.active, |_, e| e.on_record(var));
    }
}

impl Drop for Applying {
    fn drop(&mut self) {
        let tokens = self.tokens;
        each_rev(self.active, |k, e| e.after_apply(tokens[k]));
    }
}

/// A backward call for the hooks of the features active on this thread; dropping it ends
/// the call for them.
pub(crate) struct Running {
    active: u8,
    tokens: [u64; 8],
}

impl Running {
    /// A backward call begins (`active`: the thread's mask, read once for the call).
    pub(crate) fn begin(active: u8) -> Running {
        let mut tokens = [0; 8];
        each(active, |k, e| tokens[k] = e.enter_run());
        Running { active, tokens }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let tokens = self.tokens;
        each_rev(self.active, |k, e| e.exit_run(tokens[k]));
    }
}

/// Runs `node`'s backward with the hooks of the features in `active` around it.
#[cold]
#[inline(never)]
pub(crate) fn backward_node(active: u8, node: &NodeRef, ctx: &BackwardCtx<'_>, grad: &Var) -> Result<Grads> {
    let mut tokens = [0; 8];
    each(active, |k, e| tokens[k] = e.before_backward(node));
    let mut grads = node.op.backward(ctx, grad);
    each_rev(active, |k, e| e.after_backward(tokens[k], node, &mut grads));
    grads
}

/// Whether a feature flagged on `node` (`flags`: `node.extensions()`) wants its gradient.
pub(crate) fn wants_grad(flags: u8, node: &NodeRef) -> bool {
    let mut any = false;
    each(flags, |_, e| any |= e.wants_grad(node));
    any
}

/// The gradient arriving at `node`, through the node hooks of the features flagged on it.
pub(crate) fn on_grad(flags: u8, node: &NodeRef, mut grad: Var) -> Result<Var> {
    let mut result = Ok(());
    each(flags, |_, e| {
        if result.is_ok() {
            match e.on_grad(node, grad.clone()) {
                Ok(g) => grad = g,
                Err(err) => result = Err(err),
            }
        }
    });
    result.map(|()| grad)
}

/// Tells the features flagged on a leaf that its `.grad` was updated.
pub(crate) fn after_accumulate(flags: u8, node: &NodeRef) -> Result<()> {
    let mut result = Ok(());
    each(flags, |_, e| {
        if result.is_ok() {
            result = e.after_accumulate(node);
        }
    });
    result
}

/// Where `node` redirects its gradient, if a feature flagged on it says so.
pub(crate) fn redirect(flags: u8, node: &NodeRef) -> Option<Option<Var>> {
    let mut found = None;
    each(flags, |_, e| {
        if found.is_none() {
            found = e.redirect(node);
        }
    });
    found
}

/// Tells the features flagged on `node` that backward released it.
pub(crate) fn on_release(flags: u8, node: &NodeRef) {
    each(flags, |_, e| e.on_release(node));
}

/// The backward plan a feature flagged on `root` keeps, if any.
pub(crate) fn cached_plan(flags: u8, root: &NodeRef) -> Option<Arc<dyn Any + Send + Sync>> {
    let mut found = None;
    each(flags, |_, e| {
        if found.is_none() {
            found = e.cached_plan(root);
        }
    });
    found
}

/// Offers a freshly prepared backward plan to the features flagged on `root`.
pub(crate) fn keep_plan(flags: u8, root: &NodeRef, plan: &Arc<dyn Any + Send + Sync>) {
    each(flags, |_, e| e.keep_plan(root, plan));
}

/// The [`SavedSource`] the engine gives backward contexts: the features flagged on a node.
pub(crate) struct Dispatch;

impl SavedSource for Dispatch {
    fn away_version(&self, node: &NodeRef) -> Option<u64> {
        let mut found = None;
        each(node.extensions(), |_, e| found = found.or_else(|| e.away_version(node)));
        found
    }

    fn saved_input(&self, node: &NodeRef, i: usize, versions: (u64, u64), input: &NodeRef) -> Option<Result<Var>> {
        let mut found = None;
        each(node.extensions(), |_, e| {
            if found.is_none() {
                found = e.saved_input(node, i, versions, input);
            }
        });
        found
    }

    fn saved_output(&self, node: &NodeRef) -> Option<Result<Var>> {
        let mut found = None;
        each(node.extensions(), |_, e| {
            if found.is_none() {
                found = e.saved_output(node);
            }
        });
        found
    }
}
