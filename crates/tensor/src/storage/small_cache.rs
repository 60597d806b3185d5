//! A per-thread cache of freed small blocks (under 4 KiB), in front of the system allocator.
//!
//! A chain of small operations keeps thousands of values alive and frees them together when
//! the graph drops. Glibc's own per-thread cache holds only seven blocks of a size, so the
//! rest went through its general bins, which merge each freed block with its free
//! neighbours and split it again on the next request: hundreds of instructions per buffer.
//! This cache keeps freed blocks in one list per 16-byte size class and hands the newest
//! back to the next request of its size on the same thread.
//!
//! It is bounded: each thread keeps at most [`THREAD_LIMIT_BYTES`]; a block freed beyond
//! that goes back to the system, and a thread's blocks go back when the thread exits. A
//! block may be freed on another thread than the one that allocated it: every block comes
//! from the global allocator with the layout its size implies, so any thread may cache it
//! or return it. The buffer pool's switch (`set_pool_enabled`) turns this cache off too,
//! and `clear_pool` empties the calling thread's lists.

use std::alloc::{self, Layout};
use std::cell::RefCell;
use std::ptr::NonNull;

/// Block sizes are multiples of this (see `cache::rounded`), and so are the size classes.
const GRANULE: usize = 16;
/// Blocks of this many bytes and more belong to the buffer pool (its `POOL_MIN_BYTES`,
/// which `cache.rs` checks is this).
pub(crate) const END_BYTES: usize = 4 * 1024;
const CLASSES: usize = END_BYTES / GRANULE;

/// The most bytes one thread keeps cached: enough for the values of a few thousand small
/// operations (a 2,000-op chain of 64-element `f32` values holds 512 KiB), small beside a
/// thread's stack.
pub(crate) const THREAD_LIMIT_BYTES: usize = 1 << 20;

/// The freed blocks of one size, linked through their first word.
#[derive(Clone, Copy)]
struct FreeList {
    head: Option<NonNull<u8>>,
}

struct ThreadCache {
    lists: [FreeList; CLASSES],
    bytes: usize,
}

impl ThreadCache {
    const fn new() -> Self {
        ThreadCache { lists: [FreeList { head: None }; CLASSES], bytes: 0 }
    }

    fn take(&mut self, bytes: usize) -> Option<NonNull<u8>> {
        let list = &mut self.lists[bytes / GRANULE];
        let block = list.head?;
        // SAFETY: a listed block is at least a granule long, 16-aligned and owned by this
        // list; its first word holds the next block (written by `put`).
        list.head = unsafe { block.cast::<Option<NonNull<u8>>>().read() };
        self.bytes -= bytes;
        Some(block)
    }

    fn put(&mut self, block: NonNull<u8>, bytes: usize) -> bool {
        if self.bytes + bytes > THREAD_LIMIT_BYTES {
            return false;
        }
        let list = &mut self.lists[bytes / GRANULE];
        // SAFETY: the caller hands over a block of `bytes` (at least a granule, 16-aligned)
        // that nothing else uses; its first word becomes the link.
        unsafe { block.cast::<Option<NonNull<u8>>>().write(list.head) };
        list.head = Some(block);
        self.bytes += bytes;
        true
    }

    /// Returns every block to the system.
    fn clear(&mut self) {
        for class in 1..CLASSES {
            let bytes = class * GRANULE;
            while let Some(block) = self.take(bytes) {
                // SAFETY: every cached block came from the global allocator with this layout.
                unsafe { alloc::dealloc(block.as_ptr(), layout(bytes)) };
            }
        }
    }
}

impl Drop for ThreadCache {
    /// A thread's blocks go back to the system when it exits.
    fn drop(&mut self) {
        self.clear();
    }
}

thread_local! {
    static CACHE: RefCell<ThreadCache> = const { RefCell::new(ThreadCache::new()) };
}

