//! Parallel loops started from a thread outside the `rayon` pool, the usual case of a
//! program's main thread calling tensor operations.
//!
//! `rayon` enters its pool from outside by queueing the whole loop as one job and putting the
//! caller to sleep until a worker has finished it: the caller's core idles, and the
//! operation pays two cross-thread wake-ups, which doubled the time of a 100k-element add.
//! Here the caller works through the loop itself, claiming indices from the front, and
//! helper threads claim indices from the back from the moment they join. A helper that
//! joins late finds less (or nothing) left; the caller never sleeps, and at the end waits
//! only for the indices helpers have already claimed.
//!
//! The helpers are this module's own threads, not `rayon`'s: after a loop they keep
//! watching for the next one for a while ([`spin_wait`], 200 µs by default) before they
//! sleep. A training step is a string of parallel kernels separated by microseconds of
//! serial work, and waking a sleeping thread costs 15–25 µs on the virtual machines we
//! measured (a park/unpark round trip took 32–45 µs), more than a whole small kernel; a
//! watching helper joins within a fraction of a microsecond. OpenMP, under PyTorch, spins between parallel regions for the same reason.
//!
//! Whether helpers are offered a loop at all is measured as the program runs
//! ([`super::team_tuner`]): on a shared virtual machine they sometimes cost more than they
//! save.

use super::{team_counters, team_tuner};
use parking_lot::Mutex;
use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// Set in `Shared::helpers` once the caller has finished: no helper may start after it.
const CLOSED: usize = 1 << (usize::BITS - 1);

/// The loop body; `'a` is the lifetime of what it borrows.
type Body<'a> = dyn Fn(usize) + Sync + 'a;

struct Shared {
    /// Indices claimed so far, from either end; at or past `n` once all are.
    taken: AtomicUsize,
    /// Indices claimed from the front (the caller's end) and from the back (the helpers').
    front: AtomicUsize,
    back: AtomicUsize,
    /// Helpers currently running the loop body, plus `CLOSED`.
    helpers: AtomicUsize,
    /// How many helpers may join.
    max_helpers: usize,
    /// The first panic of a helper, re-raised on the caller.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

impl Shared {
    /// Runs `f` on claimed indices until none are left: the caller claims from the front,
    /// helpers from the back.
    ///
    /// Why two ends: a loop's indices are parts of its tensors in order, so each thread keeps
    /// working on the same end of the data from one kernel to the next and finds it in its own
    /// core's cache. With one shared counter the parts landed on either thread at random, and
    /// every kernel read about half of its input from the other core, which costs most when
    /// the host puts the two vCPUs on cores that do not share a cache (docs/design.md,
    /// "Threads and determinism", has the measurements).
    /// Returns how many indices this thread ran.
    fn work(&self, n: usize, f: &Body<'_>, from_back: bool) -> u64 {
        let mut ran = 0;
        // Claims are counted first, so the front's and the back's never meet: after `F`
        // front and `B` back claims, `F + B <= n`, and they cover `0..F` and `n - B..n`.
        while self.taken.fetch_add(1, Ordering::Relaxed) < n {
            let i = if from_back {
                n - 1 - self.back.fetch_add(1, Ordering::Relaxed)
            } else {
                self.front.fetch_add(1, Ordering::Relaxed)
            };
            f(i);
            ran += 1;
        }
        ran
    }

