//! Graph nodes.
//!
//! A node holds its operation (none for a leaf), strong references to its input nodes (never
//! to its consumers, so graphs are acyclic and freed when their last handle drops), its
//! cached value with the versions it was computed from, its gradient slot, flags, a sequence
//! number and optional extras (name, hooks). Node and operation live in one allocation:
//! `Node<O>` is created for a concrete operation and used as `Node<dyn Op>`.

use crate::backward_ctx::BackwardCtx;
use crate::var::Var;
use ember_tensor::{Result, Tensor};
use parking_lot::{Mutex, MutexGuard};
use smallvec::SmallVec;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};

/// A shared reference to a node, as held by the graph (not counted as a user handle).
pub(crate) type NodeRef = Arc<Node<dyn Op>>;

/// The gradients an operation's backward returns, one per input (`None`: no gradient).
pub type Grads = SmallVec<[Option<Var>; 2]>;

/// Which values an operation's backward reads: a bit per input, plus the output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Saves {
    /// Bit `i` set: backward reads the value of input `i`.
    pub inputs: u32,
    /// Backward reads the operation's own output.
    pub output: bool,
}

impl Saves {
    /// Backward reads nothing (addition, views, ...).
    pub const NONE: Saves = Saves { inputs: 0, output: false };
    /// Backward reads every input.
    pub const INPUTS: Saves = Saves { inputs: u32::MAX, output: false };
    /// Backward reads the output only (exp, sigmoid, softmax, ...).
    pub const OUTPUT: Saves = Saves { inputs: 0, output: true };

    /// Backward reads input `i`.
    pub const fn input(i: usize) -> Saves {
        Saves { inputs: 1 << i, output: false }
    }

    pub(crate) fn saves_input(self, i: usize) -> bool {
        i < 32 && self.inputs & (1 << i) != 0
    }
}

/// A differentiable (or at least re-executable) operation: its forward computation on
/// tensors and its backward formula, written with `Var` operations so that it can itself be
/// differentiated when `create_graph` is set.
pub trait Op: Send + Sync + 'static {
    /// A short lowercase name (`mul`, `matmul`, ...), used in errors, graphs and profiles.
    fn name(&self) -> &str;
    /// Computes the output from the input values. Called when the node is created and
    /// whenever its value must be recomputed (after it was freed, or its inputs changed).
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor>;
    /// Gradients with respect to each input, given the gradient of the output.
    fn backward(&self, ctx: &BackwardCtx<'_>, grad: &Var) -> Result<Grads>;
    /// Which values backward reads; those are version-checked, the others may be freed or
    /// modified freely.
    fn saves(&self) -> Saves {
        Saves::INPUTS
    }
    /// Whether the forward can be run again to recompute a freed value. Operations that are
    /// not (they draw random numbers, say) keep their values after backward.
    fn recomputable(&self) -> bool {
        true
    }
    /// Whether the engine checks, in release builds too, that backward's gradients have the
    /// inputs' shapes (debug builds always check). Built-in operations are verified by
    /// gradcheck tests and skip the check; custom functions opt in.
    fn validates_grads(&self) -> bool {
        false
    }
    /// For a gradient router: the node its gradient continues to (`None`: it stops).
    #[doc(hidden)]
    fn route(&self) -> Option<Var> {
        None
    }
    /// Whether this node routes gradients instead of computing them.
    #[doc(hidden)]
    fn is_router(&self) -> bool {
        false
    }
    /// For a gradient router: sets the node its gradient continues to.
    #[doc(hidden)]
    fn set_route(&self, _target: Option<Var>) {}
}

/// The operation of a leaf: it has no inputs and is never recomputed.
pub(crate) struct Leaf;

impl Op for Leaf {
    fn name(&self) -> &str {
        "leaf"
    }
    fn forward(&self, _: &[&Tensor]) -> Result<Tensor> {
        Err(ember_tensor::Error::autograd("a leaf has no forward computation"))
    }
    fn backward(&self, _: &BackwardCtx<'_>, _: &Var) -> Result<Grads> {
        Ok(Grads::new())
    }
    fn saves(&self) -> Saves {
        Saves::NONE
    }
}

