//! The worker threads that kernels run on.
//!
//! Kernels use `rayon`'s global pool, which starts with one thread per core (or
//! `RAYON_NUM_THREADS`). [`set_num_threads`] fixes the size once, before any parallel work,
//! e.g. to compare with PyTorch at a given thread count.

use crate::{Error, Result};

/// Sizes the worker pool. Fails if the pool has already been started (by an earlier call or
/// by a parallel kernel) with a different size.
pub fn set_num_threads(n: usize) -> Result<()> {
    if n == 0 {
        return Err(Error::invalid("set_num_threads", "the number of threads must be positive"));
    }
    match rayon::ThreadPoolBuilder::new().num_threads(n).build_global() {
        Ok(()) => Ok(()),
        Err(_) if rayon::current_num_threads() == n => Ok(()),
        Err(e) => Err(Error::invalid(
            "set_num_threads",
            format!("the thread pool already runs {} threads: {e}", rayon::current_num_threads()),
        )),
    }
}

/// The number of worker threads kernels use.
pub fn num_threads() -> usize {
    rayon::current_num_threads()
}
