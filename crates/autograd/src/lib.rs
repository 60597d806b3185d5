//! `ember-autograd`: `Var`, the graph, and the backward engine, with PyTorch's semantics
//! and the stricter rules of docs/design.md, 'Accumulation rules'.
//!
//! # Vars and the graph
//!
//! A [`Var`] is an `Arc` handle to a graph node. [`Var::param`] makes a leaf that requires
//! grad (a parameter), [`Var::new`] a leaf that does not (an input or a constant).
//! Operations compute their value at once (define-by-run) and, while grad mode is on,
//! record themselves: the result holds strong references to its inputs, never the other
//! way round, so a graph is freed when its last handle drops. A node requires grad when one
//! of its inputs does.
//!
//! ```
//! use ember_autograd::Var;
//! use ember_tensor::{DType, Tensor};
//! let w = Var::param(Tensor::from_vec(vec![1.0f32, -2.0, 3.0], [3])?);
//! let x = Var::new(Tensor::ones([2, 3], DType::F32)?);
//! let y = x.mul(&w)?.relu().sum_all(); // broadcasting, elementwise, reductions...
//! y.backward()?;
//! assert_eq!(w.grad().unwrap().to_vec::<f32>()?, vec![2.0, 0.0, 2.0]);
//! assert!(x.grad().is_none()); // inputs do not require grad
//! # Ok::<(), ember_tensor::Error>(())
//! ```
//!
//! Every operation is defined once, forward and backward side by side, and backward is
//! written with `Var` operations; operators are overloaded (`&a + &b` gives `Result<Var>`
//! because shapes may not broadcast, `&a * 2.0` and `-&a` give `Var`).
//!
//! # Backward and the accumulation rules
//!
//! [`Var::backward`] starts from a scalar with gradient 1 ([`Var::backward_with`] takes an
//! explicit gradient, required for non-scalar outputs). The engine counts dependencies
//! from the root, sums multi-path gradients in per-call buffers, runs ready nodes in
//! decreasing creation order, prunes branches that reach no leaf requiring grad, and never
//! recurses (a chain of a million nodes is fine).
//!
//! - **Leaf gradients accumulate** across backward calls until [`Var::zero_grad`].
//! - **Each backward propagates only its own signal** (docs/design.md, 'Accumulation
//!   rules'): a node that keeps an accumulator passes on this call's gradient, never the accumulated one, so nothing
//!   is counted twice.
//! - **Intermediate gradients** are readable after a backward with `retain_graph = true`
//!   until the next backward through them, and freed otherwise (under `create_graph` they
//!   are plain values: only leaves and retaining nodes keep a gradient's graph);
//!   [`Var::retain_grad`] keeps them and accumulates like a leaf.
//!
//! ```
//! use ember_autograd::Var;
//! use ember_tensor::Tensor;
//! let u = Var::param(Tensor::from_vec(vec![1.0f64], [1])?);
//! let w = u.mul_scalar(2.0);
//! w.retain_grad()?;
//! let l1 = w.mul_scalar(3.0).sum_all();
//! let l2 = w.mul_scalar(5.0).sum_all();
//! l1.backward_with(None, true)?; // keep the graph for the second loss
//! l2.backward()?;
//! assert_eq!(w.grad().unwrap().to_vec::<f64>()?, vec![8.0]); // 3 + 5, accumulated
//! assert_eq!(u.grad().unwrap().to_vec::<f64>()?, vec![16.0]); // (3 + 5) * 2, not 3*2 + 8*2
//! # Ok::<(), ember_tensor::Error>(())
//! ```
//!
//! # What backward frees
//!
//! Without `retain_graph`, a node's value is freed as soon as its backward has run, unless
//! something outside the graph still holds the node — such as the `Var` you keep for your
//! logits, whose value stays and costs nothing to read — or the value was written in place
//! since it was computed (recomputing would lose the write). A second backward through
//! freed nodes recomputes them from the leaves (*ensure-forward*) instead of failing.
//!
//! ```
//! use ember_autograd::Var;
//! use ember_tensor::Tensor;
//! let w = Var::param(Tensor::from_vec(vec![0.5f64], [1])?);
//! let logits = w.exp();
//! let loss = logits.mul_scalar(3.0).sum_all();
//! loss.backward()?;
//! assert_eq!(logits.recompute_count(), 0); // held: kept, not recomputed
//! loss.backward()?; // runs again through recomputed values
//! assert!((w.grad().unwrap().to_vec::<f64>()?[0] - 6.0 * 0.5f64.exp()).abs() < 1e-12);
//! # Ok::<(), ember_tensor::Error>(())
//! ```
//!
//! # In-place writes to saved values
//!
//! Operations record the storage version of the values their backward reads. Writing one
//! of them in place before backward makes backward fail with an error naming the operation
//! and both versions, like PyTorch's.
//!
//! ```
//! use ember_autograd::Var;
//! use ember_tensor::Tensor;
//! let x = Var::param(Tensor::from_vec(vec![1.0f64, 2.0], [2])?);
//! let y = x.exp(); // exp saves its output
//! let loss = y.sum_all();
//! y.value().mul_scalar_(2.0)?;
//! let err = loss.backward().unwrap_err().to_string();
//! assert!(err.contains("modified by an inplace operation") && err.contains("exp"));
//! # Ok::<(), ember_tensor::Error>(())
//! ```
//!
//! # Controlling gradient flow
//!
//! | tool | effect |
//! |---|---|
//! | [`no_grad`], [`NoGradGuard`] | nothing records history (thread-local, nestable, restored on panic); [`enable_grad`] re-enables |
//! | [`inference_mode()`], [`InferenceModeGuard`] | as `no_grad`, and what is made inside is an inference tensor: no version counting, never allowed into a later graph ([module docs](mod@inference_mode)) |
//! | [`Var::detach`] | a new leaf sharing the storage: gradients stop here |
//! | [`Var::detach_node`] | an identity node that stops gradients but stays visible in the graph |
//! | [`Var::freeze`] / `requires_grad_(false)` | the leaf keeps no gradient, but gradients still flow *through* its operations to earlier parameters |
//! | `retain_graph` | keep values for another backward through the same graph |
//!
//! ```
//! use ember_autograd::{no_grad, Var};
//! use ember_tensor::Tensor;
//! let enc = Var::param(Tensor::from_vec(vec![2.0f64], [1])?);
//! let adapter = Var::param(Tensor::from_vec(vec![3.0f64], [1])?);
//! adapter.freeze()?;
//! enc.mul(&adapter)?.sum_all().backward()?;
//! assert_eq!(enc.grad().unwrap().to_vec::<f64>()?, vec![3.0]); // flowed through the frozen adapter
//! assert!(adapter.grad().is_none());
//! let y = no_grad(|| enc.mul_scalar(2.0));
//! assert!(!y.requires_grad());
//! # Ok::<(), ember_tensor::Error>(())
//! ```
//!
//! Calling backward inside `no_grad` on a graph recorded outside it still works, and logs
//! one warning through the `log` crate (it is usually a mistake).
//!
//! # Gradients without `.grad`, and of higher order
//!
//! [`grad`] returns the gradients of outputs with respect to chosen inputs without
//! touching any `.grad`. With `create_graph`, the backward is itself recorded, so the
//! result can be differentiated again, to any order.
//!
//! ```
//! use ember_autograd::{grad, Var};
//! use ember_tensor::Tensor;
//! let x = Var::param(Tensor::scalar(2.0f64));
//! // f(x) = x^4 + 2x^3 + x^2
//! let f = x.pow_scalar(4.0)?.add(&x.pow_scalar(3.0)?.mul_scalar(2.0))?.add(&x.square())?;
//! let d1 = grad(&[&f], &[&x], &[], false, true)?[0].clone().unwrap();
//! let d2 = grad(&[&d1], &[&x], &[], false, true)?[0].clone().unwrap();
//! let d3 = grad(&[&d2], &[&x], &[], false, false)?[0].clone().unwrap();
//! assert_eq!([f.item()?, d1.item()?, d2.item()?, d3.item()?], [36.0, 60.0, 74.0, 60.0]);
//! # Ok::<(), ember_tensor::Error>(())
//! ```
//!
//! # Checking gradients
//!
//! [`gradcheck`] compares analytical gradients with `f64` central differences, like
//! `torch.autograd.gradcheck`; every built-in operation is tested with it. [`gradgradcheck`]
//! checks second-order gradients the same way (`torch.autograd.gradgradcheck`).
//!
//! # Gradient penalties
//!
//! A penalty on a gradient (WGAN-GP, input-gradient regularisation) is a loss built from a
//! `grad(..., create_graph = true)`; backward through it reaches the parameters through the
//! recorded backward. [`Var::backward_full`] with `create_graph` does the same into `.grad`.
//!
//! ```
//! use ember_autograd::{grad, Var};
//! use ember_tensor::{DType, Tensor};
//! let w = Var::param(Tensor::from_vec(vec![0.5f64, -1.5], [2, 1])?); // a linear critic D(x) = tanh(x w)
//! let x = Var::param(Tensor::from_vec(vec![1.0f64, 2.0, -1.0, 0.5], [2, 2])?);
//! let d = x.matmul(&w)?.tanh();
//! let dx = grad(&[&d.sum_all()], &[&x], &[], false, true)?[0].clone().unwrap();
//! let norm = dx.square().sum(1, false)?.sqrt();
//! let penalty = norm.sub_scalar(1.0).square().mean_all(); // (|dD/dx| - 1)^2
//! penalty.backward()?;
//! assert_eq!(w.grad().unwrap().shape(), &[2, 1]);
//! # Ok::<(), ember_tensor::Error>(())
//! ```
//!
//! # Custom functions
//!
//! A [`Function`] is a forward on tensors and a hand-written backward, applied to `Var`s
//! (PyTorch's `autograd.Function`): its [`FunctionCtx`] keeps what backward needs
//! (version-checked saved tensors, any other value), says which inputs need gradients,
//! and a function may have several outputs. The engine validates the gradients' shapes. A
//! backward that is not declared differentiable makes `create_graph` an error.
//!
//! ```
//! use ember_autograd::{Function, FunctionCtx, Var};
//! use ember_tensor::{Result, Tensor};
//! /// `out = input @ weight^T + bias`.
//! struct LinearFunction;
//! impl Function for LinearFunction {
//!     fn forward(&self, ctx: &mut FunctionCtx, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
//!         ctx.save_for_backward(&[&inputs[0], &inputs[1]]);
//!         Ok(vec![inputs[0].matmul(&inputs[1].t()?)?.add(&inputs[2])?])
//!     }
//!     fn backward(&self, ctx: &FunctionCtx, grads: &[Var]) -> Result<Vec<Option<Var>>> {
//!         let saved = ctx.saved_tensors()?;
//!         let g = &grads[0];
//!         Ok(vec![
//!             if ctx.needs_input_grad(0) { Some(g.matmul(&saved[1])?) } else { None },
//!             if ctx.needs_input_grad(1) { Some(g.t()?.matmul(&saved[0])?) } else { None },
//!             if ctx.needs_input_grad(2) { Some(g.sum(0, false)?) } else { None },
//!         ])
//!     }
//! }
//! let x = Var::new(Tensor::ones([2, 3], ember_tensor::DType::F32)?);
//! let w = Var::param(Tensor::ones([4, 3], ember_tensor::DType::F32)?);
//! let b = Var::param(Tensor::zeros([4], ember_tensor::DType::F32)?);
//! let out = LinearFunction.apply(&[&x, &w, &b])?.remove(0);
//! out.sum_all().backward()?;
//! assert_eq!(b.grad().unwrap().to_vec::<f32>()?, vec![2.0; 4]);
//! assert!(x.grad().is_none()); // not asked for: needs_input_grad(0) was false
//! # Ok::<(), ember_tensor::Error>(())
//! ```
//!
//! # Saved-tensor hooks
//!
//! [`saved_tensors_hooks`] (or a [`SavedTensorsHooksGuard`]) decides how the values
//! backward reads are kept: nodes created in its scope store `pack(value)` and their
//! backward reads `unpack(&packed)`. Values only the graph holds are then kept in packed
//! form alone, so packing to a smaller dtype (or offloading) reduces what a forward keeps
//! for backward; the [module docs](saved_hooks) say which values must stay. The in-place
//! check still applies to the original. [`save_on_cpu()`] is such a pair of hooks: it keeps
//! a GPU forward's saved values in host memory until backward.
//!
//! ```
//! use ember_autograd::{saved_tensors_hooks, Var};
//! use ember_tensor::{DType, Tensor};
//! let x = Var::param(Tensor::from_vec(vec![0.5f64, 2.0], [2])?);
//! // Keep saved values in f32, give them back as f64.
//! let y = saved_tensors_hooks(|t: &Tensor| t.to_dtype(DType::F32), |p: &Tensor| Ok(p.to_dtype(DType::F64)), || {
//!     x.exp()
//! });
//! y.sum_all().backward()?;
//! let g = x.grad().unwrap().to_vec::<f64>()?;
//! assert!((g[0] - 0.5f64.exp()).abs() < 1e-6);
//! # Ok::<(), ember_tensor::Error>(())
//! ```
//!
//! # Gradient checkpointing
//!
//! [`checkpoint()`] (or [`Var::checkpoint`]) runs a segment without keeping its
//! intermediate values and recomputes it in backward: activation memory for compute. The
//! parameters the segment reads are found as it runs and get their gradients as usual.
//! Under `create_graph` the recomputation is recorded, so gradient penalties and
//! higher-order gradients go through checkpointed segments.
//! `cargo run --release -p ember-autograd --example checkpoint_memory` measures a 32-layer
//! MLP step.
//!
//! ```
//! use ember_autograd::Var;
//! use ember_tensor::{DType, Tensor};
//! let layers: Vec<Var> = (0..4).map(|_| Var::param(Tensor::ones([8, 8], DType::F32).unwrap())).collect();
//! let mut h = Var::new(Tensor::ones([2, 8], DType::F32)?.mul_scalar(0.01));
//! for pair in layers.chunks(2) {
//!     let pair = pair.to_vec();
//!     h = h.checkpoint(move |h| Ok(h.matmul(&pair[0])?.tanh().matmul(&pair[1])?.tanh()))?;
//! }
//! h.sum_all().backward()?;
//! assert!(layers.iter().all(|w| w.grad().is_some()));
//! # Ok::<(), ember_tensor::Error>(())
//! ```
//!
//! # Values, versions and re-execution
//!
//! Nodes cache their value with the versions of the inputs it was computed from.
//! [`Var::value`] returns the cached value and never recomputes; [`Var::forward`] first
//! recomputes whatever is stale — nodes downstream of a leaf replaced with
//! [`Var::set_value`] or written in place — and nothing else. When nothing has changed
//! since the last request, the answer is immediate.
//!
//! # Static mode
//!
//! A [`Traced`] model builds its graph once per input shape, from a gradient router as
//! input, and re-runs it by setting the router's value; what is passed in ([`ForwardInput`]:
//! a tensor, a `&Var`, a detached `Var`) decides whether gradients go on into the input's own
//! graph. A [`CachedLoss`] does the same for a loss on a traced output. [`to_dot`] and
//! [`to_svg`] draw any graph, routers included. `docs/static_mode.md` in the repository
//! explains all of it for a PyTorch user, with figures, a GAN trained in static mode, and
//! when not to trace: [docs/static_mode.md on GitHub](https://github.com/ember-rs/ember/blob/main/docs/static_mode.md).
//!
//! # Debugging
//!
//! [`detect_anomaly`] (or an [`AnomalyGuard`]) makes a NaN or Inf produced by a backward
//! node fail with the node's operation and the place its forward was created.
//! [`Var::register_hook`] sees (and may replace) gradients as they flow, and
//! [`Var::register_post_accumulate_grad_hook`] runs on a parameter once its `.grad` is
//! complete.
//!
//! ```
//! use ember_autograd::{detect_anomaly, Var};
//! use ember_tensor::Tensor;
//! use std::sync::{Arc, Mutex};
//! let w = Var::param(Tensor::from_vec(vec![0.0f64, 1.0], [2])?);
//! // log(0) = -inf: its gradient 1/w is infinite, and anomaly mode names the operation.
//! let err = detect_anomaly(|| w.log().mul_scalar(0.5).sum_all().backward()).unwrap_err();
//! assert!(err.to_string().contains("function 'log'"), "{err}");
//!
//! // Watch gradients as they flow, and collect each parameter's as soon as it is ready.
//! let seen = Arc::new(Mutex::new(Vec::new()));
//! let s = seen.clone();
//! let h = w.exp();
//! h.register_hook(|g| Ok(Some(g.clamp(Some(-1.0), Some(1.0)))))?; // clip what flows into h
//! w.register_post_accumulate_grad_hook(move |leaf| {
//!     s.lock().unwrap().push(leaf.grad().unwrap().to_vec::<f64>()?);
//!     Ok(())
//! })?;
//! w.zero_grad();
//! h.mul_scalar(3.0).sum_all().backward()?; // 3 clipped to 1, times e^w
//! assert_eq!(seen.lock().unwrap()[0], vec![1.0, 1.0f64.exp()]);
//! # Ok::<(), ember_tensor::Error>(())
//! ```
//!
//! # Mixed precision
//!
//! [`autocast()`] (or an [`AutocastGuard`]) runs matrix products, convolutions, attention
//! and recurrent layers in `bf16` or `f16` and the operations that need the range in `f32`,
//! by PyTorch's per-operation lists, per thread and device type; the casts are recorded, so
//! `f32` parameters get `f32` gradients. The [module docs](mod@autocast) have the rules.
//!
//! # Profiling
//!
//! [`profile`] (or a [`Profiler`]) times every operation's forward and every node's
//! backward on this thread, with [`record_function`] ranges of your own; the [`Profile`]
//! prints a table sorted by total time and exports a Chrome trace. Off, it costs one
//! thread-local check per operation.
//!
//! ```
//! use ember_autograd::{profile, Var};
//! use ember_tensor::{DType, Tensor};
//! let w = Var::param(Tensor::ones([16, 16], DType::F32)?);
//! let (r, prof) = profile(|| w.matmul(&w)?.relu().sum_all().backward());
//! r?;
//! assert_eq!(prof.key_averages().iter().filter(|s| s.name == "matmul").count(), 2); // forward, backward
//! print!("{}", prof.table());
//! let _json = prof.chrome_trace(); // open in chrome://tracing or Perfetto
//! # Ok::<(), ember_tensor::Error>(())
//! ```

