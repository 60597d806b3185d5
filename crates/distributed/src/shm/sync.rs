//! The control block each rank keeps at the start of its shared-memory portion, and the
//! barrier the ranks meet at through it.
//!
//! A barrier is a generation count: each rank publishes the number of barriers it has
//! reached, and waits until every other rank's count is at least its own. A waiter spins
//! for a short while (the peers of a collective usually arrive within microseconds of each
//! other) and then sleeps on a futex, so that a rank waiting for a peer still in backward
//! leaves the core to the computation (the host may have as many busy threads as cores).

use crate::header::WORDS;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// One rank's control block. The words other ranks write (`sleepers`) sit on their own
/// cache line, apart from the words the owner writes.
#[repr(C, align(64))]
pub(crate) struct Control {
    /// Barriers this rank has reached.
    arrived: AtomicU64,
    /// Bumped after every arrival; the futex word sleepers wait on.
    wake: AtomicU32,
    _own: [u8; 52],
    /// Ranks sleeping on `wake` (written by the waiters).
    sleepers: AtomicU32,
    _theirs: [u8; 60],
    /// Two header slots, used alternately by successive barriers (a rank may write the
    /// next header while a slow peer still reads the previous one).
    pub(crate) headers: [[AtomicU64; WORDS]; 2],
}

/// The bytes reserved for a control block at the start of each rank's portion: a page, so
/// that the data after it starts page-aligned.
pub(crate) const CONTROL_BYTES: usize = 4096;
const _: () = assert!(std::mem::size_of::<Control>() <= CONTROL_BYTES);

/// How long a waiter spins before it sleeps. A sleeping waiter pays a wake-up when its
/// peer arrives (35-55 µs on a virtual machine, measured per barrier), and the ranks of a
/// training step reach the all-reduce hundreds of microseconds apart. A spinning one yields
/// every few microseconds, so a computation sharing its core still runs (ranks bound to
/// cores, Open MPI's default for two ranks, keep each rank's threads on one core): in
/// `ddp_scaling.sh`'s MLP with ranks bound to cores, 300 µs left 0.20-0.36 ms of exposed
/// all-reduce per step against 0.29-0.39 ms at 30 µs (alternating runs).
const SPIN: Duration = Duration::from_micros(300);
/// A sleeper wakes up at least this often to look again (a missed wake-up cannot hang it).
const NAP: Duration = Duration::from_millis(5);

impl Control {
    /// Announces that this rank reached barrier `generation` and wakes its sleepers.
    pub(crate) fn arrive(&self, generation: u64) {
        // SeqCst on `arrived`, `wake` and `sleepers` (here and in `wait_for`): either the
        // waiter sees the arrival, or this load sees the waiter registered and wakes it.
        self.arrived.store(generation, Ordering::SeqCst);
        self.wake.fetch_add(1, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            futex::wake_all(&self.wake);
        }
    }

    /// Waits until this rank (a peer) reached barrier `generation`. Acquires the peer's
    /// writes before its arrival.
    pub(crate) fn wait_for(&self, generation: u64) {
        if self.arrived.load(Ordering::Acquire) >= generation {
            return;
        }
        let start = Instant::now();
        let mut spins = 0u32;
        while start.elapsed() < SPIN {
            for _ in 0..64 {
                if self.arrived.load(Ordering::Acquire) >= generation {
                    return;
                }
                std::hint::spin_loop();
            }
            spins += 1;
            if spins.is_multiple_of(16) {
                std::thread::yield_now();
            }
        }
        loop {
            self.sleepers.fetch_add(1, Ordering::SeqCst);
            let seen = self.wake.load(Ordering::SeqCst);
            if self.arrived.load(Ordering::SeqCst) >= generation {
                self.sleepers.fetch_sub(1, Ordering::SeqCst);
                return;
            }
            futex::wait(&self.wake, seen, NAP);
            self.sleepers.fetch_sub(1, Ordering::SeqCst);
            if self.arrived.load(Ordering::Acquire) >= generation {
                return;
            }
        }
    }
}

#[cfg(target_os = "linux")]
mod futex {
    use std::sync::atomic::AtomicU32;
    use std::time::Duration;

    /// Sleeps while `word` holds `expected`, for at most `timeout` (spurious returns are
    /// fine: the caller looks again). Not `FUTEX_PRIVATE`: the word may be shared between
    /// processes.
    pub(super) fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
        let ts = libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as _ };
        // SAFETY: `word` is a live, aligned 32-bit atomic, and `ts` outlives the call; the
        // kernel only reads them.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAIT,
                expected,
                &ts as *const libc::timespec,
                std::ptr::null::<u32>(),
                0u32,
            );
        }
    }

    /// Wakes every thread sleeping on `word`.
    pub(super) fn wake_all(word: &AtomicU32) {
        // SAFETY: `word` is a live, aligned 32-bit atomic; FUTEX_WAKE only uses its address.
        unsafe {
            libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX, 0usize, 0usize, 0u32);
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod futex {
    use std::sync::atomic::AtomicU32;
    use std::time::Duration;

    /// Without futexes, a short sleep between looks.
    pub(super) fn wait(_word: &AtomicU32, _expected: u32, _timeout: Duration) {
        std::thread::sleep(Duration::from_micros(20));
    }

    pub(super) fn wake_all(_word: &AtomicU32) {}
}
