//! Custom functions: a forward on tensors and a hand-written backward, applied to `Var`s
//! like any operation (PyTorch's `torch.autograd.Function`).
//!
//! Implement [`Function`]: `forward` computes the outputs from the input tensors and may
//! keep what backward needs on the [`FunctionCtx`] — tensors with
//! [`FunctionCtx::save_for_backward`] (version-checked: writing one in place before backward
//! is an error) and any other value with [`FunctionCtx::set`]. `backward` receives one
//! gradient per output (zeros for outputs that received none; see
//! [`FunctionCtx::output_has_grad`]) and returns one gradient per input, `None` where there
//! is none; [`FunctionCtx::needs_input_grad`] says which are wanted. The engine checks that
//! each gradient has its input's shape, and converts one of another dtype to the input's.
//!
//! A function may return several outputs; each is its own `Var`, and backward runs once per
//! backward pass with the gradients of all of them.
//!
//! As in PyTorch, a backward without `retain_graph` frees what the function saved once its
//! backward has run, so a function's saved tensors live no longer than the built-in
//! operations' values. Unlike built-in operations, a custom function's forward is not run
//! again to restore them: a second backward through it fails (naming the function) if its
//! backward reads [`FunctionCtx::saved_tensors`]. Pass `retain_graph` to the first backward
//! to keep them.
//!
//! A backward is assumed not differentiable: using the function under `create_graph` is an
//! error, unless [`Function::differentiable_backward`] returns true — backward must then
//! compute with `Var` operations, on the gradients and on
//! [`FunctionCtx::saved_tensors`], which gives saved inputs and outputs back as the graph's
//! own `Var`s so that higher-order gradients flow through them (other saved tensors are
//! constants).
//!
//! ```
//! use ember_autograd::{Function, FunctionCtx, Var};
//! use ember_tensor::{Result, Tensor};
//!
//! /// `y = x^3`, with the derivative `3x^2`.
//! struct Cube;
//!
//! impl Function for Cube {
//!     fn forward(&self, ctx: &mut FunctionCtx, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
//!         ctx.save_for_backward(&[&inputs[0]]);
//!         Ok(vec![inputs[0].pow_scalar(3.0)?])
//!     }
//!     fn backward(&self, ctx: &FunctionCtx, grads: &[Var]) -> Result<Vec<Option<Var>>> {
//!         let x = &ctx.saved_tensors()?[0];
//!         Ok(vec![Some(grads[0].mul(&x.square().mul_scalar(3.0))?)])
//!     }
//! }
//!
//! let x = Var::param(Tensor::from_vec(vec![1.0f64, 2.0], [2])?);
//! let y = Cube.apply(&[&x])?.remove(0);
//! y.sum_all().backward()?;
//! assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![3.0, 12.0]);
//! # Ok::<(), ember_tensor::Error>(())
//! ```

use crate::backward_ctx::BackwardCtx;
use crate::engine::{current_run, current_run_retains};
use crate::extension::Applying;
use crate::grad_mode::{is_grad_enabled, no_grad};
use crate::inference_mode;
use crate::node::{Node, NodeRef, REQUIRES_GRAD, new_node};
use crate::op::{Grads, Op, Saves};
use crate::saved_hooks::{self, PackedValue};
use crate::var::Var;
use ember_tensor::{DType, Device, Error, Result, Shape, Tensor};
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use smallvec::{SmallVec, smallvec};
use std::any::{Any, TypeId};
use std::sync::{Arc, Weak};

