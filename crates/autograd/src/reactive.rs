//! Value freshness: which node values are stale, and recomputing exactly those (see
//! docs/design.md, 'Value versions and re-execution').
//!
//! This is part of the core, not an extension: value versions are what the in-place check
//! compares, the engine frees values after backward *because* they can be recomputed here
//! (and refreshes its roots before differentiating them), and a handle to a freed value is
//! only given out after restoring it (`Var::from_node_ensured`). The push half below
//! (consumer registrations and dirty marks) serves `Var::forward` and the static mode, and
//! costs eager code nothing: a node registers with its inputs only at its first full
//! request.
//!
//! Every node records the `(value_version, storage_version)` of each input when it computed
//! its value. A request walks up from the requested node (with an explicit stack, never
//! recursion), and then, inputs first, recomputes each node whose recorded input versions
//! differ from the current ones, or whose value was freed after a backward. Untouched
//! branches are not recomputed.
//!
//! Two global epochs make the common case O(1): the *value epoch* advances when a leaf's
//! value is replaced with `set_value`; the *mutation epoch* (owned by `ember-tensor`)
//! advances on that and on every in-place write to a storage that holds a node's value. A
//! node verified fresh at the current epoch answers at once, without walking its ancestors.
//!
//! Two modes:
//! - [`Mode::Values`] reacts to replaced values (and freed ones). Backward uses it, so a
//!   stale graph is re-forwarded before it is differentiated, while an in-place write to a
//!   saved tensor remains the error PyTorch makes it.
//! - [`Mode::Full`] also reacts to in-place writes upstream (an optimizer step, say); this
//!   is what `Var::forward()` and the static mode use.
//!
//! `Full` requests push as well as pull. The first full request from a
//! node walks its graph once, even when every value is fresh, and *subscribes* it: every
//! node on the way registers with its inputs as a consumer. From then on, replacing a
//! leaf's value marks exactly its subscribed dependents dirty, and as
//! long as no in-place write happened since, a request descends only into dirty inputs:
//! changing one of a thousand independent branches recomputes that branch and the join,
//! and checks the other branches' flags without walking them. Eager code never subscribes
//! and pays nothing for this.

use crate::node::{DIRTY, NodeRef, NodeState, SUBSCRIBED, VALUE_AWAY};
use ember_tensor::storage::{bump_mutation_epoch, inplace_epoch, mutation_epoch};
use ember_tensor::{Error, Result, Tensor};
use smallvec::SmallVec;
use std::sync::atomic::{AtomicU64, Ordering};

static VALUE_EPOCH: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static NODES_VISITED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many graph nodes the value requests ([`Var::forward`](crate::Var::forward), backward's
/// re-forward, the static mode) made on this thread have visited so far.
///
/// A diagnostic for tests and benchmarks: a request answered from the cache visits none, so
/// the difference across a request shows how much of the graph it walked.
///
/// ```
/// use ember_autograd::{Var, reactive_nodes_visited};
/// use ember_tensor::Tensor;
/// let x = Var::new(Tensor::scalar(1.0f32));
/// let y = x.exp().log();
/// y.forward()?; // the first request walks the graph
/// let before = reactive_nodes_visited();
/// y.forward()?; // nothing changed: answered at once
/// assert_eq!(reactive_nodes_visited(), before);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn reactive_nodes_visited() -> u64 {
    NODES_VISITED.with(|c| c.get())
}

fn count_visit() {
    NODES_VISITED.with(|c| c.set(c.get() + 1));
}

/// The current `(value epoch, mutation epoch)`.
pub(crate) fn epochs() -> (u64, u64) {
    (VALUE_EPOCH.load(Ordering::Acquire), mutation_epoch())
}

/// Records that a leaf's value was replaced.
pub(crate) fn bump_value_epoch() {
    VALUE_EPOCH.fetch_add(1, Ordering::AcqRel);
    bump_mutation_epoch();
}

/// How much a request reacts to; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Values,
    Full,
}

