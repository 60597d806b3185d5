//! One block of a matrix product on the calling thread: the strided matrix operand
//! ([`Mat`], from `mat.rs`), the trait by which the split product hands a block to its kernel
//! ([`BlockProduct`]), and `gemm`'s product of one block: [`gemm_block`] on raw operands,
//! which the split product and the convolutions call, and [`block_product`] /
//! [`block_product_to`] on slices, which the attention and LSTM kernels call. Below both
//! the `f32`/`f64` product (`matmul.rs`) and the low-precision one (`matmul_lowp.rs`).

use crate::dtype::Element;
use gemm::Parallelism;

pub(super) use super::mat::Mat;

/// How one block of a product is computed on the calling thread: [`gemm_parallel`] cuts a
/// product into blocks and hands each to one of these.
pub(super) trait BlockProduct<T>: Sync {
    /// `dst[m, n] = a[m, k] @ b[k, n]` on the calling thread, `dst` with rows `dst_rs` apart.
    ///
    /// # Safety
    /// The pointers and strides must address valid `m x k`, `k x n` and row-major `m x n`
    /// (row stride `dst_rs`, unit column stride) matrices, `m`, `n` and `k` must be
    /// positive, and `dst` must not overlap the inputs.
    #[allow(clippy::too_many_arguments)]
    unsafe fn product(&self, m: usize, n: usize, k: usize, dst: *mut T, dst_rs: usize, a: &Mat<T>, b: &Mat<T>);

    /// Whether a product with a small output may be split along its inner dimension too,
    /// its parts summed afterwards in `T`: only where `T` is the precision the kernel sums
    /// in (`f32`, `f64`), so that the parts' rounding adds nothing a longer sum would not.
    fn splits_depth(&self) -> bool {
        false
    }

    /// Whether the product is cut by what `gemm` packs and streams for each block
    /// (`Plan::for_gemm`) rather than by the shape's fixed cut (`Tiles::new`): only for
    /// kernels that block and pack their operands as `gemm` does.
    fn cuts_for_gemm(&self) -> bool {
        false
    }
}

/// One block product on the calling thread for kernels that tile their own work (LSTM,
/// attention): `dst[m, n] = scale * a[m, k] @ b[k, n]`, or with `accumulate`
/// `dst[m, n] += scale * a[m, k] @ b[k, n]`. Each operand is a slice starting at its first
/// element with its row and column strides; `dst` has unit column stride and rows `dst_rs`
/// apart.
///
/// # Panics
/// If an operand does not hold every element its strides address: the callers derive the
/// strides from the slices they pass, so this is an internal invariant.
#[allow(clippy::too_many_arguments)]
pub(super) fn block_product<T: Element>(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [T],
    dst_rs: usize,
    accumulate: bool,
    a: (&[T], usize, usize),
    b: (&[T], usize, usize),
    scale: T,
) {
    if m == 0 || n == 0 {
        return;
    }
    assert!(dst.len() >= reach(m, n, dst_rs, 1), "block_product: destination too short");
    // SAFETY: the assertion keeps every destination row inside `dst`, a unique borrow that
    // no other thread touches and that overlaps neither input.
    unsafe { block_product_to((m, n, k), (dst.as_mut_ptr(), dst_rs), accumulate, a, b, scale) }
}

/// [`block_product`] into rows that a raw pointer addresses, for kernels whose threads write
/// disjoint rows of one buffer (the attention's output and gradients).
///
/// # Safety
/// `dst` must address `m` rows of `n` elements, `dst_rs` apart, inside one buffer that the
/// operands are not part of, and no other thread may touch those rows meanwhile.
///
/// # Panics
/// As [`block_product`].
pub(super) unsafe fn block_product_to<T: Element>(
    (m, n, k): (usize, usize, usize),
    (dst, dst_rs): (*mut T, usize),
    accumulate: bool,
    (a, ars, acs): (&[T], usize, usize),
    (b, brs, bcs): (&[T], usize, usize),
    scale: T,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            for r in 0..m {
                // SAFETY: row r of the destination, which the caller guarantees.
                unsafe { std::slice::from_raw_parts_mut(dst.add(r * dst_rs), n) }.fill(T::ZERO);
            }
        }
        return;
    }
    assert!(a.len() >= reach(m, k, ars, acs) && b.len() >= reach(k, n, brs, bcs), "block_product: operand too short");
    let am = Mat { ptr: a.as_ptr(), rs: ars as isize, cs: acs as isize };
    let bm = Mat { ptr: b.as_ptr(), rs: brs as isize, cs: bcs as isize };
    // SAFETY: the assertion keeps the operands inside their slices; the destination is the
    // caller's, in a buffer the operands (shared borrows) are not part of.
    unsafe { gemm_block((m, n, k), (dst, dst_rs), &am, &bm, accumulate, scale) }
}

/// How many elements a `rows x cols` matrix with strides `rs`, `cs` spans from its first.
fn reach(rows: usize, cols: usize, rs: usize, cs: usize) -> usize {
    (rows - 1) * rs + (cols - 1) * cs + 1
}

/// `dst[m, n] = scale * a[m, k] @ b[k, n]` (`+=` where `accumulate`) on the calling thread
/// through `gemm`, `dst` with rows `dst_rs` apart and adjacent columns.
///
/// # Safety
/// `a`, `b` and `dst` must address `m x k`, `k x n` and `m x n` valid elements through
/// their strides, and `dst` must not overlap the operands.
pub(super) unsafe fn gemm_block<T: Element>(
    (m, n, k): (usize, usize, usize),
    (dst, dst_rs): (*mut T, usize),
    a: &Mat<T>,
    b: &Mat<T>,
    accumulate: bool,
    scale: T,
) {
    #[cfg(target_arch = "x86_64")]
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() {
        let as_f32 = |x: &Mat<T>| Mat { ptr: x.ptr.cast::<f32>(), rs: x.rs, cs: x.cs };
        let (a, b) = (as_f32(a), as_f32(b));
        if super::matmul_avx2::takes(m, n, k, &b) {
            // SAFETY: `T` is `f32`, so the casts change nothing; `takes` checked the
            // processor; the rest is the caller's contract.
            unsafe { super::matmul_avx2::product((m, n, k), (dst.cast(), dst_rs), &a, &b, accumulate, scale.to_f32()) };
            return;
        }
    }
    let keep = if accumulate { T::ONE } else { T::ZERO };
    // SAFETY: guaranteed by the caller.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            1,
            dst_rs as isize,
            accumulate,
            a.ptr,
            a.cs,
            a.rs,
            b.ptr,
            b.cs,
            b.rs,
            keep,
            scale,
            false,
            false,
            false,
            Parallelism::None,
        )
    }
}
