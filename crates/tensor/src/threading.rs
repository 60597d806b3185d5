//! The worker threads that kernels run on.
//!
//! Kernels called from a program's own threads run on the calling thread plus `n - 1`
//! helper threads of ember's; after a kernel the helpers watch for the next one for 200 µs
//! before they sleep, so a training step's string of short kernels does not pay a thread
//! wake-up (15–25 µs on a virtual machine) each time. Work started inside `rayon`'s pool
//! uses `rayon`. Both have `n` threads: one per core by default (or `RAYON_NUM_THREADS`);
//! [`set_num_threads`] fixes `n` once, before any parallel work, e.g. to compare with
//! PyTorch at a given thread count.

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
