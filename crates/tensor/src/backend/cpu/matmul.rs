//! Matrix products through the `gemm` crate.
//!
//! `gemm` reads arbitrary row and column strides, so transposed operands never need a
//! copy. With the workspace's `x86-v4` feature it dispatches to AVX-512 kernels at run time
//! on machines that have them and to AVX2/FMA elsewhere.

use crate::dtype::Element;
use crate::layout::Layout;
use crate::storage::{Buffer, CpuStorage};
use crate::{Error, Result};
use gemm::Parallelism;
use rayon::prelude::*;

/// Products with fewer multiply-adds than this run batches in parallel instead of
/// parallelising inside each product.
const SMALL_PRODUCT: usize = 64 * 64 * 64;

struct Mat<T> {
    ptr: *const T,
    rs: isize,
    cs: isize,
}

#[derive(Clone, Copy)]
struct SendPtr<T>(*mut T);
// SAFETY: each batch writes a disjoint block of the output.
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}

/// One product `dst[m, n] = a[m, k] @ b[k, n]`.
///
/// # Safety
/// The pointers and strides must address valid `m x k`, `k x n` and contiguous `m x n`
/// matrices, and `dst` must not overlap the inputs.
unsafe fn gemm_one<T: Element>(m: usize, n: usize, k: usize, dst: *mut T, a: &Mat<T>, b: &Mat<T>, par: Parallelism) {
    // SAFETY: guaranteed by the caller.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            1,
            n as isize,
            false,
            a.ptr,
            a.cs,
            a.rs,
            b.ptr,
            b.cs,
            b.rs,
            T::ZERO,
            T::ONE,
            false,
            false,
            false,
            par,
        )
    }
}

/// The row stride of `[batch.., m, k]` seen as one `[batch * m, k]` matrix, when its rows
/// are evenly spaced (each batch dimension steps over exactly the rows inside it); `None`
/// otherwise. `ars` is the (normalised) row stride within one matrix.
fn folded_row_stride(la: &Layout, m: usize, ars: isize) -> Option<isize> {
    let rank = la.rank();
    if m > 1 && ars == 0 {
        return None;
    }
    // With one row per matrix, the innermost batch dimension sets the spacing.
    let mut spacing = (m > 1).then(|| m * la.strides()[rank - 2]);
    let mut rows = (m > 1).then_some(ars);
    for d in (0..rank - 2).rev() {
        let (extent, stride) = (la.shape()[d], la.strides()[d]);
        if extent == 1 {
            continue;
        }
        if spacing.is_some_and(|s| s != stride) {
            return None;
        }
        rows.get_or_insert(stride as isize);
        // A saturated spacing matches no stride of a validated layout.
        spacing = Some(stride.saturating_mul(extent));
    }
    Some(rows.unwrap_or(1))
}

fn typed<T: Element>(a: &[T], la: &Layout, b: &[T], lb: &Layout) -> Result<Buffer<T>> {
    let rank = la.rank();
    let (m, k, n) = (la.shape()[rank - 2], la.shape()[rank - 1], lb.shape()[rank - 1]);
    let batch_shape = &la.shape()[..rank - 2];
    let batch: usize = batch_shape.iter().product();
    if batch * m * n == 0 || k == 0 {
        return Buffer::zeros("matmul", batch * m * n);
    }
    // `gemm` is told not to read `dst` (alpha 0, `read_dst` false), so every element is
    // overwritten: zeroing first would be one more pass over the whole output.
    let mut out = Buffer::<T>::uninit("matmul", batch * m * n)?;
    // The stride of a dimension of extent 1 is never used to reach another element, so it
    // may be anything a layout says (even past `isize::MAX`); `gemm` gets a harmless one.
    let stride = |extent: usize, s: usize| if extent > 1 { s as isize } else { 1 };
    let (ars, acs) = (stride(m, la.strides()[rank - 2]), stride(k, la.strides()[rank - 1]));
    let (brs, bcs) = (stride(k, lb.strides()[rank - 2]), stride(n, lb.strides()[rank - 1]));
    let threads = rayon::current_num_threads();
    let par_inner = if threads > 1 { Parallelism::Rayon(threads) } else { Parallelism::None };

    // A batch of matrices times one shared matrix (`[B, m, k] @ [k, n]`, a linear layer on
    // a 3-d input) is one tall product when the batch rows are evenly spaced.
    let b_shared = lb.strides()[..rank - 2].iter().all(|&s| s == 0);
    if batch > 1
        && b_shared
        && let Some(rows) = folded_row_stride(la, m, ars)
    {
        let am = Mat { ptr: a[la.offset()..].as_ptr(), rs: rows, cs: acs };
        let bm = Mat { ptr: b[lb.offset()..].as_ptr(), rs: brs, cs: bcs };
        // SAFETY: the backend validated both layouts against their storages, and the folded
        // rows are exactly the rows of the batch; `out` is fresh.
        unsafe { gemm_one(batch * m, n, k, out.as_mut_ptr(), &am, &bm, par_inner) };
        return Ok(out);
    }

    let batch_offsets = |i: usize| -> (usize, usize) {
        let (mut oa, mut ob) = (la.offset(), lb.offset());
        let mut rem = i;
        for d in (0..rank - 2).rev() {
            let idx = rem % batch_shape[d];
            rem /= batch_shape[d];
            oa += idx * la.strides()[d];
            ob += idx * lb.strides()[d];
        }
        (oa, ob)
    };
    let dst = SendPtr(out.as_mut_ptr());
    let run = |i: usize, par: Parallelism| {
        let (oa, ob) = batch_offsets(i);
        let am = Mat { ptr: a[oa..].as_ptr(), rs: ars, cs: acs };
        let bm = Mat { ptr: b[ob..].as_ptr(), rs: brs, cs: bcs };
        let d = dst;
        // SAFETY: batch `i` writes only `out[i*m*n..(i+1)*m*n]`.
        unsafe { gemm_one(m, n, k, d.0.add(i * m * n), &am, &bm, par) };
    };
    if batch > 1 && m * n * k < SMALL_PRODUCT && threads > 1 {
        (0..batch).into_par_iter().for_each(|i| run(i, Parallelism::None));
    } else {
        for i in 0..batch {
            run(i, par_inner);
        }
    }
    Ok(out)
}

/// `[batch.., m, k] @ [batch.., k, n]` for float storages of one dtype.
pub(crate) fn matmul(a: &CpuStorage, la: &Layout, b: &CpuStorage, lb: &Layout) -> Result<CpuStorage> {
    match (a, b) {
        (CpuStorage::F32(x), CpuStorage::F32(y)) => Ok(typed(x, la, y, lb)?.into()),
        (CpuStorage::F64(x), CpuStorage::F64(y)) => Ok(typed(x, la, y, lb)?.into()),
        _ => Err(Error::dtype(
            "matmul",
            format!("matmul needs two f32 or two f64 operands, got {} and {}", a.dtype(), b.dtype()),
        )),
    }
}
