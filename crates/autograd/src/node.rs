//! Graph nodes.
//!
//! A node holds its operation (none for a leaf), strong references to its input nodes (never
//! to its consumers, so graphs are acyclic and freed when their last handle drops), its
//! cached value with the versions it was computed from, its gradient slot, flags, a sequence
//! number and optional extras (name, consumer registrations, extension slots). Node and
//! operation live in one allocation: `Node<O>` is created for a concrete operation and used
//! as `Node<dyn Op>`.
//!
//! Optional features keep their per-node data here without this module knowing them: each
//! owns one flag bit in [`EXTENSION_FLAGS`] (which makes the engine call it for the node,
//! see `extension`) and stores what it needs in a typed slot of the extras
//! ([`Extras::slot`]). See docs/design.md, 'Engine and extensions'.

use crate::node_cache;
use crate::op::Op;
use crate::reactive;
use crate::var::Var;
use ember_tensor::Tensor;
use parking_lot::{Mutex, MutexGuard};
use smallvec::SmallVec;
use std::any::Any;
use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// A shared reference to a node, as held by the graph (not counted as a user handle).
pub(crate) type NodeRef = Arc<Node<dyn Op>>;

pub(crate) const REQUIRES_GRAD: u32 = 1;
pub(crate) const RETAINS_GRAD: u32 = 2;
pub(crate) const FROZEN: u32 = 4;
pub(crate) const IS_LEAF: u32 = 8;
pub(crate) const DETACHED: u32 = 16;
/// A non-leaf holds the gradient of an earlier backward (kept by `retain_graph`).
pub(crate) const HAS_GRAD: u32 = 32;
/// The node is registered as a consumer of its inputs (see `reactive`).
pub(crate) const SUBSCRIBED: u32 = 64;
/// An ancestor's value was replaced since this node's value was computed.
pub(crate) const DIRTY: u32 = 128;
/// The value was dropped on purpose, while backward can do without it: no recorded backward
/// reads it ([`release_unread`]), or an extension keeps what every backward reading it
/// needs. It is recomputed only when its inputs change or the value itself is asked for
/// (see `reactive`); an extension's copy has its storage version read through the extension
/// (see `BackwardCtx`).
pub(crate) const VALUE_AWAY: u32 = 256;
/// Backward adds into this leaf's gradient in place even when its storage is shared (a view
/// into a larger buffer, as data-parallel training's gradient buckets are).
pub(crate) const GRAD_IN_PLACE: u32 = 512;
/// No recorded backward reads this value (neither the node's own nor a consumer's): when
/// its last `Var` drops, the value is released (see [`release_unread`]). Cleared when a
/// consumer whose backward reads it is recorded.
pub(crate) const UNREAD: u32 = 1024;
/// The node counts the consumers that hold it as an input (`Node::edges`), so that the
/// handles outside the graph can be told from them. Set at creation, never cleared, so
/// that counting up and down stays symmetric.
pub(crate) const COUNTS_EDGES: u32 = 2048;
/// The operation cannot be re-executed ([`Op::recomputable`] is false, read once when the
/// node is made): backward never frees its value.
pub(crate) const NOT_RECOMPUTABLE: u32 = 4096;
/// Backward checks the shapes of the gradients the operation returns in release builds too
/// ([`Op::validates_grads`], read once when the node is made).
pub(crate) const CHECKS_GRADS: u32 = 8192;
/// Values smaller than this are never released early: they are below what
/// `ember_tensor::storage::memory_stats` counts, and releasing them would cost a lock per
/// operation to save next to nothing.
pub(crate) const RELEASE_MIN_BYTES: usize = 4096;
/// Bits 16 to 23 belong to extensions, one per feature (see `extension::Feature`); node.rs
/// stores them and never reads them.
pub(crate) const EXTENSION_FLAGS: u32 = 0xff << 16;
/// The position of the first extension flag.
pub(crate) const EXTENSION_SHIFT: u32 = 16;

/// The mutable state of a node's value.
pub(crate) struct NodeState {
    /// The cached value; `None` once freed after backward.
    pub value: Option<Tensor>,
    /// Bumped when the value is recomputed from changed inputs or a leaf is set.
    pub value_version: u64,
    /// The storage version of `value` when it was computed (to detect in-place writes).
    pub storage_version: u64,
    /// Per input: `(value_version, storage_version)` of the input when this value was
    /// computed.
    pub input_versions: SmallVec<[(u64, u64); 2]>,
    /// The value epoch at which this node was last verified fresh.
    pub verified_values: u64,
    /// The mutation epoch at which this node was last verified fresh, in-place writes
    /// included.
    pub verified_full: u64,
    /// How many times the value has been recomputed after creation.
    pub recomputes: u64,
    /// The stamp of in-place writes and plan runs (see `reactive`) at which this node was
    /// last verified fresh by a full walk.
    pub verified_inplace: u64,
}