/// A differentiable operation defined by its forward on tensors and its backward; see the
/// [module docs](self).
pub trait Function: Send + Sync + 'static {
    /// The name used in errors, profiles and graphs (default: the type's name).
    fn name(&self) -> &str {
        let full = std::any::type_name::<Self>();
        let base = full.split('<').next().unwrap_or(full);
        let start = base.rfind("::").map_or(0, |i| i + 2);
        &full[start..]
    }

    /// Computes the outputs (at least one) from the input values.
    fn forward(&self, ctx: &mut FunctionCtx, inputs: &[Tensor]) -> Result<Vec<Tensor>>;

    /// Computes one gradient per input (`None`: no gradient) from one gradient per output.
    fn backward(&self, ctx: &FunctionCtx, grad_outputs: &[Var]) -> Result<Vec<Option<Var>>>;

    /// Whether backward is written with `Var` operations that may themselves be recorded,
    /// so that the function can be used under `create_graph` (default: false).
    fn differentiable_backward(&self) -> bool {
        false
    }

    /// Applies the function to `inputs`: runs forward and, in grad mode, records it so that
    /// backward reaches the inputs. Returns one `Var` per output.
    fn apply(self, inputs: &[&Var]) -> Result<Vec<Var>>
    where
        Self: Sized,
    {
        apply_function(self, inputs)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    Input(usize),
    Output(usize),
    Other,
}

#[derive(Clone)]
struct Saved {
    /// The tensor itself; `None` once saved-tensor hooks packed it (the packed copy is what
    /// backward reads, and the function's reference must not keep the original alive).
    tensor: Option<Tensor>,
    /// The storage, to see in-place writes made after the tensor was dropped here.
    storage: std::sync::Weak<ember_tensor::storage::StorageCell>,
    shape: Shape,
    dtype: DType,
    /// The storage version when forward returned.
    version: u64,
    source: Source,
    packed: Option<PackedValue>,
}

impl Saved {
    fn new(t: &Tensor) -> Self {
        Saved {
            tensor: Some(t.clone()),
            storage: Arc::downgrade(t.storage()),
            shape: t.shape().clone(),
            dtype: t.dtype(),
            version: t.version(),
            source: Source::Other,
            packed: None,
        }
    }

    /// The storage version now (the recorded one if nothing can write the storage any more).
    fn current_version(&self) -> u64 {
        match &self.tensor {
            Some(t) => t.version(),
            None => self.storage.upgrade().map_or(self.version, |s| s.version()),
        }
    }
}

/// The graph's own `Var`s for saved inputs and outputs, given to a differentiable backward.
struct Links {
    inputs: Vec<Var>,
    outputs: Vec<Option<Var>>,
}

/// What a custom function's forward keeps for its backward, and what backward learns about
/// the pass it runs in.
#[derive(Clone)]
pub struct FunctionCtx {
    name: Arc<str>,
    needs: SmallVec<[bool; 4]>,
    saved: Vec<Saved>,
    state: FxHashMap<TypeId, Arc<dyn Any + Send + Sync>>,
    output_has_grad: SmallVec<[bool; 2]>,
    links: Option<Arc<Links>>,
    /// How many saved tensors a backward without `retain_graph` freed (0: none freed).
    freed: usize,
}

impl FunctionCtx {
    fn new(name: Arc<str>, needs: SmallVec<[bool; 4]>) -> Self {
        FunctionCtx {
            name,
            needs,
            saved: Vec::new(),
            state: FxHashMap::default(),
            output_has_grad: SmallVec::new(),
            links: None,
            freed: 0,
        }
    }

    /// Keeps `tensors` for backward (replacing what an earlier call saved). They are
    /// version-checked: writing one in place before backward makes backward fail.
    pub fn save_for_backward(&mut self, tensors: &[&Tensor]) {
        self.saved = tensors.iter().map(|t| Saved::new(t)).collect();
    }

