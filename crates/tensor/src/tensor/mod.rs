//! The [`Tensor`] type: a cheap handle to shared storage seen through a layout.

mod attention;
mod conditional;
mod conv;
mod create;
mod elementwise;
mod index;
mod inplace;
mod join;
mod layer_norm;
mod linalg;
mod locks;
mod loss;
mod lstm;
mod norm;
mod operators;
mod optim;
mod pool;
mod reduce;
mod unary;
mod unscale;
pub(crate) mod view;

use crate::backend::{Backend, View, backend_for};
use crate::dtype::{DType, Element};
use crate::error::infallible;
use crate::host::read::{vec_with_capacity, view_to_f64, view_to_vec};
use crate::layout::Layout;
use crate::shape::Shape;
use crate::storage::{Storage, StorageCell};
use crate::{Device, Error, Result};
use std::mem::ManuallyDrop;
use std::sync::Arc;

/// An n-dimensional array of one dtype on one device.
///
/// A `Tensor` is a handle: `clone()` is O(1) and shares the data, like PyTorch's tensors.
/// Operations return new tensors and leave their inputs untouched; in-place operations end
/// in `_` (`add_`, `fill_`, ...) and write through every handle and view of the storage,
/// bumping the storage's [`version`](Tensor::version).
///
/// Views (`reshape`, `transpose`, `narrow`, `expand`, ...) share storage and cost O(rank).
///
/// ```
/// use ember_tensor::Tensor;
/// let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3])?;
/// let b = Tensor::from_vec(vec![10.0f32, 20.0, 30.0], [3])?;
/// let c = (&a + &b)?; // broadcasts [3] over the rows
/// assert_eq!(c.to_vec::<f32>()?, vec![11.0, 22.0, 33.0, 14.0, 25.0, 36.0]);
/// assert_eq!(c.t()?.shape(), &[3, 2]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Clone)]
pub struct Tensor {
    /// Taken out only by `Drop`, which hands it to the storage cell cache.
    storage: ManuallyDrop<Arc<StorageCell>>,
    layout: Layout,
    dtype: DType,
    device: Device,
}

impl Drop for Tensor {
    /// The last handle to a storage leaves its emptied cell to the next tensor this thread
    /// makes (see `storage/cell_cache.rs`).
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the field is taken once, here, and not used afterwards.
        let cell = unsafe { ManuallyDrop::take(&mut self.storage) };
        crate::storage::cell_cache::recycle(cell);
    }
}

impl Tensor {
    /// A contiguous tensor over fresh storage.
    #[inline]
    pub(crate) fn from_storage(storage: Storage, shape: Shape) -> Tensor {
        let dtype = storage.dtype();
        let device = storage.device();
        Tensor {
            storage: ManuallyDrop::new(StorageCell::shared(storage)),
            layout: Layout::contiguous(shape),
            dtype,
            device,
        }
    }

    /// The same storage through another layout.
    pub(crate) fn with_layout(&self, layout: Layout) -> Tensor {
        Tensor { storage: self.storage.clone(), layout, dtype: self.dtype, device: self.device }
    }

