//! `ember-distributed`: data-parallel training across processes (MPI) or threads.
//!
//! * A [`ProcessGroup`] is a set of ranks that run collectives together: `all_reduce`
//!   (sum, avg, max, min), `broadcast`, `all_gather`, `reduce_scatter` and `barrier` on
//!   `f32`/`f64` (and `i64`) tensors, blocking or non-blocking (a [`Work`] handle with `wait()`), and
//!   sub-groups with [`new_group`](ProcessGroup::new_group). Ranks that disagree on a
//!   collective, a shape or a dtype get an error naming the ranks and shapes.
//! * [`LocalGroup`] runs the ranks as threads of one process (tests, no MPI needed);
//!   `MpiGroup` (cargo feature `mpi`) runs them as MPI processes under `mpirun`.
//! * [`DistributedDataParallel`] wraps a module: it broadcasts rank 0's parameters and
//!   buffers, all-reduces gradients in buckets launched from the parameters'
//!   post-accumulate hooks while backward goes on, and averages them before
//!   `backward()` returns.
//! * [`DistributedSampler`] gives each rank a disjoint shard of a dataset for
//!   `ember-data`'s `DataLoader`.
//!
//! The design, the cost model and the measurements are in `docs/distributed.md`.
//!
//! ```
//! use ember_distributed::{DistributedDataParallel, LocalGroup, ProcessGroup};
//! use ember_nn::{Linear, Module};
//! use ember_autograd::Var;
//! use ember_tensor::Tensor;
//! use std::sync::Arc;
//!
//! let grads = LocalGroup::spawn(2, |group| {
//!     let rank = group.rank();
//!     let model = DistributedDataParallel::new(Linear::new(3, 1)?, Arc::new(group))?;
//!     // Each rank sees its own data; backward averages the gradients across ranks.
//!     let x = Var::new(Tensor::full([4, 3], rank as f64 + 1.0, ember_tensor::DType::F32)?);
//!     model.forward(&x)?.sum_all().backward()?;
//!     model.module().named_parameters()[0].1.grad().unwrap().to_vec::<f32>()
//! });
//! let (g0, g1) = (grads[0].as_ref().unwrap(), grads[1].as_ref().unwrap());
//! assert_eq!(g0, g1);
//! assert_eq!(g0, &vec![6.0f32; 3]); // the mean of 4 * 1 and 4 * 2
//! # Ok::<(), ember_tensor::Error>(())
//! ```

#![warn(missing_docs)]

mod bucket;
mod comm;
mod ddp;
mod group;
mod header;
mod host_buf;
mod local;
#[cfg(feature = "mpi")]
mod mpi_group;
#[cfg(feature = "mpi")]
mod mpi_shm;
mod reduce_op;
mod reducer;
mod sampler;
#[cfg(any(feature = "mpi", test))]
mod shm;
mod transport;

pub use ddp::{DdpOptions, DdpStats, DistributedDataParallel, NoSyncGuard};
pub use group::{ProcessGroup, Work};
pub use local::LocalGroup;
#[cfg(feature = "mpi")]
pub use mpi_group::{MpiGroup, MpiOptions};
pub use reduce_op::ReduceOp;
pub use sampler::DistributedSampler;
