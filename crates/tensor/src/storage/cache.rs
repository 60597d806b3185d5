//! A size-bucketed cache of large buffers, and the memory counters.
//!
//! Glibc hands allocations above its mmap threshold straight back to the OS on `free`, so a
//! training loop that allocates a fresh activation buffer for every op pays a page fault on
//! every 4 KiB of every op; and fresh memory must be zeroed (every buffer holds initialised
//! values), which costs a memset on every allocation. The pool keeps freed blocks of 4 KiB
//! and more, keyed by their (page-rounded) size, and hands them back out to the next request
//! of the same size: a training step after the first reuses the blocks of the step before.
//!
//! What the pool keeps is resident memory the program is not using, so it is bounded two
//! ways (docs/design.md, "Memory"):
//!
//! * **a limit**: it holds at most [`pool_limit`] bytes (by default the larger of
//!   [`DEFAULT_POOL_LIMIT`] and the most the program's tensors ever held at once, or the
//!   `EMBER_POOL_LIMIT` environment variable); blocks freed beyond it go back to the
//!   system;
//! * **idle trimming**: the pool counts the requests it serves in periods of
//!   [`pool_trim_period`] requests, and at the end of each period returns to the system the
//!   blocks that sat unused through all of it. A training loop reuses its blocks every step
//!   and keeps them; blocks left over from a one-off phase (loading data, a larger batch,
//!   an evaluation) go back within two periods.
//!
//! [`trim_pool`] runs the trimming at once and [`clear_pool`] empties the pool (PyTorch's
//! `torch.cuda.empty_cache`).
//!
//! Smaller blocks go through a per-thread cache in front of the system allocator
//! (`small_cache.rs`), which the same switch ([`set_pool_enabled`]) turns off.

use super::small_cache;
use parking_lot::Mutex;
use std::alloc::{self, Layout as AllocLayout};
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Blocks smaller than this go to the system allocator, whose small-size bins are fast and
/// whose zeroing is cheap at that size.
pub(crate) const POOL_MIN_BYTES: usize = 4 * 1024;
// Smaller blocks go through the per-thread cache, which must cover everything below.
const _: () = assert!(small_cache::END_BYTES == POOL_MIN_BYTES);
const PAGE: usize = 4096;
/// Blocks below this are not counted in [`MemoryStats`]: counting costs atomic updates that
/// would dominate the cost of operations on tiny tensors, whose memory does not matter.
pub(crate) const TRACK_MIN_BYTES: usize = 4096;
const ALIGN_LARGE: usize = 64;

/// The least the pool may cache unless [`set_pool_limit`] or `EMBER_POOL_LIMIT` says
/// otherwise: 512 MiB, more than a training step of a model that fits a laptop frees and
/// reallocates. The default limit is the larger of this and the most bytes the program's
/// tensors have held at once ([`pool_limit`]).
pub const DEFAULT_POOL_LIMIT: usize = 512 << 20;

/// The number of pooled requests per trimming period unless [`set_pool_trim_period`] says
/// otherwise. A period must span a training step, or blocks a step reuses could sit
/// unused through a whole period and be returned; the MNIST MLP makes 16 pooled requests
/// a step, a large model some thousands.
pub const DEFAULT_TRIM_PERIOD: usize = 16_384;

/// The marker of a limit not yet read from the environment.
const UNSET: usize = usize::MAX;
/// The marker of the default limit, which follows [`HIGH_WATER`] ([`pool_limit`]).
const AUTO: usize = usize::MAX - 1;

static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);
static PEAK_BYTES: AtomicUsize = AtomicUsize::new(0);
/// The most live bytes ever: [`PEAK_BYTES`] without [`reset_peak`].
static HIGH_WATER: AtomicUsize = AtomicUsize::new(0);
static CACHED_BYTES: AtomicUsize = AtomicUsize::new(0);
static POOL_HITS: AtomicUsize = AtomicUsize::new(0);
static POOL_MISSES: AtomicUsize = AtomicUsize::new(0);
static POOL_LIMIT: AtomicUsize = AtomicUsize::new(UNSET);
static TRIM_PERIOD: AtomicUsize = AtomicUsize::new(DEFAULT_TRIM_PERIOD);
static POOL_ENABLED: AtomicBool = AtomicBool::new(true);

