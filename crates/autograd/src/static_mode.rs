//! Static mode: graphs built once and re-run with new values (see docs/design.md, 'Static mode').
//!
//! In eager mode every call builds new nodes. A [`Traced`] model instead builds its graph
//! once per input shape, from a [gradient router](Var::router) as input, and afterwards
//! only *sets the router's value* and asks the output for its value: the reactive machinery
//! recomputes exactly the nodes downstream of what changed (the new input, and parameters an
//! optimizer wrote in place). Node structures are reused; nothing is rebuilt.
//!
//! `docs/static_mode.md` in the repository walks through eager and static mode for a
//! PyTorch user, with drawings of traced graphs, a GAN trained this way, and when not to
//! trace: [docs/static_mode.md on GitHub](https://github.com/ember-rs/ember/blob/main/docs/static_mode.md).
//!
//! What is passed in decides where gradients go ([`ForwardInput`]):
//!
//! | input | value used | gradient |
//! |---|---|---|
//! | `Tensor` | the tensor | stops at the router |
//! | `&Var` that requires grad | its value | routed back into that `Var`'s graph |
//! | `var.detach()` | its value | stops at the router |
//!
//! ```
//! use ember_autograd::{Traced, Var};
//! use ember_tensor::{DType, Tensor};
//! let w = Var::param(Tensor::from_vec(vec![2.0f32], [1])?);
//! let w2 = w.clone();
//! let model = Traced::new(move |x: &Var| Ok(x.mul(&w2)?.sum_all()));
//! let y1 = model.forward(Tensor::from_vec(vec![1.0f32, 2.0], [2])?)?;
//! assert_eq!(y1.item()?, 6.0);
//! let y2 = model.forward(Tensor::from_vec(vec![3.0f32, 4.0], [2])?)?;
//! assert!(y1.same_node(&y2)); // the same graph, re-run
//! assert_eq!(y2.item()?, 14.0);
//! y2.backward()?;
//! assert_eq!(w.grad().unwrap().to_vec::<f32>()?, vec![7.0]);
//! # Ok::<(), ember_tensor::Error>(())
//! ```

use crate::extension::{Extension, Feature, ids};
use crate::node::{Node, NodeRef};
use crate::op::Op;
use crate::reactive::Plan;
use crate::var::Var;
use ember_tensor::{DType, Result, Tensor};
use parking_lot::{Mutex, MutexGuard};
use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Weak};

/// What a traced model (or a cached criterion) accepts as input: a value, and optionally a
/// `Var` to route gradients back to (see docs/design.md, 'Static mode').
pub trait ForwardInput {
    /// The value to compute with.
    fn forward_value(&self) -> Tensor;
    /// Where the gradient of this input should go, if anywhere.
    fn forward_route(&self) -> Option<Var>;
}

impl ForwardInput for Tensor {
    fn forward_value(&self) -> Tensor {
        self.clone()
    }
    fn forward_route(&self) -> Option<Var> {
        None
    }
}

impl ForwardInput for &Tensor {
    fn forward_value(&self) -> Tensor {
        (*self).clone()
    }
    fn forward_route(&self) -> Option<Var> {
        None
    }
}

impl ForwardInput for Var {
    fn forward_value(&self) -> Tensor {
        self.value()
    }
    /// A `Var` that requires grad is routed to; a detached one (or a constant) is not.
    fn forward_route(&self) -> Option<Var> {
        self.requires_grad().then(|| self.clone())
    }
}

impl ForwardInput for &Var {
    fn forward_value(&self) -> Tensor {
        self.value()
    }
    fn forward_route(&self) -> Option<Var> {
        self.requires_grad().then(|| (*self).clone())
    }
}

/// Kept backward plans as an engine extension, flagged on the root of a cached loss:
/// backward from it runs through the same graph every time, so it keeps its prepared plan
/// (the engine checks that nothing structural changed since).
struct KeptPlans;

static FEATURE: Feature = Feature::new(ids::BACKWARD_PLAN, &KeptPlans);

/// The backward plan kept on a root, in its extension slot.
#[derive(Default)]
struct KeptPlan(Option<Arc<dyn Any + Send + Sync>>);

