//! Parallel loops started from a thread outside the `rayon` pool, the usual case of a
//! program's main thread calling tensor operations.
//!
//! `rayon` enters its pool from outside by queueing the whole loop as one job and putting the
//! caller to sleep until a worker has finished it: the caller's core idles, and the
//! operation pays two cross-thread wake-ups (several microseconds each in a virtual
//! machine), which doubled the time of a 100k-element add. Here the caller works through the
//! loop itself, claiming indices from an atomic counter, and `threads - 1` helper jobs on the
//! pool claim indices too from the moment they start. A helper that starts late finds less
//! (or nothing) left; the caller never sleeps, and at the end waits only for the indices
//! helpers have already claimed.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Set in `Shared::helpers` once the caller has finished: no helper may start after it.
const CLOSED: usize = 1 << (usize::BITS - 1);

/// The loop body; `'a` is the lifetime of what it borrows.
type Body<'a> = dyn Fn(usize) + Sync + 'a;

struct Shared {
    /// The next index to claim; at or past `n` once all are claimed.
    next: AtomicUsize,
    /// Helpers currently running the loop body, plus `CLOSED`.
    helpers: AtomicUsize,
    /// The first panic of a helper, re-raised on the caller.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

impl Shared {
    /// Runs `f` on claimed indices until none are left.
    fn work(&self, n: usize, f: &Body<'_>) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= n {
                return;
            }
            f(i);
        }
    }

    /// Counts a helper in, unless the caller has already finished.
    fn enter(&self) -> bool {
        let mut cur = self.helpers.load(Ordering::Acquire);
        loop {
            if cur & CLOSED != 0 {
                return false;
            }
            match self.helpers.compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(c) => cur = c,
            }
        }
    }
}

/// Counts a helper out when dropped, also when the body panics.
struct Leave<'a>(&'a Shared);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        // Release: the helper's writes happen before the caller sees the count drop.
        self.0.helpers.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Closes the loop to new helpers and waits for the running ones when dropped, so that the
/// borrowed body outlives every use of it even when the caller's share panics.
struct Finish<'a>(&'a Shared);

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        self.0.helpers.fetch_or(CLOSED, Ordering::AcqRel);
        let mut spins = 0u32;
        while self.0.helpers.load(Ordering::Acquire) != CLOSED {
            // A running helper is inside one claimed index, a short wait; yield if it was
            // descheduled so that it can finish.
            if spins < 1 << 12 {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// The body pointer with its lifetime erased, so that a `'static` pool job can hold it.
struct ErasedBody(*const Body<'static>);
// SAFETY: the body is `Sync`, so calling it from another thread is fine; the lifetime is
// upheld by the enter/finish protocol (see `run`).
unsafe impl Send for ErasedBody {}

impl ErasedBody {
    /// The pointer; a method so that the job's closure captures the whole `Send` wrapper.
    fn get(&self) -> *const Body<'static> {
        self.0
    }
}

/// Calls `f(i)` once for every `i` in `0..n`, on the calling thread and on up to
/// `helpers` pool threads. Must be called from outside the pool (inside it, a helper job
/// could wait behind the caller's own task). A panic in `f` is re-raised here after every
/// thread has left the loop.
pub(crate) fn run(n: usize, helpers: usize, f: &Body<'_>) {
    let helpers = helpers.min(n.saturating_sub(1));
    if helpers == 0 {
        (0..n).for_each(f);
        return;
    }
    let shared = Arc::new(Shared { next: AtomicUsize::new(0), helpers: AtomicUsize::new(0), panic: Mutex::new(None) });
    // SAFETY: only the lifetime changes. A helper dereferences the pointer only between a
    // successful `enter` and its `Leave`, and `Finish` (dropped before `run` returns or
    // unwinds) closes `enter` and then waits for every entered helper to leave, so no use of
    // `f` outlives this call.
    let erased = unsafe { std::mem::transmute::<*const Body<'_>, *const Body<'static>>(f) };
    for _ in 0..helpers {
        let shared = Arc::clone(&shared);
        let body = ErasedBody(erased);
        rayon::spawn(move || {
            if !shared.enter() {
                return;
            }
            let _leave = Leave(&shared);
            // SAFETY: entered and not yet left, so the caller is still inside `run`.
            let f = unsafe { &*body.get() };
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| shared.work(n, f))) {
                // Stop the others early and hand the panic to the caller.
                shared.next.store(n, Ordering::Relaxed);
                shared.panic.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(p);
            }
        });
    }
    {
        let _finish = Finish(&shared);
        shared.work(n, f);
    }
    if let Some(p) = shared.panic.lock().unwrap_or_else(|e| e.into_inner()).take() {
        resume_unwind(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn every_index_runs_once() {
        for n in [0, 1, 2, 3, 17, 1000] {
            let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
            run(n, 3, &|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "n = {n}");
        }
    }

    #[test]
    fn a_panic_reaches_the_caller_after_the_loop() {
        let done = AtomicU32::new(0);
        let r = catch_unwind(AssertUnwindSafe(|| {
            run(64, 2, &|i| {
                if i == 5 {
                    panic!("index 5");
                }
                done.fetch_add(1, Ordering::Relaxed);
            })
        }));
        assert!(r.is_err());
        // Nothing runs after `run` has returned: the count is final.
        let seen = done.load(Ordering::Relaxed);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(done.load(Ordering::Relaxed), seen);
    }
}
