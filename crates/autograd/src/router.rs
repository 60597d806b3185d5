//! The gradient router: the input node of a traced (static) graph (see docs/design.md,
//! 'Static mode').
//!
//! A router holds a value set from outside and, optionally, a *route*: the `Var` that the
//! value came from. Backward sends the gradient arriving at the router on to its route, so
//! a generator upstream of a traced discriminator still trains; with no route (the input
//! was a plain tensor or a detached `Var`) the gradient stops at the router.

use crate::backward_ctx::BackwardCtx;
use crate::extension::{Extension, Feature, ids};
use crate::node::{NodeRef, REQUIRES_GRAD, bump_structure_epoch, new_node};
use crate::op::{Grads, Op, Saves};
use crate::var::Var;
use ember_tensor::{Error, Result, Tensor};
use parking_lot::Mutex;
use smallvec::SmallVec;
use std::any::Any;

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
}

impl Router {
    fn route(&self) -> Option<Var> {
        self.target.lock().clone()
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
            bump_structure_epoch();
        }
        *current = target;
    }
}

/// Routers as an engine extension, flagged on every router: backward sends a router's
/// gradient to its route of the moment.
struct Routing;

static FEATURE: Feature = Feature::new(ids::ROUTER, &Routing);

impl Extension for Routing {
    fn redirect(&self, node: &NodeRef) -> Option<Option<Var>> {
        route_of(node)
    }
}

/// The router of `node`, if it is one.
fn router_of(node: &NodeRef) -> Option<&Router> {
    (&node.op as &dyn Any).downcast_ref::<Router>()
}

/// `Some(route)` if `node` is a router (for graph views).
pub(crate) fn route_of(node: &NodeRef) -> Option<Option<Var>> {
    router_of(node).map(Router::route)
}

impl Var {
    /// A gradient router holding `value`, with no route yet. It always requires grad, so
    /// that a graph traced from it carries gradients whatever its input turns out to be.
    pub fn router(value: Tensor) -> Var {
        let var = new_node(
            crate::node::next_seq(),
            Router { target: Mutex::new(None) },
            SmallVec::new(),
            REQUIRES_GRAD,
            value,
            SmallVec::new(),
        );
        FEATURE.flag(&var.node, true);
        var
    }

    /// Whether this node is a gradient router.
    pub fn is_router(&self) -> bool {
        router_of(&self.node).is_some()
    }

    /// Sets where a router sends its gradient (`None`: nowhere). A no-op on other nodes.
    pub fn set_route(&self, target: Option<Var>) {
        if let Some(r) = router_of(&self.node) {
            r.set_route(target);
        }
    }

    /// A router's current route.
    pub fn route(&self) -> Option<Var> {
        router_of(&self.node).and_then(Router::route)
    }
}