/// Rarely used per-node data, allocated on first use.
#[derive(Default)]
pub(crate) struct Extras {
    pub name: Option<String>,
    /// The nodes that use this one as an input, registered by a reactive request so that
    /// replacing a value can mark exactly its dependents dirty.
    pub consumers: Vec<std::sync::Weak<Node<dyn Op>>>,
    /// One slot per extension that keeps data on this node, found by type.
    slots: Vec<Box<dyn Any + Send + Sync>>,
}

impl Extras {
    /// The slot of type `T`, if an extension filled it.
    pub(crate) fn slot<T: Any>(&self) -> Option<&T> {
        self.slots.iter().find_map(|s| s.downcast_ref::<T>())
    }

    /// The slot of type `T`, mutably.
    pub(crate) fn slot_mut<T: Any>(&mut self) -> Option<&mut T> {
        self.slots.iter_mut().find_map(|s| s.downcast_mut::<T>())
    }

    /// The slot of type `T`, created empty if missing.
    pub(crate) fn slot_or_default<T: Any + Send + Sync + Default>(&mut self) -> &mut T {
        let pos = match self.slots.iter().position(|s| s.is::<T>()) {
            Some(p) => p,
            None => {
                self.slots.push(Box::new(T::default()));
                self.slots.len() - 1
            }
        };
        match self.slots[pos].downcast_mut::<T>() {
            Some(t) => t,
            None => unreachable!("ember internal error: an extension slot changed type"),
        }
    }
}

/// A graph node; see the module docs.
///
/// The fields are laid out in the order written (`repr(C)`): what discovery and the
/// backward loop read of every node (flags, sequence number, inputs) comes first, beside
/// the reference counts, so that those reads touch one or two cache lines of a node rather
/// than lines at both of its ends.
#[repr(C)]
pub struct Node<O: ?Sized> {
    pub(crate) flags: AtomicU32,
    /// How many nodes hold this one as an input, counted only with [`COUNTS_EDGES`].
    pub(crate) edges: AtomicU32,
    pub(crate) seq: u64,
    pub(crate) inputs: SmallVec<[NodeRef; 2]>,
    pub(crate) state: Mutex<NodeState>,
    pub(crate) grad: Mutex<Option<Var>>,
    pub(crate) extras: Mutex<Option<Box<Extras>>>,
    pub(crate) op: O,
}

static NEXT_SEQ_BLOCK: AtomicU64 = AtomicU64::new(1);
const SEQ_BLOCK: u64 = 1 << 16;

thread_local! {
    /// The next sequence number of this thread and the end of its reserved block.
    static SEQ: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
    /// How many [`SeqLog`]s are open on this thread, and the blocks it reserved meanwhile.
    static SEQ_LOG: RefCell<(usize, Vec<std::ops::Range<u64>>)> = const { RefCell::new((0, Vec::new())) };
}

/// A fresh sequence number. Threads reserve blocks from a global counter, so that numbering
/// a node costs no atomic operation. Numbers only choose among *ready* nodes in backward
/// (dependencies are counted), so blocks interleaving across threads is harmless. They are
/// unique, but they are no clock across threads: a node made later on another thread may
/// have a smaller number, or a larger one.
#[inline]
pub(crate) fn next_seq() -> u64 {
    SEQ.with(|c| {
        let (mut next, mut end) = c.get();
        if next == end {
            next = reserve_seq_block();
            end = next + SEQ_BLOCK;
        }
        c.set((next + 1, end));
        next
    })
}

/// Takes the next block of sequence numbers for this thread, and logs it while a
/// [`SeqLog`] is open.
#[cold]
fn reserve_seq_block() -> u64 {
    let start = NEXT_SEQ_BLOCK.fetch_add(SEQ_BLOCK, Ordering::Relaxed);
    SEQ_LOG.with(|l| {
        let mut l = l.borrow_mut();
        if l.0 > 0 {
            l.1.push(start..start + SEQ_BLOCK);
        }
    });
    start
}

/// Which sequence numbers this thread hands out while it is open: the nodes numbered from
/// them were created on this thread since then (numbers are no clock across threads, so
/// "numbered after the start" would say nothing).
pub(crate) struct SeqLog {
    /// The rest of the thread's block when the log was opened.
    first: std::ops::Range<u64>,
    /// Where this log's blocks begin in the thread's list.
    from: usize,
}

