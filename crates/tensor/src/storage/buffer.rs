//! `Buffer<T>`: an owned, initialised, pool-backed array of elements.

use super::cache;
use crate::shape::MAX_NUMEL;
use crate::{DType, Error, Result};
use std::ptr::NonNull;

/// `Ok` when `elements` values of `dtype` could be allocated now: the count is within
/// ember's element limit and the system grants the bytes (reserved and freed at once, which
/// touches no memory). Otherwise the error a tensor of that size would give, naming `op`.
///
/// For requests made of many parts that are each small (the layers of a deep stack, the
/// sample maps of a huge resampling): checked on their total before any part is built, they
/// fail with an error instead of running the process out of memory part by part.
///
/// ```
/// use ember_tensor::DType;
/// use ember_tensor::storage::check_allocatable;
/// assert!(check_allocatable("demo", 1 << 10, DType::F32).is_ok());
/// assert!(check_allocatable("demo", usize::MAX, DType::F32).unwrap_err().to_string().contains("demo"));
/// ```
pub fn check_allocatable(op: &'static str, elements: usize, dtype: DType) -> Result<()> {
    if elements > MAX_NUMEL {
        return Err(Error::shape(op, format!("{elements} elements are more than a tensor may hold")));
    }
    let refused = || Error::Alloc { op, elements, dtype: dtype.name() };
    let bytes = elements.checked_mul(dtype.size_in_bytes()).ok_or_else(refused)?;
    Vec::<u8>::new().try_reserve_exact(bytes).map_err(|_| refused())
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for u8 {}
    impl Sealed for i64 {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// An element type a [`Buffer`] can hold: `u8`, `i64`, `half::f16`, `half::bf16`, `f32` or
/// `f64`, for each of which
/// every bit pattern is a valid value (so reused memory holds valid elements) and the
/// alignment is at most 8 (so tiny buffers fit inline). Its dtype is `T::DTYPE`.
pub trait BufferElement: sealed::Sealed + Copy + Send + Sync + std::fmt::Debug + 'static {
    /// The dtype of this element type.
    const DTYPE: DType;
}

impl BufferElement for u8 {
    const DTYPE: DType = DType::U8;
}
impl BufferElement for i64 {
    const DTYPE: DType = DType::I64;
}
impl BufferElement for f32 {
    const DTYPE: DType = DType::F32;
}
impl BufferElement for f64 {
    const DTYPE: DType = DType::F64;
}
impl BufferElement for half::f16 {
    const DTYPE: DType = DType::F16;
}
impl BufferElement for half::bf16 {
    const DTYPE: DType = DType::BF16;
}

/// Buffers of at most this many bytes live inside the `Buffer` value itself: a tensor of a
/// few elements then costs no allocation of its own.
const INLINE_BYTES: usize = 32;

/// An owned array of `T`, allocated through the buffer pool (or stored inline when tiny).
///
/// Every element is always initialised: fresh memory is zeroed and reused memory holds the
/// stale values of its previous owner, which are valid values of every element type.
pub struct Buffer<T: BufferElement> {
    /// `None` for an inline buffer.
    ptr: Option<NonNull<T>>,
    len: usize,
    inline: [u64; INLINE_BYTES / 8],
    _t: std::marker::PhantomData<T>,
}

// SAFETY: `Buffer` owns its memory exclusively, like `Vec<T>`.
unsafe impl<T: BufferElement> Send for Buffer<T> {}
// SAFETY: shared access only hands out `&[T]`.
unsafe impl<T: BufferElement> Sync for Buffer<T> {}

impl<T: BufferElement> Buffer<T> {
    fn bytes_for(op: &'static str, len: usize) -> Result<usize> {
        len.checked_mul(std::mem::size_of::<T>())
            .filter(|&b| b <= isize::MAX as usize / 2)
            .map(cache::rounded)
            .ok_or_else(|| Error::Alloc { op, elements: len, dtype: T::DTYPE.name() })
    }

    // Inlined: a tiny buffer is returned by value through every kernel layer, and built
    // in place it is not stored in one width and reloaded in another.
    #[inline]
    fn alloc(op: &'static str, len: usize, zeroed: bool) -> Result<Self> {
        let inline = [0u64; INLINE_BYTES / 8];
        if len <= INLINE_BYTES / std::mem::size_of::<T>() {
            return Ok(Buffer { ptr: None, len, inline, _t: std::marker::PhantomData });
        }
        let bytes = Self::bytes_for(op, len)?;
        // The error is built only on failure: built eagerly, it is dropped (through the error
        // type's drop glue) on every allocation.
        let p = cache::alloc_block(bytes, zeroed).ok_or_else(|| Error::Alloc {
            op,
            elements: len,
            dtype: T::DTYPE.name(),
        })?;
        Ok(Buffer { ptr: Some(p.cast()), len, inline, _t: std::marker::PhantomData })
    }

    fn data_ptr(&self) -> *const T {
        match self.ptr {
            Some(p) => p.as_ptr(),
            // The inline words are 8-aligned, which suits every element type.
            None => self.inline.as_ptr() as *const T,
        }
    }

    /// A buffer of no elements (it allocates nothing).
    pub(crate) const fn empty() -> Self {
        Buffer { ptr: None, len: 0, inline: [0u64; INLINE_BYTES / 8], _t: std::marker::PhantomData }
    }

    /// `len` zeros.
    #[inline]
    pub fn zeros(op: &'static str, len: usize) -> Result<Self> {
        Self::alloc(op, len, true)
    }

    /// `len` elements of unspecified (but initialised) value, for outputs a kernel overwrites
    /// completely.
    #[inline]
    pub fn uninit(op: &'static str, len: usize) -> Result<Self> {
        Self::alloc(op, len, false)
    }

    /// `len` copies of `value`.
    pub fn full(op: &'static str, len: usize, value: T) -> Result<Self> {
        let mut b = Self::uninit(op, len)?;
        b.fill(value);
        Ok(b)
    }

    /// A copy of `data`.
    pub fn from_slice(op: &'static str, data: &[T]) -> Result<Self> {
        let mut b = Self::uninit(op, data.len())?;
        b.copy_from_slice(data);
        Ok(b)
    }

    /// The buffer filled by `f(i)` for each index.
    pub fn from_fn(op: &'static str, len: usize, mut f: impl FnMut(usize) -> T) -> Result<Self> {
        let mut b = Self::uninit(op, len)?;
        for (i, v) in b.iter_mut().enumerate() {
            *v = f(i);
        }
        Ok(b)
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<T: BufferElement> std::ops::Deref for Buffer<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: the data holds `len` initialised elements owned by `self`.
        unsafe { std::slice::from_raw_parts(self.data_ptr(), self.len) }
    }
}

impl<T: BufferElement> std::ops::DerefMut for Buffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as above, and `&mut self` guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.data_ptr() as *mut T, self.len) }
    }
}