    pub(crate) fn backend(&self) -> &'static dyn Backend {
        // Tensors only exist on devices whose backend is compiled in.
        infallible(backend_for(self.device))
    }

    /// Runs `f` with this tensor's storage and layout, holding a read lock.
    pub(crate) fn read<R>(&self, f: impl FnOnce(View<'_>) -> R) -> R {
        let g = self.storage.read();
        f((&g, &self.layout))
    }

    /// Runs `f` with the views of `self` and `other`, read-locked in the global lock order
    /// (one lock when they share storage; see [`locks`]).
    pub(crate) fn read2<R>(&self, other: &Tensor, f: impl FnOnce(View<'_>, View<'_>) -> R) -> R {
        let (ga, gb) = locks::read_pair(&self.storage, &other.storage);
        let sb: &Storage = gb.as_deref().unwrap_or(&ga);
        f((&ga, &self.layout), (sb, &other.layout))
    }

    /// `read2` for three tensors.
    pub(crate) fn read3<R>(&self, b: &Tensor, c: &Tensor, f: impl FnOnce(View<'_>, View<'_>, View<'_>) -> R) -> R {
        let set = locks::ReadSet::new(&[&self.storage, &b.storage, &c.storage]);
        f((set.get(&self.storage), &self.layout), (set.get(&b.storage), &b.layout), (set.get(&c.storage), &c.layout))
    }

    pub(crate) fn same_device(&self, op: &'static str, other: &Tensor) -> Result<()> {
        if self.device != other.device {
            return Err(Error::invalid(
                op,
                format!("expected tensors on one device, got {} and {}", self.device, other.device),
            ));
        }
        Ok(())
    }

    /// The extents of each dimension, outermost first. A [`Shape`] dereferences to
    /// `&[usize]` and compares with slices, arrays and vectors, so it reads like one:
    ///
    /// ```
    /// use ember_tensor::{DType, Tensor};
    /// let t = Tensor::zeros([2, 3], DType::F32)?;
    /// assert_eq!(t.shape(), &[2, 3]);
    /// assert_eq!(t.shape()[1], 3);
    /// let dims: &[usize] = t.shape();
    /// assert_eq!(dims.len(), 2);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    #[inline]
    pub fn shape(&self) -> &Shape {
        self.layout.shape()
    }

    /// Number of dimensions (0 for a scalar).
    #[inline]
    pub fn rank(&self) -> usize {
        self.layout.rank()
    }

    /// Number of elements.
    #[inline]
    pub fn numel(&self) -> usize {
        self.layout.numel()
    }

    /// The extent of dimension `dim` (negative counts from the back).
    pub fn size(&self, dim: impl crate::shape::Dim) -> Result<usize> {
        Ok(self.shape()[dim.resolve(self.rank(), "size")?])
    }

    /// The element type.
    #[inline]
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The device holding the data.
    #[inline]
    pub fn device(&self) -> Device {
        self.device
    }

    /// The layout (shape, strides, offset).
    #[inline]
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Strides in elements.
    #[inline]
    pub fn strides(&self) -> &[usize] {
        self.layout.strides()
    }

    /// Whether the elements are stored row-major without gaps.
    #[inline]
    pub fn is_contiguous(&self) -> bool {
        self.layout.is_contiguous()
    }

    /// How many in-place writes the storage has seen; shared by all views of it.
    ///
    /// ```
    /// use ember_tensor::{DType, Tensor};
    /// let t = Tensor::zeros([3], DType::F32)?;
    /// let v = t.narrow(0, 1, 2)?;
    /// v.fill_(1.0)?;
    /// assert_eq!(t.version(), 1);
    /// assert_eq!(t.to_vec::<f32>()?, vec![0.0, 1.0, 1.0]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    #[inline]
    pub fn version(&self) -> u64 {
        self.storage.version()
    }

    /// The shared storage cell (for autograd's version and identity checks).
    #[inline]
    pub fn storage(&self) -> &Arc<StorageCell> {
        &self.storage
    }

    /// Whether two tensors share storage (one may be a view of the other).
    #[inline]
    pub fn shares_storage(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.storage, &other.storage)
    }

    /// The elements in logical (row-major) order. `T` must be the tensor's dtype.
    ///
    /// ```
    /// use ember_tensor::Tensor;
    /// let t = Tensor::from_vec(vec![1i64, 2, 3, 4], [2, 2])?.t()?;
    /// assert_eq!(t.to_vec::<i64>()?, vec![1, 3, 2, 4]);
    /// assert!(t.to_vec::<f32>().is_err());
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.with_host(|s, l| view_to_vec(s, l))??
            .ok_or_else(|| Error::dtype("to_vec", format!("cannot read a {} tensor as {}", self.dtype, T::DTYPE)))
    }

    /// The elements converted to `f64`, in logical order, whatever the dtype.
    pub fn to_vec_f64(&self) -> Result<Vec<f64>> {
        self.with_host(view_to_f64)?
    }

    /// A 2-d tensor as rows.
    pub fn to_vec2<T: Element>(&self) -> Result<Vec<Vec<T>>> {
        if self.rank() != 2 {
            return Err(Error::shape("to_vec2", format!("expected a 2-d tensor, got shape {:?}", self.shape())));
        }
        let (rows, cols) = (self.shape()[0], self.shape()[1]);
        let flat = self.to_vec::<T>()?;
        // Empty rows hold no data that would have failed to allocate above, so the outer
        // vector may still not fit in memory.
        let mut out = vec_with_capacity("to_vec2", rows, "rows")?;
        if cols == 0 {
            out.resize(rows, Vec::new());
            return Ok(out);
        }
        for c in flat.chunks(cols) {
            let mut row = vec_with_capacity("to_vec2", cols, T::DTYPE.name())?;
            row.extend_from_slice(c);
            out.push(row);
        }
        Ok(out)
    }

    /// The single element of a one-element tensor. `T` must be the tensor's dtype.
    pub fn to_scalar<T: Element>(&self) -> Result<T> {
        if self.numel() != 1 {
            return Err(Error::shape(
                "to_scalar",
                format!("expected a tensor with one element, got shape {:?}", self.shape()),
            ));
        }
        Ok(self.to_vec::<T>()?[0])
    }

    /// The single element as `f64`, whatever the dtype (PyTorch's `item()`).
    pub fn item(&self) -> Result<f64> {
        if self.numel() != 1 {
            return Err(Error::shape(
                "item",
                format!("expected a tensor with one element, got shape {:?}", self.shape()),
            ));
        }
        Ok(self.to_vec_f64()?[0])
    }

    /// Runs `f` on a host view of the data: the storage itself on the CPU, a contiguous
    /// host copy on other devices.
    fn with_host<R>(&self, f: impl FnOnce(&crate::storage::CpuStorage, &Layout) -> R) -> Result<R> {
        self.read(|(s, l)| match s.as_cpu() {
            Some(c) => Ok(f(c, l)),
            None => {
                let host = self.backend().download((s, l))?;
                Ok(f(&host, &Layout::contiguous(l.shape().clone())))
            }
        })
    }

    /// A contiguous tensor with the same values: `self` when already contiguous, otherwise
    /// a copy.
    pub fn contiguous(&self) -> Tensor {
        if self.is_contiguous() {
            return self.clone();
        }
        self.copy()
    }

    /// A contiguous copy that shares nothing with `self` (PyTorch's `clone()`).
    pub fn copy(&self) -> Tensor {
        infallible(self.try_copy())
    }

    /// The values converted to `dtype` with `as` semantics; `self` when it already has it.
    pub fn to_dtype(&self, dtype: DType) -> Tensor {
        infallible(self.try_to_dtype(dtype))
    }

    /// [`Tensor::copy`] for operations that return `Result`: materialising a view too large
    /// for memory (a huge `expand`) is then an allocation error instead of an abort.
    pub(crate) fn try_copy(&self) -> Result<Tensor> {
        let s = self.read(|v| self.backend().cast(v, self.dtype))?;
        Ok(Tensor::from_storage(s, self.layout.shape().clone()))
    }

    /// [`Tensor::contiguous`] for operations that return `Result` (see [`Tensor::try_copy`]).
    pub(crate) fn try_contiguous(&self) -> Result<Tensor> {
        if self.is_contiguous() { Ok(self.clone()) } else { self.try_copy() }
    }

    /// [`Tensor::to_dtype`] for operations that return `Result` (see [`Tensor::try_copy`]).
    pub(crate) fn try_to_dtype(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype {
            return Ok(self.clone());
        }
        let s = self.read(|v| self.backend().cast(v, dtype))?;
        Ok(Tensor::from_storage(s, self.layout.shape().clone()))
    }

    /// The tensor on `device` (PyTorch's `tensor.to(device)`); `self` when it is there
    /// already, an error naming the device when it cannot be used.
    ///
    /// A copy to a GPU does not wait for the transfer (like PyTorch's `non_blocking=True`
    /// from pinned memory): the data is staged in page-locked host memory and the copy is
    /// queued before the kernels that will read it. A copy back to the host waits for the
    /// work queued before it.
    pub fn to_device(&self, device: Device) -> Result<Tensor> {
        device.check_available()?;
        if device == self.device {
            return Ok(self.clone());
        }
        let host = self.read(|v| self.backend().download(v))?;
        let s = backend_for(device)?.upload(host)?;
        Ok(Tensor::from_storage(s, self.layout.shape().clone()))
    }
}