/// Whether `n` has its value, or does without it because an extension dropped it
/// (`VALUE_AWAY`: backward reads the extension's copies): such a node is recomputed only when its inputs changed
/// or when its value itself is asked for.
fn present(n: &NodeRef, st: &NodeState) -> bool {
    st.value.is_some() || n.has(VALUE_AWAY)
}

fn fresh(n: &NodeRef, st: &NodeState, mode: Mode, ep: (u64, u64)) -> bool {
    present(n, st)
        && match mode {
            Mode::Values => st.verified_values == ep.0,
            Mode::Full => st.verified_full == ep.1,
        }
}

fn mark(st: &mut NodeState, mode: Mode, ep: (u64, u64)) {
    st.verified_values = ep.0;
    if mode == Mode::Full {
        st.verified_full = ep.1;
    }
}

/// The fresh value of `node` under `mode`, recomputing stale ancestors first.
pub(crate) fn refresh(node: &NodeRef, mode: Mode) -> Result<Tensor> {
    let ep = epochs();
    {
        // A full request on a node that never subscribed walks once even when its value is
        // fresh (a graph just built): later changes then push dirty marks to it, and it does
        // not pay a whole-graph walk at the first change instead.
        let st = node.state();
        if fresh(node, &st, mode, ep)
            && (mode == Mode::Values || node.has(SUBSCRIBED) || node.inputs.is_empty())
            && let Some(v) = &st.value
        {
            return Ok(v.clone());
        }
    }
    if mode == Mode::Full && node.has(SUBSCRIBED) {
        let stamp = shortcut_stamp();
        if node.state().verified_inplace == stamp {
            return dirty_walk(node, ep, stamp);
        }
    }
    full_walk(node, mode, ep)
}

/// Whether the walk can stop at `n`: its value is fresh and, for a full request, its whole
/// ancestry is subscribed.
fn settled(n: &NodeRef, mode: Mode, ep: (u64, u64)) -> bool {
    fresh(n, &n.state(), mode, ep) && (mode == Mode::Values || n.inputs.is_empty() || n.has(SUBSCRIBED))
}

/// Checks every node that is not settled, recomputing the stale ones; a full request also
/// subscribes them.
fn full_walk(node: &NodeRef, mode: Mode, ep: (u64, u64)) -> Result<Tensor> {
    let inplace = shortcut_stamp();
    // (node, inputs pushed, its value itself is needed): the requested node's is, and so
    // are the inputs of a node being recomputed.
    let mut stack: Vec<(NodeRef, bool, bool)> = vec![(node.clone(), false, true)];
    while let Some((n, expanded, need)) = stack.pop() {
        count_visit();
        if n.inputs.is_empty() {
            // Leaves (and routers, whose value is set from outside) are fresh by definition.
            let mut st = n.state();
            if st.value.is_none() {
                return Err(Error::autograd(format!("the value of leaf '{}' is missing", n.op.name())));
            }
            mark(&mut st, mode, ep);
            continue;
        }
        if !expanded {
            if settled(&n, mode, ep) && (!need || n.state().value.is_some()) {
                continue;
            }
            stack.push((n.clone(), true, need));
            for i in n.inputs.iter() {
                if !settled(i, mode, ep) {
                    stack.push((i.clone(), false, false));
                }
            }
            continue;
        }
        let missing = recompute_if_stale(&n, mode, ep, need)?;
        if !missing.is_empty() {
            // The recomputation needs inputs that were dropped (`VALUE_AWAY`): bring
            // them back first, then come back to this node.
            stack.push((n, true, need));
            stack.extend(missing.into_iter().map(|i| (i, false, true)));
            continue;
        }
        if mode == Mode::Full {
            subscribe(&n);
            n.set(DIRTY, false);
            n.state().verified_inplace = inplace;
        }
    }
    let st = node.state();
    st.value.clone().ok_or_else(|| Error::autograd("a recomputed value is missing"))
}

/// Registers `n` as a consumer of its inputs (once).
fn subscribe(n: &NodeRef) {
    if n.has(SUBSCRIBED) {
        return;
    }
    for i in n.inputs.iter() {
        i.extras().get_or_insert_with(Default::default).consumers.push(std::sync::Arc::downgrade(n));
    }
    n.set(SUBSCRIBED, true);
}

