//! Gradient checkpointing: trade compute for memory by recomputing a segment in backward
//! instead of keeping its activations (PyTorch's `torch.utils.checkpoint`).
//!
//! [`checkpoint()`] runs a segment without recording it and keeps only its inputs and its
//! output. The parameters the segment reads are noticed as it runs (any `Var` requiring
//! grad that its operations receive besides the inputs) and become inputs of the
//! checkpoint's node, so gradients reach them through the engine like any other: they
//! accumulate into `.grad`, are returned by [`grad`], and run their hooks. When backward
//! reaches the node, it runs the segment again with grad mode on, from the saved input
//! values, and backpropagates through that fresh graph. The global random generator is
//! replayed to its state at the first run, so dropout masks come out the same. The fresh
//! graph is dropped once its gradients are out.
//!
//! Under `create_graph` (a gradient penalty, a Hessian-vector product), the recomputation
//! and the backward through it are recorded instead: the gradients the checkpoint hands on
//! are `Var`s connected to its inputs and parameters, so gradients of gradients flow
//! through the segment, to any order, as they would without the checkpoint (PyTorch's
//! non-reentrant checkpoint does the same). That graph is kept by the gradients that refer
//! to it, as any graph `create_graph` records, and by the checkpoint: a later backward
//! through the checkpoint (the loss of a gradient penalty) goes through it rather than
//! recomputing the segment again, and one without `retain_graph` lets it go. The memory
//! saved in forward is spent again for whatever differentiates the gradients.
//!
//! Rules: the segment must compute the same function of the same parameters each time it
//! runs; a `Var` computed outside the segment that requires grad must be passed as an input
//! (reading one captured by the closure is an error, as its gradient would otherwise flow
//! twice); writing an input or a parameter in place between forward and backward is an
//! error, as for any saved value.
//!
//! ```
//! use ember_autograd::{checkpoint, Var};
//! use ember_tensor::{Error, Tensor};
//! let w = Var::param(Tensor::from_vec(vec![0.5f64, -1.0, 2.0, 0.25], [2, 2])?);
//! let x = Var::new(Tensor::from_vec(vec![1.0f64, 2.0], [1, 2])?);
//! let w2 = w.clone();
//! let block = move |h: &Var| -> ember_tensor::Result<Var> { Ok(h.matmul(&w2)?.tanh().matmul(&w2)?.tanh()) };
//! let plain = block(&x)?.sum_all();
//! let saved = x.checkpoint(block)?.sum_all(); // nothing inside the block is kept
//! let g_plain = ember_autograd::grad(&[&plain], &[&w], &[], false, false)?.remove(0).ok_or_else(|| Error::autograd("no gradient"))?;
//! saved.backward()?;
//! assert_eq!(w.grad().map(|g| g.to_vec::<f64>()).transpose()?, Some(g_plain.value().to_vec::<f64>()?));
//!
//! // A gradient penalty through the checkpoint: the input's gradient is differentiated again.
//! let penalty_grad = |checkpointed: bool| -> ember_tensor::Result<Vec<f64>> {
//!     let x = Var::param(Tensor::from_vec(vec![1.0f64, 2.0], [1, 2])?);
//!     let w3 = w.clone();
//!     let block = move |h: &Var| -> ember_tensor::Result<Var> { Ok(h.matmul(&w3)?.tanh()) };
//!     let y = if checkpointed { x.checkpoint(block)? } else { block(&x)? };
//!     let gx = ember_autograd::grad(&[&y.sum_all()], &[&x], &[], false, true)?.remove(0).ok_or_else(|| Error::autograd("no gradient"))?;
//!     let dw = ember_autograd::grad(&[&gx.square().sum_all()], &[&w], &[], false, false)?.remove(0).ok_or_else(|| Error::autograd("no gradient"))?;
//!     dw.value().to_vec::<f64>()
//! };
//! assert_eq!(penalty_grad(true)?, penalty_grad(false)?);
//! # Ok::<(), ember_tensor::Error>(())
//! ```
//!
//! [`grad`]: crate::grad

use crate::backward::grad_with;
use crate::backward_ctx::BackwardCtx;
use crate::extension::{Applying, Extension, Feature, ids};
use crate::grad_mode::{enable_grad, is_grad_enabled, no_grad};
use crate::node::{NodeRef, REQUIRES_GRAD, SeqLog, bump_structure_epoch, new_node};
use crate::op::{Grads, Op, Saves};
use crate::var::Var;
use ember_tensor::random::with_rng;
use ember_tensor::{Error, Result, Tensor};
use parking_lot::Mutex;
use rustc_hash::FxHashSet;
use smallvec::SmallVec;
use std::any::Any;
use std::cell::RefCell;
use std::sync::Arc;