    /// Counts a helper in, unless the caller has already finished.
    fn enter(&self) -> bool {
        let mut cur = self.helpers.load(Ordering::Acquire);
        loop {
            if cur & CLOSED != 0 || cur >= self.max_helpers {
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
// SAFETY: as above; the body is `Sync`, so several helpers may call it at once.
unsafe impl Sync for ErasedBody {}

impl ErasedBody {
    /// The pointer; a method so that the job's closure captures the whole `Send` wrapper.
    fn get(&self) -> *const Body<'static> {
        self.0
    }
}

/// The number of worker threads ([`crate::threading::num_threads`]). Kernels ask here, not
/// `rayon`, because the first question from outside a `rayon` pool starts `rayon`'s global
/// pool, and its threads must start in the program's own float mode, not the one a kernel
/// may have set on the caller (see [`super::float_mode`]).
pub(crate) fn threads() -> usize {
    static STARTED: AtomicBool = AtomicBool::new(false);
    if !STARTED.load(Ordering::Relaxed) && rayon::current_thread_index().is_none() {
        super::float_mode::outside(rayon::current_num_threads);
        STARTED.store(true, Ordering::Relaxed);
    }
    rayon::current_num_threads()
}

/// How long a helper keeps watching for the next loop before it sleeps, by default.
const DEFAULT_SPIN: Duration = Duration::from_micros(200);

/// The watch time in nanoseconds; `u64::MAX` until first read (then from `EMBER_SPIN_US`).
static SPIN_NS: AtomicU64 = AtomicU64::new(u64::MAX);

/// How long helpers keep watching for the next loop before they sleep: set by
/// [`set_spin_wait`], else by the `EMBER_SPIN_US` environment variable (microseconds), else
/// 200 µs.
pub(crate) fn spin_wait() -> Duration {
    let ns = SPIN_NS.load(Ordering::Relaxed);
    if ns != u64::MAX {
        return Duration::from_nanos(ns);
    }
    let spin = std::env::var("EMBER_SPIN_US")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(DEFAULT_SPIN, Duration::from_micros);
    // A concurrent `set_spin_wait` wins over the environment.
    let _ = SPIN_NS.compare_exchange(u64::MAX, nanos(spin), Ordering::Relaxed, Ordering::Relaxed);
    Duration::from_nanos(SPIN_NS.load(Ordering::Relaxed))
}

/// Sets how long helpers watch for the next loop before they sleep.
pub(crate) fn set_spin_wait(spin: Duration) {
    SPIN_NS.store(nanos(spin), Ordering::Relaxed);
}

/// `d` in nanoseconds, below the "unset" marker.
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX - 1).min(u64::MAX - 1)
}

/// A loop published to the helpers: they run it if they join before it closes.
/// Called with the index of the helper that runs it.
type Job = Arc<dyn Fn(usize) + Send + Sync>;

/// The helper threads and the loop they are offered.
struct Helpers {
    /// Bumped each time a loop is published.
    generation: AtomicU64,
    /// The newest published loop.
    job: Mutex<Option<Job>>,
    /// Per helper: whether it sleeps (and must be woken to see a new loop).
    sleeping: Box<[AtomicBool]>,
    /// Per helper: its thread, `None` where the system refused to start it.
    threads: OnceLock<Vec<Option<Thread>>>,
}

/// The helpers, started at the first parallel loop: one fewer than the worker threads
/// ([`crate::threading::num_threads`]), since the caller works too.
fn helpers() -> &'static Helpers {
    static HELPERS: OnceLock<&'static Helpers> = OnceLock::new();
    HELPERS.get_or_init(|| {
        // Asked through `threads`, which starts `rayon`'s pool in the program's own
        // float mode. The helpers themselves may inherit the kernels' mode from the caller;
        // they set their own when they pick up a loop.
        let count = threads().saturating_sub(1);
        // Leaked: the helpers serve for the life of the process, like `rayon`'s workers.
        let h: &'static Helpers = Box::leak(Box::new(Helpers {
            generation: AtomicU64::new(0),
            job: Mutex::new(None),
            sleeping: (0..count).map(|_| AtomicBool::new(false)).collect(),
            threads: OnceLock::new(),
        }));
        let threads = (0..count)
            .map(|i| {
                let spawn = std::thread::Builder::new().name(format!("ember-helper-{i}")).spawn(move || h.serve(i));
                // A helper that cannot be started leaves the loops fewer hands, nothing worse.
                spawn.ok().map(|j| j.thread().clone())
            })
            .collect();
        let _ = h.threads.set(threads);
        h
    })
}

