//! `Var`: the user's handle to a graph node.

use crate::node::{
    DETACHED, EXTENSION_SHIFT, FROZEN, GRAD_IN_PLACE, IS_LEAF, NodeRef, REQUIRES_GRAD, RETAINS_GRAD, UNREAD,
    bump_structure_epoch, new_node, release_unread,
};
use crate::node_cache;
use crate::op::Leaf;
use crate::reactive::{self, Mode};
use crate::thread_mask::{self, ids};
use ember_tensor::{DType, Device, Error, Result, Shape, Tensor};
use smallvec::SmallVec;
use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::sync::Arc;

/// The thread-mask bit of inference mode (`inference_mode.rs` holds the mode and its
/// guards; `Var` reads the bit because a leaf made in the mode is an inference tensor).
pub(crate) const INFERENCE_BIT: u8 = 1 << ids::INFERENCE;

/// The node flag of an inference tensor.
pub(crate) const INFERENCE_FLAG: u32 = 1 << (EXTENSION_SHIFT + ids::INFERENCE as u32);

/// Whether inference mode is active on this thread.
#[inline]
pub(crate) fn in_inference_mode() -> bool {
    thread_mask::active() & INFERENCE_BIT != 0
}

/// A leaf made by `Var::new` or `Var::param` in inference mode: an inference tensor, whose
/// storage stops counting writes unless someone else also holds it.
fn inference_leaf(value: Tensor) -> Var {
    if Arc::strong_count(value.storage()) == 1 {
        value.storage().untrack();
    }
    Var::leaf_with(value, INFERENCE_FLAG)
}

/// A tensor in the autograd graph: a shared handle to a node that holds the value, the
/// operation that produced it and the gradient slot.
///
/// `Var` is cheap to clone (an `Arc`), `Send` and `Sync`. Operations on `Var`s compute
/// their value at once (define-by-run, like PyTorch) and, in grad mode, record the
/// operation so that [`Var::backward`] can differentiate it.
///
/// ```
/// use ember_autograd::Var;
/// use ember_tensor::Tensor;
/// let x = Var::param(Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3])?);
/// let y = (&x * &x)?.sum_all(); // y = sum(x^2)
/// y.backward()?;
/// assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![2.0, 4.0, 6.0]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub struct Var {
    pub(crate) node: NodeHandle,
}

/// A `Var`'s reference to its node. `Var`'s `Drop` takes the `Arc` out, so that the last
/// handle to a node hands the node's allocation to the node cache (see `node_cache`)
/// instead of the system allocator: results made outside grad mode, and the gradients
/// backward passes along, are leaves that no teardown loop reaches. Everything else sees a
/// `NodeRef` (it dereferences to one, and is deliberately not `Clone`, so that
/// `var.node.clone()` clones the `Arc`).
pub(crate) struct NodeHandle(ManuallyDrop<NodeRef>);

impl NodeHandle {
    #[inline]
    pub(crate) fn new(node: NodeRef) -> NodeHandle {
        NodeHandle(ManuallyDrop::new(node))
    }
}

impl Deref for NodeHandle {
    type Target = NodeRef;
    #[inline]
    fn deref(&self) -> &NodeRef {
        &self.0
    }
}

// `Var` is documented as `Send + Sync` and graphs are shared between threads: a field that
// breaks it must fail the build here, not in a user's code.
const _: fn() = || {
    fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<Var>();
};

impl Clone for Var {
    fn clone(&self) -> Self {
        Var { node: NodeHandle::new(self.node.clone()) }
    }
}

impl Drop for Var {
    /// The last handle to a value no recorded backward reads releases it (PyTorch never
    /// keeps such a value); see `release_unread` in `node.rs`.
    #[inline]
    fn drop(&mut self) {
        if self.node.has(UNREAD) {
            release_unread(&self.node);
        }
        // SAFETY: the field is taken once, here, and not used afterwards.
        let node = unsafe { ManuallyDrop::take(&mut self.node.0) };
        node_cache::release(node);
    }
}

impl Var {
    /// A handle to a node whose value is present (the caller guarantees it).
    pub(crate) fn from_node(node: NodeRef) -> Var {
        Var { node: NodeHandle::new(node) }
    }

