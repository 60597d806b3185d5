//! `ember-tensor`: the tensor layer of ember.
//!
//! A [`Tensor`] is a cheap handle to shared storage seen through a [`Layout`]; views never
//! copy, in-place operations bump a version counter that autograd checks. Operations
//! validate their arguments and return [`Result`] where shapes, dimensions or dtypes can be
//! wrong; elementwise functions and tensor-scalar operations, which cannot fail, return
//! tensors directly. Computation happens in a [`backend::Backend`]; the CPU backend uses
//! SIMD loops dispatched at run time (AVX-512 or AVX2), parallel loops for large work (the
//! calling thread plus helper threads that stay awake between kernels, so that a training
//! step's many short parallel kernels do not each pay thread wake-ups) and the `gemm` crate
//! for matrix products. Storage comes from a buffer pool that reuses large
//! blocks ([`storage::memory_stats`]).
//!
//! ```
//! use ember_tensor::{manual_seed, DType, Tensor};
//! manual_seed(0);
//! let x = Tensor::randn([4, 3])?;
//! let w = Tensor::randn([3, 2])?;
//! let logits = x.matmul(&w)?.add(&Tensor::zeros([2], DType::F32)?)?;
//! let probs = logits.softmax(-1)?;
//! assert_eq!(probs.shape(), &[4, 2]);
//! let rows = probs.sum(-1, false)?.to_vec::<f32>()?;
//! assert!(rows.iter().all(|s| (s - 1.0).abs() < 1e-6));
//! # Ok::<(), ember_tensor::Error>(())
//! ```
//!
//! See [`dtype`] for the type-promotion rules and [`display`] for the print format.

#![warn(missing_docs)]
// Kernels index several parallel arrays with one loop variable; iterator chains would
// obscure them.
#![allow(clippy::needless_range_loop)]

pub mod amx_settings;
pub mod backend;
pub mod conv_settings;
pub mod device;
pub mod display;
pub mod dtype;
pub mod error;
mod host;
pub mod layout;
pub mod matmul_precision;
pub mod ops;
pub mod random;
pub mod shape;
pub mod storage;
mod tensor;
pub mod threading;

pub use amx_settings::{matmul_amx, set_matmul_amx};
pub use backend::{CmpOp, DeviceTimer, ReduceOp};
pub use conv_settings::{conv_winograd, set_conv_winograd};
pub use device::{Device, DeviceMemory};
pub use dtype::{DType, Element, FloatElement, Scalar};
pub use error::{Error, Result};
pub use half::{bf16, f16};
pub use layout::Layout;
pub use matmul_precision::{MatmulPrecision, float32_matmul_precision, matmul_precision, set_float32_matmul_precision};
pub use ops::attention::{Attention, AttentionShapes, check_attention};
pub use ops::conv::{ConvArgs, ConvTransposeArgs, Padding, Spatial, UnfoldArgs};
pub use ops::loss::{ClassLoss, ClassScores, LossReduction};
pub use ops::pool::{AvgPoolArgs, InterpolateArgs, InterpolateMode, MaxPoolArgs};
pub use ops::{BinaryOp, UnaryOp};
pub use random::manual_seed;
pub use shape::{Dim, Dims, Shape};
pub use tensor::Tensor;
pub use tensor::view::ShapeSpec;
