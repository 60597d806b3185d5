//! The worker threads that kernels run on.
//!
//! Kernels called from a program's own threads run on the calling thread plus `n - 1`
//! helper threads of ember's; after a kernel the helpers watch for the next one for 200 µs
//! before they sleep, so a training step's string of short kernels does not pay a thread
//! wake-up (15–25 µs on a virtual machine) each time. Work started inside `rayon`'s pool
//! uses `rayon`. Both have `n` threads: one per core by default (or `RAYON_NUM_THREADS`);
//! [`set_num_threads`] fixes `n` once, before any parallel work, e.g. to compare with
//! PyTorch at a given thread count.
//!
//! Watching keeps a core busy between kernels. Where that core is wanted for other work
//! (more processes than cores, a program that does long stretches of serial work between
//! kernels), shorten the watch with [`set_spin_wait`] or the `EMBER_SPIN_US` environment
//! variable, as `OMP_WAIT_POLICY=PASSIVE` does for PyTorch's OpenMP threads; 0 makes helpers
//! sleep at once after each kernel (MNIST MLP training on 2 threads then ran 11–14% slower
//! on our 2-core machine; see BENCHMARKS.md).

use crate::backend::cpu::team;
use crate::{Error, Result};
use std::time::Duration;

/// Sets how long helper threads keep watching for the next kernel before they sleep (by
/// default 200 µs, or `EMBER_SPIN_US` microseconds when that variable is set). Takes effect
/// from each helper's next wait; it can be changed at any time.
///
/// ```
/// use std::time::Duration;
/// ember_tensor::threading::set_spin_wait(Duration::from_micros(50));
/// assert_eq!(ember_tensor::threading::spin_wait(), Duration::from_micros(50));
/// ```
pub fn set_spin_wait(spin: Duration) {
    team::set_spin_wait(spin);
}

/// How long helper threads keep watching for the next kernel before they sleep.
pub fn spin_wait() -> Duration {
    team::spin_wait()
}

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
