//! Device memory: the storage type (blocks from the device's caching allocator, see
//! `allocator`), and host transfers through pinned staging buffers.

use super::allocator::Staging;
use super::device::Gpu;
use crate::dtype::DType;
use crate::storage::{CpuStorage, DeviceData};
use crate::{Error, Result, cpu_dispatch};
use cudarc::driver::{result, sys};

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

impl DeviceData for CudaStorage {
    fn dtype(&self) -> DType {
        self.dtype
    }

    fn len(&self) -> usize {
        self.len
    }

    fn ordinal(&self) -> usize {
        self.buf.gpu.ordinal
    }
}

/// Host copies larger than this go straight from pageable memory (the driver stages them
/// itself, synchronously); smaller ones through a pinned buffer, which lets the host go on
/// while the copy runs.
const STAGED_MAX: usize = 64 << 20;

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
    let mut pool = gpu.staging.0.lock();
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
