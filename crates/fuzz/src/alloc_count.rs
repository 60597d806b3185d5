//! A global allocator that measures the peak of live heap bytes while an input is read, so
//! that a header claiming terabytes shows up as a failure instead of a slow machine.
//!
//! Only allocations made on a thread that called [`track`] are counted, each thread on its
//! own: the test harness runs several harnesses at once, and the watchdog allocates on its
//! own thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// One thread's counts. Const-initialised without a destructor, so reaching it from inside
/// the allocator never allocates.
struct Counts {
    tracked: Cell<bool>,
    /// Live bytes allocated since the last [`reset`].
    live: Cell<isize>,
    /// The highest value `live` reached since the last [`reset`].
    peak: Cell<usize>,
}

thread_local! {
    static COUNTS: Counts = const { Counts { tracked: Cell::new(false), live: Cell::new(0), peak: Cell::new(0) } };
}

/// The system allocator with counting; install it with `#[global_allocator]` in the binary
/// or test that runs the harnesses.
pub struct CountingAlloc;

/// Whether a counting allocator is installed: without it the limit cannot be checked.
static INSTALLED: AtomicUsize = AtomicUsize::new(0);

fn grow(by: usize) {
    INSTALLED.store(1, Ordering::Relaxed);
    // During thread teardown the thread-local may be gone; such calls are not counted.
    let _ = COUNTS.try_with(|c| {
        if c.tracked.get() {
            let live = c.live.get() + by as isize;
            c.live.set(live);
            c.peak.set(c.peak.get().max(live.max(0) as usize));
        }
    });
}

fn shrink(by: usize) {
    let _ = COUNTS.try_with(|c| {
        if c.tracked.get() {
            c.live.set(c.live.get() - by as isize);
        }
    });
}

// SAFETY: every call is forwarded unchanged to `System`; the counters only observe sizes.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grow(layout.size());
        // SAFETY: the caller upholds `alloc`'s contract, which `System` shares.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        grow(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        shrink(layout.size());
        // SAFETY: `ptr` came from `System` with this layout, as the caller guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size >= layout.size() {
            grow(new_size - layout.size());
        } else {
            shrink(layout.size() - new_size);
        }
        // SAFETY: as for `dealloc` and `alloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Counts this thread's allocations from now on.
pub fn track() {
    COUNTS.with(|c| c.tracked.set(true));
}

/// Starts a new measurement on this thread: the peak becomes zero.
pub fn reset() {
    COUNTS.with(|c| {
        c.live.set(0);
        c.peak.set(0);
    });
}

/// The peak of this thread's live bytes since [`reset`].
pub fn peak() -> usize {
    COUNTS.with(|c| c.peak.get())
}

/// Whether [`CountingAlloc`] is the global allocator (known once anything was allocated).
pub fn installed() -> bool {
    INSTALLED.load(Ordering::Relaxed) == 1
}