type Segment = Arc<dyn Fn(&[Var]) -> Result<Var> + Send + Sync>;

/// Sets the global generator to a saved state; returns what puts the replaced state back.
type RngReplay = Arc<dyn Fn() -> Box<dyn FnOnce()> + Send + Sync>;

fn snapshot_rng() -> RngReplay {
    let state = with_rng(|r| r.clone());
    Arc::new(move || {
        let previous = with_rng(|r| std::mem::replace(r, state.clone()));
        Box::new(move || with_rng(|r| *r = previous))
    })
}

/// Runs `f` with the generator replayed, restoring the current state afterwards (also on
/// unwinding).
fn replaying<R>(rng: &RngReplay, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Box<dyn FnOnce()>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(r) = self.0.take() {
                r();
            }
        }
    }
    let _restore = Restore(Some(rng()));
    f()
}

struct Capture {
    /// The sequence numbers this thread has handed out since the segment began: a node
    /// numbered in them was created inside the segment and is never captured, whichever
    /// thread made the others.
    inside: SeqLog,
    seen: FxHashSet<usize>,
    vars: Vec<Var>,
}

/// Checkpointing as an engine extension: active on a thread while a segment runs its first
/// forward, where it sees the inputs of every operation applied (the capture); flagged on a
/// checkpoint's node once a backward under `create_graph` recorded its recomputation, which
/// later backwards then go through (see [`Checkpoint::backward_recorded`]).
struct Checkpointing;

static FEATURE: Feature = Feature::new(ids::CHECKPOINT, &Checkpointing);

impl Extension for Checkpointing {
    fn before_apply(&self, _: &str, inputs: &[&Var]) -> u64 {
        capture(inputs);
        0
    }

    fn redirect(&self, node: &NodeRef) -> Option<Option<Var>> {
        checkpoint_of(node)?.recorded.lock().clone().map(Some)
    }

    /// A backward without `retain_graph` went through the recorded recomputation: it is
    /// no longer the checkpoint's to keep (a later backward recomputes the segment again).
    fn on_release(&self, node: &NodeRef) {
        if let Some(op) = checkpoint_of(node)
            && op.recorded.lock().take().is_some()
        {
            bump_structure_epoch();
        }
    }
}

fn checkpoint_of(node: &NodeRef) -> Option<&Checkpoint> {
    (&node.op as &dyn Any).downcast_ref::<Checkpoint>()
}

thread_local! {
    /// The segments running their first forward, innermost last.
    static CAPTURES: RefCell<Vec<Capture>> = const { RefCell::new(Vec::new()) };
}

/// Notes the inputs of an operation applied in a segment's forward that require grad and
/// were not created inside the segment: the parameters (and outer `Var`s) it reads,
/// whichever thread made them. (The segment runs in `no_grad`, so what it computes requires
/// grad only if it turns grad mode back on.)
fn capture(inputs: &[&Var]) {
    CAPTURES.with(|c| {
        if let Some(top) = c.borrow_mut().last_mut() {
            for v in inputs {
                if v.requires_grad() && !top.inside.contains(v.node.seq) && top.seen.insert(v.id()) {
                    top.vars.push((*v).clone());
                }
            }
        }
    });
}

/// Collects captured `Var`s until [`CaptureGuard::finish`] (or drop, on an error).
struct CaptureGuard {
    depth: usize,
}

impl CaptureGuard {
    fn new() -> Self {
        let depth = CAPTURES.with(|c| {
            let mut c = c.borrow_mut();
            c.push(Capture { inside: SeqLog::open(), seen: FxHashSet::default(), vars: Vec::new() });
            c.len() - 1
        });
        FEATURE.set_active(true);
        CaptureGuard { depth }
    }

    fn finish(self) -> Vec<Var> {
        let vars = CAPTURES.with(|c| c.borrow_mut().get_mut(self.depth).map(|t| std::mem::take(&mut t.vars)));
        vars.unwrap_or_default()
    }
}

impl Drop for CaptureGuard {
    fn drop(&mut self) {
        // The captures are taken out before they drop: closing their logs uses the
        // thread-local of numbering, not this one, but nothing of that may find it borrowed.
        let (gone, any) = CAPTURES.with(|c| {
            let mut c = c.borrow_mut();
            let keep = self.depth.min(c.len());
            let gone = c.split_off(keep);
            (gone, !c.is_empty())
        });
        drop(gone);
        FEATURE.set_active(any);
    }
}

