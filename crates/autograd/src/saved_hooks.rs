//! Saved-tensor hooks: a scoped pair of functions that decide how the values a backward
//! reads are kept (PyTorch's `torch.autograd.graph.saved_tensors_hooks`).
//!
//! While hooks are active on a thread, every node created that requires grad calls
//! `pack(value)` for each value its backward reads (per [`Op::saves`]:
//! inputs in order, then the output), and custom functions call it for each tensor given to
//! `save_for_backward`. Backward then calls `unpack(&packed)` instead of reading the saved
//! value. The hooks are captured at node creation, so they apply to that node's every
//! backward, wherever and whenever it runs.
//!
//! The in-place check stays what it is without hooks: the version of the *original* value
//! is recorded at creation and compared before unpacking, so writing a saved tensor in place
//! is still an error even if the packed copy is intact. Unpack must give back the saved
//! value's shape and dtype (anything else is an error naming the operation). With
//! `create_graph`, the unpacked value is connected to the graph like the original, so higher
//! order gradients flow through it.
//!
//! # Memory
//!
//! A pack hook saves memory only if the original can go. A value no backward reads is
//! released anyway when its last `Var` drops; one that a backward reads is held by its node
//! (for re-execution), so while hooks are active the scope also watches the nodes recorded
//! in it: once the graph alone holds a node (no `Var` of the user's, no consumer recorded
//! outside the scope) and every backward that reads its value reads a packed copy, the value
//! itself is dropped, and a backward unpacks instead of reading or recomputing it. This is
//! checked as operations are recorded in the scope and when the scope ends, so a forward
//! written as `saved_tensors_hooks(pack, unpack, || model(x))` keeps only packed copies of
//! its activations (and drops the activations no backward reads at all). If something later
//! asks for a dropped value (re-execution, [`Var::inputs`](crate::Var::inputs)), it is
//! recomputed from the leaves. After a backward without `retain_graph`, each node's packed
//! values are freed with its backward, as PyTorch frees saved tensors.
//!
//! What cannot be dropped, so that packing it adds the packed copy to the original:
//! - leaves: parameters, inputs and constants (a parameter's value *is* the parameter);
//! - values a `Var` still refers to (the output you keep, an activation in a list);
//! - values of operations that cannot be re-executed (a custom function's outputs);
//! - values also used by operations recorded outside the scope or by custom functions;
//! - values written in place since they were computed (recomputing would lose the write).
//!
//! Custom functions drop their own reference to a packed saved tensor, so a tensor only the
//! function kept is freed once packed.
//!
//! ```
//! use ember_autograd::{saved_tensors_hooks, Var};
//! use ember_tensor::{DType, Tensor};
//! use std::sync::{Arc, atomic::{AtomicUsize, Ordering}};
//! let packs = Arc::new(AtomicUsize::new(0));
//! let counter = packs.clone();
//! let x = Var::param(Tensor::from_vec(vec![1.0f64, 2.0], [2])?);
//! let y = saved_tensors_hooks(
//!     move |t: &Tensor| { counter.fetch_add(1, Ordering::Relaxed); t.to_dtype(DType::F32) }, // keep f32
//!     |p: &Tensor| Ok(p.to_dtype(DType::F64)),
//!     || x.mul(&x),
//! )?;
//! y.sum_all().backward()?;
//! assert_eq!(packs.load(Ordering::Relaxed), 2); // mul saves both of its inputs
//! assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![2.0, 4.0]);
//! # Ok::<(), ember_tensor::Error>(())
//! ```

use crate::backward_ctx::BackwardCtx;
use crate::extension::{Extension, Feature, ids};
use crate::grad_mode::is_grad_enabled;
use crate::node::{Node, NodeRef, REQUIRES_GRAD, VALUE_AWAY, new_node};
use crate::op::{Grads, Op, Saves};
use crate::var::Var;
use ember_tensor::{DType, Error, Result, Shape, Tensor};
use rustc_hash::FxHashMap;
use smallvec::{SmallVec, smallvec};
use std::any::Any;
use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::{Arc, Weak};

/// Saved-tensor hooks as an engine extension: active on a thread while hooks are, they see
/// every node recorded there; flagged on a node while they keep something for it, they
/// give backward the unpacked values and free the packed ones with the node's backward.
struct SavedHooks;

static FEATURE: Feature = Feature::new(ids::SAVED_HOOKS, &SavedHooks);