impl SeqLog {
    /// Starts logging this thread's numbers.
    pub(crate) fn open() -> SeqLog {
        let first = SEQ.with(|c| {
            let (next, end) = c.get();
            next..end
        });
        let from = SEQ_LOG.with(|l| {
            let mut l = l.borrow_mut();
            l.0 += 1;
            l.1.len()
        });
        SeqLog { first, from }
    }

    /// Whether `seq` was handed out on this thread since the log was opened.
    pub(crate) fn contains(&self, seq: u64) -> bool {
        self.first.contains(&seq) || SEQ_LOG.with(|l| l.borrow().1[self.from..].iter().any(|r| r.contains(&seq)))
    }
}

impl Drop for SeqLog {
    fn drop(&mut self) {
        SEQ_LOG.with(|l| {
            let mut l = l.borrow_mut();
            l.0 -= 1;
            if l.0 == 0 {
                l.1.clear();
            }
        });
    }
}

static STRUCTURE_EPOCH: AtomicU64 = AtomicU64::new(1);

/// Records a change that can alter what a backward visits or needs (a leaf's
/// `requires_grad`, a retained gradient, an extension's flag on a node): plans of backward
/// prepared before it are no longer used.
pub(crate) fn bump_structure_epoch() {
    STRUCTURE_EPOCH.fetch_add(1, Ordering::AcqRel);
}

/// The current structure epoch (see [`bump_structure_epoch`]).
pub(crate) fn structure_epoch() -> u64 {
    STRUCTURE_EPOCH.load(Ordering::Acquire)
}

/// The one constructor of nodes: a new node numbered `seq` (from [`next_seq`]) of `op`
/// over `inputs` holding `value`, computed from inputs at `input_versions`, and the first
/// handle to it.
///
/// Callers take the number before they build anything that moves into the node: numbering
/// can call out (to reserve a block), and a call between building those and allocating the
/// node makes the compiler build them on the stack and copy them again, a measurable share
/// of a no-grad operation.
#[inline]
pub(crate) fn new_node<O: Op>(
    seq: u64,
    op: O,
    inputs: SmallVec<[NodeRef; 2]>,
    flags: u32,
    value: Tensor,
    input_versions: SmallVec<[(u64, u64); 2]>,
) -> Var {
    value.storage().watch();
    let saves = op.saves();
    for (i, input) in inputs.iter().enumerate() {
        let f = input.flags.load(Ordering::Relaxed);
        if f & (UNREAD | COUNTS_EDGES) != 0 {
            note_consumer(input, f, saves.saves_input(i));
        }
    }
    let flags = flags
        | if op.recomputable() { 0 } else { NOT_RECOMPUTABLE }
        | if op.validates_grads() { CHECKS_GRADS } else { 0 };
    let epochs = reactive::epochs();
    // Written straight into the allocation (one a freed node left, when this thread has
    // one: see `node_cache`): `Arc::new` builds the node on the stack and copies it over, a
    // `memcpy` of the whole node that was a measurable share of a recorded operation. The
    // state is built inside the write, after the allocation, for the same reason: built
    // before it, it was copied twice.
    let slot = node_cache::alloc::<Node<O>>();
    let p = Arc::as_ptr(&slot) as *mut std::mem::MaybeUninit<Node<O>>;
    // SAFETY: `slot` was just allocated and is the only handle to it, so writing through
    // its pointer races with nothing; after the write the node is initialised.
    let node: NodeRef = unsafe {
        (*p).write(Node {
            flags: AtomicU32::new(flags),
            edges: AtomicU32::new(0),
            seq,
            inputs,
            state: Mutex::new(NodeState::new(value, input_versions, epochs)),
            grad: Mutex::new(None),
            extras: Mutex::new(None),
            op,
        });
        slot.assume_init()
    };
    Var::from_node(node)
}

/// A consumer of `input` (whose flags were `flags`) is being made: its edge is counted, and
/// if its backward reads the input, the input's value is no longer released early.
#[cold]
fn note_consumer(input: &NodeRef, flags: u32, reads: bool) {
    if flags & COUNTS_EDGES != 0 {
        input.edges.fetch_add(1, Ordering::Relaxed);
    }
    if reads && flags & UNREAD != 0 {
        input.set(UNREAD, false);
    }
}

/// Whether a new node of `op` with these flags and `value` may have its value released
/// when its last `Var` drops: a recorded, re-executable operation in a graph that backward
/// walks, whose own backward does not read its output, with a value worth releasing.
#[inline]
pub(crate) fn release_flags<O: Op>(op: &O, flags: u32, value: &Tensor) -> u32 {
    if flags & REQUIRES_GRAD != 0
        && !op.saves().output
        && op.recomputable()
        && value.numel() * value.dtype().size_in_bytes() >= RELEASE_MIN_BYTES
    {
        UNREAD | COUNTS_EDGES
    } else {
        0
    }
}

