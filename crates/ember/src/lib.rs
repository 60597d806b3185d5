//! ember: a deep-learning framework in Rust with a PyTorch-grade autograd engine.
//!
//! This crate re-exports the layers so that one dependency is enough:
//!
//! | module | crate | what it holds |
//! |---|---|---|
//! | [`tensor`] | `ember-tensor` | `Tensor`, dtypes, layouts, storage, the CPU backend |
//! | [`autograd`] | `ember-autograd` | `Var`, backward, `grad`, grad mode, hooks, gradcheck |
//! | [`io`] | `ember-io` | `StateDict`, safetensors files and `torch.save` checkpoints |
//! | [`nn`] | `ember-nn` | `Module`, layers, losses, `state_dict` (its files re-exported from `io`) |
//! | [`optim`] | `ember-optim` | SGD, Adam, AdamW, RMSprop, LR schedulers, gradient clipping |
//! | [`data`] | `ember-data` | `Dataset`, `DataLoader`, the MNIST reader |
//! | `pnnx` (feature `pnnx`) | `ember-pnnx` | PNNX models (`.param` + `.bin` from PyTorch's PNNX tool) on ember's layers |
//! | `distributed` (feature `distributed`) | `ember-distributed` | process groups (threads, MPI with feature `mpi`), `DistributedDataParallel`, `DistributedSampler` |
//! | `onnx` (feature `onnx`) | `ember-onnx` | ONNX import (a graph IR that runs on `Var`s) and export |
//! | `models` (feature `models`) | `ember-models` | pretrained architectures, Hugging Face checkpoint directories, tokenizers, generation |
//!
//! The last four are opt-in, so that a program that does not use them does not compile
//! them: `ember = { version = "0.1", features = ["onnx"] }` turns on `ember::onnx`, and
//! `features = ["full"]` all four (`mpi` implies `distributed`).
//!
//! `use ember::prelude::*;` brings the everyday names into scope; [`mnist`] holds the quick
//! start (model, data, training epoch, evaluation) behind `cargo run --release --example mnist`;
//! [`gan`] a small GAN trained in static mode (traced networks, gradient routing, a cached
//! criterion) behind `cargo run --release --example gan`, with DCGAN networks
//! ([`gan::dcgan`]) and an eager trainer with WGAN-GP ([`gan::eager`]). The other training
//! scenarios of the examples: [`multitask`] (shared trunk, a classifier and a regressor,
//! weighted losses, a frozen head, `retain_graph`), [`transfer`] (a frozen encoder), and on
//! [`cartpole`] [`actor_critic`], [`dqn`] (a target network) and [`ppo`] (separate actor and
//! critic); [`char_lm`] holds the character-level Transformer language model, [`tbptt`] an
//! LSTM language model trained with truncated backpropagation through time.
//!
//! ```
//! use ember::prelude::*;
//! manual_seed(0);
//! let x = Var::new(Tensor::randn([4, 3])?);
//! let w = Var::param(Tensor::randn([3, 2])?);
//! let loss = x.matmul(&w)?.relu().mean_all();
//! loss.backward()?;
//! assert_eq!(w.grad().unwrap().shape(), &[3, 2]);
//! # Ok::<(), ember::Error>(())
//! ```

// `#[derive(Module)]` from `ember::nn` names this crate `::ember`, inside it too.
extern crate self as ember;

pub mod actor_critic;
pub mod cartpole;
pub mod char_lm;
pub mod dqn;
pub mod gan;
pub mod mnist;
pub mod multitask;
pub mod ppo;
pub mod soak;
pub mod tbptt;
pub mod transfer;

pub use ember_autograd as autograd;
pub use ember_data as data;
#[cfg(feature = "distributed")]
pub use ember_distributed as distributed;
pub use ember_io as io;
/// `ember-nn`: modules, layers, losses and model files; see [`ember_nn`]. Its
/// `#[derive(Module)]` reaches the crate through `ember::nn` here, so that a crate depending
/// on `ember` alone can derive.
pub mod nn {
    #[doc(inline)]
    pub use ember_derive::FacadeModule as Module;
    #[doc(inline)]
    pub use ember_nn::*;
}
#[cfg(feature = "models")]
pub use ember_models as models;
#[cfg(feature = "onnx")]
pub use ember_onnx as onnx;
pub use ember_optim as optim;
#[cfg(feature = "pnnx")]
pub use ember_pnnx as pnnx;
pub use ember_tensor as tensor;

pub use ember_autograd::{Var, no_grad};
pub use ember_tensor::{
    DType, Device, Error, Result, Tensor, bf16, f16, float32_matmul_precision, manual_seed,
    set_float32_matmul_precision,
};

/// The everyday names: tensors, `Var`, grad and inference mode, dtypes, errors, and the traits whose
/// methods a training loop calls (`Module`, `ModuleExt`, `Loss`, `Optimizer`,
/// `LrScheduler`), so that `model.parameters()` or `opt.step()` work without more imports;
/// `Module` is also `#[derive(Module)]`.
pub mod prelude {
    pub use crate::nn::{Loss, Module, ModuleExt};
    pub use ember_autograd::{
        InferenceModeGuard, NoGradGuard, Var, enable_grad, grad, inference_mode, is_grad_enabled, no_grad,
    };
    pub use ember_optim::{LrScheduler, Optimizer};
    pub use ember_tensor::{DType, Device, Error, Result, Tensor, manual_seed};
}

/// The README's code blocks, compiled and run as doctests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

/// `docs/static_mode.md`'s code blocks, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/static_mode.md")]
pub struct StaticModeDoctests;