/// What the hooks keep for one node, in its extension slot.
#[derive(Default)]
struct NodeSaved {
    /// What the pack hook returned for the values the node's backward reads.
    packed: Option<Box<PackedValues>>,
    /// For a value the hooks dropped: its storage, to see in-place writes made through a
    /// tensor handle that outlived the value (the version check still applies).
    away_storage: Option<Weak<ember_tensor::storage::StorageCell>>,
}

impl Extension for SavedHooks {
    fn on_record(&self, var: &Var) {
        pack_node(var);
    }
    /// What the hooks packed for this node's backward goes with it, as PyTorch frees saved
    /// tensors. A later backward reads, or recomputes, the originals.
    fn on_release(&self, node: &NodeRef) {
        let mut ex = node.extras();
        if let Some(s) = ex.as_mut().and_then(|e| e.slot_mut::<NodeSaved>()) {
            s.packed = None;
            if s.away_storage.is_none() {
                FEATURE.flag(node, false);
            }
        }
    }
    fn away_version(&self, node: &NodeRef) -> Option<u64> {
        if !node.has(VALUE_AWAY) {
            return None;
        }
        node.extras().as_ref()?.slot::<NodeSaved>()?.away_storage.as_ref()?.upgrade().map(|s| s.version())
    }
    fn saved_input(&self, node: &NodeRef, i: usize, versions: (u64, u64), input: &NodeRef) -> Option<Result<Var>> {
        let p = packed_input(node, i, versions)?;
        Some(unpack(node.op.name(), &format!("input {i}"), p, Some(input)))
    }
    fn saved_output(&self, node: &NodeRef) -> Option<Result<Var>> {
        let p = packed_output(node)?;
        Some(unpack(node.op.name(), "the output", p, Some(node)))
    }
}

/// A packed value, as a pack hook returned it.
pub(crate) type Packed = Arc<dyn Any + Send + Sync>;
type PackFn = Arc<dyn Fn(&Tensor) -> Packed + Send + Sync>;
/// The unpack hook of the scope a value was packed in.
pub(crate) type UnpackFn = Arc<dyn Fn(&(dyn Any + Send + Sync)) -> Result<Tensor> + Send + Sync>;

#[derive(Clone)]
struct Hooks {
    pack: PackFn,
    unpack: UnpackFn,
}

thread_local! {
    /// The active hook pairs, innermost last.
    static STACK: RefCell<Vec<Hooks>> = const { RefCell::new(Vec::new()) };
    /// The nodes recorded while hooks are active whose values may be dropped (see the module
    /// docs, "Memory").
    static SWEEP: RefCell<Sweep> = RefCell::new(Sweep::default());
}

/// A packed value with the shape and dtype of the original, which unpacking must give back
/// (the original may be gone by then).
#[derive(Clone)]
struct PackedData {
    data: Packed,
    shape: Shape,
    dtype: DType,
}

impl PackedData {
    fn pack(pack: &PackFn, t: &Tensor) -> Self {
        PackedData { data: pack(t), shape: t.shape().clone(), dtype: t.dtype() }
    }
}

/// `(input index, the input's versions at creation, packed value)`.
type PackedInput = (usize, (u64, u64), PackedData);

/// What a node's pack hook returned, kept in the node's extras.
pub(crate) struct PackedValues {
    unpack: UnpackFn,
    /// `(input index, input versions at creation, packed value)`.
    inputs: SmallVec<[PackedInput; 2]>,
    /// `(the node's value version at creation, packed value)`.
    output: Option<(u64, PackedData)>,
}

/// One packed value with the hook that unpacks it.
#[derive(Clone)]
pub(crate) struct PackedValue {
    unpack: UnpackFn,
    packed: PackedData,
}

impl PackedValues {
    /// The packed input `i`, if it was packed from the value with `versions` (a node
    /// recomputed from changed inputs has newer versions, and then reads its live inputs).
    pub(crate) fn input(&self, i: usize, versions: (u64, u64)) -> Option<PackedValue> {
        self.inputs
            .iter()
            .find(|(k, v, _)| *k == i && *v == versions)
            .map(|(_, _, p)| PackedValue { unpack: self.unpack.clone(), packed: p.clone() })
    }

