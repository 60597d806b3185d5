//! `ember-autograd`: `Var`, the graph, and the backward engine.
//!
//! See the crate README section in the workspace docs for the full semantics; the short
//! version follows PyTorch, with the stricter rules of seed 001 §7.2.
//!
//! - [`Var`] is an `Arc` handle to a graph node. `Var::param` makes a leaf that requires
//!   grad, `Var::new` an input or constant. Operations compute at once and, in grad mode,
//!   record themselves.
//! - [`Var::backward`] accumulates gradients into the `.grad` of leaves that require grad.
//!   Each backward propagates only its own signal; leaves accumulate across calls until
//!   [`Var::zero_grad`].
//! - [`grad`] returns gradients without touching any `.grad`, optionally as differentiable
//!   graphs (`create_graph`) for higher-order derivatives.
//! - [`no_grad`], [`NoGradGuard`], [`enable_grad`]: thread-local grad mode.

#![warn(missing_docs)]

mod anomaly;
mod backward;
mod backward_ctx;
mod engine;
mod grad_mode;
mod gradcheck;
mod hooks;
mod node;
mod ops;
mod reactive;
mod var;

pub use anomaly::{AnomalyGuard, detect_anomaly, is_anomaly_enabled};
pub use backward::grad;
pub use backward_ctx::BackwardCtx;
pub use grad_mode::{EnableGradGuard, NoGradGuard, enable_grad, is_grad_enabled, no_grad};
pub use gradcheck::gradcheck;
pub use hooks::{GradHook, HookHandle, PostAccumulateHook};
pub use node::{Grads, Op, Saves};
pub use var::{IntoVar, Var};
