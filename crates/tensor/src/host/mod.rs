//! Computation on host memory that the CPU backend shares with the layers around it: the
//! vectorisable `f32` functions behind [`FloatElement`](crate::FloatElement), the float mode
//! every kernel thread runs in, strided iteration and the parallel loops (the caller plus
//! ember's helper threads), reading a strided host view into a `Vec`, and random draws from
//! the global generator.
//!
//! Everything here depends only on the core types (shapes, layouts, dtypes, storages), so
//! the tensor layer (`Tensor::to_vec`, `Tensor::update_`), the thread settings
//! ([`crate::threading`]) and every backend can use it without reaching into another
//! backend.

pub(crate) mod fastmath;
pub(crate) mod float_mode;
pub(crate) mod iter;
pub(crate) mod random;
pub(crate) mod read;
pub(crate) mod team;
pub(crate) mod team_counters;
mod team_tuner;