impl Helpers {
    /// A helper's life: wait for a new loop, join it, repeat.
    fn serve(&self, me: usize) {
        let mut seen = 0;
        loop {
            seen = self.wait(me, seen);
            let job = self.job.lock().clone();
            if let Some(job) = job {
                // Helpers run only kernels, so they keep the flush mode between loops.
                super::float_mode::follow();
                job(me);
            }
        }
    }

    /// Returns the first generation after `seen`: watching for [`spin_wait`], then asleep.
    fn wait(&self, me: usize, seen: u64) -> u64 {
        let start = Instant::now();
        let spin = spin_wait();
        let mut spins = 0u32;
        loop {
            let g = self.generation.load(Ordering::Acquire);
            if g != seen {
                return g;
            }
            spins = spins.wrapping_add(1);
            if !spins.is_multiple_of(64) || start.elapsed() < spin {
                std::hint::spin_loop();
                continue;
            }
            // Announce the sleep, then look once more: a publisher either sees the flag
            // and wakes us, or published before the flag and we see its generation.
            let sleeping = &self.sleeping[me];
            sleeping.store(true, Ordering::SeqCst);
            let g = self.generation.load(Ordering::SeqCst);
            if g != seen {
                sleeping.store(false, Ordering::Relaxed);
                return g;
            }
            while sleeping.load(Ordering::SeqCst) {
                std::thread::park();
            }
            return self.generation.load(Ordering::Acquire);
        }
    }

    /// Offers `job` to every helper and wakes the sleeping ones.
    fn publish(&self, job: Job) {
        *self.job.lock() = Some(job);
        self.generation.fetch_add(1, Ordering::SeqCst);
        let threads = self.threads.get().map(Vec::as_slice).unwrap_or_default();
        for (sleeping, thread) in self.sleeping.iter().zip(threads) {
            if sleeping.swap(false, Ordering::SeqCst)
                && let Some(t) = thread
            {
                t.unpark();
            }
        }
    }

    /// Drops the published job if it is still `job`, so that a finished loop's state is
    /// not kept alive until the next one.
    fn withdraw(&self, job: &Job) {
        let mut slot = self.job.lock();
        if slot.as_ref().is_some_and(|j| Arc::ptr_eq(j, job)) {
            *slot = None;
        }
    }
}

/// How much work each index of a loop is, which decides whether the thread tuner has a say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Grain {
    /// Indices of any size: [`super::team_tuner`] decides whether helpers are offered the
    /// loop, and measures it.
    Tuned,
    /// Every index is tens of microseconds of work or more (a block of a large matrix
    /// product): the helpers are always offered the loop, and the tuner neither decides
    /// nor measures it.
    ///
    /// The tuner exists for the host that runs both vCPUs on one core, where a helper
    /// watching for the next of a string of short loops takes that core's time from the
    /// caller. A helper sharing a core with the caller on long indices costs little (the two
    /// take turns on the same work), and on two cores it halves the loop; while a solo probe
    /// of the tuner, which lasts at least its 32 loops, ran 32 such loops on one thread: a
    /// second or more of large products. So heavy loops always share their work.
    Heavy,
}

/// The tuner that decides whether a loop of `grain` is offered to the helpers and measures
/// it: none for heavy loops, nor where `EMBER_THREAD_TUNING=0` turned it off.
fn tuner_for(grain: Grain) -> Option<&'static team_tuner::Tuner> {
    (grain == Grain::Tuned && team_tuner::enabled()).then_some(&team_tuner::TUNER)
}

