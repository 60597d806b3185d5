//! The seam between tensors and devices.
//!
//! `Tensor` methods validate arguments, resolve dimensions, promote dtypes and compute
//! output layouts; then they call one [`Backend`] method with storages and layouts that
//! are already consistent. A backend only computes. Adding a device means implementing
//! this trait and adding a [`crate::storage::Storage`] variant; callers do not change.
//!
//! Inside, the layers point down only:
//!
//! - the trait ([`Backend`], generated in `seam.rs` from its method list in `methods.rs`),
//!   the operands
//!   its methods take ([`View`], [`Target`], ...), the default bodies of its heavy methods
//!   (`compose`), the checks every backend runs on its views (`validate`) and the
//!   generated delegating backends ([`Delegate`]);
//! - the backends, leaves that import nothing from each other: [`cpu`], `cuda` (feature
//!   `cuda`) or `emulated_cuda` (without it), `libtorch` (feature `libtorch`);
//! - the registry, [`backend_for`], the one place above the backends that names them.
//!
//! For code outside `ember-tensor` the public seam is [`Backend`], its operand types
//! ([`View`], [`Target`], [`AdamState`], [`RmsPropState`]), [`backend_for`] and
//! [`Delegate`] with [`delegate_backend!`](crate::delegate_backend); the descriptors the
//! methods take are in [`crate::ops`].

mod compose;
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod delegate;
#[cfg(not(feature = "cuda"))]
pub mod emulated_cuda;
pub(crate) mod kernels;
#[cfg(feature = "libtorch")]
pub mod libtorch;
mod methods;
mod operands;
mod registry;
mod seam;
#[doc(hidden)]
pub mod signature;
mod timer;
pub(crate) mod validate;
pub(crate) mod widen;

// The CUDA backend's kernel source is generated from the op tables. It is plain text, so
// it is also compiled in builds without the `cuda` feature (where the device is the
// emulated one), for its tests: they check that every op has a CUDA kernel, and those
// builds are the ones the workspace tests run.
#[cfg(all(test, not(feature = "cuda")))]
#[path = "cuda/kernel_source.rs"]
mod cuda_kernel_source;

pub use crate::ops::{BinaryOp, CmpOp, ReduceOp, UnaryOp};
pub use delegate::Delegate;
pub use operands::{AdamState, RmsPropState, Target, View};
pub use registry::backend_for;
pub use seam::Backend;
pub use timer::DeviceTimer;