    /// A handle to a node, recomputing its value first if it was freed. The caller's
    /// `NodeRef` counts as a handle while the value is checked under the lock, so a
    /// concurrent backward cannot free it between this check and the caller's reads.
    pub(crate) fn from_node_ensured(node: NodeRef) -> Result<Var> {
        if node.state().value.is_none() {
            reactive::restore(&node)?;
        }
        Ok(Var::from_node(node))
    }

    /// A leaf node holding `value` with `flags` (a normal tensor even in inference mode).
    pub(crate) fn leaf_with(value: Tensor, flags: u32) -> Var {
        new_node(crate::node::next_seq(), Leaf, SmallVec::new(), IS_LEAF | flags, value, SmallVec::new())
    }

    /// A leaf that does not require grad: an input or a constant. Made in
    /// [`inference_mode`](crate::inference_mode()), it is an inference tensor.
    pub fn new(value: Tensor) -> Var {
        if in_inference_mode() {
            return inference_leaf(value);
        }
        Var::leaf_with(value, 0)
    }

    /// A leaf that requires grad: a trainable parameter. Only float values can require
    /// grad (as in PyTorch); an integer value gives a leaf without grad. Made in
    /// [`inference_mode`](crate::inference_mode()), it is an inference tensor, which never
    /// requires grad in ember (see the [inference mode docs](mod@crate::inference_mode)).
    pub fn param(value: Tensor) -> Var {
        if in_inference_mode() {
            return inference_leaf(value);
        }
        let flags = if value.dtype().is_float() { REQUIRES_GRAD } else { 0 };
        Var::leaf_with(value, flags)
    }

    /// Whether this is an inference tensor: made inside
    /// [`inference_mode`](crate::inference_mode()) (or a view of one). See the
    /// [inference mode docs](mod@crate::inference_mode) for what it may not do.
    pub fn is_inference(&self) -> bool {
        self.node.has(INFERENCE_FLAG)
    }

    /// The value as last computed. Reading it never recomputes anything; after leaves were
    /// changed with [`Var::set_value`], call [`Var::forward`] for the fresh value.
    pub fn value(&self) -> Tensor {
        match &self.node.state().value {
            Some(v) => v.clone(),
            // A value is freed (by backward, or saved-tensor hooks) only under the node's
            // lock after finding that no handle exists, and handles to a freed node are
            // given out only after restoring it (`from_node_ensured`): every handle sees a
            // value.
            None => unreachable!("ember internal error: a Var handle points to a node without a value"),
        }
    }

    /// The value, recomputing whatever is stale first: nodes downstream of a leaf replaced
    /// with [`Var::set_value`] or written in place since they were computed. Nodes whose
    /// inputs are unchanged are not touched, and when nothing has changed since the last
    /// request the answer is immediate.
    pub fn forward(&self) -> Result<Tensor> {
        reactive::refresh(&self.node, Mode::Full)
    }

    /// The shape of the value.
    pub fn shape(&self) -> Shape {
        match &self.node.state().value {
            Some(v) => v.shape().clone(),
            None => Shape::scalar(),
        }
    }

    /// The shape and dtype together (one lock instead of two).
    pub(crate) fn shape_and_dtype(&self) -> (Shape, DType) {
        match &self.node.state().value {
            Some(v) => (v.shape().clone(), v.dtype()),
            None => (Shape::scalar(), DType::F32),
        }
    }

    /// The dtype of the value.
    pub fn dtype(&self) -> DType {
        self.node.state().value.as_ref().map_or(DType::F32, |v| v.dtype())
    }

    /// The device of the value.
    pub fn device(&self) -> Device {
        self.node.state().value.as_ref().map_or(Device::Cpu, |v| v.device())
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape().rank()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape().numel()
    }

    /// The single element as `f64` (PyTorch's `item()`).
    pub fn item(&self) -> Result<f64> {
        self.value().item()
    }

    /// Whether gradients flow to this node: a parameter, or an operation with such an input.
    pub fn requires_grad(&self) -> bool {
        self.node.requires_grad()
    }

    /// Whether this is a leaf, as PyTorch defines it: a `Var` created directly rather than by
    /// a recorded operation, or any `Var` that does not require grad (backward never goes
    /// past it). A result computed from constants is therefore a leaf, even though it keeps
    /// its inputs for re-execution ([`Var::forward`], static mode) and [`Var::op_name`]
    /// still names its operation.
    pub fn is_leaf(&self) -> bool {
        self.node.is_leaf() || !self.node.requires_grad()
    }