impl<T: BufferElement> Drop for Buffer<T> {
    fn drop(&mut self) {
        let Some(p) = self.ptr else { return };
        let bytes = cache::rounded(self.len * std::mem::size_of::<T>());
        // SAFETY: the block was allocated by `alloc_block(bytes, _)` in `alloc`.
        unsafe { cache::free_block(p.cast(), bytes) };
    }
}

impl<T: BufferElement> std::fmt::Debug for Buffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::cache::{POOL_MIN_BYTES, memory_stats};

    #[test]
    fn large_buffers_are_reused() {
        let n = POOL_MIN_BYTES; // f32: 4 x the pool threshold
        let b = Buffer::<f32>::full("t", n, 3.0).unwrap();
        let p = b.as_ptr();
        drop(b);
        let hits = memory_stats().pool_hits;
        let c = Buffer::<f32>::zeros("t", n).unwrap();
        // Another test thread may take the block first; only check values when reused.
        if c.as_ptr() == p {
            assert!(memory_stats().pool_hits > hits);
        }
        assert!(c.iter().all(|&v| v == 0.0));
    }

    #[test]
    fn empty_and_overflowing_requests() {
        assert!(Buffer::<f64>::zeros("t", 0).unwrap().is_empty());
        let mut tiny = Buffer::<u8>::zeros("t", 32).unwrap();
        tiny[31] = 7;
        let moved = tiny;
        assert_eq!(moved[31], 7);
        assert!(Buffer::<f64>::zeros("t", usize::MAX / 4).is_err());
    }
}
