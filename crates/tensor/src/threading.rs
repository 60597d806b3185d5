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
//!
//! Whether the helpers join kernels at all is measured as the program runs: on a shared
//! virtual machine the host sometimes runs two vCPUs on one core, and then one thread is
//! faster than two. The team probes the other mode for 30 ms every one to four seconds and keeps
//! whichever makes loops faster; results do not depend on it. `EMBER_THREAD_TUNING=0` turns
//! the probing off (helpers join every kernel). Large matrix products are outside it: their
//! tiles are always shared with the helpers. [`team_counters`] shows who ran the loops'
//! work.
//!
//! Every thread running a kernel, the caller and the helpers alike, flushes subnormal floats
//! to zero while it does, unless [`set_flush_denormal`] or `EMBER_FLUSH_DENORMAL=0` turns that
//! off; the program's own code between kernels keeps its own float mode.

use crate::host::{float_mode, team, team_counters};
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

pub use crate::host::team_counters::TeamCounters;

/// The work of the parallel loops so far, by who did it: whether helper threads share the
/// kernels' work, as a count rather than a timing. Take it before and after the work to
/// look at and subtract. Loops started inside `rayon`'s pool are not counted; small work
/// that a kernel runs without a parallel loop is not either.
///
/// ```
/// use ember_tensor::{Tensor, threading};
/// let before = threading::team_counters();
/// let a = Tensor::randn([512, 512])?;
/// let _ = a.matmul(&a)?;
/// let after = threading::team_counters();
/// // The product's blocks were run by the caller and, with two or more threads, mostly
/// // shared with helpers.
/// assert!(after.by_caller + after.by_helpers > before.by_caller + before.by_helpers);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn team_counters() -> TeamCounters {
    team_counters::read()
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

/// Sets whether ember's kernels flush subnormal floats to zero, as PyTorch's
/// `torch.set_flush_denormal` does; returns whether the processor supports it (x86-64 and
/// AArch64 do; elsewhere nothing changes and the setting stays off).
///
/// Subnormals are the floats below the smallest normal one (about 1.2e-38 in `f32`, 2.2e-308
/// in `f64`). Arithmetic that reads or produces one takes a slow path on most processors,
/// tens to a hundred times slower, and training drifts into them: Adam's moving averages of a
/// parameter whose gradient stays exactly zero (a dead ReLU unit's weights) shrink
/// geometrically until they are subnormal, and every step then pays for them. With flushing
/// on, kernels treat subnormal operands as zero and round subnormal results to zero (x86's
/// flush-to-zero and denormals-are-zero modes, AArch64's FZ). Nothing else changes: values
/// from the normal range compute bitwise as before.
///
/// **The default is on** (unlike PyTorch, like TensorFlow): the quick-start MLP fed random
/// data trained at 92,000–99,000 samples/s throughout with flushing on, and with it off at
/// 53,000 for its first thousand steps and 32,000–34,000 once half of Adam's state had
/// turned subnormal; the MNIST quick start reached the same accuracy either way, faster with
/// flushing on (`docs/design.md`, "Subnormal numbers"). The `EMBER_FLUSH_DENORMAL`
/// environment variable (`0` or `1`) sets the default for a process; this call overrides
/// it. Turn flushing off where results must follow IEEE arithmetic into the subnormal range,
/// such as comparing `exp` of large negative numbers with the standard library's.
///
/// The setting applies to every thread while it runs an ember kernel: the calling thread
/// gets the mode when a kernel starts and its own back when it returns, so the program's
/// own arithmetic is never changed; ember's helper threads take up a change at their next
/// kernel. It can be changed at any time; kernels already running finish in the old mode.
///
/// ```
/// use ember_tensor::threading::{flush_denormal, set_flush_denormal};
/// use ember_tensor::Tensor;
/// let before = flush_denormal();
/// if set_flush_denormal(true) {
///     let tiny = Tensor::from_vec(vec![1e-38f32], [1])?.mul_scalar(1e-3);
///     assert_eq!(tiny.to_vec::<f32>()?, vec![0.0]);
/// }
/// set_flush_denormal(false);
/// let tiny = Tensor::from_vec(vec![1e-38f32], [1])?.mul_scalar(1e-3);
/// assert!(tiny.to_vec::<f32>()?[0] > 0.0);
/// set_flush_denormal(before);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn set_flush_denormal(on: bool) -> bool {
    float_mode::set_flush(on)
}

/// Whether ember's kernels flush subnormal floats to zero (see [`set_flush_denormal`]).
pub fn flush_denormal() -> bool {
    float_mode::flush()
}
