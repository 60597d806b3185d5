//! Tensor storage: the buffers, their version counters, and the buffer pool.
//!
//! A [`StorageCell`] is shared (through `Arc`) by a tensor and all of its views. It carries a
//! version counter that every in-place write bumps; autograd compares it against the version
//! it recorded when it saved a tensor, to detect in-place modification of saved values.

mod buffer;
pub mod cache;
pub(crate) mod cell_cache;
mod device;
mod rss;
mod small_cache;

pub use buffer::{Buffer, BufferElement, check_allocatable};
pub use cache::{
    DEFAULT_POOL_LIMIT, DEFAULT_TRIM_PERIOD, MemoryStats, clear_pool, memory_stats, pool_enabled, pool_limit,
    pool_trim_period, reset_peak, reset_pool_limit, set_pool_enabled, set_pool_limit, set_pool_trim_period, trim_pool,
};
pub use device::{DeviceData, DeviceStorage};
pub use rss::{current_rss, peak_rss};

use crate::Device;
use crate::dtype::DType;
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Host memory of one dtype.
#[derive(Debug)]
pub enum CpuStorage {
    /// `u8` elements.
    U8(Buffer<u8>),
    /// `i64` elements.
    I64(Buffer<i64>),
    /// `f16` elements.
    F16(Buffer<half::f16>),
    /// `bf16` elements.
    BF16(Buffer<half::bf16>),
    /// `f32` elements.
    F32(Buffer<f32>),
    /// `f64` elements.
    F64(Buffer<f64>),
}

/// Applies `$body` to the buffer inside a [`CpuStorage`] whatever its dtype, binding it to
/// `$b`. Each arm is compiled for its own element type.
#[macro_export]
#[doc(hidden)]
macro_rules! cpu_dispatch {
    ($storage:expr, $b:ident => $body:expr) => {
        match $storage {
            $crate::storage::CpuStorage::U8($b) => $body,
            $crate::storage::CpuStorage::I64($b) => $body,
            $crate::storage::CpuStorage::F16($b) => $body,
            $crate::storage::CpuStorage::BF16($b) => $body,
            $crate::storage::CpuStorage::F32($b) => $body,
            $crate::storage::CpuStorage::F64($b) => $body,
        }
    };
}