struct Block(NonNull<u8>);
// SAFETY: a cached block is plain memory owned by the pool; nothing else points into it.
unsafe impl Send for Block {}

/// The cached blocks of one size.
#[derive(Default)]
struct Bucket {
    /// Oldest first: requests take the newest (the most likely still in cache), trimming
    /// returns the oldest.
    blocks: Vec<Block>,
    /// The fewest blocks the bucket held at any moment of the current period: that many
    /// sat unused through all of it.
    low: usize,
}

#[derive(Default)]
struct Pool {
    buckets: HashMap<usize, Bucket>,
    /// Pooled requests served in the current period.
    requests: usize,
}

/// Blocks taken out of the pool to be returned to the system once its lock is released
/// (returning a large block is an `munmap`, which other threads should not wait on).
type Released = Vec<(usize, Block)>;

impl Pool {
    /// A cached block of `bytes`, if any.
    fn take(&mut self, bytes: usize) -> Option<Block> {
        let bucket = self.buckets.get_mut(&bytes)?;
        let b = bucket.blocks.pop()?;
        bucket.low = bucket.low.min(bucket.blocks.len());
        Some(b)
    }

    /// Counts a request; at the end of a period, takes out the blocks that sat unused
    /// through it.
    fn count_request(&mut self, out: &mut Released) {
        self.requests += 1;
        let period = TRIM_PERIOD.load(Ordering::Relaxed);
        if period != 0 && self.requests >= period {
            self.end_period(out);
        }
    }

    /// Takes out the blocks that sat unused through the period and starts the next one.
    fn end_period(&mut self, out: &mut Released) {
        self.requests = 0;
        for (&bytes, bucket) in &mut self.buckets {
            let idle = bucket.low.min(bucket.blocks.len());
            out.extend(bucket.blocks.drain(..idle).map(|b| (bytes, b)));
            bucket.low = bucket.blocks.len();
        }
        self.buckets.retain(|_, b| !b.blocks.is_empty());
    }

    /// Takes out blocks, largest first and oldest first within a size, until at most
    /// `limit` bytes stay cached.
    fn shrink_to(&mut self, limit: usize, out: &mut Released) {
        let mut sizes: Vec<usize> = self.buckets.keys().copied().collect();
        sizes.sort_unstable_by(|a, b| b.cmp(a));
        let mut cached = CACHED_BYTES.load(Ordering::Relaxed);
        for bytes in sizes {
            let Some(bucket) = self.buckets.get_mut(&bytes) else { continue };
            let excess = cached.saturating_sub(limit).div_ceil(bytes).min(bucket.blocks.len());
            out.extend(bucket.blocks.drain(..excess).map(|b| (bytes, b)));
            bucket.low = bucket.low.min(bucket.blocks.len());
            cached = cached.saturating_sub(excess * bytes);
        }
        self.buckets.retain(|_, b| !b.blocks.is_empty());
    }
}

static POOL: Mutex<Option<Pool>> = Mutex::new(None);

/// Returns blocks taken out of the pool to the system; the total bytes.
fn release(blocks: Released) -> usize {
    let mut total = 0;
    for (bytes, b) in blocks {
        CACHED_BYTES.fetch_sub(bytes, Ordering::Relaxed);
        total += bytes;
        // SAFETY: every cached block was allocated by `alloc_block` with this size.
        unsafe { alloc::dealloc(b.0.as_ptr(), block_layout(bytes)) };
    }
    total
}

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