pub(crate) const REQUIRES_GRAD: u16 = 1;
pub(crate) const RETAINS_GRAD: u16 = 2;
pub(crate) const FROZEN: u16 = 4;
pub(crate) const IS_LEAF: u16 = 8;
pub(crate) const HAS_HOOKS: u16 = 16;
pub(crate) const DETACHED: u16 = 32;
/// A non-leaf holds the gradient of an earlier backward (kept by `retain_graph`).
pub(crate) const HAS_GRAD: u16 = 64;
/// The node is registered as a consumer of its inputs (see `reactive`).
pub(crate) const SUBSCRIBED: u16 = 128;
/// An ancestor's value was replaced since this node's value was computed.
pub(crate) const DIRTY: u16 = 256;
/// Saved-tensor hooks packed what this node's backward reads (kept in its extras).
pub(crate) const HAS_PACKED: u16 = 512;
/// A static graph's root (a cached loss): backward keeps its prepared plan (see `engine`).
pub(crate) const PLAN_BACKWARD: u16 = 1024;
/// Saved-tensor hooks dropped the value (only the graph held it, and every backward that
/// reads it reads a packed copy): it is recomputed only when its inputs change or a value
/// is actually asked for (see `saved_hooks` and `reactive`).
pub(crate) const PACKED_AWAY: u16 = 2048;

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
    pub hooks: Vec<(u64, crate::hooks::GradHook)>,
    pub post_accumulate_hooks: Vec<(u64, crate::hooks::PostAccumulateHook)>,
    pub created_at: Option<String>,
    /// What saved-tensor hooks packed of the values backward reads, if they were active
    /// when the node was created.
    pub packed: Option<Box<crate::saved_hooks::PackedValues>>,
    /// The nodes that use this one as an input, registered by a reactive request so that
    /// replacing a value can mark exactly its dependents dirty.
    pub consumers: Vec<std::sync::Weak<Node<dyn Op>>>,
    /// For a static graph's root: the backward plan, reused while the structure is unchanged.
    pub backward_plan: Option<std::sync::Arc<crate::engine::Prepared>>,
    /// For a value saved-tensor hooks dropped: its storage, to see in-place writes made
    /// through a tensor handle that outlived the value (the version check still applies).
    pub away_storage: Option<std::sync::Weak<ember_tensor::storage::StorageCell>>,
}

/// A graph node; see the module docs.
pub struct Node<O: ?Sized> {
    pub(crate) inputs: SmallVec<[NodeRef; 2]>,
    pub(crate) seq: u64,
    pub(crate) flags: AtomicU16,
    pub(crate) state: Mutex<NodeState>,
    pub(crate) grad: Mutex<Option<Var>>,
    pub(crate) extras: Mutex<Option<Box<Extras>>>,
    pub(crate) op: O,
}

static NEXT_SEQ_BLOCK: AtomicU64 = AtomicU64::new(1);
const SEQ_BLOCK: u64 = 1 << 16;

thread_local! {
    /// The next sequence number of this thread and the end of its reserved block.
    static SEQ: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// A fresh sequence number. Threads reserve blocks from a global counter, so that numbering
/// a node costs no atomic operation. Numbers only choose among *ready* nodes in backward
/// (dependencies are counted), so blocks interleaving across threads is harmless. They are
/// unique, but they are no clock across threads: a node made later on another thread may
/// have a smaller number, or a larger one.
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

/// Takes the next block of sequence numbers for this thread, and tells segments that are
/// collecting the nodes this thread creates (checkpoint's capture) about it.
#[cold]
fn reserve_seq_block() -> u64 {
    let start = NEXT_SEQ_BLOCK.fetch_add(SEQ_BLOCK, Ordering::Relaxed);
    if crate::instrument::active() & crate::instrument::CAPTURE != 0 {
        crate::checkpoint::note_seq_block(start..start + SEQ_BLOCK);
    }
    start
}

/// The numbers this thread will still hand out from its current block (empty when it holds
/// none yet).
pub(crate) fn seq_remaining() -> std::ops::Range<u64> {
    SEQ.with(|c| {
        let (next, end) = c.get();
        next..end
    })
}

impl<O: Op> Node<O> {
    /// A new node and the first handle to it.
    pub(crate) fn new_var(op: O, inputs: SmallVec<[NodeRef; 2]>, flags: u16, state: NodeState) -> Var {
        Node::new_var_numbered(next_seq(), op, inputs, flags, state)
    }

    /// [`Node::new_var`] with a sequence number the caller took. The per-operation paths
    /// (`ops::record`, `Var::leaf_with`) take it before they build the node's state:
    /// numbering can call out (to reserve a block), and a call between building the state
    /// and allocating the node makes the compiler build the state on the stack and copy it
    /// twice more, a measurable share of a no-grad operation.
    #[inline]
    pub(crate) fn new_var_numbered(
        seq: u64,
        op: O,
        inputs: SmallVec<[NodeRef; 2]>,
        flags: u16,
        state: NodeState,
    ) -> Var {
        let node: NodeRef = Arc::new(Node {
            inputs,
            seq,
            flags: AtomicU16::new(flags),
            state: Mutex::new(state),
            grad: Mutex::new(None),
            extras: Mutex::new(None),
            op,
        });
        Var { node }
    }
}

impl<O: ?Sized + Op> Node<O> {
    pub(crate) fn has(&self, flag: u16) -> bool {
        self.flags.load(Ordering::Relaxed) & flag != 0
    }

    pub(crate) fn set(&self, flag: u16, on: bool) {
        if on {
            self.flags.fetch_or(flag, Ordering::Relaxed);
        } else {
            self.flags.fetch_and(!flag, Ordering::Relaxed);
        }
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
            }
        }
    }
}

impl NodeState {
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
