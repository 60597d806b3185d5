//! The comparison and reduction kinds a [`Backend`](super::Backend) computes. Like the
//! elementwise kinds, [`UnaryOp`](super::UnaryOp) and [`BinaryOp`](super::BinaryOp), they
//! are generated from the op tables in `ops/`.

pub use crate::ops::{CmpOp, ReduceOp};

// The CUDA backend's kernel source is generated from the op tables. It is plain text, so
// it is also compiled in builds without the `cuda` feature (where `backend::cuda` is the
// emulated device), for its tests: they check that every op has a CUDA kernel, and those
// builds are the ones the workspace tests run.
#[cfg(all(test, not(feature = "cuda")))]
#[path = "cuda/kernel_source.rs"]
mod cuda_kernel_source;
