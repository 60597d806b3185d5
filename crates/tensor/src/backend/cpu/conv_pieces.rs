//! What the convolution kernels (`conv.rs`, and `conv_direct.rs` for small images) share:
//! the output pointer their parallel pieces write through, the loop over pieces, the
//! scratch blocks the pieces borrow, the bias view, and the `gemm` call of their products.

use super::binary;
use crate::dtype::FloatElement;
use crate::host::iter::{fill_chunks, par_for, threads};
use crate::layout::Layout;
use crate::storage::{Buffer, CpuStorage};
use crate::{Error, Result};
use parking_lot::Mutex;

/// Multiply-adds below which a kernel runs on the calling thread only.
const SERIAL_WORK: usize = 1 << 18;

/// A pointer to the output that may cross threads; every piece writes a disjoint part.
#[derive(Clone, Copy)]
pub(super) struct Out<T>(pub(super) *mut T);
// SAFETY: `Out` is only used by loops whose pieces write disjoint parts of one buffer,
// which outlives the loop.
unsafe impl<T> Send for Out<T> {}
unsafe impl<T> Sync for Out<T> {}
impl<T> Out<T> {
    /// The pointer; a method so that closures capture the whole `Send` wrapper.
    pub(super) fn get(self) -> *mut T {
        self.0
    }
}
/// The product of `factors` (a count of multiply-adds), saturating.
pub(super) fn work(factors: &[usize]) -> usize {
    factors.iter().fold(1usize, |a, &f| a.saturating_mul(f))
}

/// Runs `f` on `0..pieces`, in parallel unless the whole kernel is `work` multiply-adds of
/// little weight.
pub(super) fn run_pieces(pieces: usize, work: usize, f: impl Fn(usize) + Sync) {
    if pieces <= 1 || work < SERIAL_WORK || threads() <= 1 {
        (0..pieces).for_each(f);
    } else {
        par_for(pieces, f);
    }
}

/// Scratch blocks handed out to the pieces of a loop: allocated before it, at most one per
/// thread that can run at once.
pub(super) struct Scratch<T: FloatElement>(Mutex<Vec<Buffer<T>>>);

impl<T: FloatElement> Scratch<T> {
    pub(super) fn new(op: &'static str, pieces: usize, len: usize) -> Result<Self> {
        let count = if len == 0 { 0 } else { pieces.min(threads()).max(1) };
        let blocks = (0..count).map(|_| Buffer::uninit(op, len)).collect::<Result<Vec<_>>>()?;
        Ok(Scratch(Mutex::new(blocks)))
    }

    /// Runs `f` with a block; a loop never has more pieces running than blocks exist.
    pub(super) fn with<R>(&self, op: &'static str, len: usize, f: impl FnOnce(&mut [T]) -> R) -> R {
        let taken = self.0.lock().pop();
        let mut block = match taken {
            Some(b) => b,
            // Only reachable if more pieces run at once than there are threads; fall back to
            // the pool rather than fail.
            None => crate::error::infallible(Buffer::uninit(op, len)),
        };
        let r = f(&mut block[..len]);
        self.0.lock().push(block);
        r
    }
}

/// `out` set to the sum of `chunks` partial results laid end to end in `partial`, added in
/// chunk order whatever thread computed them (so the result does not depend on the thread
/// count).
pub(super) fn sum_partials<T: FloatElement>(out: &mut [T], partial: &[T], chunks: usize) {
    let size = out.len();
    fill_chunks(out, 1 << 14, |at, part| {
        for (k, e) in part.iter_mut().enumerate() {
            let mut s = partial[at + k];
            for chunk in 1..chunks {
                s = s + partial[chunk * size + at + k];
            }
            *e = s;
        }
    });
}

/// A bias view: element `i` is at `data[offset + i * stride]`.
#[derive(Clone, Copy)]
pub(super) struct Bias<'a, T> {
    pub(super) data: &'a [T],
    pub(super) offset: usize,
    pub(super) stride: usize,
}

impl<T: Copy> Bias<'_, T> {
    pub(super) fn get(&self, i: usize) -> T {
        self.data[self.offset + i * self.stride]
    }
}

pub(super) use super::block::Mat;

/// `dst[m, n] = a[m, k] @ b[k, n]`, plus the previous `dst` when `accumulate`; `dst` has rows
/// `dst_rs` apart and unit column stride.
///
/// # Safety
/// The matrices must be valid for their extents and strides, and `dst` must not overlap
/// `a` or `b`.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn product<T: FloatElement>(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut T,
    dst_rs: usize,
    a: Mat<T>,
    b: Mat<T>,
    accumulate: bool,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            for r in 0..m {
                // SAFETY: row `r` of `dst` holds `n` elements.
                unsafe { std::slice::from_raw_parts_mut(dst.add(r * dst_rs), n).fill(T::ZERO) };
            }
        }
        return;
    }
    // SAFETY: guaranteed by the caller.
    unsafe { super::block::gemm_block((m, n, k), (dst, dst_rs), &a, &b, accumulate, T::ONE) }
}

/// The layout's data as a contiguous slice starting at its first element: the view itself
/// when contiguous, else a copy kept in `held`.
pub(super) fn contiguous<'a, T: FloatElement>(
    s: &'a CpuStorage,
    l: &Layout,
    held: &'a mut Option<CpuStorage>,
) -> Result<&'a [T]> {
    let mixed = || Error::dtype("conv2d", "operands of mixed dtypes");
    if l.is_contiguous() {
        let data = s.as_slice::<T>().ok_or_else(mixed)?;
        return Ok(&data[l.offset()..l.offset() + l.numel()]);
    }
    let copy = held.insert(binary::cast(s, l, T::DTYPE)?);
    copy.as_slice::<T>().ok_or_else(mixed)
}

/// The bias of a convolution as a [`Bias`] view of `T`; `None` without one.
pub(super) fn bias_view<'a, T: FloatElement>(bias: Option<(&'a CpuStorage, &Layout)>) -> Result<Option<Bias<'a, T>>> {
    let Some((s, l)) = bias else { return Ok(None) };
    let data = s.as_slice::<T>().ok_or_else(|| Error::dtype("conv2d", "the bias has another dtype"))?;
    Ok(Some(Bias { data, offset: l.offset(), stride: l.strides()[0] }))
}