    /// The packed output, if it was packed from the value of `value_version`.
    pub(crate) fn output(&self, value_version: u64) -> Option<PackedValue> {
        match &self.output {
            Some((v, p)) if *v == value_version => Some(PackedValue { unpack: self.unpack.clone(), packed: p.clone() }),
            _ => None,
        }
    }
}

/// Makes saved-tensor hooks active on this thread until dropped, then restores the hooks
/// that were active before (guards nest; the innermost hooks apply).
#[must_use = "the hooks are removed when the guard is dropped"]
pub struct SavedTensorsHooksGuard {
    depth: usize,
    // The hooks live in a thread-local stack: the guard must be dropped on its thread.
    _not_send: PhantomData<*const ()>,
}

impl SavedTensorsHooksGuard {
    /// Activates `pack` and `unpack`; see [`saved_tensors_hooks`].
    pub fn new<P: Send + Sync + 'static>(
        pack: impl Fn(&Tensor) -> P + Send + Sync + 'static,
        unpack: impl Fn(&P) -> Result<Tensor> + Send + Sync + 'static,
    ) -> Self {
        let pack: PackFn = Arc::new(move |t: &Tensor| Arc::new(pack(t)) as Packed);
        let unpack: UnpackFn = Arc::new(move |p: &(dyn Any + Send + Sync)| match p.downcast_ref::<P>() {
            Some(p) => unpack(p),
            None => Err(Error::autograd("saved tensor hooks: a packed value has an unexpected type")),
        });
        let depth = STACK.with(|s| {
            let mut s = s.borrow_mut();
            s.push(Hooks { pack, unpack });
            s.len() - 1
        });
        FEATURE.set_active(true);
        SavedTensorsHooksGuard { depth, _not_send: PhantomData }
    }
}

impl Drop for SavedTensorsHooksGuard {
    fn drop(&mut self) {
        let any = STACK.with(|s| {
            let mut s = s.borrow_mut();
            s.truncate(self.depth);
            !s.is_empty()
        });
        FEATURE.set_active(any);
        if !any {
            // The scope's temporaries are gone by now: drop what only the graph holds, and
            // stop watching.
            sweep();
            SWEEP.with(|s| *s.borrow_mut() = Sweep::default());
        }
    }
}

/// Runs `f` with saved-tensor hooks: nodes created inside keep `pack(value)` for each value
/// their backward reads, and their backward reads `unpack(&packed)` instead. See the
/// [module docs](self) for the rules.
pub fn saved_tensors_hooks<P: Send + Sync + 'static, R>(
    pack: impl Fn(&Tensor) -> P + Send + Sync + 'static,
    unpack: impl Fn(&P) -> Result<Tensor> + Send + Sync + 'static,
    f: impl FnOnce() -> R,
) -> R {
    let _g = SavedTensorsHooksGuard::new(pack, unpack);
    f()
}

fn current() -> Option<Hooks> {
    STACK.with(|s| s.borrow().last().cloned())
}

/// Turns the hooks off while a pack hook runs, so that a hook using `Var` operations does
/// not pack its own work.
struct Suspend;

impl Suspend {
    fn new() -> Self {
        FEATURE.set_active(false);
        Suspend
    }
}

impl Drop for Suspend {
    fn drop(&mut self) {
        FEATURE.set_active(STACK.with(|s| !s.borrow().is_empty()));
    }
}

/// Packs `t` with the active hooks (for a custom function's `save_for_backward`).
pub(crate) fn pack_tensor(t: &Tensor) -> Option<PackedValue> {
    if !FEATURE.is_active() {
        return None;
    }
    let hooks = current()?;
    let _off = Suspend::new();
    Some(PackedValue { packed: PackedData::pack(&hooks.pack, t), unpack: hooks.unpack })
}

/// Packs the values the backward of the node `var` just created will read. Every node
/// recorded while hooks are active comes through here, so that the scope knows which nodes
/// consume which, and may drop values only the graph holds.
fn pack_node(var: &Var) {
    let node = &var.node;
    if !node.recomputable() {
        // A node that cannot be re-executed (a custom function's) keeps its own saved
        // values, and is not watched: what it uses is never dropped.
        return;
    }
    note(node);
    if !node.is_leaf() && node.requires_grad() {
        pack_saved(node);
    }
    let due = SWEEP.with(|s| {
        let s = s.borrow();
        s.added >= s.candidates.len().max(64)
    });
    if due {
        sweep();
    }
}

