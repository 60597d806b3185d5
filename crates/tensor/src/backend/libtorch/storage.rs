//! The LibTorch storage: one flat, contiguous `tch::Tensor` per ember storage, which every
//! view reads through `as_strided` with the view's own shape, strides and offset, so that
//! ember's layouts (views, expansions, offsets) reach PyTorch's kernels without copies.

use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::storage::{CpuStorage, DeviceData, DeviceStorage, Storage};
use std::fmt;
use tch::{Kind, Tensor};

/// The device this backend computes on.
pub(crate) const DEVICE: Device = Device::TorchCpu;

/// PyTorch's device for the tensors of [`DEVICE`].
pub(crate) const TORCH_DEVICE: tch::Device = tch::Device::Cpu;

/// The data of a tensor on `torch-cpu`: a flat LibTorch tensor, and the host buffer it
/// borrows when it was made from one without a copy.
pub struct TorchStorage {
    // Dropped before `host`, the memory it may point into.
    tensor: Tensor,
    host: Option<Box<CpuStorage>>,
    dtype: DType,
    len: usize,
}

// SAFETY: `tch::Tensor` is `Send` but not `Sync` because its handle is a raw pointer. ember
// reaches a storage through its cell's `RwLock`: shared references only read (ATen's
// reference counts are atomic, and reading a tensor's data and metadata from several
// threads is safe in ATen); every write goes through `&mut Storage`, which is exclusive.
unsafe impl Sync for TorchStorage {}

impl fmt::Debug for TorchStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TorchStorage({}, {} elements)", self.dtype, self.len)
    }
}

impl DeviceData for TorchStorage {
    fn dtype(&self) -> DType {
        self.dtype
    }

    fn len(&self) -> usize {
        self.len
    }

    fn ordinal(&self) -> usize {
        0
    }
}

/// The LibTorch dtype of an ember dtype.
pub(crate) fn kind(d: DType) -> Kind {
    match d {
        DType::U8 => Kind::Uint8,
        DType::I64 => Kind::Int64,
        DType::F16 => Kind::Half,
        DType::BF16 => Kind::BFloat16,
        DType::F32 => Kind::Float,
        DType::F64 => Kind::Double,
    }
}

/// The ember dtype of a LibTorch dtype, for the six ember has.
pub(crate) fn dtype_of(op: &'static str, k: Kind) -> Result<DType> {
    Ok(match k {
        Kind::Uint8 => DType::U8,
        Kind::Int64 => DType::I64,
        Kind::Half => DType::F16,
        Kind::BFloat16 => DType::BF16,
        Kind::Float => DType::F32,
        Kind::Double => DType::F64,
        other => return Err(Error::invalid(op, format!("LibTorch returned a tensor of dtype {other:?}"))),
    })
}

/// A LibTorch error as ember's, naming the operation.
pub(crate) fn torch_err(op: &'static str) -> impl Fn(tch::TchError) -> Error {
    move |e| Error::invalid(op, format!("LibTorch: {e}"))
}

/// An ember size as LibTorch's `i64`.
pub(crate) fn i(v: usize) -> i64 {
    v as i64
}

/// Sizes as LibTorch's `i64`s.
pub(crate) fn dims(v: &[usize]) -> Vec<i64> {
    v.iter().map(|&d| d as i64).collect()
}

impl TorchStorage {
    /// A storage owning the result `t` of a LibTorch kernel. `t` must not share memory with
    /// any other storage (every kernel's output is fresh; a view of an input is not).
    pub(crate) fn owning(op: &'static str, t: Tensor) -> Result<TorchStorage> {
        let t = if t.is_contiguous() { t } else { t.f_contiguous().map_err(torch_err(op))? };
        let dtype = dtype_of(op, t.kind())?;
        let len = t.numel();
        let tensor = t.f_reshape([len as i64]).map_err(torch_err(op))?;
        Ok(TorchStorage { tensor, host: None, dtype, len })
    }

    /// Host data as a LibTorch tensor, without a copy: the tensor reads the buffer, which
    /// the storage keeps (boxed, so that buffers stored inline do not move).
    pub(crate) fn borrowing(data: CpuStorage) -> Result<TorchStorage> {
        let host = Box::new(data);
        let (dtype, len) = (host.dtype(), host.len());
        let ptr: *const u8 = crate::cpu_dispatch!(&*host, b => b.as_ptr().cast::<u8>());
        // SAFETY: `ptr` addresses `len` initialised elements of `dtype` in the boxed buffer,
        // which lives as long as the storage and is dropped after the tensor (field order).
        // Kernels never return views of it as results: `owning` takes fresh outputs only.
        let tensor = unsafe { Tensor::f_from_blob(ptr, &[len as i64], &[1], kind(dtype), TORCH_DEVICE) }
            .map_err(torch_err("to_device"))?;
        Ok(TorchStorage { tensor, host: Some(host), dtype, len })
    }

    /// Whether the tensor reads a host buffer it borrows: data uploaded from the host,
    /// which `to_device` brings onto `torch-cpu` without a copy.
    pub fn is_borrowed(&self) -> bool {
        self.host.is_some()
    }

    /// The view `l` addresses, as a LibTorch tensor sharing the storage's memory.
    pub(crate) fn view(&self, op: &'static str, l: &Layout) -> Result<Tensor> {
        self.tensor
            .f_as_strided(dims(l.shape().dims()), dims(l.strides()), Some(l.offset() as i64))
            .map_err(torch_err(op))
    }

    /// A contiguous host copy of the view `l` addresses, written by LibTorch's copy kernel
    /// straight into ember's buffer.
    pub(crate) fn download(&self, op: &'static str, l: &Layout) -> Result<CpuStorage> {
        let numel = l.shape().numel();
        let mut out = CpuStorage::zeros(op, numel, self.dtype)?;
        if numel == 0 {
            return Ok(out);
        }
        let ptr: *mut u8 = crate::cpu_dispatch!(&mut out, b => b.as_mut_ptr().cast::<u8>());
        let shape = dims(l.shape().dims());
        let src = self.view(op, l)?;
        // SAFETY: `out` holds `numel` elements of the view's dtype, contiguous, and outlives
        // `dst`, which is dropped at the end of this block; nothing else reads `out` meanwhile.
        {
            let mut dst = unsafe { Tensor::f_from_blob(ptr, &shape, &[], kind(self.dtype), TORCH_DEVICE) }
                .map_err(torch_err(op))?;
            dst.f_copy_(&src).map_err(torch_err(op))?;
        }
        Ok(out)
    }
}

/// The LibTorch storage inside `s`, or an error for a storage of another device.
pub(crate) fn storage_of<'a>(op: &'static str, s: &'a Storage) -> Result<&'a TorchStorage> {
    s.as_torch().and_then(DeviceStorage::downcast_ref).ok_or_else(|| foreign(op, s.device()))
}

/// [`storage_of`] for a storage written in place.
pub(crate) fn storage_of_mut<'a>(op: &'static str, s: &'a mut Storage) -> Result<&'a mut TorchStorage> {
    let device = s.device();
    s.as_torch_mut().and_then(DeviceStorage::downcast_mut).ok_or_else(|| foreign(op, device))
}

fn foreign(op: &'static str, d: Device) -> Error {
    Error::Device {
        device: d.to_string(),
        msg: format!("{op}: the LibTorch backend was given a storage of this device"),
    }
}

/// A LibTorch storage as a [`Storage`].
pub(crate) fn stored(t: TorchStorage) -> Storage {
    Storage::Torch(DeviceStorage::new(t))
}