/// Releases the value of `node` as its `Var` `handle` drops, when nothing can read it any
/// more: no other handle exists (the references left are the consumers' edges), no recorded
/// backward reads it, and nothing else shares or wrote its storage. The value is recomputed
/// from its inputs if it is ever asked for again (it keeps its version: see docs/design.md,
/// 'Value versions and re-execution'); backward does without it.
#[cold]
#[inline(never)]
pub(crate) fn release_unread(node: &NodeRef) {
    let taken = {
        // The handle count is read under the state lock, as the engine's release reads it:
        // a handle taken from a consumer's edge meanwhile either is counted here or finds
        // the value gone and restores it.
        let mut st = node.state();
        let edges = node.edges.load(Ordering::Acquire) as usize;
        if edges == 0 || Arc::strong_count(node) != 1 + edges || !node.has(UNREAD) || node.has(VALUE_AWAY) {
            return;
        }
        match &st.value {
            // A storage shared with a view or a tensor handle could still be written, and
            // releasing it would free nothing.
            Some(v) if v.version() == st.storage_version && Arc::strong_count(v.storage()) == 1 => {}
            _ => return,
        }
        node.set(VALUE_AWAY, true);
        st.value.take()
    };
    // Freed outside the lock.
    drop(taken);
}

/// Whether any node has held a kept gradient ([`HAS_GRAD`]) since the program started.
static ANY_KEPT_GRAD: AtomicBool = AtomicBool::new(false);

/// Whether any node may hold a kept gradient ([`HAS_GRAD`]): false until the first backward
/// that retains its graph keeps one, so that the others need not look at every node.
#[inline]
pub(crate) fn any_kept_grad() -> bool {
    ANY_KEPT_GRAD.load(Ordering::Acquire)
}

impl<O: ?Sized + Op> Node<O> {
    /// Sets or clears [`HAS_GRAD`]; the only way to set it, so that [`any_kept_grad`] knows.
    pub(crate) fn set_kept_grad(&self, on: bool) {
        if on && !ANY_KEPT_GRAD.load(Ordering::Relaxed) {
            ANY_KEPT_GRAD.store(true, Ordering::Release);
        }
        self.set(HAS_GRAD, on);
    }

    pub(crate) fn has(&self, flag: u32) -> bool {
        self.flags.load(Ordering::Relaxed) & flag != 0
    }

    pub(crate) fn set(&self, flag: u32, on: bool) {
        if on {
            self.flags.fetch_or(flag, Ordering::Relaxed);
        } else {
            self.flags.fetch_and(!flag, Ordering::Relaxed);
        }
    }

    /// The extension flags set on this node, one bit per feature (see `extension`).
    #[inline]
    pub(crate) fn extensions(&self) -> u8 {
        ((self.flags.load(Ordering::Relaxed) & EXTENSION_FLAGS) >> EXTENSION_SHIFT) as u8
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, NodeState> {
        self.state.lock()
    }

    pub(crate) fn grad_slot(&self) -> MutexGuard<'_, Option<Var>> {
        self.grad.lock()
    }

    pub(crate) fn extras(&self) -> MutexGuard<'_, Option<Box<Extras>>> {
        self.extras.lock()
    }

    pub(crate) fn is_leaf(&self) -> bool {
        self.has(IS_LEAF)
    }

    pub(crate) fn requires_grad(&self) -> bool {
        self.has(REQUIRES_GRAD)
    }

    /// Whether the value can be recomputed from the inputs ([`Op::recomputable`]).
    pub(crate) fn recomputable(&self) -> bool {
        !self.has(NOT_RECOMPUTABLE)
    }

    /// Whether backward checks the gradients' shapes in release builds ([`Op::validates_grads`]).
    pub(crate) fn checks_grads(&self) -> bool {
        self.has(CHECKS_GRADS)
    }

    /// The node's name if one was set.
    pub(crate) fn name(&self) -> Option<String> {
        self.extras().as_ref().and_then(|e| e.name.clone())
    }
}

