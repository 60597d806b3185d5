//! `ember-optim`: optimizers, learning-rate schedulers and gradient clipping for ember, with
//! PyTorch's update rules.
//!
//! - Optimizers implement [`Optimizer`]: [`Sgd`] (momentum, dampening, Nesterov, weight
//!   decay), [`Adam`] (with AMSGrad), [`AdamW`] (decoupled weight decay) and [`RmsProp`]
//!   (centered, momentum). Each is built from a parameter list, either with a config struct
//!   (`Adam::new(params, AdamConfig { lr: 1e-3, ..Default::default() })`) or with chained
//!   settings (`Adam::with_params(params).lr(1e-3).build()`), and owns exactly those
//!   parameters: several optimizers can split a model's parameters between them.
//! - A step updates each parameter's value in place, under `no_grad`, with one fused
//!   backend kernel per parameter (`Tensor::sgd_step_`, `adam_step_`, `rmsprop_step_`,
//!   see [`ember_tensor::backend::Backend`]) in the parameter's own dtype (f32 or f64): one
//!   pass over the parameter, its gradient and its state, no temporaries, rounded like
//!   ATen's kernels.
//!   Parameters that do not require grad (frozen ones included, even with a stale
//!   gradient) and parameters without a gradient are skipped, their value and state
//!   untouched. In-place writes bump the value's version, so a backward through a graph
//!   that saved a parameter before the step reports the modification, as in PyTorch.
//! - [`Optimizer::state_dict`] and [`Optimizer::load_state_dict`] save and restore the
//!   hyperparameters and per-parameter state ([`OptimizerState`]), so training resumes exactly.
//! - Schedulers implement [`LrScheduler`]: [`StepLR`], [`CosineAnnealingLR`], [`LambdaLR`].
//! - [`clip_grad_norm_`] rescales gradients to a maximum total norm.
//!
//! The update rules, schedules and clipping are checked against PyTorch trajectories
//! (`tools/parity/optim.py`, `tests/parity_optim.rs`).
//!
//! # Example
//!
//! Fitting `y = 2x - 1` with Adam, a cosine schedule and gradient clipping:
//!
//! ```
//! use ember_autograd::Var;
//! use ember_optim::{clip_grad_norm_, Adam, CosineAnnealingLR, LrScheduler, Optimizer};
//! use ember_tensor::Tensor;
//!
//! let x = Tensor::from_vec(vec![-1.0f32, 0.0, 1.0, 2.0], [4, 1])?;
//! let y = Tensor::from_vec(vec![-3.0f32, -1.0, 1.0, 3.0], [4, 1])?;
//! let w = Var::param(Tensor::zeros([1, 1], ember_tensor::DType::F32)?);
//! let b = Var::param(Tensor::zeros([1], ember_tensor::DType::F32)?);
//!
//! let mut opt = Adam::with_params(vec![w.clone(), b.clone()]).lr(0.1).build()?;
//! let mut sched = CosineAnnealingLR::new(&mut opt, 300, 1e-3)?;
//! for _epoch in 0..300 {
//!     opt.zero_grad();
//!     let pred = (Var::new(x.clone()).matmul(&w)? + &b)?;
//!     let err = (&pred - &Var::new(y.clone()))?;
//!     let loss = (&err * &err)?.mean_all();
//!     loss.backward()?;
//!     clip_grad_norm_(opt.params(), 10.0, 2.0)?;
//!     opt.step()?;
//!     sched.step(&mut opt);
//! }
//! assert!((w.value().item()? - 2.0).abs() < 1e-2);
//! assert!((b.value().item()? + 1.0).abs() < 1e-2);
//! # Ok::<(), ember_tensor::Error>(())
//! ```

#![warn(missing_docs)]

mod adam;
mod builder;
mod clip;
mod grad_scaler;
mod optimizer;
mod optimizer_state;
mod params;
mod pt_format;
mod rmsprop;
mod scheduler;
mod sgd;

pub use adam::{Adam, AdamBuilder, AdamConfig, AdamW, AdamWBuilder, AdamWConfig};
pub use clip::clip_grad_norm_;
pub use grad_scaler::{GradScaler, GradScalerBuilder, GradScalerConfig, GradScalerState};
pub use optimizer::Optimizer;
pub use optimizer_state::OptimizerState;
pub use rmsprop::{RmsProp, RmsPropBuilder, RmsPropConfig};
pub use scheduler::{CosineAnnealingLR, LambdaLR, LrScheduler, StepLR};
pub use sgd::{Sgd, SgdBuilder, SgdConfig};