    /// The tensors given to [`FunctionCtx::save_for_backward`], in order, as `Var`s. In a
    /// backward under `create_graph`, saved inputs and outputs are the graph's own `Var`s.
    /// Fails if one of them was written in place since forward.
    pub fn saved_tensors(&self) -> Result<Vec<Var>> {
        if self.freed > 0 {
            return Err(Error::autograd(format!(
                "custom function {}: trying to backward through the graph a second time (or to access saved \
                 tensors after they have already been freed): the {} tensor(s) it saved were freed by a backward \
                 without retain_graph; pass retain_graph=true to the first backward to keep them",
                self.name, self.freed
            )));
        }
        let mut out = Vec::with_capacity(self.saved.len());
        for (k, s) in self.saved.iter().enumerate() {
            let now = s.current_version();
            if now != s.version {
                return Err(Error::autograd(format!(
                    "one of the variables needed for gradient computation has been modified by an inplace operation: \
                     saved tensor {k} of {} [{} {:?}] is at version {now}; expected version {} instead",
                    self.name, s.dtype, s.shape, s.version
                )));
            }
            let linked = self.links.as_ref().and_then(|l| match s.source {
                Source::Input(i) => l.inputs.get(i).cloned(),
                Source::Output(j) => l.outputs.get(j).cloned().flatten(),
                Source::Other => None,
            });
            out.push(match (&s.packed, linked, &s.tensor) {
                (Some(p), linked, _) => saved_hooks::unpack(
                    &self.name,
                    &format!("saved tensor {k}"),
                    p.clone(),
                    linked.as_ref().map(|v| &*v.node),
                )?,
                (None, Some(linked), _) => linked,
                (None, None, Some(t)) => Var::new(t.clone()),
                (None, None, None) => {
                    return Err(Error::autograd(format!(
                        "custom function {}: saved tensor {k} is neither kept nor packed",
                        self.name
                    )));
                }
            });
        }
        Ok(out)
    }

    /// Whether input `i` needs a gradient: in forward, whether it requires grad; in
    /// backward, whether this pass wants its gradient.
    pub fn needs_input_grad(&self, i: usize) -> bool {
        self.needs.get(i).copied().unwrap_or(false)
    }

    /// In backward: whether output `j` received a gradient (if not, backward was given
    /// zeros for it).
    pub fn output_has_grad(&self, j: usize) -> bool {
        self.output_has_grad.get(j).copied().unwrap_or(false)
    }

    /// Keeps a value of any type for backward, one per type (a second `set` of the same
    /// type replaces the first).
    pub fn set<T: Any + Send + Sync>(&mut self, value: T) {
        self.state.insert(TypeId::of::<T>(), Arc::new(value));
    }

    /// The value of type `T` given to [`FunctionCtx::set`], if any.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.state.get(&TypeId::of::<T>()).and_then(|v| v.downcast_ref::<T>())
    }

    /// Works out which saved tensors are inputs or outputs, records their versions and, if
    /// saved-tensor hooks are active, packs them.
    fn finish_forward(&mut self, inputs: &[Tensor], outputs: &[Tensor], pack: bool) {
        let same = |a: &Tensor, b: &Tensor| a.shares_storage(b) && a.layout() == b.layout() && a.dtype() == b.dtype();
        for s in &mut self.saved {
            let Some(t) = s.tensor.clone() else { continue };
            s.version = t.version();
            s.source = if let Some(i) = inputs.iter().position(|x| same(x, &t)) {
                Source::Input(i)
            } else if let Some(j) = outputs.iter().position(|x| same(x, &t)) {
                Source::Output(j)
            } else {
                Source::Other
            };
            s.packed = if pack { saved_hooks::pack_tensor(&t) } else { None };
            if s.packed.is_some() {
                // Backward reads the packed copy: the original is left to whoever else holds
                // it (for a tensor only the function kept, that frees it).
                s.tensor = None;
            }
        }
    }
}

/// What the nodes of one application share: the function and its latest context.
struct Shared<F> {
    f: F,
    name: Arc<str>,
    /// Replaced when the forward runs again (its inputs changed).
    ctx: Mutex<Arc<FunctionCtx>>,
    inputs: Vec<(Shape, DType)>,
    outputs: Mutex<Vec<(Shape, DType, Device)>>,
    /// For several outputs: the output nodes (weak: they hold this function's node).
    output_nodes: Mutex<Vec<Weak<Node<dyn Op>>>>,
}

