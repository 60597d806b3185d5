//! Gradient hooks on nodes.
//!
//! A *grad hook* ([`Var::register_hook`]) sees the gradient flowing into a node during
//! backward and may replace it; hooks run in registration order, each seeing the previous
//! one's result. A *post-accumulate hook* ([`Var::register_post_accumulate_grad_hook`]) runs
//! on a leaf after its `.grad` was updated — the point where data-parallel training starts
//! reducing a gradient. Both return a [`HookHandle`] that removes the hook.

use crate::extension::{Extension, Feature, ids};
use crate::node::{NodeRef, bump_structure_epoch};
use crate::var::Var;
use ember_tensor::{Error, Result};
use smallvec::SmallVec;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// A hook on the gradient of a node: returns a replacement gradient, or `None` to keep it.
pub type GradHook = Arc<dyn Fn(&Var) -> Result<Option<Var>> + Send + Sync>;
/// A hook run after a leaf's gradient was accumulated; it receives the leaf.
pub type PostAccumulateHook = Arc<dyn Fn(&Var) -> Result<()> + Send + Sync>;

static NEXT_HOOK: AtomicU64 = AtomicU64::new(1);

/// The hooks of one node, kept in its extension slot.
#[derive(Default)]
struct NodeHooks {
    grad: Vec<(u64, GradHook)>,
    post_accumulate: Vec<(u64, PostAccumulateHook)>,
}

/// Grad hooks as an engine extension: flagged on the nodes that have hooks.
struct GradHooks;

static FEATURE: Feature = Feature::new(ids::GRAD_HOOKS, &GradHooks);

impl Extension for GradHooks {
    /// A node with hooks receives its gradient even if nothing beyond it needs one.
    fn wants_grad(&self, _: &NodeRef) -> bool {
        true
    }
    fn on_grad(&self, node: &NodeRef, grad: Var) -> Result<Var> {
        run_grad_hooks(node, grad)
    }
    fn after_accumulate(&self, node: &NodeRef) -> Result<()> {
        run_post_accumulate_hooks(node)
    }
}

/// Adds a hook to `node`'s slot and flags the node.
fn add(node: &NodeRef, f: impl FnOnce(&mut NodeHooks, u64)) -> u64 {
    let id = NEXT_HOOK.fetch_add(1, Ordering::Relaxed);
    f(node.extras().get_or_insert_with(Default::default).slot_or_default::<NodeHooks>(), id);
    FEATURE.flag(node, true);
    bump_structure_epoch();
    id
}

/// Removes a hook when [`HookHandle::remove`] is called (dropping the handle keeps the hook,
/// as in PyTorch).
pub struct HookHandle {
    node: Weak<crate::node::Node<dyn crate::op::Op>>,
    id: u64,
}

impl std::fmt::Debug for HookHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookHandle").field("id", &self.id).field("node_alive", &(self.node.strong_count() > 0)).finish()
    }
}

impl HookHandle {
    /// Removes the hook; a no-op if the node is gone or the hook was already removed.
    pub fn remove(self) {
        if let Some(node) = self.node.upgrade() {
            let mut ex = node.extras();
            if let Some(h) = ex.as_mut().and_then(|e| e.slot_mut::<NodeHooks>()) {
                h.grad.retain(|(id, _)| *id != self.id);
                h.post_accumulate.retain(|(id, _)| *id != self.id);
                let any = !h.grad.is_empty() || !h.post_accumulate.is_empty();
                FEATURE.flag(&node, any);
                bump_structure_epoch();
            }
        }
    }
}

impl Var {
    /// Registers a hook that sees (and may replace) the gradient of this node each time a
    /// backward computes it.
    ///
    /// Like PyTorch, only a `Var` that requires grad can have hooks: no gradient ever reaches
    /// one that does not, so its hook would silently never run. That is an error.
    ///
    /// ```
    /// use ember_autograd::Var;
    /// use ember_tensor::Tensor;
    /// let x = Var::param(Tensor::from_vec(vec![1.0f32, 2.0], [2])?);
    /// let h = x.register_hook(|g| Ok(Some(g.mul_scalar(10.0))))?;
    /// x.mul_scalar(3.0).sum_all().backward()?;
    /// assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![30.0, 30.0]);
    /// h.remove();
    /// let c = Var::new(Tensor::ones([2], ember_tensor::DType::F32)?);
    /// assert!(c.register_hook(|_| Ok(None)).is_err()); // a constant gets no gradient
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn register_hook(
        &self,
        hook: impl Fn(&Var) -> Result<Option<Var>> + Send + Sync + 'static,
    ) -> Result<HookHandle> {
        self.check_hookable("register_hook")?;
        let id = add(&self.node, |h, id| h.grad.push((id, Arc::new(hook))));
        Ok(HookHandle { node: Arc::downgrade(&self.node), id })
    }