fn pack_saved(node: &NodeRef) {
    let saves = node.op.saves();
    if saves == Saves::NONE {
        return;
    }
    let Some(hooks) = current() else { return };
    let _off = Suspend::new();
    let recorded = node.state().input_versions.clone();
    let mut packed = PackedValues { unpack: hooks.unpack.clone(), inputs: SmallVec::new(), output: None };
    for (i, input) in node.inputs.iter().enumerate() {
        if !saves.saves_input(i) {
            continue;
        }
        let value = input.state().value.clone();
        if let (Some(v), Some(&versions)) = (value, recorded.get(i)) {
            packed.inputs.push((i, versions, PackedData::pack(&hooks.pack, &v)));
        }
    }
    if saves.output {
        let (value, version) = {
            let st = node.state();
            (st.value.clone(), st.value_version)
        };
        if let Some(v) = value {
            packed.output = Some((version, PackedData::pack(&hooks.pack, &v)));
        }
    }
    node.extras().get_or_insert_with(Default::default).slot_or_default::<NodeSaved>().packed = Some(Box::new(packed));
    FEATURE.flag(node, true);
}

/// The packed input `i` of `node`, if it was packed from the value with `versions`.
fn packed_input(node: &NodeRef, i: usize, versions: (u64, u64)) -> Option<PackedValue> {
    node.extras().as_ref()?.slot::<NodeSaved>()?.packed.as_ref()?.input(i, versions)
}

/// The packed output of `node`, if it was packed from its current value.
fn packed_output(node: &NodeRef) -> Option<PackedValue> {
    let version = node.state().value_version;
    node.extras().as_ref()?.slot::<NodeSaved>()?.packed.as_ref()?.output(version)
}

/// Unpacks a saved value of `op` (`what` names it in errors). In grad mode (a backward with
/// `create_graph`) the result is connected to the node of the original, `link`, so that
/// gradients of the backward flow on to it.
pub(crate) fn unpack(op: &str, what: &str, packed: PackedValue, link: Option<&NodeRef>) -> Result<Var> {
    let t = (packed.unpack)(&*packed.packed.data)?;
    let (shape, dtype) = (&packed.packed.shape, packed.packed.dtype);
    if t.shape() != shape || t.dtype() != dtype {
        return Err(Error::autograd(format!(
            "saved tensor hooks: unpacking {what} of {op} gave a value of [{} {:?}]; expected [{dtype} {shape:?}], the \
             saved value's",
            t.dtype(),
            t.shape()
        )));
    }
    let Some(original) = link.filter(|n| is_grad_enabled() && n.requires_grad()) else {
        return Ok(Var::new(t));
    };
    let versions = original.state().versions();
    Ok(new_node(crate::node::next_seq(), Unpacked, smallvec![original.clone()], REQUIRES_GRAD, t, smallvec![versions]))
}

/// The nodes recorded in the current hooks scope whose values are not dropped yet, with
/// the consumers recorded in the scope that hold an edge to each.
#[derive(Default)]
struct Sweep {
    candidates: Vec<Candidate>,
    /// Node address to position in `candidates`.
    index: FxHashMap<usize, usize>,
    /// Nodes noted since the last sweep: a sweep costs a pass over the candidates, so one
    /// runs only after as many new nodes as there are candidates (amortised O(1) a node).
    added: usize,
}

struct Candidate {
    node: Weak<Node<dyn Op>>,
    consumers: SmallVec<[Weak<Node<dyn Op>>; 2]>,
}

fn addr(n: &NodeRef) -> usize {
    Arc::as_ptr(n) as *const u8 as usize
}

/// Whether a node's value could ever be dropped: a re-executable operation's result (not a
/// leaf, not a router whose value comes from outside).
fn droppable_kind(n: &NodeRef) -> bool {
    !n.inputs.is_empty() && !n.is_leaf() && n.recomputable()
}

/// The position of `n` among the candidates, adding it if it may ever be dropped.
fn slot(candidates: &mut Vec<Candidate>, index: &mut FxHashMap<usize, usize>, n: &NodeRef) -> Option<usize> {
    if !droppable_kind(n) {
        return None;
    }
    let pos = *index.entry(addr(n)).or_insert_with(|| {
        candidates.push(Candidate { node: Arc::downgrade(n), consumers: SmallVec::new() });
        candidates.len() - 1
    });
    let c = &mut candidates[pos];
    if c.node.strong_count() == 0 {
        // A dead node's address, reused.
        *c = Candidate { node: Arc::downgrade(n), consumers: SmallVec::new() };
    }
    Some(pos)
}