impl<O: ?Sized> Drop for Node<O> {
    /// Drops the chain of inputs iteratively: a graph that is a chain of a million nodes
    /// would otherwise be freed by a million nested drops and overflow the stack.
    fn drop(&mut self) {
        if self.inputs.is_empty() {
            return;
        }
        // The worklist stays inline for chains; it only spills when a branch point is the
        // last owner of several inputs.
        let mut stack: SmallVec<[NodeRef; 4]> = SmallVec::new();
        stack.extend(std::mem::take(&mut self.inputs));
        while let Some(mut n) = stack.pop() {
            if n.has(COUNTS_EDGES) {
                // This edge goes: uncounted before its reference is, so that a handle count
                // read meanwhile never looks smaller than it is.
                n.edges.fetch_sub(1, Ordering::Release);
            }
            if Arc::strong_count(&n) == 1 && Arc::weak_count(&n) > 0 && n.has(SUBSCRIBED) {
                // The consumer registrations of a subscribed node are weak references that
                // would stop `get_mut` below; the node is going away, so withdraw them.
                let me = Arc::as_ptr(&n) as *const u8;
                for i in n.inputs.iter() {
                    if let Some(ex) = i.extras().as_mut() {
                        ex.consumers.retain(|w| w.as_ptr() as *const u8 != me);
                    }
                }
            }
            if let Some(inner) = Arc::get_mut(&mut n) {
                for i in std::mem::take(&mut inner.inputs) {
                    stack.push(i);
                }
                // The node's allocation is kept for the next operations on this thread (see
                // `node_cache`), and so is its value's storage cell (see `Tensor`'s `Drop`).
                // SAFETY: `get_mut` just found `n` the only handle to its node.
                unsafe { node_cache::recycle(n) };
            }
        }
    }
}

impl NodeState {
    #[inline]
    pub(crate) fn new(value: Tensor, input_versions: SmallVec<[(u64, u64); 2]>, epochs: (u64, u64)) -> Self {
        let storage_version = value.version();
        NodeState {
            value: Some(value),
            value_version: 0,
            storage_version,
            input_versions,
            verified_values: epochs.0,
            verified_full: epochs.1,
            recomputes: 0,
            verified_inplace: 0,
        }
    }

    /// `(value_version, storage_version)` of the current value, as consumers record it.
    pub(crate) fn versions(&self) -> (u64, u64) {
        (self.value_version, self.value.as_ref().map_or(self.storage_version, |v| v.version()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backward_ctx::BackwardCtx;
    use crate::op::{Grads, Leaf};
    use ember_tensor::{DType, Result};

    /// An operation that answers the engine's questions the other way from the defaults.
    struct Unusual;

    impl Op for Unusual {
        fn name(&self) -> &str {
            "unusual"
        }
        fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
            Ok(inputs[0].clone())
        }
        fn backward(&self, _: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
            Ok(smallvec::smallvec![Some(g.clone())])
        }
        fn recomputable(&self) -> bool {
            false
        }
        fn validates_grads(&self) -> bool {
            true
        }
    }

    /// `new_node` writes the operation's answers into the flags, and the node's accessors
    /// read them there.
    #[test]
    fn a_node_keeps_its_operations_answers_in_its_flags() -> Result<()> {
        let x = Var::param(Tensor::ones([2], DType::F32)?);
        let plain = x.exp();
        assert!(plain.node.recomputable() && !plain.node.checks_grads());
        let unusual = Var::apply_op(Unusual, &[&x])?;
        assert!(!unusual.node.recomputable() && unusual.node.checks_grads());
        assert!(unusual.node.has(NOT_RECOMPUTABLE | CHECKS_GRADS));
        Ok(())
    }

    /// What backward reads of every node sits at the front, beside the reference counts;
    /// the value state and the operation come after it.
    #[test]
    fn the_fields_backward_reads_of_every_node_come_first() {
        type N = Node<Leaf>;
        let front = [
            std::mem::offset_of!(N, flags),
            std::mem::offset_of!(N, edges),
            std::mem::offset_of!(N, seq),
            std::mem::offset_of!(N, inputs),
        ];
        let state = std::mem::offset_of!(N, state);
        assert!(front.iter().all(|&f| f < state), "{front:?} against the state at {state}");
        assert!(state < std::mem::offset_of!(N, grad) && std::mem::offset_of!(N, extras) < std::mem::offset_of!(N, op));
        // With the two counts of the `Arc`, these fields span two cache lines at most.
        assert!(2 * size_of::<usize>() + state <= 2 * 64, "the front takes {state} bytes");
    }

    /// Keeping a gradient on a node is what turns on the pass that drops kept gradients.
    #[test]
    fn a_kept_gradient_is_noted() -> Result<()> {
        let h = Var::param(Tensor::ones([2], DType::F32)?).exp();
        h.node.set_kept_grad(true);
        assert!(any_kept_grad() && h.node.has(HAS_GRAD));
        h.node.set_kept_grad(false);
        assert!(!h.node.has(HAS_GRAD));
        Ok(())
    }
}