#![warn(missing_docs)]

mod anomaly;
pub mod autocast;
mod backward;
mod backward_ctx;
pub mod checkpoint;
mod dot;
mod engine;
pub mod export;
mod extension;
pub mod function;
mod grad_buffer;
mod grad_mode;
mod gradcheck;
mod graph_view;
mod hooks;
pub mod inference_mode;
mod node;
mod node_cache;
mod op;
mod ops;
pub mod profiler;
mod reactive;
mod router;
pub mod save_on_cpu;
pub mod saved_hooks;
pub mod static_mode;
mod svg;
mod thread_mask;
mod var;

pub use anomaly::{AnomalyGuard, detect_anomaly, is_anomaly_enabled};
pub use autocast::{AutocastGuard, DeviceType, autocast, autocast_dtype, is_autocast_enabled};
pub use backward::grad;
pub use backward_ctx::BackwardCtx;
pub use checkpoint::checkpoint;
pub use dot::{save_dot, save_svg, to_dot, to_svg};
pub use function::{Function, FunctionCtx};
pub use grad_mode::{EnableGradGuard, NoGradGuard, enable_grad, is_grad_enabled, no_grad};
pub use gradcheck::{gradcheck, gradgradcheck};
pub use hooks::{GradHook, HookHandle, PostAccumulateHook};
pub use inference_mode::{InferenceModeGuard, inference_mode, is_inference_mode_enabled};
pub use op::{Grads, Op, Saves};
pub use profiler::{Profile, Profiler, profile, profile_with, record_function};
pub use reactive::reactive_nodes_visited;
pub use save_on_cpu::{SaveOnCpuGuard, save_on_cpu};
pub use saved_hooks::{SavedTensorsHooksGuard, saved_tensors_hooks};
pub use static_mode::{CachedLoss, ForwardInput, Traced};
pub use var::{IntoVar, Var};