/// Recomputes the dirty (or freed) part of a subscribed node's ancestry, descending only
/// into dirty inputs.
fn dirty_walk(node: &NodeRef, ep: (u64, u64), inplace: u64) -> Result<Tensor> {
    // `need`: the node's value itself is needed (see `full_walk`).
    let needs_work = |n: &NodeRef, need: bool| {
        !n.inputs.is_empty() && (n.has(DIRTY) || (n.state().value.is_none() && (need || !n.has(VALUE_AWAY))))
    };
    let mut stack: Vec<(NodeRef, bool, bool)> = vec![(node.clone(), false, true)];
    while let Some((n, expanded, need)) = stack.pop() {
        count_visit();
        if !needs_work(&n, need) {
            continue;
        }
        if !expanded {
            stack.push((n.clone(), true, need));
            for i in n.inputs.iter() {
                if needs_work(i, false) {
                    stack.push((i.clone(), false, false));
                }
            }
            continue;
        }
        let missing = recompute_if_stale(&n, Mode::Values, ep, need)?;
        if !missing.is_empty() {
            stack.push((n, true, need));
            stack.extend(missing.into_iter().map(|i| (i, false, true)));
            continue;
        }
        n.set(DIRTY, false);
    }
    let mut st = node.state();
    mark(&mut st, Mode::Full, ep);
    st.verified_inplace = inplace;
    st.value.clone().ok_or_else(|| Error::autograd("a recomputed value is missing"))
}

/// Marks the subscribed dependents of `leaf` dirty after its value was replaced.
pub(crate) fn mark_dependents_dirty(leaf: &NodeRef) {
    let mut stack: Vec<NodeRef> = Vec::new();
    let push_consumers = |n: &NodeRef, stack: &mut Vec<NodeRef>| {
        if let Some(ex) = n.extras().as_mut() {
            ex.consumers.retain(|w| w.strong_count() > 0);
            stack.extend(ex.consumers.iter().filter_map(|w| w.upgrade()));
        }
    };
    push_consumers(leaf, &mut stack);
    while let Some(n) = stack.pop() {
        if n.has(DIRTY) {
            continue;
        }
        n.set(DIRTY, true);
        push_consumers(&n, &mut stack);
    }
}

/// Recomputes `n` if its inputs changed (per `mode`) or its value was freed (a value an
/// extension dropped only if `need`: its value itself is asked for). The inputs
/// are fresh when this is called. Versions are compared first, so an unchanged node costs
/// no tensor clones. Returns the inputs whose values a recomputation needs but were dropped
/// (empty when done): the caller restores them and calls again.
fn recompute_if_stale(n: &NodeRef, mode: Mode, ep: (u64, u64), need: bool) -> Result<SmallVec<[NodeRef; 2]>> {
    let current: SmallVec<[(u64, u64); 2]> = n.inputs.iter().map(|i| i.state().versions()).collect();
    {
        let mut st = n.state();
        let changed = match mode {
            Mode::Values => st.input_versions.iter().zip(&current).any(|(a, b)| a.0 != b.0),
            Mode::Full => st.input_versions[..] != current[..],
        };
        if !changed && (st.value.is_some() || (!need && n.has(VALUE_AWAY))) {
            mark(&mut st, mode, ep);
            return Ok(SmallVec::new());
        }
    }
    let mut values: SmallVec<[Tensor; 2]> = SmallVec::with_capacity(n.inputs.len());
    let mut missing: SmallVec<[NodeRef; 2]> = SmallVec::new();
    for i in n.inputs.iter() {
        match i.state().value.clone() {
            Some(v) => values.push(v),
            None => missing.push(i.clone()),
        }
    }
    if !missing.is_empty() {
        return Ok(missing);
    }
    let refs: SmallVec<[&Tensor; 2]> = values.iter().collect();
    let out = n.op.forward(&refs)?;
    let mut st = n.state();
    let changed = match mode {
        Mode::Values => st.input_versions.iter().zip(&current).any(|(a, b)| a.0 != b.0),
        Mode::Full => st.input_versions[..] != current[..],
    };
    store_recomputed(&mut st, out, current, changed);
    n.set(VALUE_AWAY, false);
    mark(&mut st, mode, ep);
    Ok(SmallVec::new())
}

