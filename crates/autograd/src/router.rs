//! The gradient router: the input node of a traced (static) graph (see docs/design.md,
//! 'Static mode').
//!
//! A router holds a value set from outside and, optionally, a *route*: the `Var` that the
//! value came from. Backward sends the gradient arriving at the router on to its route, so
//! a generator upstream of a traced discriminator still trains; with no route (the input
//! was a plain tensor or a detached `Var`) the gradient stops at the router.

use crate::backward_ctx::BackwardCtx;
use crate::node::{Grads, Node, NodeState, Op, REQUIRES_GRAD, Saves};
use crate::reactive;
use crate::var::Var;
use ember_tensor::{Error, Result, Tensor};
use smallvec::SmallVec;
use parking_lot::Mutex;

pub(crate) struct Router {
    target: Mutex<Option<Var>>,
}

impl Op for Router {
    fn name(&self) -> &str {
        "router"
    }
    fn forward(&self, _: &[&Tensor]) -> Result<Tensor> {
        Err(Error::autograd("a gradient router's value is set from outside, not computed"))
    }
    fn backward(&self, _: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        Ok(smallvec::smallvec![Some(g.clone())])
    }
    fn saves(&self) -> Saves {
        Saves::NONE
    }
    fn recomputable(&self) -> bool {
        false
    }
    fn route(&self) -> Option<Var> {
        self.target.lock().clone()
    }
    fn is_router(&self) -> bool {
        true
    }
    fn set_route(&self, target: Option<Var>) {
        let mut current = self.target.lock();
        let same = match (&*current, &target) {
            (Some(a), Some(b)) => a.same_node(b),
            (None, None) => true,
            _ => false,
        };
        if !same {
            // What backward reaches through the router changed.
            crate::engine::bump_structure_epoch();
        }
        *current = target;
    }
}

impl Var {
    /// A gradient router holding `value`, with no route yet. It always requires grad, so
    /// that a graph traced from it carries gradients whatever its input turns out to be.
    pub fn router(value: Tensor) -> Var {
        value.storage().watch();
        let state = NodeState::new(value, SmallVec::new(), reactive::epochs());
        Node::new_var(Router { target: Mutex::new(None) }, SmallVec::new(), REQUIRES_GRAD, state)
    }

    /// Whether this node is a gradient router.
    pub fn is_router(&self) -> bool {
        self.node.op.is_router()
    }

    /// Sets where a router sends its gradient (`None`: nowhere). A no-op on other nodes.
    pub fn set_route(&self, target: Option<Var>) {
        self.node.op.set_route(target);
    }

    /// A router's current route.
    pub fn route(&self) -> Option<Var> {
        self.node.op.route()
    }
}
