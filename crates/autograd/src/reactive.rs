//! Value freshness: which node values are stale, and recomputing exactly those (seed 000).
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

use crate::node::{NodeRef, NodeState};
use ember_tensor::storage::{bump_mutation_epoch, mutation_epoch};
use ember_tensor::{Error, Result, Tensor};
use smallvec::SmallVec;
use std::sync::atomic::{AtomicU64, Ordering};

static VALUE_EPOCH: AtomicU64 = AtomicU64::new(1);

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

fn fresh(st: &NodeState, mode: Mode, ep: (u64, u64)) -> bool {
    st.value.is_some()
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
        let st = node.state();
        if fresh(&st, mode, ep)
            && let Some(v) = &st.value
        {
            return Ok(v.clone());
        }
    }
    let mut stack: Vec<(NodeRef, bool)> = vec![(node.clone(), false)];
    while let Some((n, expanded)) = stack.pop() {
        if n.inputs.is_empty() {
            // Leaves (and routers, whose value is set from outside) are fresh by definition.
            let mut st = n.state();
            if st.value.is_none() {
                return Err(Error::autograd(format!("the value of leaf '{}' is missing", n.op.name())));
            }
            mark(&mut st, mode, ep);
            continue;
        }
        if fresh(&n.state(), mode, ep) {
            continue;
        }
        if !expanded {
            stack.push((n.clone(), true));
            for i in n.inputs.iter() {
                if !fresh(&i.state(), mode, ep) {
                    stack.push((i.clone(), false));
                }
            }
            continue;
        }
        recompute_if_stale(&n, mode, ep)?;
    }
    let st = node.state();
    st.value.clone().ok_or_else(|| Error::autograd("a recomputed value is missing"))
}

/// Recomputes `n` if its inputs changed (per `mode`) or its value was freed. The inputs are
/// fresh when this is called.
fn recompute_if_stale(n: &NodeRef, mode: Mode, ep: (u64, u64)) -> Result<()> {
    let mut values: SmallVec<[Tensor; 2]> = SmallVec::with_capacity(n.inputs.len());
    let mut current: SmallVec<[(u64, u64); 2]> = SmallVec::with_capacity(n.inputs.len());
    for i in n.inputs.iter() {
        let st = i.state();
        let v = st.value.clone().ok_or_else(|| Error::autograd("an input value is missing during recomputation"))?;
        current.push(st.versions());
        values.push(v);
    }
    let mut st = n.state();
    let changed = match mode {
        Mode::Values => st.input_versions.iter().zip(&current).any(|(a, b)| a.0 != b.0),
        Mode::Full => st.input_versions[..] != current[..],
    };
    if changed || st.value.is_none() {
        let refs: SmallVec<[&Tensor; 2]> = values.iter().collect();
        let out = n.op.forward(&refs)?;
        out.storage().watch();
        st.storage_version = out.version();
        st.value = Some(out);
        st.recomputes += 1;
        // A freed value recomputed from unchanged inputs is the same value: its version
        // stays, so its consumers remain valid.
        if changed {
            st.value_version += 1;
            st.input_versions = current;
        }
    }
    mark(&mut st, mode, ep);
    Ok(())
}

/// Recomputes a freed value (and whatever else is stale by value) so that a handle to the
/// node can be given out.
pub(crate) fn restore(node: &NodeRef) -> Result<Tensor> {
    refresh(node, Mode::Values)
}