/// Calls `f(i)` once for every `i` in `0..n`, on the calling thread and on up to
/// `helpers` helper threads. `key` names the loop to the tuner
/// ([`team_tuner::loop_key`]). A panic in `f` is re-raised here after every thread has left
/// the loop. Safe to call from several threads at once and from inside a loop body: a
/// caller never waits for a helper that has not joined its loop, and at worst runs the loop
/// alone.
///
/// Whether helpers are called for a [`Grain::Tuned`] loop is up to [`super::team_tuner`],
/// which measures whether they make loops faster on this machine; [`Grain::Heavy`] loops
/// always call them.
pub(crate) fn run(n: usize, helpers: usize, grain: Grain, key: u64, f: &Body<'_>) {
    let helpers = helpers.min(n.saturating_sub(1));
    if helpers == 0 {
        team_counters::loop_alone(n);
        (0..n).for_each(f);
        return;
    }
    let Some(tuner) = tuner_for(grain) else {
        if grain == Grain::Heavy && team_tuner::enabled() {
            // Not the tuner's to decide, but taken out of the measured loops' costs: heavy
            // loops run with helpers in either mode.
            let start = Instant::now();
            run_team(n, helpers, f);
            return team_tuner::TUNER.record_heavy(start.elapsed());
        }
        return run_team(n, helpers, f);
    };
    let start = Instant::now();
    if tuner.solo() {
        team_counters::loop_alone(n);
        (0..n).for_each(f);
    } else {
        run_team(n, helpers, f);
    }
    let end = Instant::now();
    tuner.record(key, end - start, end);
}

/// [`run`] with `helpers` (at least one) offered the loop.
fn run_team(n: usize, helpers: usize, f: &Body<'_>) {
    let shared = Arc::new(Shared {
        taken: AtomicUsize::new(0),
        front: AtomicUsize::new(0),
        back: AtomicUsize::new(0),
        helpers: AtomicUsize::new(0),
        max_helpers: helpers,
        panic: Mutex::new(None),
    });
    // SAFETY: only the lifetime changes. A helper dereferences the pointer only between a
    // successful `enter` and its `Leave`, and `Finish` (dropped before `run` returns or
    // unwinds) closes `enter` and then waits for every entered helper to leave, so no use of
    // `f` outlives this call.
    let erased = unsafe { std::mem::transmute::<*const Body<'_>, *const Body<'static>>(f) };
    let body = ErasedBody(erased);
    let job: Job = {
        let shared = Arc::clone(&shared);
        Arc::new(move |me| {
            if !shared.enter() {
                return;
            }
            let _leave = Leave(&shared);
            // SAFETY: entered and not yet left, so the caller is still inside `run`.
            let f = unsafe { &*body.get() };
            match catch_unwind(AssertUnwindSafe(|| shared.work(n, f, true))) {
                Ok(ran) => team_counters::helper_ran(me, ran),
                Err(p) => {
                    // Stop the others early and hand the panic to the caller.
                    shared.taken.store(n, Ordering::Relaxed);
                    shared.panic.lock().get_or_insert(p);
                }
            }
        })
    };
    let team = self::helpers();
    team.publish(Arc::clone(&job));
    {
        let _finish = Finish(&shared);
        team_counters::loop_shared(shared.work(n, f, false));
    }
    team.withdraw(&job);
    if let Some(p) = shared.panic.lock().take() {
        resume_unwind(p);
    }
}

#[cfg(test)]
mod tests {
    // The loops here call the helpers whatever the tuner thinks of them: `run_team`.
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn heavy_loops_are_never_left_to_the_tuner() {
        // Heavy loops go straight to the helpers whatever the tuner would decide, and other
        // loops follow the tuner wherever it is on.
        assert!(tuner_for(Grain::Heavy).is_none());
        assert_eq!(tuner_for(Grain::Tuned).is_some(), team_tuner::enabled());
    }

    #[test]
    fn every_index_runs_once() {
        for n in [0, 1, 2, 3, 17, 1000] {
            let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
            run_team(n, 3, &|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "n = {n}");
        }
    }

