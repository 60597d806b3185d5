//! Gradient hooks on nodes.
//!
//! A *grad hook* ([`Var::register_hook`]) sees the gradient flowing into a node during
//! backward and may replace it; hooks run in registration order, each seeing the previous
//! one's result. A *post-accumulate hook* ([`Var::register_post_accumulate_grad_hook`]) runs
//! on a leaf after its `.grad` was updated — the point where data-parallel training starts
//! reducing a gradient. Both return a [`HookHandle`] that removes the hook.

use crate::node::{HAS_HOOKS, NodeRef};
use crate::var::Var;
use ember_tensor::Result;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// A hook on the gradient of a node: returns a replacement gradient, or `None` to keep it.
pub type GradHook = Arc<dyn Fn(&Var) -> Result<Option<Var>> + Send + Sync>;
/// A hook run after a leaf's gradient was accumulated; it receives the leaf.
pub type PostAccumulateHook = Arc<dyn Fn(&Var) -> Result<()> + Send + Sync>;

static NEXT_HOOK: AtomicU64 = AtomicU64::new(1);

/// Removes a hook when [`HookHandle::remove`] is called (dropping the handle keeps the hook,
/// as in PyTorch).
pub struct HookHandle {
    node: Weak<crate::node::Node<dyn crate::node::Op>>,
    id: u64,
}

impl HookHandle {
    /// Removes the hook; a no-op if the node is gone or the hook was already removed.
    pub fn remove(self) {
        if let Some(node) = self.node.upgrade() {
            let mut ex = node.extras();
            if let Some(e) = ex.as_mut() {
                e.hooks.retain(|(id, _)| *id != self.id);
                e.post_accumulate_hooks.retain(|(id, _)| *id != self.id);
                let any = !e.hooks.is_empty() || !e.post_accumulate_hooks.is_empty();
                node.set(HAS_HOOKS, any);
                crate::engine::bump_structure_epoch();
            }
        }
    }
}

impl Var {
    /// Registers a hook that sees (and may replace) the gradient of this node each time a
    /// backward computes it.
    ///
    /// ```
    /// use ember_autograd::Var;
    /// use ember_tensor::Tensor;
    /// let x = Var::param(Tensor::from_vec(vec![1.0f32, 2.0], [2])?);
    /// let h = x.register_hook(|g| Ok(Some(g.mul_scalar(10.0))));
    /// x.mul_scalar(3.0).sum_all().backward()?;
    /// assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![30.0, 30.0]);
    /// h.remove();
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn register_hook(&self, hook: impl Fn(&Var) -> Result<Option<Var>> + Send + Sync + 'static) -> HookHandle {
        let id = NEXT_HOOK.fetch_add(1, Ordering::Relaxed);
        self.node.extras().get_or_insert_with(Default::default).hooks.push((id, Arc::new(hook)));
        self.node.set(HAS_HOOKS, true);
        crate::engine::bump_structure_epoch();
        HookHandle { node: Arc::downgrade(&self.node), id }
    }

    /// Registers a hook that runs on this leaf after backward accumulated into its `.grad`.
    pub fn register_post_accumulate_grad_hook(
        &self,
        hook: impl Fn(&Var) -> Result<()> + Send + Sync + 'static,
    ) -> HookHandle {
        let id = NEXT_HOOK.fetch_add(1, Ordering::Relaxed);
        self.node.extras().get_or_insert_with(Default::default).post_accumulate_hooks.push((id, Arc::new(hook)));
        self.node.set(HAS_HOOKS, true);
        crate::engine::bump_structure_epoch();
        HookHandle { node: Arc::downgrade(&self.node), id }
    }
}

/// Runs the grad hooks of `node` on `grad`, in registration order. The hooks are cloned
/// out of the node first, so a hook may register or remove hooks.
pub(crate) fn run_grad_hooks(node: &NodeRef, mut grad: Var) -> Result<Var> {
    let hooks: Vec<GradHook> =
        node.extras().as_ref().map(|e| e.hooks.iter().map(|(_, f)| f.clone()).collect()).unwrap_or_default();
    for f in hooks {
        if let Some(g) = f(&grad)? {
            grad = g;
        }
    }
    Ok(grad)
}

/// Runs the post-accumulate hooks of a leaf.
pub(crate) fn run_post_accumulate_hooks(node: &NodeRef) -> Result<()> {
    let hooks: Vec<PostAccumulateHook> = node
        .extras()
        .as_ref()
        .map(|e| e.post_accumulate_hooks.iter().map(|(_, f)| f.clone()).collect())
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
