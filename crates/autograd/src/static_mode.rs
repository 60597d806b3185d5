//! Static mode: graphs built once and re-run with new values (seed 001 §2.6, §2.7, §10).
//!
//! In eager mode every call builds new nodes. A [`Traced`] model instead builds its graph
//! once per input shape, from a [gradient router](Var::router) as input, and afterwards
//! only *sets the router's value* and asks the output for its value: the reactive machinery
//! recomputes exactly the nodes downstream of what changed (the new input, and parameters an
//! optimizer wrote in place). Node structures are reused; nothing is rebuilt.
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

use crate::var::Var;
use ember_tensor::{DType, Result, Tensor};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// What a traced model (or a cached criterion) accepts as input: a value, and optionally a
/// `Var` to route gradients back to (seed 001 §2.6).
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

type Build = Box<dyn Fn(&Var) -> Result<Var> + Send + Sync>;

/// A model whose graph is built once per input shape and dtype, then re-run by setting
/// values (see the module docs).
///
/// Randomness drawn while building (a dropout mask, say) is part of the traced graph and
/// stays fixed; trace models for evaluation, or without random layers.
pub struct Traced {
    build: Build,
    graphs: Mutex<HashMap<(Vec<usize>, DType), (Var, Var)>>,
}

impl Traced {
    /// A traced model computing `build(input)`.
    pub fn new(build: impl Fn(&Var) -> Result<Var> + Send + Sync + 'static) -> Self {
        Traced { build: Box::new(build), graphs: Mutex::new(HashMap::new()) }
    }

    fn graphs(&self) -> MutexGuard<'_, HashMap<(Vec<usize>, DType), (Var, Var)>> {
        self.graphs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The output for `input`: the cached graph for its shape re-run with the new value, or
    /// a graph built now. The returned `Var` is the same node on every call with the same
    /// shape.
    pub fn forward(&self, input: impl ForwardInput) -> Result<Var> {
        let value = input.forward_value();
        let route = input.forward_route();
        let key = (value.shape().to_vec(), value.dtype());
        let cached = self.graphs().get(&key).cloned();
        if let Some((router, out)) = cached {
            router.set_route(route);
            router.set_value(value)?;
            out.forward()?;
            return Ok(out);
        }
        // Built outside the lock, so that a model may use itself while building.
        let router = Var::router(value);
        router.set_route(route);
        let out = (self.build)(&router)?;
        self.graphs().insert(key, (router, out.clone()));
        Ok(out)
    }

    /// The number of graphs built so far (one per distinct input shape and dtype).
    pub fn num_graphs(&self) -> usize {
        self.graphs().len()
    }

    /// The router (input node) of the graph for `shape` and `dtype`, if built.
    pub fn input_node(&self, shape: &[usize], dtype: DType) -> Option<Var> {
        self.graphs().get(&(shape.to_vec(), dtype)).map(|(r, _)| r.clone())
    }
}

struct LossEntry {
    output: std::sync::Weak<crate::node::Node<dyn crate::node::Op>>,
    /// How many references to the output the loss graph itself holds.
    own_refs: usize,
    target: Var,
    loss: Var,
}

/// A loss function whose subgraph is built once per output node and re-run with new targets
/// (seed 001 §2.7's `Criterion`): for the output of a [`Traced`] model, every call after the
/// first only sets the target and recomputes.
///
/// An entry is dropped once nothing but the loss graph holds its output, so calling it on
/// fresh eager outputs every step does not accumulate graphs.
pub struct CachedLoss {
    f: Box<dyn Fn(&Var, &Var) -> Result<Var> + Send + Sync>,
    entries: Mutex<Vec<LossEntry>>,
}

impl CachedLoss {
    /// A criterion computing `f(output, target)`.
    pub fn new(f: impl Fn(&Var, &Var) -> Result<Var> + Send + Sync + 'static) -> Self {
        CachedLoss { f: Box::new(f), entries: Mutex::new(Vec::new()) }
    }

    /// The loss of `output` against `target`.
    pub fn forward(&self, output: &Var, target: impl ForwardInput) -> Result<Var> {
        let value = target.forward_value();
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|e| e.output.strong_count() > e.own_refs);
        let ptr = std::sync::Arc::as_ptr(&output.node) as *const u8;
        if let Some(e) = entries.iter().find(|e| e.output.as_ptr() as *const u8 == ptr) {
            e.target.set_value(value)?;
            e.loss.forward()?;
            return Ok(e.loss.clone());
        }
        let before = std::sync::Arc::strong_count(&output.node);
        let target = Var::new(value);
        let loss = (self.f)(output, &target)?;
        let own_refs = std::sync::Arc::strong_count(&output.node) - before;
        entries.push(LossEntry {
            output: std::sync::Arc::downgrade(&output.node),
            own_refs,
            target,
            loss: loss.clone(),
        });
        Ok(loss)
    }

    /// The number of loss subgraphs currently cached.
    pub fn cached(&self) -> usize {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|e| e.output.strong_count() > e.own_refs);
        entries.len()
    }
}