    #[test]
    fn the_caller_takes_the_front_and_helpers_the_back() {
        // Whoever joins when, the caller's indices are a prefix and the helpers' a suffix, so
        // each thread keeps to its own end of the data from one loop to the next.
        let caller = std::thread::current().id();
        for _ in 0..50 {
            let n = 64;
            let by_caller: Vec<AtomicBool> = (0..n).map(|_| AtomicBool::new(false)).collect();
            run_team(n, 3, &|i| {
                by_caller[i].store(std::thread::current().id() == caller, Ordering::Relaxed);
                // Long enough for helpers to join.
                std::thread::sleep(Duration::from_micros(20));
            });
            let mine: Vec<bool> = by_caller.iter().map(|b| b.load(Ordering::Relaxed)).collect();
            let prefix = mine.iter().take_while(|&&m| m).count();
            assert!(mine[prefix..].iter().all(|&m| !m), "caller's indices are not a prefix: {mine:?}");
        }
    }

    #[test]
    fn concurrent_and_nested_loops_each_run_every_index_once() {
        // Several callers publish at once (each may find the helpers on another's loop) and
        // bodies start loops of their own: every index still runs exactly once.
        std::thread::scope(|s| {
            for t in 0..4 {
                s.spawn(move || {
                    for round in 0..50 {
                        let n = 8 + (t * 7 + round) % 40;
                        let hits: Vec<AtomicU32> = (0..n * 3).map(|_| AtomicU32::new(0)).collect();
                        run_team(n, 3, &|i| {
                            run_team(3, 3, &|j| {
                                hits[i * 3 + j].fetch_add(1, Ordering::Relaxed);
                            });
                        });
                        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "thread {t} round {round}");
                    }
                });
            }
        });
    }

    #[test]
    fn sleeping_helpers_wake_for_the_next_loop() {
        if rayon::current_num_threads() < 2 {
            return; // no helpers to wake
        }
        // The unit tests run in parallel and other tests' loops use the same helpers: a loop
        // published while a helper works on another test's loop runs alone. So the check is
        // that some attempt, each after the helpers have fallen asleep, gets a helper.
        let woke = (0..5).any(|_| {
            let hits = AtomicU32::new(0);
            run_team(4, 1, &|_| {
                hits.fetch_add(1, Ordering::Relaxed);
            });
            // Long enough for the helpers to stop watching and sleep.
            std::thread::sleep(spin_wait() * 20);
            let helper_ran = AtomicU32::new(0);
            let caller = std::thread::current().id();
            run_team(2, 1, &|_| {
                if std::thread::current().id() != caller {
                    helper_ran.fetch_add(1, Ordering::Relaxed);
                }
                // Hold the caller on its first index until a helper takes the other one.
                let start = std::time::Instant::now();
                while std::thread::current().id() == caller
                    && helper_ran.load(Ordering::Relaxed) == 0
                    && start.elapsed() < std::time::Duration::from_secs(1)
                {
                    std::hint::spin_loop();
                }
            });
            // A woken helper may take both indices before the caller claims one (the caller
            // can be descheduled right after publishing), so any count above zero shows it
            // woke.
            helper_ran.load(Ordering::Relaxed) >= 1
        });
        assert!(woke, "no sleeping helper woke in 5 attempts");
    }

    #[test]
    fn helpers_that_sleep_at_once_still_run_every_index() {
        let before = spin_wait();
        set_spin_wait(Duration::ZERO);
        assert_eq!(spin_wait(), Duration::ZERO);
        for n in [1, 7, 64, 500] {
            let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
            run_team(n, 3, &|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "n = {n}");
        }
        set_spin_wait(before);
        assert_eq!(spin_wait(), before);
    }

    #[test]
    fn a_panic_reaches_the_caller_after_the_loop() {
        let done = AtomicU32::new(0);
        let r = catch_unwind(AssertUnwindSafe(|| {
            run_team(64, 2, &|i| {
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