/// Registers a node just recorded in the scope: as a candidate itself, and as a consumer of
/// its inputs.
fn note(node: &NodeRef) {
    SWEEP.with(|s| {
        let mut s = s.borrow_mut();
        let Sweep { candidates, index, added } = &mut *s;
        slot(candidates, index, node);
        for input in node.inputs.iter() {
            if let Some(pos) = slot(candidates, index, input) {
                let consumers = &mut candidates[pos].consumers;
                if consumers.last().is_none_or(|w| w.as_ptr() as *const u8 != Arc::as_ptr(node) as *const u8) {
                    consumers.push(Arc::downgrade(node));
                }
            }
        }
        *added += 1;
    });
}

enum Outcome {
    Dropped,
    /// Something outside the recorded graph still holds the node.
    NotYet,
    /// A backward reads the value itself, or it was written in place: it stays.
    Never,
}

/// Drops the values of the candidates that only the graph holds.
fn sweep() {
    // Candidates are taken out of the thread-local while they are examined: dropping the
    // references taken here may free nodes, and nothing of that may find the registry
    // borrowed.
    let candidates = SWEEP.with(|s| {
        let mut s = s.borrow_mut();
        s.added = 0;
        s.index.clear();
        std::mem::take(&mut s.candidates)
    });
    let mut kept = Vec::with_capacity(candidates.len());
    for c in candidates {
        let Some(node) = c.node.upgrade() else { continue };
        if node.has(VALUE_AWAY) {
            continue;
        }
        if let Outcome::NotYet = try_drop(&node, &c.consumers) {
            kept.push(c);
        }
    }
    SWEEP.with(|s| {
        let mut s = s.borrow_mut();
        let meanwhile = std::mem::take(&mut s.candidates);
        kept.extend(meanwhile);
        s.index = kept.iter().enumerate().map(|(i, c)| (c.node.as_ptr() as *const u8 as usize, i)).collect();
        s.candidates = kept;
    });
}

fn try_drop(node: &NodeRef, consumers: &[Weak<Node<dyn Op>>]) -> Outcome {
    if node.requires_grad() && node.op.saves().output && packed_output(node).is_none() {
        return Outcome::Never;
    }
    // The consumers are held while the handle count is compared, so that the edges counted
    // cannot go away meanwhile and make room for a handle taken elsewhere.
    let live: SmallVec<[NodeRef; 4]> = consumers.iter().filter_map(Weak::upgrade).collect();
    let mut edges = 0;
    for c in &live {
        let saves = c.op.saves();
        let backward_runs = c.requires_grad() && !c.is_leaf();
        for (p, input) in c.inputs.iter().enumerate() {
            if !Arc::ptr_eq(input, node) {
                continue;
            }
            edges += 1;
            if backward_runs && saves.saves_input(p) {
                let recorded = c.state().input_versions.get(p).copied();
                if recorded.and_then(|r| packed_input(c, p, r)).is_none() {
                    return Outcome::Never;
                }
            }
        }
    }
    let taken = {
        let mut st = node.state();
        // This sweep's reference and the consumers' edges, nothing else: no handle can read
        // the value any more, and one taken later recomputes it (the count is read under the
        // lock, as in the engine's release).
        if Arc::strong_count(node) != 1 + edges {
            return Outcome::NotYet;
        }
        match &st.value {
            Some(v) if v.version() == st.storage_version => {}
            _ => return Outcome::Never,
        }
        node.set(VALUE_AWAY, true);
        st.value.take()
    };
    if let Some(v) = taken {
        node.extras().get_or_insert_with(Default::default).slot_or_default::<NodeSaved>().away_storage =
            Some(Arc::downgrade(v.storage()));
        FEATURE.flag(node, true);
    }
    Outcome::Dropped
}

/// An unpacked value standing for its original in a graph built by backward: gradients
/// pass through it unchanged.
struct Unpacked;

impl Op for Unpacked {
    fn name(&self) -> &str {
        "unpack"
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs.first().map(|t| (*t).clone()).ok_or_else(|| Error::autograd("unpack: no input"))
    }
    fn backward(&self, _: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        Ok(smallvec![Some(g.clone())])
    }
    fn saves(&self) -> Saves {
        Saves::NONE
    }
}