/// The most bytes the pool keeps cached: what [`set_pool_limit`] set, else the
/// `EMBER_POOL_LIMIT` environment variable, else the larger of [`DEFAULT_POOL_LIMIT`]
/// (512 MiB) and the most bytes the program's tensors have held at once.
///
/// The default grows with the program because a training step frees about as much as it
/// held at its peak, and what the pool cannot keep the next step must fault in and zero
/// again: a Transformer encoder step (4 layers of width 256, 64 sequences of 256 tokens, a
/// peak of 0.9 GB) took 2176-2225 ms with a 512 MiB pool and 2065-2129 ms with room for
/// the whole step, and its peak resident memory fell from 1.22 to 1.05 GB. The process
/// then stays at about its peak, as it does with PyTorch's CUDA caching allocator; idle
/// trimming still returns what a finished phase left behind.
///
/// `EMBER_POOL_LIMIT` is read once, at the first use of the pool: a number of bytes with an
/// optional suffix `K`, `M` or `G` (KiB, MiB, GiB), such as `256M`; `0` caches nothing. A
/// value that does not parse is ignored.
pub fn pool_limit() -> usize {
    let mut limit = POOL_LIMIT.load(Ordering::Relaxed);
    if limit == UNSET {
        let from_env = std::env::var("EMBER_POOL_LIMIT").ok().and_then(|v| parse_size(&v));
        // A concurrent `set_pool_limit` wins over the environment.
        let _ = POOL_LIMIT.compare_exchange(
            UNSET,
            from_env.map_or(AUTO, |b| b.min(AUTO - 1)),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        limit = POOL_LIMIT.load(Ordering::Relaxed);
    }
    if limit == AUTO { DEFAULT_POOL_LIMIT.max(HIGH_WATER.load(Ordering::Relaxed)) } else { limit }
}

/// Returns the pool to its default limit (see [`pool_limit`]): `EMBER_POOL_LIMIT` if set,
/// else the limit that follows the program's use. Undoes [`set_pool_limit`].
pub fn reset_pool_limit() {
    POOL_LIMIT.store(UNSET, Ordering::Relaxed);
    shrink_pool(pool_limit());
}

/// Returns blocks (largest first) until the pool holds at most `limit` bytes.
fn shrink_pool(limit: usize) {
    if CACHED_BYTES.load(Ordering::Relaxed) > limit {
        let mut out = Released::new();
        if let Some(pool) = POOL.lock().as_mut() {
            pool.shrink_to(limit, &mut out);
        }
        release(out);
    }
}

/// A size such as `4096`, `64K`, `256M` or `2G` (binary multiples), `None` when it does not
/// parse or overflows.
fn parse_size(text: &str) -> Option<usize> {
    let text = text.trim();
    let (digits, shift) = match text.as_bytes().last()? {
        b'k' | b'K' => (&text[..text.len() - 1], 10),
        b'm' | b'M' => (&text[..text.len() - 1], 20),
        b'g' | b'G' => (&text[..text.len() - 1], 30),
        _ => (text, 0),
    };
    digits.trim().parse::<usize>().ok()?.checked_mul(1 << shift)
}

/// Sets the most bytes the pool keeps cached (see [`pool_limit`]); blocks freed beyond it
/// go back to the system. When the pool holds more, it returns blocks (largest first) until
/// it holds at most `bytes`. `0` turns caching off while keeping the counters.
///
/// ```
/// use ember_tensor::storage::{memory_stats, reset_pool_limit, set_pool_limit};
/// set_pool_limit(64 << 20);
/// assert!(memory_stats().cached_bytes <= 64 << 20);
/// reset_pool_limit(); // back to the default, which follows the program's use
/// ```
pub fn set_pool_limit(bytes: usize) {
    let bytes = bytes.min(AUTO - 1);
    POOL_LIMIT.store(bytes, Ordering::Relaxed);
    shrink_pool(bytes);
}

/// The number of pooled requests per trimming period (default [`DEFAULT_TRIM_PERIOD`]);
/// 0 when trimming is off.
pub fn pool_trim_period() -> usize {
    TRIM_PERIOD.load(Ordering::Relaxed)
}

/// Sets the number of pooled requests (allocations of 4 KiB and more) per trimming period:
/// at the end of each, the blocks that sat in the pool unused through the whole period go
/// back to the system. `0` turns trimming off, so that only the limit bounds the pool.
pub fn set_pool_trim_period(requests: usize) {
    TRIM_PERIOD.store(requests, Ordering::Relaxed);
}

/// Ends the current trimming period now: returns to the system the blocks that sat unused
/// since the period began, and starts a new one. Returns the bytes released.
///
/// Calling it twice in a row releases everything not taken in between, so a program that
/// leaves a phase with other memory needs (a larger batch, an evaluation) can call it once
/// when entering the new phase and once after its first step.
pub fn trim_pool() -> usize {
    let mut out = Released::new();
    if let Some(pool) = POOL.lock().as_mut() {
        pool.end_period(&mut out);
    }
    release(out)
}

/// Turns buffer reuse on or off (on by default): the pool of large blocks, and the
/// per-thread caches of small blocks and of storage cells. Benchmarks switch it off to
/// measure what it saves.
pub fn set_pool_enabled(enabled: bool) {
    POOL_ENABLED.store(enabled, Ordering::Relaxed);
    if !enabled {
        clear_pool();
    }
}

/// Whether buffer reuse is on.
pub fn pool_enabled() -> bool {
    POOL_ENABLED.load(Ordering::Relaxed)
}

/// Returns every cached block to the system (PyTorch's `torch.cuda.empty_cache`): the
/// pool's, and the small blocks the calling thread keeps (other threads' go back when they
/// exit). Returns the bytes released.
pub fn clear_pool() -> usize {
    let small = small_cache::clear_thread();
    let pool = POOL.lock().take();
    let Some(pool) = pool else { return small };
    let out = pool.buckets.into_iter().flat_map(|(bytes, bucket)| bucket.blocks.into_iter().map(move |b| (bytes, b)));
    small + release(out.collect())
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
    if small_cache::handles(bytes) {
        return small_cache::layout(bytes);
    }
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
        let mut expired = Released::new();
        let reused = {
            let mut guard = POOL.lock();
            let pool = guard.get_or_insert_with(Pool::default);
            let b = pool.take(bytes);
            pool.count_request(&mut expired);
            b
        };
        if !expired.is_empty() {
            release(expired);
        }
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
    if small_cache::handles(bytes)
        && POOL_ENABLED.load(Ordering::Relaxed)
        && let Some(p) = small_cache::take(bytes)
    {
        if zeroed {
            // SAFETY: the block has `bytes` bytes.
            unsafe { std::ptr::write_bytes(p.as_ptr(), 0, bytes) };
        }
        return Some(p);
    }
    // Fresh memory is always zeroed so that every buffer holds initialised values. A small
    // block is allocated and cleared here rather than by `alloc_zeroed`: glibc's `calloc`
    // bypasses its per-thread cache, so every small tensor's buffer went through the slow
    // bins on both allocation and free. (`black_box` keeps the compiler from fusing the
    // allocation and the clearing back into a `calloc`.)
    // SAFETY: `bytes > 0` and the layout is valid; a block that was granted has `bytes`
    // bytes to clear.
    let p = unsafe {
        if bytes < POOL_MIN_BYTES {
            let p = std::hint::black_box(alloc::alloc(block_layout(bytes)));
            if !p.is_null() {
                std::ptr::write_bytes(p, 0, bytes);
            }
            p
        } else {
            alloc::alloc_zeroed(block_layout(bytes))
        }
    };
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
        && CACHED_BYTES.load(Ordering::Relaxed) + bytes <= pool_limit()
    {
        let mut guard = POOL.lock();
        guard.get_or_insert_with(Pool::default).buckets.entry(bytes).or_default().blocks.push(Block(ptr));
        CACHED_BYTES.fetch_add(bytes, Ordering::Relaxed);
        return;
    }
    // SAFETY: a block under 4 KiB was allocated with `small_cache::layout(bytes)` (see
    // `block_layout`), and the caller gives it up.
    if small_cache::handles(bytes) && POOL_ENABLED.load(Ordering::Relaxed) && unsafe { small_cache::put(ptr, bytes) } {
        return;
    }
    // SAFETY: guaranteed by the caller.
    unsafe { alloc::dealloc(ptr.as_ptr(), block_layout(bytes)) };
}

fn track_alloc(bytes: usize) {
    let live = LIVE_BYTES.fetch_add(bytes, Ordering::Relaxed) + bytes;
    // A plain load first: the read-modify-write is only needed when a new peak is reached.
    // The high-water mark is never below the peak, so a new one is also a new peak.
    if live > PEAK_BYTES.load(Ordering::Relaxed) {
        PEAK_BYTES.fetch_max(live, Ordering::Relaxed);
        HIGH_WATER.fetch_max(live, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size(" 64K "), Some(64 << 10));
        assert_eq!(parse_size("256m"), Some(256 << 20));
        assert_eq!(parse_size("2G"), Some(2 << 30));
        assert_eq!(parse_size("0"), Some(0));
        for bad in ["", "M", "1.5G", "-1", "12T", "99999999999999999999G"] {
            assert_eq!(parse_size(bad), None, "{bad:?}");
        }
    }
}
