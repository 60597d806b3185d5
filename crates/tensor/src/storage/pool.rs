//! A size-bucketed cache of large buffers, and the memory counters.
//!
//! Glibc hands allocations above its mmap threshold straight back to the OS on `free`, so a
//! training loop that allocates a fresh activation buffer for every op pays a page fault on
//! every 4 KiB of every op; and fresh memory must be zeroed (every buffer holds initialised
//! values), which costs a memset on every allocation. The pool keeps freed blocks of 4 KiB
//! and more, keyed by their (page-rounded) size, and hands them back out to the next request
//! of the same size: a training step after the first reuses the blocks of the step before.
//!
//! The pool holds at most [`pool_limit`] bytes; blocks beyond that go back to the system.

use parking_lot::Mutex;
use std::alloc::{self, Layout as AllocLayout};
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Blocks smaller than this go to the system allocator, whose small-size bins are fast and
/// whose zeroing is cheap at that size.
pub(crate) const POOL_MIN_BYTES: usize = 4 * 1024;
const PAGE: usize = 4096;
/// Blocks below this are not counted in [`MemoryStats`]: counting costs atomic updates that
/// would dominate the cost of operations on tiny tensors, whose memory does not matter.
pub(crate) const TRACK_MIN_BYTES: usize = 4096;
const ALIGN_LARGE: usize = 64;

static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);
static PEAK_BYTES: AtomicUsize = AtomicUsize::new(0);
static CACHED_BYTES: AtomicUsize = AtomicUsize::new(0);
static POOL_HITS: AtomicUsize = AtomicUsize::new(0);
static POOL_MISSES: AtomicUsize = AtomicUsize::new(0);
static POOL_LIMIT: AtomicUsize = AtomicUsize::new(2 << 30);
static POOL_ENABLED: AtomicBool = AtomicBool::new(true);

struct Block(NonNull<u8>);
// SAFETY: a cached block is plain memory owned by the pool; nothing else points into it.
unsafe impl Send for Block {}

static FREE: Mutex<Option<HashMap<usize, Vec<Block>>>> = Mutex::new(None);

/// Memory counters of tensor storage, for benchmarks and memory tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes held by live tensor storages of 4 KiB and more (smaller ones are not counted).
    pub live_bytes: usize,
    /// The highest `live_bytes` since the last [`reset_peak`].
    pub peak_bytes: usize,
    /// Bytes of freed blocks kept by the pool for reuse.
    pub cached_bytes: usize,
    /// Large allocations served from the pool.
    pub pool_hits: usize,
    /// Large allocations that went to the system allocator.
    pub pool_misses: usize,
}

/// The current memory counters.
pub fn memory_stats() -> MemoryStats {
    MemoryStats {
        live_bytes: LIVE_BYTES.load(Ordering::Relaxed),
        peak_bytes: PEAK_BYTES.load(Ordering::Relaxed),
        cached_bytes: CACHED_BYTES.load(Ordering::Relaxed),
        pool_hits: POOL_HITS.load(Ordering::Relaxed),
        pool_misses: POOL_MISSES.load(Ordering::Relaxed),
    }
}

/// Sets the peak counter to the current live bytes.
pub fn reset_peak() {
    PEAK_BYTES.store(LIVE_BYTES.load(Ordering::Relaxed), Ordering::Relaxed);
}

/// The most bytes the pool keeps cached (default 2 GiB).
pub fn pool_limit() -> usize {
    POOL_LIMIT.load(Ordering::Relaxed)
}

/// Sets the most bytes the pool keeps cached; blocks freed beyond it go back to the system.
pub fn set_pool_limit(bytes: usize) {
    POOL_LIMIT.store(bytes, Ordering::Relaxed);
    if CACHED_BYTES.load(Ordering::Relaxed) > bytes {
        clear_pool();
    }
}

/// Turns buffer reuse on or off (on by default). Benchmarks switch it off to measure what it
/// saves.
pub fn set_pool_enabled(enabled: bool) {
    POOL_ENABLED.store(enabled, Ordering::Relaxed);
    if !enabled {
        clear_pool();
    }
}

