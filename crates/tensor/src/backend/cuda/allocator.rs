//! What a device keeps for reuse: a caching allocator of device memory and the pinned host
//! buffers that stage uploads.
//!
//! Allocating with `cuMemAlloc` synchronises the device and freeing does too, so freed
//! blocks are kept in per-size free lists and handed out again (as PyTorch's caching
//! allocator does). Reuse is safe without events because every kernel and copy runs on
//! one stream, in order: work queued after a block is handed out runs after the work that
//! used it before. When the driver runs out of memory the cache is returned to it and the
//! allocation tried once more.

use crate::{Error, Result};
use cudarc::driver::{result, sys};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Blocks up to this size are rounded to a multiple of 512 bytes; larger ones to a
/// multiple of 2 MiB, so that similar sizes share a free list.
const SMALL: usize = 1 << 20;

fn size_class(bytes: usize) -> usize {
    if bytes <= SMALL { bytes.div_ceil(512) * 512 } else { bytes.div_ceil(2 << 20) * (2 << 20) }
}

/// The caching allocator of one device.
pub(crate) struct Allocator {
    ordinal: usize,
    free: Mutex<HashMap<usize, Vec<sys::CUdeviceptr>>>,
    in_use: AtomicUsize,
    cached: AtomicUsize,
    peak: AtomicUsize,
}

impl Allocator {
    pub(crate) fn new(ordinal: usize) -> Self {
        Allocator {
            ordinal,
            free: Mutex::new(HashMap::new()),
            in_use: AtomicUsize::new(0),
            cached: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        }
    }

    /// A block of at least `bytes` (from the cache, else the driver) and its size class.
    pub(crate) fn alloc(&self, bytes: usize) -> Result<(sys::CUdeviceptr, usize)> {
        if bytes == 0 {
            return Ok((0, 0));
        }
        let class = size_class(bytes);
        let reused = self.free.lock().get_mut(&class).and_then(Vec::pop);
        let ptr = match reused {
            Some(p) => {
                self.cached.fetch_sub(class, Ordering::Relaxed);
                p
            }
            // SAFETY: a plain allocation; the context is current (the caller bound it).
            None => match unsafe { result::malloc_sync(class) } {
                Ok(p) => p,
                Err(_) => {
                    self.empty_cache();
                    // SAFETY: as above.
                    unsafe { result::malloc_sync(class) }.map_err(|e| Error::Device {
                        device: format!("cuda:{}", self.ordinal),
                        msg: format!(
                            "out of memory allocating {bytes} bytes ({} in use by tensors): {e:?}",
                            self.in_use.load(Ordering::Relaxed)
                        ),
                    })?
                }
            },
        };
        let now = self.in_use.fetch_add(class, Ordering::Relaxed) + class;
        self.peak.fetch_max(now, Ordering::Relaxed);
        Ok((ptr, class))
    }

    /// Returns a block of size class `class` to the cache.
    pub(crate) fn release(&self, ptr: sys::CUdeviceptr, class: usize) {
        if class == 0 {
            return;
        }
        self.in_use.fetch_sub(class, Ordering::Relaxed);
        self.cached.fetch_add(class, Ordering::Relaxed);
        self.free.lock().entry(class).or_default().push(ptr);
    }

    /// Returns every cached block to the driver (PyTorch's `torch.cuda.empty_cache`).
    pub(crate) fn empty_cache(&self) {
        let blocks: Vec<_> = self.free.lock().drain().collect();
        for (class, ptrs) in blocks {
            for p in ptrs {
                // SAFETY: the block came from malloc_sync and nothing refers to it. Freeing
                // synchronises the device, so no queued kernel still uses it.
                let _ = unsafe { result::free_sync(p) };
                self.cached.fetch_sub(class, Ordering::Relaxed);
            }
        }
    }

    /// Bytes held by tensors now, at most since the last reset, and kept in the cache.
    pub(crate) fn stats(&self) -> (usize, usize, usize) {
        (self.in_use.load(Ordering::Relaxed), self.peak.load(Ordering::Relaxed), self.cached.load(Ordering::Relaxed))
    }

    pub(crate) fn reset_peak(&self) {
        self.peak.store(self.in_use.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

/// A page-locked host buffer and the event that marks the end of the copy that reads it.
pub(crate) struct Staging {
    pub(crate) host: *mut u8,
    pub(crate) bytes: usize,
    pub(crate) done: sys::CUevent,
}

// SAFETY: the pointers are owned by this struct and only used under the pool's mutex.
unsafe impl Send for Staging {}

/// Pinned staging buffers of a device, reused once their copy has finished.
pub(crate) struct StagingPool(pub(crate) Mutex<Vec<Staging>>);

impl StagingPool {
    pub(crate) fn new() -> Self {
        StagingPool(Mutex::new(Vec::new()))
    }
}
