//! `Buffer<T>`: an owned, initialised, pool-backed array of elements.

use super::pool;
use crate::dtype::Element;
use crate::{Error, Result};
use std::ptr::NonNull;

/// An owned array of `T`, allocated through the buffer pool.
///
/// Every element is always initialised: fresh memory is zeroed and reused memory holds the
/// stale values of its previous owner, which are valid values of every element type.
pub struct Buffer<T: Element> {
    ptr: NonNull<T>,
    len: usize,
}

// SAFETY: `Buffer` owns its memory exclusively, like `Vec<T>`.
unsafe impl<T: Element> Send for Buffer<T> {}
// SAFETY: shared access only hands out `&[T]`.
unsafe impl<T: Element> Sync for Buffer<T> {}

impl<T: Element> Buffer<T> {
    fn bytes_for(op: &'static str, len: usize) -> Result<usize> {
        len.checked_mul(std::mem::size_of::<T>())
            .filter(|&b| b <= isize::MAX as usize / 2)
            .map(pool::rounded)
            .ok_or(Error::Alloc { op, elements: len, dtype: T::DTYPE.name() })
    }

    fn alloc(op: &'static str, len: usize, zeroed: bool) -> Result<Self> {
        if len == 0 {
            return Ok(Buffer { ptr: NonNull::dangling(), len: 0 });
        }
        let bytes = Self::bytes_for(op, len)?;
        let p = pool::alloc_block(bytes, zeroed).ok_or(Error::Alloc { op, elements: len, dtype: T::DTYPE.name() })?;
        Ok(Buffer { ptr: p.cast(), len })
    }

    /// `len` zeros.
    pub fn zeros(op: &'static str, len: usize) -> Result<Self> {
        Self::alloc(op, len, true)
    }

    /// `len` elements of unspecified (but initialised) value, for outputs a kernel overwrites
    /// completely.
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

impl<T: Element> std::ops::Deref for Buffer<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` points to `len` initialised elements owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Element> std::ops::DerefMut for Buffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as above, and `&mut self` guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Element> Drop for Buffer<T> {
    fn drop(&mut self) {
        if self.len == 0 {
            return;
        }
        let bytes = pool::rounded(self.len * std::mem::size_of::<T>());
        // SAFETY: the block was allocated by `alloc_block(bytes, _)` in `alloc`.
        unsafe { pool::free_block(self.ptr.cast(), bytes) };
    }
}

impl<T: Element> std::fmt::Debug for Buffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::pool::{POOL_MIN_BYTES, memory_stats};

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
        assert!(Buffer::<f64>::zeros("t", usize::MAX / 4).is_err());
    }
}