impl<F: Function> Shared<F> {
    /// Runs the user's forward on `values` with a fresh context.
    fn run_forward(&self, values: &[Tensor], needs: SmallVec<[bool; 4]>, pack: bool) -> Result<Vec<Tensor>> {
        let mut ctx = FunctionCtx::new(self.name.clone(), needs);
        let outputs = no_grad(|| self.f.forward(&mut ctx, values))?;
        if outputs.is_empty() {
            return Err(Error::autograd(format!("custom function {}: forward returned no outputs", self.name)));
        }
        ctx.finish_forward(values, &outputs, pack);
        *self.ctx.lock() = Arc::new(ctx);
        *self.outputs.lock() = outputs.iter().map(|t| (t.shape().clone(), t.dtype(), t.device())).collect();
        Ok(outputs)
    }

    /// Forward again on new input values (the reactive engine recomputing a stale node).
    fn rerun(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let needs = self.ctx.lock().needs.clone();
        let values: Vec<Tensor> = inputs.iter().map(|t| (*t).clone()).collect();
        self.run_forward(&values, needs, false)
    }

    /// Calls the user's backward with one gradient (or none) per output.
    fn backward(&self, bctx: &BackwardCtx<'_>, grads: OutputGrads) -> Result<Grads> {
        // The engine refuses create_graph through a backward not declared differentiable
        // (`Op::backward_differentiable`).
        let create_graph = is_grad_enabled();
        let n = bctx.num_inputs();
        let mut ctx = FunctionCtx::clone(&self.ctx.lock());
        ctx.needs = (0..n).map(|i| bctx.needs_input_grad(i)).collect();
        ctx.output_has_grad = grads.iter().map(Option::is_some).collect();
        if create_graph {
            let inputs = (0..n).map(|i| bctx.input(i)).collect::<Result<Vec<_>>>()?;
            let nodes = self.output_nodes.lock().clone();
            let outputs = if nodes.is_empty() {
                vec![Some(bctx.output()?)]
            } else {
                nodes.iter().map(|w| w.upgrade().map(Var::from_node_ensured).transpose()).collect::<Result<_>>()?
            };
            ctx.links = Some(Arc::new(Links { inputs, outputs }));
        }
        let metas = self.outputs.lock().clone();
        let mut grad_outputs = Vec::with_capacity(grads.len());
        for (j, g) in grads.into_iter().enumerate() {
            grad_outputs.push(match g {
                Some(g) => g,
                None => {
                    // Zeros on the output's device: the user's backward combines them with
                    // the gradients of the other outputs.
                    let (shape, dtype, device) =
                        metas.get(j).cloned().unwrap_or((Shape::scalar(), DType::F32, Device::Cpu));
                    Var::new(Tensor::full_on(shape, 0, dtype, device)?)
                }
            });
        }
        let result = self.f.backward(&ctx, &grad_outputs)?;

        if result.len() != n {
            return Err(Error::autograd(format!(
                "custom function {}: backward returned {} gradients for {n} inputs",
                self.name,
                result.len()
            )));
        }
        let mut grads = Grads::with_capacity(n);
        for (i, g) in result.into_iter().enumerate() {
            let mut g = g.filter(|_| ctx.needs_input_grad(i));
            if let (Some(gi), Some((shape, dtype))) = (&g, self.inputs.get(i)) {
                let (gs, gd) = gi.shape_and_dtype();
                if gs != *shape {
                    return Err(Error::autograd(format!(
                        "custom function {}: backward returned a gradient of [{gd} {gs:?}] for input {i}, which is \
                         [{dtype} {shape:?}]",
                        self.name,
                    )));
                }
                // Another dtype is converted, as PyTorch's validate_outputs does.
                if gd != *dtype {
                    g = Some(gi.to_dtype(*dtype));
                }
            }
            grads.push(g);
        }
        drop(ctx);
        if !current_run_retains() {
            // Like PyTorch, a backward that does not retain the graph frees what the function
            // saved (a user's forward is not re-run to get it back: a second backward is then
            // an error naming the function).
            let mut shared = self.ctx.lock();
            if !shared.saved.is_empty() {
                let ctx = Arc::make_mut(&mut shared);
                ctx.freed = ctx.saved.len();
                ctx.saved = Vec::new();
            }
        }
        Ok(grads)
    }
}