    /// The accumulated gradient of a leaf (or of a node that [`Var::retain_grad`]s, or of
    /// any node right after a backward with `retain_graph`).
    pub fn grad(&self) -> Option<Tensor> {
        self.node.grad_slot().as_ref().map(|g| g.value())
    }

    /// The gradient as a `Var`; after a backward with `create_graph` it carries the graph of
    /// the gradient computation.
    pub fn grad_var(&self) -> Option<Var> {
        self.node.grad_slot().clone()
    }

    /// Clears the gradient (sets it to none, like PyTorch's default `set_to_none=True`).
    pub fn zero_grad(&self) {
        *self.node.grad_slot() = None;
    }

    /// Replaces the gradient with a `Var` (a handle the caller keeps, so that setting the
    /// same gradient again allocates nothing); the same checks as [`Var::set_grad`].
    pub fn set_grad_var(&self, grad: Option<Var>) -> Result<()> {
        if let Some(g) = &grad {
            self.check_grad("set_grad_var", &g.value())?;
        }
        *self.node.grad_slot() = grad;
        Ok(())
    }

    /// An error unless `g` fits as this value's gradient (same shape and device).
    pub(crate) fn check_grad(&self, op: &'static str, g: &Tensor) -> Result<()> {
        if g.shape() != self.shape().dims() {
            return Err(Error::shape(
                op,
                format!("gradient of shape {:?} for a value of shape {:?}", g.shape(), self.shape()),
            ));
        }
        if g.device() != self.device() {
            return Err(Error::Device {
                device: g.device().to_string(),
                msg: format!("{op}: the gradient is on {} but the value is on {}", g.device(), self.device()),
            });
        }
        Ok(())
    }

    /// Replaces the gradient (used by optimizers' tests and gradient manipulation).
    pub fn set_grad(&self, grad: Option<Tensor>) -> Result<()> {
        if let Some(g) = &grad {
            self.check_grad("set_grad", g)?;
        }
        *self.node.grad_slot() = grad.map(Var::new);
        Ok(())
    }