/// Stores a node's recomputed value. Its version moves only when its inputs' did: a freed
/// value recomputed from unchanged inputs is the same value, so its consumers remain valid.
fn store_recomputed(st: &mut NodeState, out: Tensor, current: SmallVec<[(u64, u64); 2]>, changed: bool) {
    out.storage().watch();
    st.storage_version = out.version();
    st.value = Some(out);
    st.recomputes += 1;
    if changed {
        st.value_version += 1;
        st.input_versions = current;
    }
}

/// A straight-line recomputation order for a graph that is re-run as a whole (a traced
/// model): its non-leaf nodes, inputs before consumers.
pub(crate) struct Plan {
    nodes: Vec<NodeRef>,
}

impl Plan {
    /// The plan for everything `root` depends on, stopping at `boundary` (a node whose
    /// value another plan keeps up to date).
    pub(crate) fn of(root: &NodeRef, boundary: Option<&NodeRef>) -> Plan {
        let mut seen: rustc_hash::FxHashSet<usize> = Default::default();
        let mut nodes = Vec::new();
        let mut stack: Vec<(NodeRef, bool)> = vec![(root.clone(), false)];
        while let Some((n, expanded)) = stack.pop() {
            if n.inputs.is_empty() || boundary.is_some_and(|b| std::sync::Arc::ptr_eq(b, &n)) {
                continue;
            }
            if expanded {
                nodes.push(n);
                continue;
            }
            if !seen.insert(std::sync::Arc::as_ptr(&n) as *const u8 as usize) {
                continue;
            }
            stack.push((n.clone(), true));
            for i in n.inputs.iter() {
                stack.push((i.clone(), false));
            }
        }
        Plan { nodes }
    }

    /// Brings every node up to date in order: each checks its inputs' versions once and
    /// recomputes if they moved (or its value was freed). No walk, no dirty flags: a traced
    /// graph's input changed, so most of it recomputes anyway.
    pub(crate) fn run(&self) -> Result<()> {
        let ep = epochs();
        for n in &self.nodes {
            let mut values: SmallVec<[Tensor; 2]> = SmallVec::with_capacity(n.inputs.len());
            let mut current: SmallVec<[(u64, u64); 2]> = SmallVec::with_capacity(n.inputs.len());
            for i in n.inputs.iter() {
                let st = i.state();
                current.push(st.versions());
                values.push(st.value.clone().ok_or_else(|| Error::autograd("an input value is missing in a plan"))?);
            }
            let mut st = n.state();
            if st.value.is_some() && st.input_versions[..] == current[..] {
                mark(&mut st, Mode::Full, ep);
                continue;
            }
            let refs: SmallVec<[&Tensor; 2]> = values.iter().collect();
            let out = n.op.forward(&refs)?;
            let changed = st.input_versions[..] != current[..];
            store_recomputed(&mut st, out, current, changed);
            n.set(VALUE_AWAY, false);
            mark(&mut st, Mode::Full, ep);
        }
        // Nodes outside the plan that consume its nodes were not marked dirty: make sure no
        // request trusts dirty flags until it has walked once more.
        bump_plan_epoch();
        Ok(())
    }
}

static PLAN_EPOCH: AtomicU64 = AtomicU64::new(0);

fn bump_plan_epoch() {
    PLAN_EPOCH.fetch_add(1, Ordering::AcqRel);
}

/// What a dirty-flag shortcut must find unchanged: in-place writes, and plan runs.
fn shortcut_stamp() -> u64 {
    inplace_epoch() + PLAN_EPOCH.load(Ordering::Acquire)
}

/// Recomputes a freed value (and whatever else is stale by value) so that a handle to the
/// node can be given out.
pub(crate) fn restore(node: &NodeRef) -> Result<Tensor> {
    refresh(node, Mode::Values)
}