impl CpuStorage {
    /// The dtype of the elements.
    pub fn dtype(&self) -> DType {
        match self {
            CpuStorage::U8(_) => DType::U8,
            CpuStorage::I64(_) => DType::I64,
            CpuStorage::F16(_) => DType::F16,
            CpuStorage::BF16(_) => DType::BF16,
            CpuStorage::F32(_) => DType::F32,
            CpuStorage::F64(_) => DType::F64,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        cpu_dispatch!(self, b => b.len())
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements as `&[T]` when `T` is the storage's dtype.
    pub fn as_slice<T: HostElement>(&self) -> Option<&[T]> {
        T::storage_slice(self)
    }

    /// The elements as `&mut [T]` when `T` is the storage's dtype.
    pub fn as_mut_slice<T: HostElement>(&mut self) -> Option<&mut [T]> {
        T::storage_slice_mut(self)
    }

    /// Zeros of `dtype`.
    pub fn zeros(op: &'static str, len: usize, dtype: DType) -> crate::Result<Self> {
        Ok(match dtype {
            DType::U8 => CpuStorage::U8(Buffer::zeros(op, len)?),
            DType::I64 => CpuStorage::I64(Buffer::zeros(op, len)?),
            DType::F16 => CpuStorage::F16(Buffer::zeros(op, len)?),
            DType::BF16 => CpuStorage::BF16(Buffer::zeros(op, len)?),
            DType::F32 => CpuStorage::F32(Buffer::zeros(op, len)?),
            DType::F64 => CpuStorage::F64(Buffer::zeros(op, len)?),
        })
    }
}

/// An element type with a place in [`CpuStorage`]: the variant that holds its buffers.
/// Every [`Element`](crate::Element) is one.
pub trait HostElement: BufferElement {
    /// The elements of `s`, when they are of this type.
    fn storage_slice(s: &CpuStorage) -> Option<&[Self]>;
    /// The elements of `s`, mutably, when they are of this type.
    fn storage_slice_mut(s: &mut CpuStorage) -> Option<&mut [Self]>;
    /// A buffer of this type as a storage.
    fn into_storage(b: Buffer<Self>) -> CpuStorage;
}

macro_rules! storage_element {
    ($t:ty, $v:ident) => {
        impl From<Buffer<$t>> for CpuStorage {
            fn from(b: Buffer<$t>) -> Self {
                CpuStorage::$v(b)
            }
        }

        impl HostElement for $t {
            #[inline(always)]
            fn storage_slice(s: &CpuStorage) -> Option<&[Self]> {
                match s {
                    CpuStorage::$v(b) => Some(b),
                    _ => None,
                }
            }
            #[inline(always)]
            fn storage_slice_mut(s: &mut CpuStorage) -> Option<&mut [Self]> {
                match s {
                    CpuStorage::$v(b) => Some(b),
                    _ => None,
                }
            }
            #[inline(always)]
            fn into_storage(b: Buffer<Self>) -> CpuStorage {
                CpuStorage::$v(b)
            }
        }
    };
}
storage_element!(u8, U8);
storage_element!(i64, I64);
storage_element!(f32, F32);
storage_element!(f64, F64);
storage_element!(half::f16, F16);
storage_element!(half::bf16, BF16);

/// The data of a tensor on its device. New backends add a variant here.
#[derive(Debug)]
pub enum Storage {
    /// Host memory.
    Cpu(CpuStorage),
    /// Memory of a CUDA device (host memory in disguise on the emulated `cuda:0`, see
    /// [`Device::emulate_cuda`]), which only its backend looks inside.
    Cuda(DeviceStorage),
    /// A LibTorch tensor on the host (`Device::TorchCpu`), which only the LibTorch backend
    /// looks inside.
    Torch(DeviceStorage),
}

impl Storage {
    /// The dtype of the elements.
    pub fn dtype(&self) -> DType {
        match self {
            Storage::Cpu(s) => s.dtype(),
            Storage::Cuda(s) | Storage::Torch(s) => s.dtype(),
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Storage::Cpu(s) => s.len(),
            Storage::Cuda(s) | Storage::Torch(s) => s.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The device holding the data.
    pub fn device(&self) -> Device {
        match self {
            Storage::Cpu(_) => Device::Cpu,
            Storage::Cuda(s) => Device::Cuda(s.ordinal()),
            Storage::Torch(_) => Device::TorchCpu,
        }
    }

    /// The device storage, if the data lives on a CUDA device.
    pub fn as_cuda(&self) -> Option<&DeviceStorage> {
        match self {
            Storage::Cuda(s) => Some(s),
            _ => None,
        }
    }

    /// The device storage, mutably, if the data lives on a CUDA device.
    pub fn as_cuda_mut(&mut self) -> Option<&mut DeviceStorage> {
        match self {
            Storage::Cuda(s) => Some(s),
            _ => None,
        }
    }

    /// The LibTorch storage, if the data is a LibTorch tensor.
    pub fn as_torch(&self) -> Option<&DeviceStorage> {
        match self {
            Storage::Torch(s) => Some(s),
            _ => None,
        }
    }

    /// The LibTorch storage, mutably, if the data is a LibTorch tensor.
    pub fn as_torch_mut(&mut self) -> Option<&mut DeviceStorage> {
        match self {
            Storage::Torch(s) => Some(s),
            _ => None,
        }
    }

    /// The host storage, if the data lives on the CPU.
    pub fn as_cpu(&self) -> Option<&CpuStorage> {
        match self {
            Storage::Cpu(s) => Some(s),
            _ => None,
        }
    }

    /// The host storage, mutably, if the data lives on the CPU.
    pub fn as_cpu_mut(&mut self) -> Option<&mut CpuStorage> {
        match self {
            Storage::Cpu(s) => Some(s),
            _ => None,
        }
    }
}

impl From<CpuStorage> for Storage {
    /// Host data as a CPU storage.
    fn from(s: CpuStorage) -> Self {
        Storage::Cpu(s)
    }
}

static MUTATION_EPOCH: AtomicU64 = AtomicU64::new(1);

/// A global counter bumped by every in-place write to a *watched* storage (one that holds
/// the value of an autograd node) and by autograd when a leaf's value is replaced.
///
/// Autograd's reactive re-execution compares it with the epoch at which a node was last
/// verified: when nothing has been written since, a request for a value answers at once.
#[inline]
pub fn mutation_epoch() -> u64 {
    MUTATION_EPOCH.load(Ordering::Acquire)
}

/// Advances [`mutation_epoch`]; autograd calls it when it replaces a leaf's value.
pub fn bump_mutation_epoch() -> u64 {
    MUTATION_EPOCH.fetch_add(1, Ordering::AcqRel) + 1
}

static INPLACE_EPOCH: AtomicU64 = AtomicU64::new(1);

/// A global counter bumped only by in-place writes to watched storages (a subset of what
/// [`mutation_epoch`] counts). When it has not moved, every change since was a value
/// replaced through autograd, which autograd tracks itself.
#[inline]
pub fn inplace_epoch() -> u64 {
    INPLACE_EPOCH.load(Ordering::Acquire)
}

/// Shared storage with its version counter. All views of a tensor share one cell.
#[derive(Debug)]
pub struct StorageCell {
    data: RwLock<Storage>,
    version: AtomicU64,
    watched: AtomicBool,
    untracked: AtomicBool,
}

impl StorageCell {
    /// A new cell at version 0.
    #[inline(always)]
    pub fn new(storage: Storage) -> Self {
        StorageCell {
            data: RwLock::new(storage),
            version: AtomicU64::new(0),
            watched: AtomicBool::new(false),
            untracked: AtomicBool::new(false),
        }
    }

    /// A new cell at version 0, in its own `Arc`.
    ///
    /// Written straight into the allocation: `Arc::new` builds the cell on the stack and
    /// copies it over, and for the one-element results of a chain of small operations that
    /// copy (loads straddling the stores that just built it) was a measurable share of the
    /// operation.
    ///
    /// The cell is one a dropped tensor left in this thread's cache when there is one (see
    /// `storage/cell_cache.rs`), else a fresh allocation.
    #[inline]
    pub fn shared(storage: Storage) -> Arc<Self> {
        if let Some(cell) = cell_cache::take() {
            cell_cache::refill(&cell, storage);
            return cell;
        }
        let slot = Arc::<Self>::new_uninit();
        let p = Arc::as_ptr(&slot) as *mut std::mem::MaybeUninit<Self>;
        // SAFETY: `slot` was just allocated and is the only handle to it, so writing through
        // its pointer races with nothing; after the write the value is initialised.
        unsafe {
            (*p).write(StorageCell::new(storage));
            slot.assume_init()
        }
    }

    /// Shared access to the data.
    #[inline]
    pub fn read(&self) -> RwLockReadGuard<'_, Storage> {
        self.data.read()
    }

    /// Exclusive access for an in-place write; bumps the version counter (and the global
    /// mutation epoch when the cell is watched).
    pub fn write(&self) -> RwLockWriteGuard<'_, Storage> {
        self.bump();
        self.data.write()
    }

    /// Bumps the version as an in-place write does (nothing, once [`StorageCell::untrack`]ed).
    #[inline]
    pub fn bump(&self) {
        if self.untracked.load(Ordering::Relaxed) {
            return;
        }
        self.version.fetch_add(1, Ordering::AcqRel);
        if self.watched.load(Ordering::Relaxed) {
            INPLACE_EPOCH.fetch_add(1, Ordering::AcqRel);
            bump_mutation_epoch();
        }
    }

    /// Starts the version history over, for a tensor that was filled in place while it was
    /// being built and that no one else has seen yet: its writes are not modifications.
    pub(crate) fn reset_version(&self) {
        self.version.store(0, Ordering::Release);
    }

    /// The number of in-place writes so far.
    #[inline]
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// Stops counting in-place writes, for good: the version stays where it is and writes
    /// no longer advance the global epochs. For data no autograd graph will ever read, such
    /// as autograd's inference tensors (PyTorch's inference tensors have no version
    /// counter either); the caller makes sure nothing else shares the cell.
    #[inline]
    pub fn untrack(&self) {
        self.untracked.store(true, Ordering::Relaxed);
    }

    /// Whether in-place writes are counted (see [`StorageCell::untrack`]).
    #[inline]
    pub fn is_tracked(&self) -> bool {
        !self.untracked.load(Ordering::Relaxed)
    }

    /// Marks the cell as holding an autograd value, so that writes advance the global
    /// mutation epoch.
    #[inline]
    pub fn watch(&self) {
        if !self.watched.load(Ordering::Relaxed) {
            self.watched.store(true, Ordering::Relaxed);
        }
    }
}

impl StorageCell {
    /// The data, when this is the last handle to the cell.
    pub fn into_inner(self) -> Storage {
        self.data.into_inner()
    }
}