/// Returns every cached block to the system.
pub fn clear_pool() {
    let blocks = {
        let mut guard = FREE.lock();
        guard.take()
    };
    if let Some(map) = blocks {
        for (bytes, list) in map {
            for b in list {
                CACHED_BYTES.fetch_sub(bytes, Ordering::Relaxed);
                // SAFETY: every cached block was allocated by `alloc_block` with this size.
                unsafe { alloc::dealloc(b.0.as_ptr(), block_layout(bytes)) };
            }
        }
    }
}

/// The allocation size actually used for a request of `bytes`.
pub(crate) fn rounded(bytes: usize) -> usize {
    if bytes >= POOL_MIN_BYTES {
        bytes.div_ceil(PAGE) * PAGE
    } else {
        // At least one 16-byte unit, so that the system allocator takes its `calloc` fast
        // path (an alignment larger than the size sends it to `posix_memalign`).
        bytes.max(1).div_ceil(16) * 16
    }
}

fn block_layout(bytes: usize) -> AllocLayout {
    let align = if bytes >= PAGE { ALIGN_LARGE } else { 16 };
    // Sizes were validated by `checked_numel` before reaching here, so this cannot fail.
    AllocLayout::from_size_align(bytes, align).unwrap_or(AllocLayout::new::<u8>())
}

/// Allocates `bytes` (already rounded) of initialised memory: zeroed if `zeroed`, otherwise
/// zeroed when fresh from the system or holding stale data when reused. Returns `None` when
/// the system refuses.
pub(crate) fn alloc_block(bytes: usize, zeroed: bool) -> Option<NonNull<u8>> {
    debug_assert!(bytes > 0);
    if bytes >= TRACK_MIN_BYTES {
        track_alloc(bytes);
    }
    if bytes >= POOL_MIN_BYTES && POOL_ENABLED.load(Ordering::Relaxed) {
        let reused = {
            let mut guard = FREE.lock();
            guard.as_mut().and_then(|m| m.get_mut(&bytes)).and_then(|v| v.pop())
        };
        if let Some(b) = reused {
            CACHED_BYTES.fetch_sub(bytes, Ordering::Relaxed);
            POOL_HITS.fetch_add(1, Ordering::Relaxed);
            if zeroed {
                // SAFETY: the block has `bytes` bytes.
                unsafe { std::ptr::write_bytes(b.0.as_ptr(), 0, bytes) };
            }
            return Some(b.0);
        }
        POOL_MISSES.fetch_add(1, Ordering::Relaxed);
    }
    // Fresh memory is always zeroed so that every buffer holds initialised values.
    // SAFETY: `bytes > 0` and the layout is valid.
    let p = unsafe { alloc::alloc_zeroed(block_layout(bytes)) };
    let p = NonNull::new(p);
    if p.is_none() && bytes >= TRACK_MIN_BYTES {
        LIVE_BYTES.fetch_sub(bytes, Ordering::Relaxed);
    }
    p
}

/// Returns a block obtained from [`alloc_block`] with the same `bytes`.
///
/// # Safety
/// `ptr` must come from `alloc_block(bytes, _)` and must not be used afterwards.
pub(crate) unsafe fn free_block(ptr: NonNull<u8>, bytes: usize) {
    if bytes >= TRACK_MIN_BYTES {
        LIVE_BYTES.fetch_sub(bytes, Ordering::Relaxed);
    }
    if bytes >= POOL_MIN_BYTES
        && POOL_ENABLED.load(Ordering::Relaxed)
        && CACHED_BYTES.load(Ordering::Relaxed) + bytes <= POOL_LIMIT.load(Ordering::Relaxed)
    {
        let mut guard = FREE.lock();
        guard.get_or_insert_with(HashMap::new).entry(bytes).or_default().push(Block(ptr));
        CACHED_BYTES.fetch_add(bytes, Ordering::Relaxed);
        return;
    }
    // SAFETY: guaranteed by the caller.
    unsafe { alloc::dealloc(ptr.as_ptr(), block_layout(bytes)) };
}

fn track_alloc(bytes: usize) {
    let live = LIVE_BYTES.fetch_add(bytes, Ordering::Relaxed) + bytes;
    // A plain load first: the read-modify-write is only needed when a new peak is reached.
    if live > PEAK_BYTES.load(Ordering::Relaxed) {
        PEAK_BYTES.fetch_max(live, Ordering::Relaxed);
    }
}