impl Extension for KeptPlans {
    fn cached_plan(&self, root: &NodeRef) -> Option<Arc<dyn Any + Send + Sync>> {
        root.extras().as_ref()?.slot::<KeptPlan>()?.0.clone()
    }
    fn keep_plan(&self, root: &NodeRef, plan: &Arc<dyn Any + Send + Sync>) {
        root.extras().get_or_insert_with(Default::default).slot_or_default::<KeptPlan>().0 = Some(plan.clone());
    }
}

type Build = Box<dyn Fn(&Var) -> Result<Var> + Send + Sync>;
type LossFn = Box<dyn Fn(&Var, &Var) -> Result<Var> + Send + Sync>;
/// Traced graphs are cached per input shape and dtype.
type GraphKey = (Vec<usize>, DType);

/// One traced graph: its input router, its output, and the order to recompute it in.
struct TracedGraph {
    router: Var,
    output: Var,
    plan: Plan,
    /// Held while a call sets the router and re-runs the plan, so that two threads calling
    /// with the same shape do not interleave their inputs within one re-run.
    running: Mutex<()>,
}

/// A model whose graph is built once per input shape and dtype, then re-run by setting
/// values (see the module docs).
///
/// Randomness drawn while building (a dropout mask, say) is part of the traced graph and
/// stays fixed; trace models for evaluation, or without random layers.
///
/// The graph is always built with grad mode on, even inside [`no_grad`](crate::no_grad):
/// under no-grad an operation records no inputs, so a graph built there could not be re-run.
/// A call under no-grad therefore still returns the traced output `Var`; re-running it
/// records nothing new.
///
/// Calls with the same input shape return the same output node. A `Traced` may be shared
/// between threads, but two threads calling it with the same shape at once overwrite each
/// other's result: give each thread its own `Traced`.
pub struct Traced {
    build: Build,
    graphs: Mutex<HashMap<GraphKey, Arc<TracedGraph>>>,
}

impl Traced {
    /// A traced model computing `build(input)`.
    pub fn new(build: impl Fn(&Var) -> Result<Var> + Send + Sync + 'static) -> Self {
        Traced { build: Box::new(build), graphs: Mutex::new(HashMap::new()) }
    }

    fn graphs(&self) -> MutexGuard<'_, HashMap<GraphKey, Arc<TracedGraph>>> {
        self.graphs.lock()
    }

    /// The output for `input`: the cached graph for its shape re-run with the new value, or
    /// a graph built now. The returned `Var` is the same node on every call with the same
    /// shape.
    ///
    /// A re-run replaces the router's value and recomputes the graph in a precomputed order,
    /// each node once, checking its inputs' versions: nodes that depend only on unchanged
    /// parameters are skipped, parameters an optimizer updated in place are picked up.
    pub fn forward(&self, input: impl ForwardInput) -> Result<Var> {
        let value = input.forward_value();
        let route = input.forward_route();
        let key = (value.shape().to_vec(), value.dtype());
        let cached = self.graphs().get(&key).cloned();
        if let Some(g) = cached {
            let _running = g.running.lock();
            g.router.set_route(route);
            g.router.set_value_quietly(value)?;
            g.plan.run()?;
            return Ok(g.output.clone());
        }
        // Built outside the lock, so that a model may use itself while building.
        let router = Var::router(value);
        router.set_route(route);
        let output = crate::grad_mode::enable_grad(|| (self.build)(&router))?;
        if !depends_on(&output, &router) {
            return Err(ember_tensor::Error::autograd(format!(
                "Traced: the output (shape {:?}) does not depend on the input Var; a traced model must compute \
                 with the Var it is given, not with its value (re-runs would return the first call's output)",
                output.shape()
            )));
        }
        let plan = Plan::of(&output.node, None);
        let graph = TracedGraph { router, output: output.clone(), plan, running: Mutex::new(()) };
        self.graphs().insert(key, Arc::new(graph));
        Ok(output)
    }

    /// The number of graphs built so far (one per distinct input shape and dtype).
    pub fn num_graphs(&self) -> usize {
        self.graphs().len()
    }

    /// The router (input node) of the graph for `shape` and `dtype`, if built.
    pub fn input_node(&self, shape: &[usize], dtype: DType) -> Option<Var> {
        self.graphs().get(&(shape.to_vec(), dtype)).map(|g| g.router.clone())
    }
}

