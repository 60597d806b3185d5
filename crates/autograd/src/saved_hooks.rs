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
//! Nodes own their values in ember, so a pack hook does not by itself free memory: it is for
//! observing, transforming (lower precision, say) or copying what backward reads.
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
use crate::grad_mode::is_grad_enabled;
use crate::instrument::{self, SAVED_HOOKS};
use crate::node::{Grads, HAS_PACKED, Node, NodeRef, NodeState, Op, REQUIRES_GRAD, Saves};
use crate::reactive;
use crate::var::Var;
use ember_tensor::{Error, Result, Tensor};
use smallvec::{SmallVec, smallvec};
use std::any::Any;
use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::Arc;

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
}

/// `(input index, the input's versions at creation, packed value)`.
type PackedInput = (usize, (u64, u64), Packed);

/// What a node's pack hook returned, kept in the node's extras.
pub(crate) struct PackedValues {
    unpack: UnpackFn,
    /// `(input index, input versions at creation, packed value)`.
    inputs: SmallVec<[PackedInput; 2]>,
    /// `(the node's value version at creation, packed value)`.
    output: Option<(u64, Packed)>,
}

/// One packed value with the hook that unpacks it.
#[derive(Clone)]
pub(crate) struct PackedValue {
    unpack: UnpackFn,
    data: Packed,
}

impl PackedValues {
    /// The packed input `i`, if it was packed from the value with `versions` (a node
    /// recomputed from changed inputs has newer versions, and then reads its live inputs).
    pub(crate) fn input(&self, i: usize, versions: (u64, u64)) -> Option<PackedValue> {
        self.inputs
            .iter()
            .find(|(k, v, _)| *k == i && *v == versions)
            .map(|(_, _, data)| PackedValue { unpack: self.unpack.clone(), data: data.clone() })
    }

    /// The packed output, if it was packed from the value of `value_version`.
    pub(crate) fn output(&self, value_version: u64) -> Option<PackedValue> {
        match &self.output {
            Some((v, data)) if *v == value_version => {
                Some(PackedValue { unpack: self.unpack.clone(), data: data.clone() })
            }
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
        instrument::set(SAVED_HOOKS, true);
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
        instrument::set(SAVED_HOOKS, any);
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
        instrument::set(SAVED_HOOKS, false);
        Suspend
    }
}

impl Drop for Suspend {
    fn drop(&mut self) {
        instrument::set(SAVED_HOOKS, STACK.with(|s| !s.borrow().is_empty()));
    }
}

/// Packs `t` with the active hooks (for a custom function's `save_for_backward`).
pub(crate) fn pack_tensor(t: &Tensor) -> Option<PackedValue> {
    if instrument::active() & SAVED_HOOKS == 0 {
        return None;
    }
    let hooks = current()?;
    let _off = Suspend::new();
    Some(PackedValue { data: (hooks.pack)(t), unpack: hooks.unpack })
}

/// Packs the values the backward of the node `var` just created will read.
pub(crate) fn pack_node(var: &Var) {
    let node = &var.node;
    if node.is_leaf() || !node.requires_grad() {
        return;
    }
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
            packed.inputs.push((i, versions, (hooks.pack)(&v)));
        }
    }
    if saves.output {
        let (value, version) = {
            let st = node.state();
            (st.value.clone(), st.value_version)
        };
        if let Some(v) = value {
            packed.output = Some((version, (hooks.pack)(&v)));
        }
    }
    node.extras().get_or_insert_with(Default::default).packed = Some(Box::new(packed));
    node.set(HAS_PACKED, true);
}

/// The packed input `i` of `node`, if it was packed from the value with `versions`.
pub(crate) fn packed_input(node: &NodeRef, i: usize, versions: (u64, u64)) -> Option<PackedValue> {
    node.extras().as_ref()?.packed.as_ref()?.input(i, versions)
}

/// The packed output of `node`, if it was packed from its current value.
pub(crate) fn packed_output(node: &NodeRef) -> Option<PackedValue> {
    let version = node.state().value_version;
    node.extras().as_ref()?.packed.as_ref()?.output(version)
}

/// Unpacks a saved value of `op` (`what` names it in errors) whose original is `original`.
/// In grad mode (a backward with `create_graph`) the result is connected to `original`'s
/// node, so gradients of the backward flow on to it.
pub(crate) fn unpack(op: &str, what: &str, packed: PackedValue, original: &Var) -> Result<Var> {
    let t = (packed.unpack)(&*packed.data)?;
    let (shape, dtype) = (original.shape(), original.dtype());
    if t.shape_obj() != &shape || t.dtype() != dtype {
        return Err(Error::autograd(format!(
            "saved tensor hooks: unpacking {what} of {op} gave a value of [{} {:?}]; expected [{dtype} {shape:?}], the \
             saved value's",
            t.dtype(),
            t.shape_obj()
        )));
    }
    if !(is_grad_enabled() && original.requires_grad()) {
        return Ok(Var::new(t));
    }
    t.storage().watch();
    let versions = original.node.state().versions();
    let state = NodeState::new(t, smallvec![versions], reactive::epochs());
    Ok(Node::new_var(Unpacked, smallvec![original.node.clone()], REQUIRES_GRAD, state))
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