    /// Sets whether a leaf requires grad. Non-leaves derive it from their inputs; asking
    /// them to stop is an error (use [`Var::detach`]).
    ///
    /// As in PyTorch, a `Var` that does not require grad is a leaf, including the result of
    /// an operation on constants: `requires_grad_(true)` makes it a parameter-like leaf that
    /// accumulates its own gradient (backward stops there, whatever its inputs do later).
    ///
    /// ```
    /// use ember_autograd::Var;
    /// use ember_tensor::Tensor;
    /// let x = Var::new(Tensor::from_vec(vec![1.0f32, 2.0], [2])?);
    /// let y = x.mul_scalar(2.0); // computed from a constant: a leaf
    /// assert!(y.is_leaf() && !y.requires_grad());
    /// y.requires_grad_(true)?;
    /// y.square().sum_all().backward()?;
    /// assert_eq!(y.grad().unwrap().to_vec::<f32>()?, vec![4.0, 8.0]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn requires_grad_(&self, on: bool) -> Result<&Var> {
        if !self.is_leaf() {
            if on == self.requires_grad() {
                return Ok(self);
            }
            return Err(Error::autograd(format!(
                "requires_grad_: only leaves can change requires_grad, and this Var was computed by {} from inputs \
                 that require grad; use detach() to cut it from the graph",
                self.op_name()
            )));
        }
        if on && !self.dtype().is_float() {
            return Err(Error::autograd(format!(
                "requires_grad_: only float values can require grad, this one is {}",
                self.dtype()
            )));
        }
        if on && self.is_inference() {
            return Err(Error::autograd(
                "requires_grad_: Setting requires_grad=True on an inference tensor is not allowed; make a copy \
                 (Var::copy) outside inference mode to get a normal tensor",
            ));
        }
        if self.node.has(REQUIRES_GRAD) != on {
            bump_structure_epoch();
        }
        if on && !self.node.is_leaf() {
            // A result of constants becomes a leaf for backward, which accumulates into it
            // and looks no further; its inputs stay for re-execution.
            self.node.set(IS_LEAF, true);
        }
        self.node.set(REQUIRES_GRAD, on);
        if on {
            self.node.set(FROZEN, false);
        }
        Ok(self)
    }

    /// Freezes a parameter: it stops requiring grad and keeps no gradient, but gradients
    /// still flow *through* the operations that use it to earlier parameters. Optimizers
    /// skip frozen parameters.
    pub fn freeze(&self) -> Result<&Var> {
        self.requires_grad_(false)?;
        self.node.set(FROZEN, true);
        *self.node.grad_slot() = None;
        Ok(self)
    }

    /// Undoes [`Var::freeze`].
    pub fn unfreeze(&self) -> Result<&Var> {
        self.requires_grad_(true)
    }

    /// Whether the parameter is frozen.
    pub fn is_frozen(&self) -> bool {
        self.node.has(FROZEN)
    }

    /// Keeps this non-leaf's gradient after backward, accumulating like a leaf's (a no-op
    /// on a leaf, which keeps its gradient anyway).
    ///
    /// A `Var` that does not require grad never receives a gradient, so asking it to keep
    /// one is an error, as in PyTorch.
    pub fn retain_grad(&self) -> Result<&Var> {
        if !self.requires_grad() {
            return Err(Error::autograd(format!(
                "retain_grad: can't retain_grad on a Var that has requires_grad=false (made by {}, shape {:?})",
                self.op_name(),
                self.shape()
            )));
        }
        if !self.node.is_leaf() && !self.node.has(RETAINS_GRAD) {
            bump_structure_epoch();
            self.node.set(RETAINS_GRAD, true);
        }
        Ok(self)
    }

    /// Whether [`Var::retain_grad`] was called.
    pub fn retains_grad(&self) -> bool {
        self.node.has(RETAINS_GRAD)
    }

    /// Makes backward add into this leaf's existing gradient in place even when other
    /// tensors share its storage, as PyTorch's gradient accumulation always does. By default
    /// ember adds into a new tensor when the old gradient's storage is shared, so that a
    /// gradient someone still holds keeps its value; data-parallel training turns this on
    /// for parameters whose gradients are views into a communication bucket, so that they
    /// stay views. An error on a non-leaf.
    ///
    /// ```
    /// use ember_autograd::Var;
    /// use ember_tensor::{DType, Tensor};
    /// let w = Var::param(Tensor::ones([2], DType::F32)?);
    /// w.set_grad_in_place(true)?;
    /// let bucket = Tensor::zeros([4], DType::F32)?;
    /// w.set_grad(Some(bucket.narrow(0, 2, 2)?))?;
    /// w.mul_scalar(3.0).sum_all().backward()?;
    /// assert_eq!(bucket.to_vec::<f32>()?, vec![0.0, 0.0, 3.0, 3.0]);
    /// assert!(w.grad().unwrap().shares_storage(&bucket));
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn set_grad_in_place(&self, on: bool) -> Result<&Var> {
        if !self.is_leaf() {
            return Err(Error::autograd(format!(
                "set_grad_in_place: only a leaf accumulates a gradient, and this Var was computed by {}",
                self.op_name()
            )));
        }
        self.node.set(GRAD_IN_PLACE, on);
        Ok(self)
    }

    /// Whether [`Var::set_grad_in_place`] is on.
    pub fn grad_in_place(&self) -> bool {
        self.node.has(GRAD_IN_PLACE)
    }

    /// A new leaf sharing this value's storage, cut from the graph (PyTorch's `detach()`).
    pub fn detach(&self) -> Var {
        // It shares the storage: a detached inference tensor is one too.
        let inference = if self.is_inference() { INFERENCE_FLAG } else { 0 };
        let v = Var::leaf_with(self.value(), DETACHED | inference);
        if let Some(name) = self.name() {
            v.set_name(format!("{name}.detach"));
        }
        v
    }

    /// Whether this leaf was made by [`Var::detach`].
    pub fn is_detached(&self) -> bool {
        self.node.has(DETACHED)
    }

    /// The node's name, if set.
    pub fn name(&self) -> Option<String> {
        self.node.name()
    }

    /// Names the node (shown in graph exports and error messages).
    pub fn set_name(&self, name: impl Into<String>) -> &Var {
        self.node.extras().get_or_insert_with(Default::default).name = Some(name.into());
        self
    }

    /// Replaces a leaf's (or a gradient router's) value, bumping its value version so that
    /// [`Var::forward`] on dependent nodes recomputes them.
    ///
    /// An inference tensor's value may only be replaced inside
    /// [`inference_mode`](crate::inference_mode()), and then no version moves (no graph
    /// depends on it).
    pub fn set_value(&self, value: Tensor) -> Result<()> {
        if self.is_inference() {
            return self.set_inference_value(value);
        }
        self.set_value_quietly(value)?;
        reactive::mark_dependents_dirty(&self.node);
        Ok(())
    }

    /// `set_value` without marking the dependents dirty, for callers that bring them up to
    /// date themselves (a traced model's plan).
    pub(crate) fn set_value_quietly(&self, value: Tensor) -> Result<()> {
        if !self.node.inputs.is_empty() {
            return Err(Error::autograd("set_value: only a leaf's value can be replaced"));
        }
        value.storage().watch();
        {
            let mut st = self.node.state();
            st.value_version += 1;
            st.storage_version = value.version();
            st.value = Some(value);
        }
        reactive::bump_value_epoch();
        Ok(())
    }

    /// `set_value` on an inference tensor.
    #[cold]
    fn set_inference_value(&self, value: Tensor) -> Result<()> {
        if !in_inference_mode() {
            return Err(Error::autograd(
                "set_value: Inplace update to inference tensor outside inference_mode is not allowed; make a copy \
                 (Var::copy) outside inference mode to get a normal tensor before updating it",
            ));
        }
        if !self.node.inputs.is_empty() {
            return Err(Error::autograd("set_value: only a leaf's value can be replaced"));
        }
        if Arc::strong_count(value.storage()) == 1 {
            value.storage().untrack();
        }
        let mut st = self.node.state();
        st.storage_version = value.version();
        st.value = Some(value);
        Ok(())
    }

    /// The sequence number: the creation order of nodes, which backward runs in reverse.
    pub fn sequence_nr(&self) -> u64 {
        self.node.seq
    }

    /// The name of the operation that produced this node (`"leaf"` for leaves).
    pub fn op_name(&self) -> String {
        self.node.op.name().to_string()
    }

    /// How many times this node's value was recomputed after it was first computed.
    pub fn recompute_count(&self) -> u64 {
        self.node.state().recomputes
    }

    /// The value version: bumped by `set_value` on leaves and by recomputation from
    /// changed inputs.
    pub fn value_version(&self) -> u64 {
        self.node.state().value_version
    }

    /// The inputs of the operation that produced this node.
    pub fn inputs(&self) -> Result<Vec<Var>> {
        self.node.inputs.iter().map(|n| Var::from_node_ensured(n.clone())).collect()
    }

    /// Whether two handles point to the same node.
    pub fn same_node(&self, other: &Var) -> bool {
        Arc::ptr_eq(&self.node, &other.node)
    }

    /// A stable identifier of the node while it lives.
    pub fn id(&self) -> usize {
        Arc::as_ptr(&self.node) as *const u8 as usize
    }
}

impl std::fmt::Debug for Var {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Var(op={}, requires_grad={}", self.node.op.name(), self.requires_grad())?;
        if let Some(n) = self.name() {
            write!(f, ", name={n:?}")?;
        }
        write!(f, ")\n{:?}", self.value())
    }
}

impl std::fmt::Display for Var {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.value())
    }
}

impl From<Tensor> for Var {
    fn from(t: Tensor) -> Var {
        Var::new(t)
    }
}

/// Anything usable where an operation takes a non-differentiable argument (an index, a
/// mask): a `Var`, or a `Tensor`, which becomes a constant leaf.
pub trait IntoVar {
    /// The argument as a `Var`.
    fn into_var(self) -> Var;
}

impl IntoVar for Var {
    fn into_var(self) -> Var {
        self
    }
}

impl IntoVar for &Var {
    fn into_var(self) -> Var {
        self.clone()
    }
}

impl IntoVar for Tensor {
    fn into_var(self) -> Var {
        Var::new(self)
    }
}

impl IntoVar for &Tensor {
    fn into_var(self) -> Var {
        Var::new(self.clone())
    }
}