/// Runs `f` on `inputs` without keeping its intermediate values; backward recomputes them.
/// Gives the same value and gradients as `f(inputs)`. See the [module docs](self).
pub fn checkpoint(f: impl Fn(&[Var]) -> Result<Var> + Send + Sync + 'static, inputs: &[&Var]) -> Result<Var> {
    if !is_grad_enabled() || crate::inference_mode::is_inference_mode_enabled() {
        // Nothing records (inference mode wins over `enable_grad`): there is nothing to
        // save (and an enclosing checkpoint's capture sees the segment's operations
        // directly).
        let vars: Vec<Var> = inputs.iter().map(|v| (*v).clone()).collect();
        return f(&vars);
    }
    let applying = Applying::begin("checkpoint", inputs);
    let f: Segment = Arc::new(f);
    let mut values = Vec::with_capacity(inputs.len());
    let mut versions: SmallVec<[(u64, u64); 2]> = SmallVec::with_capacity(inputs.len());
    for (i, v) in inputs.iter().enumerate() {
        let st = v.node.state();
        values.push(st.value.clone().ok_or_else(|| Error::autograd(format!("checkpoint: input {i} has no value")))?);
        versions.push(st.versions());
    }
    let rng = snapshot_rng();
    let guard = CaptureGuard::new();
    let out = run_segment(&f, &values, None)?;
    let captured = guard.finish();
    if let Some(v) = captured.iter().find(|v| !v.is_leaf()) {
        return Err(Error::autograd(format!(
            "checkpoint: the segment reads a Var computed outside it that requires grad (made by {}); pass it as one \
             of the checkpoint's inputs",
            v.op_name()
        )));
    }
    let requires = inputs.iter().any(|v| v.requires_grad()) || !captured.is_empty();
    let mut edges: SmallVec<[NodeRef; 2]> = inputs.iter().map(|v| v.node.clone()).collect();
    for v in &captured {
        edges.push(v.node.clone());
        versions.push(v.node.state().versions());
    }
    let op = Checkpoint { f, n_inputs: inputs.len(), rng, recorded: Mutex::new(None) };
    let var = new_node(crate::node::next_seq(), op, edges, if requires { REQUIRES_GRAD } else { 0 }, out, versions);
    applying.recorded(&var);
    Ok(var)
}

/// The segment's value on `values`, computed in `no_grad`; with `rng`, as a replay of the
/// first run (which draws from the generator like any code).
fn run_segment(f: &Segment, values: &[Tensor], rng: Option<&RngReplay>) -> Result<Tensor> {
    let vars: Vec<Var> = values.iter().map(|t| Var::new(t.clone())).collect();
    let out = match rng {
        Some(rng) => replaying(rng, || no_grad(|| f(&vars)))?,
        None => no_grad(|| f(&vars))?,
    };
    Ok(out.value())
}

impl Var {
    /// [`checkpoint()`] for a segment of one input: `h.checkpoint(|h| block(h))` gives
    /// `block(h)` without keeping the block's intermediate values.
    pub fn checkpoint(&self, f: impl Fn(&Var) -> Result<Var> + Send + Sync + 'static) -> Result<Var> {
        checkpoint(
            move |v: &[Var]| match v.first() {
                Some(x) => f(x),
                None => Err(Error::autograd("checkpoint: the segment has no input")),
            },
            &[self],
        )
    }
}

/// The node of a checkpointed segment: its inputs, then the parameters the segment read.
struct Checkpoint {
    f: Segment,
    n_inputs: usize,
    rng: RngReplay,
    /// The segment's output as recomputed and recorded by a backward under
    /// `create_graph`: later backwards send the checkpoint's gradient there.
    recorded: Mutex<Option<Var>>,
}

