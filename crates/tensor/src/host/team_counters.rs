//! Counts of the parallel loops' work by who did it, for [`crate::threading::team_counters`]:
//! whether the helper threads share a kernel's work is then a count to read, not a timing
//! to infer it from.
//!
//! Each thread adds its share once per loop, not once per index, so the counts cost a few
//! atomic additions per loop. The helpers' share is kept in one slot per helper, each on its
//! own cache line: a slot shared by every helper would bounce between their cores at the
//! end of every loop.

use std::sync::atomic::{AtomicU64, Ordering};

/// How the parallel loops started from the program's own threads (the caller plus ember's
/// helper threads) shared their work since the process started: see [`crate::threading::team_counters`].
///
/// A kernel's loop has a fixed number of indices (blocks of rows, chunks of elements)
/// whatever the thread count; each is run by the caller or by one helper.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TeamCounters {
    /// Parallel loops started.
    pub loops: u64,
    /// Loops the caller ran alone: one thread configured, a single index, or the thread
    /// tuner (see [`crate::threading`]) judging helpers slower at the time.
    pub loops_alone: u64,
    /// Indices run by the calling threads.
    pub by_caller: u64,
    /// Indices run by the helper threads.
    pub by_helpers: u64,
}

/// An atomic counter on a cache line of its own (128 bytes: adjacent-line prefetching pairs
/// 64-byte lines on x86).
#[repr(align(128))]
struct Padded(AtomicU64);

impl Padded {
    const fn new() -> Padded {
        Padded(AtomicU64::new(0))
    }

    fn add(&self, v: u64) {
        if v != 0 {
            self.0.fetch_add(v, Ordering::Relaxed);
        }
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Helper slots; helpers beyond this many share slots (`helper % SLOTS`).
const SLOTS: usize = 64;

static LOOPS: Padded = Padded::new();
static ALONE: Padded = Padded::new();
static BY_CALLERS: Padded = Padded::new();
static BY_HELPERS: [Padded; SLOTS] = [const { Padded::new() }; SLOTS];

/// Records a loop that its caller ran alone, all `n` indices of it.
pub(super) fn loop_alone(n: usize) {
    LOOPS.add(1);
    ALONE.add(1);
    BY_CALLERS.add(n as u64);
}

/// Records a loop offered to the helpers, of which the caller ran `ran` indices.
pub(super) fn loop_shared(ran: u64) {
    LOOPS.add(1);
    BY_CALLERS.add(ran);
}

/// Records `ran` indices run by helper `helper`.
pub(super) fn helper_ran(helper: usize, ran: u64) {
    BY_HELPERS[helper % SLOTS].add(ran);
}

/// The counts so far.
pub(crate) fn read() -> TeamCounters {
    TeamCounters {
        loops: LOOPS.get(),
        loops_alone: ALONE.get(),
        by_caller: BY_CALLERS.get(),
        by_helpers: BY_HELPERS.iter().map(Padded::get).sum(),
    }
}
