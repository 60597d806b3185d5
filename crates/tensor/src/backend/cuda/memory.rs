//! Device memory: the storage type, a caching allocator, and host transfers through pinned
//! staging buffers.
//!
//! Allocating with `cuMemAlloc` synchronises the device and freeing does too, so freed
//! blocks are kept in per-size free lists and handed out again (as PyTorch's caching
//! allocator does). Reuse is safe without events because every kernel and copy runs on
//! one stream, in order: work queued after a block is handed out runs after the work that
//! used it before. When the driver runs out of memory the cache is returned to it and the
//! allocation tried once more.

use super::device::Gpu;
use crate::dtype::DType;
use crate::storage::CpuStorage;
use crate::{Error, Result, cpu_dispatch};
use cudarc::driver::{result, sys};
use std::collections::HashMap;
use std::sync::Mutex;
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

    fn alloc(&self, bytes: usize) -> Result<(sys::CUdeviceptr, usize)> {
        if bytes == 0 {
            return Ok((0, 0));
        }
        let class = size_class(bytes);
        let reused = self.free.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&class).and_then(Vec::pop);
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

    fn release(&self, ptr: sys::CUdeviceptr, class: usize) {
        if class == 0 {
            return;
        }
        self.in_use.fetch_sub(class, Ordering::Relaxed);
        self.cached.fetch_add(class, Ordering::Relaxed);
        self.free.lock().unwrap_or_else(|p| p.into_inner()).entry(class).or_default().push(ptr);
    }

    /// Returns every cached block to the driver (PyTorch's `torch.cuda.empty_cache`).
    pub(crate) fn empty_cache(&self) {
        let blocks: Vec<_> = self.free.lock().unwrap_or_else(|p| p.into_inner()).drain().collect();
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

/// A block of device memory, returned to its device's cache when dropped.
pub(crate) struct DeviceBuffer {
    ptr: sys::CUdeviceptr,
    class: usize,
    gpu: &'static Gpu,
}

impl DeviceBuffer {
    pub(crate) fn new(gpu: &'static Gpu, bytes: usize) -> Result<Self> {
        let (ptr, class) = gpu.memory.alloc(bytes)?;
        Ok(DeviceBuffer { ptr, class, gpu })
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        self.gpu.memory.release(self.ptr, self.class);
    }
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceBuffer({:#x}, {} bytes)", self.ptr, self.class)
    }
}

/// A tensor's data on a GPU: `len` elements of `dtype` in device memory.
#[derive(Debug)]
pub struct CudaStorage {
    buf: DeviceBuffer,
    dtype: DType,
    len: usize,
}

impl CudaStorage {
    /// Uninitialised room for `len` elements of `dtype` on `gpu`.
    pub(crate) fn alloc(gpu: &'static Gpu, op: &'static str, len: usize, dtype: DType) -> Result<Self> {
        let bytes =
            len.checked_mul(dtype.size_in_bytes()).ok_or(Error::Alloc { op, elements: len, dtype: dtype.name() })?;
        Ok(CudaStorage { buf: DeviceBuffer::new(gpu, bytes)?, dtype, len })
    }

    /// The dtype of the elements.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device number.
    pub fn ordinal(&self) -> usize {
        self.buf.gpu.ordinal
    }

    /// The device address of element 0.
    pub(crate) fn ptr(&self) -> sys::CUdeviceptr {
        self.buf.ptr
    }

    /// The device address of element `offset`.
    pub(crate) fn ptr_at(&self, offset: usize) -> sys::CUdeviceptr {
        self.buf.ptr + (offset * self.dtype.size_in_bytes()) as u64
    }

    pub(crate) fn gpu(&self) -> &'static Gpu {
        self.buf.gpu
    }
}

/// Host copies larger than this go straight from pageable memory (the driver stages them
/// itself, synchronously); smaller ones through a pinned buffer, which lets the host go on
/// while the copy runs.
const STAGED_MAX: usize = 64 << 20;

/// A page-locked host buffer and the event that marks the end of the copy that reads it.
struct Staging {
    host: *mut u8,
    bytes: usize,
    done: sys::CUevent,
}

// SAFETY: the pointers are owned by this struct and only used under the pool's mutex.
unsafe impl Send for Staging {}

/// Pinned staging buffers of a device, reused once their copy has finished.
pub(crate) struct StagingPool(Mutex<Vec<Staging>>);

impl StagingPool {
    pub(crate) fn new() -> Self {
        StagingPool(Mutex::new(Vec::new()))
    }
}

/// Copies host data into a new device storage without waiting for the copy.
pub(crate) fn upload(gpu: &'static Gpu, data: &CpuStorage) -> Result<CudaStorage> {
    let out = CudaStorage::alloc(gpu, "to_device", data.len(), data.dtype())?;
    let bytes: &[u8] = cpu_dispatch!(data, b => bytes_of(&b[..]));
    if bytes.is_empty() {
        return Ok(out);
    }
    if bytes.len() > STAGED_MAX {
        // SAFETY: the destination holds `bytes.len()` bytes; the copy is synchronous.
        unsafe { result::memcpy_htod_sync(out.ptr(), bytes) }.map_err(|e| gpu.err("host-to-device copy", e))?;
        return Ok(out);
    }
    let mut pool = gpu.staging.0.lock().unwrap_or_else(|p| p.into_inner());
    // A finished buffer at least as large as needed, else a new one.
    let pos = pool.iter().position(|s| s.bytes >= bytes.len() && unsafe { result::event::query(s.done) }.is_ok());
    let stage = match pos {
        Some(i) => pool.swap_remove(i),
        None => {
            let size = bytes.len().next_power_of_two().max(4096);
            // SAFETY: plain allocations; staging buffers live as long as the process.
            let host =
                unsafe { result::malloc_host(size, 0) }.map_err(|e| gpu.err("pinned host allocation", e))? as *mut u8;
            let done = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
                .map_err(|e| gpu.err("event creation", e))?;
            Staging { host, bytes: size, done }
        }
    };
    // SAFETY: the staging buffer holds at least `bytes.len()` bytes and its last copy has
    // finished (its event completed), so nothing reads it while it is overwritten.
    let queued = unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), stage.host, bytes.len());
        let src = std::slice::from_raw_parts(stage.host, bytes.len());
        result::memcpy_htod_async(out.ptr(), src, std::ptr::null_mut())
            .and_then(|()| result::event::record(stage.done, std::ptr::null_mut()))
    };
    pool.push(stage);
    queued.map_err(|e| gpu.err("host-to-device copy", e))?;
    Ok(out)
}

/// The elements of a contiguous device storage, copied to the host (waits for the work
/// queued before).
pub(crate) fn download(s: &CudaStorage) -> Result<CpuStorage> {
    let gpu = s.gpu();
    let mut host = CpuStorage::zeros("to_device", s.len(), s.dtype())?;
    let bytes: &mut [u8] = cpu_dispatch!(&mut host, b => bytes_of_mut(&mut b[..]));
    if !bytes.is_empty() {
        // SAFETY: the source holds `bytes.len()` bytes; the copy is synchronous with
        // respect to the legacy stream, so queued kernels finish first.
        unsafe { result::memcpy_dtoh_sync(bytes, s.ptr()) }.map_err(|e| gpu.err("device-to-host copy", e))?;
    }
    Ok(host)
}

fn bytes_of<T: Copy>(s: &[T]) -> &[u8] {
    // SAFETY: any initialised element type is readable as bytes.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast(), std::mem::size_of_val(s)) }
}

fn bytes_of_mut<T: Copy>(s: &mut [T]) -> &mut [u8] {
    // SAFETY: the element types (u8, i64, f32, f64) accept any bit pattern.
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast(), std::mem::size_of_val(s)) }
}