/// The node of a function with one output: its value is the output.
struct Single<F>(Arc<Shared<F>>);

impl<F: Function> Op for Single<F> {
    fn name(&self) -> &str {
        &self.0.name
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let mut outs = self.0.rerun(inputs)?;
        if outs.len() != 1 {
            return Err(Error::autograd(format!(
                "custom function {}: forward returned {} outputs when run again, 1 at first",
                self.0.name,
                outs.len()
            )));
        }
        Ok(outs.remove(0))
    }
    fn backward(&self, ctx: &BackwardCtx<'_>, grad: &Var) -> Result<Grads> {
        self.0.backward(ctx, smallvec![Some(grad.clone())])
    }
    fn saves(&self) -> Saves {
        // The context keeps and checks what the function saved.
        Saves::NONE
    }
    fn recomputable(&self) -> bool {
        // Re-running a user's forward to restore a freed value is not assumed safe.
        false
    }
    fn validates_grads(&self) -> bool {
        true
    }
    fn backward_differentiable(&self) -> bool {
        self.0.f.differentiable_backward()
    }
}

/// The gradients of a function's outputs, `None` where one received none.
type OutputGrads = SmallVec<[Option<Var>; 2]>;

/// What the nodes of a function with several outputs share: recomputed outputs waiting for
/// their nodes, and the gradients that output nodes pass to the function's node, per
/// backward call.
struct Multi {
    pending: Mutex<Vec<Option<Tensor>>>,
    slots: Mutex<Vec<(u64, OutputGrads)>>,
    /// The function node's value, and the gradient output nodes send it: a placeholder.
    token: Tensor,
}

/// The node of a function with several outputs. Its value is a placeholder; each output is
/// a node of its own that hands its gradient over through [`Multi::slots`].
struct Apply<F> {
    shared: Arc<Shared<F>>,
    multi: Arc<Multi>,
}

impl<F: Function> Op for Apply<F> {
    fn name(&self) -> &str {
        &self.shared.name
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let outs = self.shared.rerun(inputs)?;
        *self.multi.pending.lock() = outs.into_iter().map(Some).collect();
        Ok(self.multi.token.clone())
    }
    fn backward(&self, ctx: &BackwardCtx<'_>, _: &Var) -> Result<Grads> {
        let run = current_run();
        let n_out = self.shared.outputs.lock().len();
        let grads = {
            let mut slots = self.multi.slots.lock();
            match slots.iter().position(|(r, _)| *r == run) {
                Some(k) => slots.swap_remove(k).1,
                None => SmallVec::new(),
            }
        };
        let mut grads: OutputGrads = grads;
        grads.resize(n_out, None);
        self.shared.backward(ctx, grads)
    }
    fn saves(&self) -> Saves {
        Saves::NONE
    }
    fn recomputable(&self) -> bool {
        false
    }
    fn validates_grads(&self) -> bool {
        true
    }
    fn backward_differentiable(&self) -> bool {
        self.shared.f.differentiable_backward()
    }
}

/// Output `index` of a function with several outputs.
struct Output {
    multi: Arc<Multi>,
    index: usize,
    name: String,
}

impl Op for Output {
    fn name(&self) -> &str {
        &self.name
    }
    fn forward(&self, _: &[&Tensor]) -> Result<Tensor> {
        self.multi.pending.lock().get_mut(self.index).and_then(Option::take).ok_or_else(|| {
            Error::autograd(format!("{}: the function's forward did not produce this output again", self.name))
        })
    }
    fn backward(&self, _: &BackwardCtx<'_>, grad: &Var) -> Result<Grads> {
        let run = current_run();
        let mut slots = self.multi.slots.lock();
        let k = match slots.iter().position(|(r, _)| *r == run) {
            Some(k) => k,
            None => {
                slots.push((run, SmallVec::new()));
                slots.len() - 1
            }
        };
        let slot = &mut slots[k].1;
        if slot.len() <= self.index {
            slot.resize(self.index + 1, None);
        }
        slot[self.index] = Some(grad.clone());
        // The function node runs after every output node of this pass (it was created
        // before them) and picks the gradients up; it is sent a placeholder so that the
        // engine schedules it.
        Ok(smallvec![Some(Var::new(self.multi.token.clone()))])
    }
    fn saves(&self) -> Saves {
        Saves::NONE
    }
    fn recomputable(&self) -> bool {
        false
    }
}

