//! Automatic mixed precision: PyTorch's `torch.autocast`.
//!
//! Inside an [`autocast`] region (or while an [`AutocastGuard`] lives) for a device type,
//! operations on that device type's tensors pick their own precision: matrix products,
//! convolutions, attention and recurrent layers run in the region's lower-precision dtype
//! (`bf16` by default on the CPU, `f16` on CUDA), operations that need the range or the
//! accuracy (losses, and on CUDA softmax, the norms, `exp`, `log`, `pow`, sums) run in
//! `f32`, joins run in their widest input's dtype, and the rest follow their inputs. The
//! lists are PyTorch's ([`policy`] holds them, per device type); only `f32`, `f16` and
//! `bf16` inputs are converted, never integers or `f64`.
//!
//! The conversions are recorded operations (`Var::to_dtype`), so gradients flow back to
//! `f32` parameters in `f32`: parameters stay `f32`, only their copies inside the region are
//! 16-bit. Within one outermost region a parameter is converted once and its copy reused
//! (the weight cache), until the parameter is written in place; the copies are dropped when
//! the outermost region ends. Backward runs with the dtypes forward chose, whether or not
//! it is called inside the region.
//!
//! The state is per thread and per device type (another thread is not in the region;
//! `is_autocast_enabled(DeviceType::Cpu)` and `(DeviceType::Cuda)` are separate), regions
//! nest, and [`AutocastGuard::disabled`] turns autocast off for a sub-region. Outside any
//! region an operation with a policy pays one thread-local read.
//!
//! ```
//! use ember_autograd::autocast::{DeviceType, autocast, is_autocast_enabled};
//! use ember_autograd::Var;
//! use ember_tensor::{DType, Tensor};
//! let w = Var::param(Tensor::randn([4, 3])?);
//! let x = Var::new(Tensor::randn([2, 4])?);
//! let loss = autocast(DeviceType::Cpu, DType::BF16, || -> ember_tensor::Result<Var> {
//!     assert!(is_autocast_enabled(DeviceType::Cpu));
//!     let y = x.matmul(&w)?; // runs in bf16
//!     assert_eq!(y.dtype(), DType::BF16);
//!     Ok(y.to_dtype(DType::F32).square().mean_all())
//! })??;
//! loss.backward()?;
//! assert_eq!(w.grad().map(|g| g.dtype()), Some(DType::F32)); // the parameter's own dtype
//! # Ok::<(), ember_tensor::Error>(())
//! ```

mod cache;
mod cast;
pub mod policy;
mod state;

pub use cache::cached_copies;
pub use cast::{Cast, cast, cast_inputs, cast_list, run_cast, run_cast_list, without_autocast};
pub use policy::{OpPolicy, Policy};
pub use state::{AutocastGuard, DeviceType, autocast, autocast_dtype, is_autocast_enabled};