/// Whether `input` is among the nodes `output` was computed from (run once per traced graph).
fn depends_on(output: &Var, input: &Var) -> bool {
    let target = Arc::as_ptr(&input.node) as *const u8;
    let mut seen: std::collections::HashSet<*const u8> = Default::default();
    let mut stack = vec![output.node.clone()];
    while let Some(n) = stack.pop() {
        if Arc::as_ptr(&n) as *const u8 == target {
            return true;
        }
        if seen.insert(Arc::as_ptr(&n) as *const u8) {
            stack.extend(n.inputs.iter().cloned());
        }
    }
    false
}

struct LossEntry {
    output: Weak<Node<dyn Op>>,
    /// How many references to the output the loss graph itself holds.
    own_refs: usize,
    target: Var,
    /// The target's shape and dtype: the graph was built, and its checks run, for these.
    target_key: GraphKey,
    loss: Var,
    plan: Plan,
}

impl LossEntry {
    /// Whether anything besides this entry's own loss graph still holds the output.
    fn output_in_use(&self) -> bool {
        let plan = KeptPlans.cached_plan(&self.loss.node);
        let held_by_backward_plan =
            plan.is_some_and(|p| crate::engine::plan_holds(&*p, self.output.as_ptr() as *const u8));
        self.output.strong_count() > self.own_refs + held_by_backward_plan as usize
    }
}

/// A loss function whose subgraph is built once per output node and re-run with new targets
/// (a cached criterion; see docs/design.md, 'Static mode'): for the output of a [`Traced`]
/// model, every call after the first only sets the target and recomputes the loss part of the graph. A target of another
/// shape or dtype than before gets a subgraph of its own.
///
/// An entry is dropped once nothing but the loss graph holds its output, so calling it on
/// fresh eager outputs every step does not accumulate graphs. Like [`Traced`], the subgraph
/// is built with grad mode on even when the first call happens under no-grad.
pub struct CachedLoss {
    f: LossFn,
    entries: Mutex<Vec<LossEntry>>,
}

impl CachedLoss {
    /// A criterion computing `f(output, target)`.
    pub fn new(f: impl Fn(&Var, &Var) -> Result<Var> + Send + Sync + 'static) -> Self {
        CachedLoss { f: Box::new(f), entries: Mutex::new(Vec::new()) }
    }

    /// The loss of `output` against `target`. The output is taken as it is: bring it up to
    /// date first (a [`Traced`] model's `forward` does).
    pub fn forward(&self, output: &Var, target: impl ForwardInput) -> Result<Var> {
        let value = target.forward_value();
        let mut entries = self.entries.lock();
        entries.retain(LossEntry::output_in_use);
        let ptr = Arc::as_ptr(&output.node) as *const u8;
        let target_key = (value.shape().to_vec(), value.dtype());
        // A target of another shape or dtype gets a graph of its own, built by the loss
        // function with its checks, rather than broadcasting through one built for another.
        if let Some(e) = entries.iter().find(|e| e.output.as_ptr() as *const u8 == ptr && e.target_key == target_key) {
            e.target.set_value_quietly(value)?;
            e.plan.run()?;
            return Ok(e.loss.clone());
        }
        let before = Arc::strong_count(&output.node);
        let target = Var::new(value);
        // With grad mode on for the same reason as `Traced::forward`: under no-grad the loss
        // would be a bare value that a new target could not recompute.
        let loss = crate::grad_mode::enable_grad(|| (self.f)(output, &target))?;
        let own_refs = Arc::strong_count(&output.node) - before;
        let plan = Plan::of(&loss.node, Some(&output.node));
        // Backward from this loss will run through the same graph every time: let it keep
        // its prepared plan.
        FEATURE.flag(&loss.node, true);
        entries.push(LossEntry {
            output: Arc::downgrade(&output.node),
            own_refs,
            target,
            target_key,
            loss: loss.clone(),
            plan,
        });
        Ok(loss)
    }

    /// The number of loss subgraphs currently cached.
    pub fn cached(&self) -> usize {
        let mut entries = self.entries.lock();
        entries.retain(LossEntry::output_in_use);
        entries.len()
    }
}