    /// Registers a hook that runs on this leaf after backward accumulated into its `.grad`
    /// (PyTorch's `register_post_accumulate_grad_hook`): the point where a data-parallel
    /// trainer starts reducing a gradient, or an optimizer fused into backward updates the
    /// parameter and frees its gradient.
    ///
    /// Only leaves that require grad accumulate, so registering on anything else is an
    /// error (a non-leaf never has a `.grad` to accumulate into; use
    /// [`Var::register_hook`] there).
    ///
    /// ```
    /// use ember_autograd::Var;
    /// use ember_tensor::Tensor;
    /// let w = Var::param(Tensor::from_vec(vec![1.0f64, -1.0], [2])?);
    /// // SGD with learning rate 0.5, applied as soon as w's gradient is complete.
    /// w.register_post_accumulate_grad_hook(|leaf| {
    ///     if let Some(g) = leaf.grad() {
    ///         leaf.value().sub_(&g.mul_scalar(0.5))?;
    ///     }
    ///     leaf.zero_grad();
    ///     Ok(())
    /// })?;
    /// w.square().sum_all().backward()?; // d/dw sum(w^2) = 2w
    /// assert_eq!(w.value().to_vec::<f64>()?, vec![0.0, 0.0]);
    /// assert!(w.grad().is_none());
    /// assert!(w.mul_scalar(2.0).register_post_accumulate_grad_hook(|_| Ok(())).is_err()); // not a leaf
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn register_post_accumulate_grad_hook(
        &self,
        hook: impl Fn(&Var) -> Result<()> + Send + Sync + 'static,
    ) -> Result<HookHandle> {
        self.check_hookable("register_post_accumulate_grad_hook")?;
        if !self.node.is_leaf() {
            return Err(Error::autograd(format!(
                "register_post_accumulate_grad_hook: post accumulate grad hooks cannot be registered on non-leaf \
                 Vars (this one was made by {}); use register_hook",
                self.op_name()
            )));
        }
        let id = add(&self.node, |h, id| h.post_accumulate.push((id, Arc::new(hook))));
        Ok(HookHandle { node: Arc::downgrade(&self.node), id })
    }

    fn check_hookable(&self, op: &str) -> Result<()> {
        if self.requires_grad() {
            return Ok(());
        }
        Err(Error::autograd(format!(
            "{op}: cannot register a hook on a Var that doesn't require grad (made by {}, shape {:?})",
            self.op_name(),
            self.shape()
        )))
    }
}

/// Runs the grad hooks of `node` on `grad`, in registration order. The hooks are cloned
/// out of the node first, so a hook may register or remove hooks.
fn run_grad_hooks(node: &NodeRef, mut grad: Var) -> Result<Var> {
    let hooks: SmallVec<[GradHook; 2]> = node
        .extras()
        .as_ref()
        .and_then(|e| e.slot::<NodeHooks>())
        .map(|h| h.grad.iter().map(|(_, f)| f.clone()).collect())
        .unwrap_or_default();
    for f in hooks {
        if let Some(g) = f(&grad)? {
            grad = g;
        }
    }
    Ok(grad)
}

/// Runs the post-accumulate hooks of a leaf.
fn run_post_accumulate_hooks(node: &NodeRef) -> Result<()> {
    // On the stack: data-parallel training runs this for every parameter of every step.
    let hooks: SmallVec<[PostAccumulateHook; 2]> = node
        .extras()
        .as_ref()
        .and_then(|e| e.slot::<NodeHooks>())
        .map(|h| h.post_accumulate.iter().map(|(_, f)| f.clone()).collect())
        .unwrap_or_default();
    if hooks.is_empty() {
        return Ok(());
    }
    let leaf = Var::from_node(node.clone());
    for f in hooks {
        f(&leaf)?;
    }
    Ok(())
}