impl Op for Checkpoint {
    fn name(&self) -> &str {
        "checkpoint"
    }

    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let values: Vec<Tensor> = inputs.iter().take(self.n_inputs).map(|t| (*t).clone()).collect();
        run_segment(&self.f, &values, Some(&self.rng))
    }

    fn backward(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        // The engine runs an operation's backward in grad mode exactly when it records it
        // (`create_graph`).
        if is_grad_enabled() {
            return self.backward_recorded(ctx, g);
        }
        let n_all = ctx.num_inputs();
        let mut fresh = Vec::with_capacity(self.n_inputs);
        for i in 0..self.n_inputs {
            let t = ctx.input(i)?.value();
            fresh.push(if ctx.needs_input_grad(i) { Var::param(t) } else { Var::new(t) });
        }
        // The parameters, version-checked: the recomputation must see the values of forward.
        let params = (self.n_inputs..n_all).map(|j| ctx.input(j)).collect::<Result<Vec<_>>>()?;
        let out = replaying(&self.rng, || enable_grad(|| (self.f)(&fresh)))?;
        self.check_shape(&out, g)?;
        let vars: Vec<&Var> = fresh.iter().chain(&params).collect();
        partials(ctx, &vars, &out, g, false)
    }

    fn saves(&self) -> Saves {
        Saves::INPUTS
    }

    /// Under `create_graph` the recomputation and the nested backward through it are
    /// recorded (see [`Checkpoint::backward_recorded`]).
    fn backward_differentiable(&self) -> bool {
        true
    }
}

/// The gradients of the recomputed `out`, seeded with `g`, with respect to `vars` (the
/// segment's inputs or their stand-ins, then its parameters) where the outer backward needs
/// them; recorded, with the recomputation kept, under `create_graph`. The parameters' hooks
/// do not run here: they run once, when the outer backward delivers these gradients.
fn partials(ctx: &BackwardCtx<'_>, vars: &[&Var], out: &Var, g: &Var, create_graph: bool) -> Result<Grads> {
    let mut slots = Vec::new();
    let mut targets: Vec<&Var> = Vec::new();
    for (i, v) in vars.iter().enumerate() {
        if ctx.needs_input_grad(i) && v.requires_grad() {
            slots.push(i);
            targets.push(v);
        }
    }
    let mut grads: Grads = (0..vars.len()).map(|_| None).collect();
    if targets.is_empty() || !out.requires_grad() {
        return Ok(grads);
    }
    let found = enable_grad(|| grad_with(&[out], &targets, &[g], create_graph, create_graph, false))?;
    for (slot, gr) in slots.into_iter().zip(found) {
        grads[slot] = gr;
    }
    Ok(grads)
}

impl Checkpoint {
    fn check_shape(&self, out: &Var, g: &Var) -> Result<()> {
        if out.shape() != g.shape() {
            return Err(Error::autograd(format!(
                "checkpoint: the segment's output has shape {:?} when recomputed, {:?} at first; the segment must \
                 compute the same function each time",
                out.shape(),
                g.shape()
            )));
        }
        Ok(())
    }

    /// Backward under `create_graph`: the segment is recomputed and differentiated with
    /// both recorded, so that the gradients returned are `Var`s of the inputs, the
    /// parameters and `g`, and can be differentiated again (to any order: a checkpoint met
    /// on the way does the same).
    ///
    /// The segment runs on a stand-in for each input that requires grad: a router with the
    /// input's value and, during the nested backward, no route, so that the gradient stops
    /// there. That gradient is the partial derivative for the input; running through into
    /// the input's own history would add, to a parameter the segment reads that is also
    /// upstream of the input, the part of its gradient that the outer backward delivers
    /// through the input. Once the gradients are computed, each router is routed to its
    /// input: a later backward through the recorded graph passes on into the input's
    /// history.
    ///
    /// The recorded output is kept on the checkpoint, whose node then redirects the
    /// gradient of later backwards (the loss of a gradient penalty, say) into it: they go
    /// through the recorded graph instead of recomputing the segment once more, so the
    /// gradients reaching the segment by both routes add up where they would without the
    /// checkpoint, and round the same. A backward without `retain_graph` through it hands
    /// it back.
    fn backward_recorded(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        let n_all = ctx.num_inputs();
        let inputs = (0..self.n_inputs).map(|i| ctx.input(i)).collect::<Result<Vec<_>>>()?;
        let stand_ins: Vec<Var> =
            inputs.iter().map(|x| if x.requires_grad() { Var::router(x.value()) } else { x.clone() }).collect();
        let params = (self.n_inputs..n_all).map(|j| ctx.input(j)).collect::<Result<Vec<_>>>()?;
        let out = replaying(&self.rng, || (self.f)(&stand_ins))?;
        self.check_shape(&out, g)?;
        let vars: Vec<&Var> = stand_ins.iter().chain(&params).collect();
        let grads = partials(ctx, &vars, &out, g, true)?;
        for (x, s) in inputs.iter().zip(&stand_ins) {
            if s.is_router() {
                s.set_route(Some(x.clone()));
            }
        }
        if out.requires_grad() {
            *self.recorded.lock() = Some(out);
            FEATURE.flag(ctx.node, true);
            bump_structure_epoch();
        }
        Ok(grads)
    }
}