/// The layout of a small block of `bytes` (a multiple of 16 under 4 KiB).
pub(crate) fn layout(bytes: usize) -> Layout {
    // 16 divides every size here and is a power of two, so this cannot fail.
    Layout::from_size_align(bytes, GRANULE).unwrap_or(Layout::new::<u8>())
}

/// Whether blocks of `bytes` (already rounded) go through this cache.
#[inline(always)]
pub(crate) fn handles(bytes: usize) -> bool {
    bytes < END_BYTES
}

/// A cached block of `bytes` freed earlier on this thread, holding stale data, if any.
#[inline]
pub(crate) fn take(bytes: usize) -> Option<NonNull<u8>> {
    debug_assert!(handles(bytes) && bytes.is_multiple_of(GRANULE) && bytes > 0);
    CACHE.try_with(|c| c.try_borrow_mut().ok()?.take(bytes)).ok().flatten()
}

/// Keeps `block` of `bytes` for a later request on this thread. `false` when the cache is
/// full (or the thread is exiting): the caller returns the block to the system.
///
/// # Safety
/// `block` must come from the global allocator with [`layout`]`(bytes)`, and nothing may
/// use it afterwards.
#[inline]
pub(crate) unsafe fn put(block: NonNull<u8>, bytes: usize) -> bool {
    debug_assert!(handles(bytes) && bytes.is_multiple_of(GRANULE) && bytes > 0);
    CACHE.try_with(|c| c.try_borrow_mut().is_ok_and(|mut c| c.put(block, bytes))).unwrap_or(false)
}

/// Returns the calling thread's cached blocks to the system; the bytes released.
pub(crate) fn clear_thread() -> usize {
    CACHE
        .try_with(|c| {
            let Ok(mut c) = c.try_borrow_mut() else { return 0 };
            let bytes = c.bytes;
            c.clear();
            bytes
        })
        .unwrap_or(0)
}

/// The bytes the calling thread holds cached.
#[cfg(test)]
fn thread_bytes() -> usize {
    CACHE.try_with(|c| c.try_borrow().map_or(0, |c| c.bytes)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::Buffer;

    /// Runs `f` on a fresh thread, whose cache starts empty.
    fn on_new_thread<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
        std::thread::spawn(f).join().unwrap()
    }

    #[test]
    fn a_freed_block_serves_the_next_request_of_its_size() {
        on_new_thread(|| {
            let b = Buffer::<f32>::full("t", 64, 3.0).unwrap();
            let p = b.as_ptr();
            drop(b);
            assert_eq!(thread_bytes(), 256);
            // Another size does not take it.
            let other = Buffer::<f32>::uninit("t", 60).unwrap();
            assert_ne!(other.as_ptr(), p);
            let c = Buffer::<f32>::zeros("t", 64).unwrap();
            assert_eq!(c.as_ptr(), p);
            assert_eq!(thread_bytes(), 0);
            assert!(c.iter().all(|&v| v == 0.0), "a reused block is cleared for `zeros`");
        });
    }

    #[test]
    fn a_thread_keeps_at_most_its_limit() {
        on_new_thread(|| {
            let n = 2 * THREAD_LIMIT_BYTES / 1024;
            drop((0..n).map(|_| Buffer::<u8>::zeros("t", 1024).unwrap()).collect::<Vec<_>>());
            assert_eq!(thread_bytes(), THREAD_LIMIT_BYTES);
            assert_eq!(clear_thread(), THREAD_LIMIT_BYTES);
            assert_eq!(thread_bytes(), 0);
        });
    }

    #[test]
    fn blocks_freed_on_another_thread_are_kept_there() {
        let made: Vec<Buffer<f64>> = (0..100).map(|_| Buffer::zeros("t", 20).unwrap()).collect();
        // The thread caches what it frees, and frees it all when it exits.
        let kept = on_new_thread(move || {
            drop(made);
            thread_bytes()
        });
        assert_eq!(kept, 100 * 160);
        let back = on_new_thread(|| {
            let b = Buffer::<f64>::full("t", 20, 1.5).unwrap();
            b.iter().all(|&v| v == 1.5)
        });
        assert!(back);
    }
}
