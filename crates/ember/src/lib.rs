//! ember: a deep-learning framework in Rust with a PyTorch-grade autograd engine.
//!
//! This facade re-exports the layers: [`tensor`] (tensors and the CPU backend).

pub use ember_tensor as tensor;
pub use ember_tensor::{DType, Device, Error, Result, Tensor, manual_seed};
