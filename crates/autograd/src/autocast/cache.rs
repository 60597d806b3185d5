//! The weight cache: inside one outermost autocast region, the lower-precision copy of a
//! parameter (a leaf that requires grad) is made once and shared by every operation that
//! reads it, as PyTorch's autocast cache does, so that a weight used by several products
//! (or on every step of a recurrence) is converted once.
//!
//! Entries are per thread, keyed by the parameter's node and the target dtype. An entry is
//! used only while the parameter is alive (a weak reference, so a new node at a freed
//! node's address does not match), its value and storage versions are those it was cast
//! from (an in-place update or `set_value` makes a fresh copy), and the copy was made in the
//! same recording mode (a copy made under `no_grad` has no graph to give gradients back).
//! The outermost [`AutocastGuard`](super::AutocastGuard) empties it when it is dropped.

use crate::grad_mode::is_grad_enabled;
use crate::node::Node;
use crate::op::Op;
use crate::var::{Var, in_inference_mode};
use ember_tensor::DType;
use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::sync::{Arc, Weak};

/// One cached copy.
struct Entry {
    source: Weak<Node<dyn Op>>,
    versions: (u64, u64),
    recorded: bool,
    copy: Var,
}

thread_local! {
    static CACHE: RefCell<FxHashMap<(usize, DType), Entry>> = RefCell::new(FxHashMap::default());
}

/// Whether `v` is a parameter whose copies the cache keeps: a leaf that requires grad.
fn cacheable(v: &Var) -> bool {
    v.is_leaf() && v.requires_grad()
}

/// `v` in `dtype`: from the cache when `v` is a parameter with a valid copy there, else
/// converted now (and, for a parameter, kept).
pub(super) fn cast(v: &Var, dtype: DType) -> Var {
    if !cacheable(v) {
        return v.to_dtype(dtype);
    }
    let key = (Arc::as_ptr(&v.node) as *const u8 as usize, dtype);
    let versions = v.node.state().versions();
    let recorded = is_grad_enabled() && !in_inference_mode();
    let hit = CACHE.with(|c| {
        c.borrow().get(&key).and_then(|e| {
            let same = e.source.upgrade().is_some_and(|s| Arc::ptr_eq(&s, &v.node));
            (same && e.versions == versions && e.recorded == recorded).then(|| e.copy.clone())
        })
    });
    if let Some(copy) = hit {
        return copy;
    }
    let copy = v.to_dtype(dtype);
    let entry = Entry { source: Arc::downgrade(&v.node), versions, recorded, copy: copy.clone() };
    CACHE.with(|c| c.borrow_mut().insert(key, entry));
    copy
}

/// Empties this thread's cache (the outermost autocast region ended).
pub(super) fn clear() {
    // Taken out first: dropping the copies drops graph nodes, which must not find the
    // cache borrowed.
    let entries = CACHE.with(|c| std::mem::take(&mut *c.borrow_mut()));
    drop(entries);
}

/// How many copies this thread's cache holds.
pub fn cached_copies() -> usize {
    CACHE.with(|c| c.borrow().len())
}