/// A node of the function: the one constructor for every node a function records.
fn function_node<O: Op>(
    op: O,
    edges: SmallVec<[NodeRef; 2]>,
    requires_grad: bool,
    value: Tensor,
    versions: SmallVec<[(u64, u64); 2]>,
) -> Var {
    new_node(crate::node::next_seq(), op, edges, if requires_grad { REQUIRES_GRAD } else { 0 }, value, versions)
}

/// [`Function::apply`].
fn apply_function<F: Function>(f: F, inputs: &[&Var]) -> Result<Vec<Var>> {
    let name: Arc<str> = f.name().into();
    let applying = Applying::begin(&name, inputs);
    let mut values = Vec::with_capacity(inputs.len());
    let mut versions: SmallVec<[(u64, u64); 2]> = SmallVec::with_capacity(inputs.len());
    for (i, v) in inputs.iter().enumerate() {
        let st = v.node.state();
        let t = st
            .value
            .clone()
            .ok_or_else(|| Error::autograd(format!("custom function {name}: input {i} has no value")))?;
        versions.push(st.versions());
        values.push(t);
    }
    let mut record = is_grad_enabled() && !inference_mode::is_inference_mode_enabled();
    let requires = record && inputs.iter().any(|v| v.requires_grad());
    if record && inputs.iter().any(|v| v.is_inference()) {
        // Inference tensors never enter a graph: saved for backward they are an error, and
        // with nothing to differentiate nothing is recorded.
        if requires {
            return Err(inference_mode::saved_for_backward(&format!("custom function {name}")));
        }
        record = false;
    }
    let shared = Arc::new(Shared {
        f,
        name: name.clone(),
        ctx: Mutex::new(Arc::new(FunctionCtx::new(name.clone(), SmallVec::new()))),
        inputs: values.iter().map(|t| (t.shape().clone(), t.dtype())).collect(),
        outputs: Mutex::new(Vec::new()),
        output_nodes: Mutex::new(Vec::new()),
    });
    let needs = inputs.iter().map(|v| requires && v.requires_grad()).collect();
    let mut outputs = shared.run_forward(&values, needs, requires)?;
    if !record {
        return Ok(outputs.into_iter().map(Var::new).collect());
    }
    let differentiable = |t: &Tensor| requires && t.dtype().is_float();
    let edges: SmallVec<[NodeRef; 2]> = inputs.iter().map(|v| v.node.clone()).collect();
    if outputs.len() == 1 {
        let out = outputs.remove(0);
        let grad = differentiable(&out);
        let var = function_node(Single(shared), edges, grad, out, versions);
        applying.recorded(&var);
        return Ok(vec![var]);
    }
    let multi = Arc::new(Multi {
        pending: Mutex::new(Vec::new()),
        slots: Mutex::new(Vec::new()),
        token: Tensor::scalar(0.0f32),
    });
    let apply = function_node(
        Apply { shared: shared.clone(), multi: multi.clone() },
        edges,
        requires,
        multi.token.clone(),
        versions,
    );
    let apply_versions = apply.node.state().versions();
    let mut vars = Vec::with_capacity(outputs.len());
    for (index, out) in outputs.into_iter().enumerate() {
        let grad = differentiable(&out);
        let op = Output { multi: multi.clone(), index, name: format!("{name}[{index}]") };
        vars.push(function_node(op, smallvec![apply.node.clone()], grad, out, smallvec![apply_versions]));
    }
    applying.recorded(&apply);
    for v in &vars {
        applying.recorded(v);
    }
    *shared.output_nodes.lock() = vars.iter().map(|v| Arc::downgrade(&v.node)).collect();
    Ok(vars)
}
