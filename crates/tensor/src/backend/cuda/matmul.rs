//! Matrix products through cuBLAS.
//!
//! cuBLAS is column-major: a row-major product `C = A B` is computed as the column-major
//! `Cᵀ = Bᵀ Aᵀ`, which reads the row-major operands in place. Each operand may be
//! row-major or column-major (a transposed view) with any leading dimension, and its batch
//! dimensions must step through memory with one stride (0 for a broadcast operand);
//! anything else is copied to contiguous first.
//!
//! Float32 products run in full FP32 (`sgemm`), as PyTorch's default, unless
//! [`float32_matmul_precision`](crate::float32_matmul_precision) is `"high"` or `"medium"`:
//! then with TF32 tensor cores (`CUBLAS_COMPUTE_32F_FAST_TF32`), as PyTorch's `"high"`.
//! `f16` and `bf16` products read and write 16-bit matrices and sum in f32
//! (`cublasGemmStridedBatchedEx` with `CUBLAS_COMPUTE_32F`, on tensor cores), each result
//! rounded once, as the CPU computes them. `f64` products use `dgemm`.

use super::elementwise::{cast, same_dtype, zero};
use super::memory::CudaStorage;
use crate::dtype::DType;
use crate::layout::Layout;
use crate::matmul_precision::matmul_precision;
use crate::{Error, Result};
use cudarc::cublas::result as blas;
use cudarc::cublas::sys::{
    cublasComputeType_t as Compute, cublasGemmAlgo_t as Algo, cublasOperation_t as Op, cudaDataType as Data,
};
use std::ffi::c_void;

/// The element and compute types of a product `cublasGemmStridedBatchedEx` computes:
/// the 16-bit floats, and `f32` when TF32 is allowed; `None` for the dtypes with their own
/// routine (`f32` in full FP32, `f64`).
fn gemm_ex_types(dtype: DType) -> Option<(Data, Compute)> {
    match dtype {
        DType::F16 => Some((Data::CUDA_R_16F, Compute::CUBLAS_COMPUTE_32F)),
        DType::BF16 => Some((Data::CUDA_R_16BF, Compute::CUBLAS_COMPUTE_32F)),
        DType::F32 if matmul_precision().allows_reduced() => {
            Some((Data::CUDA_R_32F, Compute::CUBLAS_COMPUTE_32F_FAST_TF32))
        }
        _ => None,
    }
}

/// How cuBLAS reads one operand: its column-major form, leading dimension and batch
/// stride, and the element it starts at.
struct Operand {
    /// Whether the stored column-major matrix must be transposed to give the operand's
    /// transpose (which the column-major formula needs).
    op: Op,
    ld: i64,
    batch_stride: i64,
    offset: usize,
}

/// The operand `[batch.., rows, cols]` read for `Cᵀ = Bᵀ Aᵀ`, or `None` when its layout
/// does not fit cuBLAS.
fn operand(l: &Layout) -> Option<Operand> {
    let r = l.rank();
    let (rows, cols) = (l.shape()[r - 2], l.shape()[r - 1]);
    let (rs, cs) = (l.strides()[r - 2], l.strides()[r - 1]);
    // A row-major matrix is, read column-major, its own transpose: no cuBLAS transpose.
    // A single row or column has no stride between rows or columns to respect.
    let (op, ld) = if (cs == 1 || cols == 1) && (rows == 1 || rs >= cols.max(1)) {
        (Op::CUBLAS_OP_N, if rows == 1 { cols.max(1) } else { rs })
    } else if (rs == 1 || rows == 1) && (cols == 1 || cs >= rows.max(1)) {
        (Op::CUBLAS_OP_T, if cols == 1 { rows.max(1) } else { cs })
    } else {
        return None;
    };
    // The batch dimensions as one stride.
    let mut batch_stride = None;
    let mut expected = None;
    for d in (0..r - 2).rev() {
        let (n, s) = (l.shape()[d], l.strides()[d]);
        if n == 1 {
            continue;
        }
        match expected {
            None => {
                batch_stride = Some(s);
                expected = Some(s * n);
            }
            Some(e) if e == s && batch_stride != Some(0) => expected = Some(s * n),
            Some(_) if s == 0 && batch_stride == Some(0) => {}
            _ => return None,
        }
    }
    Some(Operand { op, ld: ld as i64, batch_stride: batch_stride.unwrap_or(0) as i64, offset: l.offset() })
}

pub(crate) fn matmul(a: &CudaStorage, la: &Layout, b: &CudaStorage, lb: &Layout) -> Result<CudaStorage> {
    let op = "matmul";
    same_dtype(op, a.dtype(), b.dtype())?;
    let gpu = a.gpu();
    let r = la.rank();
    let (m, k, n) = (la.shape()[r - 2], la.shape()[r - 1], lb.shape()[r - 1]);
    let batch: usize = la.shape()[..r - 2].iter().product();
    let out = CudaStorage::alloc(gpu, op, batch * m * n, a.dtype())?;
    if out.is_empty() {
        return Ok(out);
    }
    if k == 0 {
        zero(gpu, &out)?;
        return Ok(out);
    }
    let too_big = |v: usize| i32::try_from(v).is_err();
    if [m, n, k, batch].into_iter().any(too_big) {
        return Err(Error::invalid(
            op,
            format!("cuBLAS takes sizes below 2^31, got {batch} products of {m}x{k} by {k}x{n}"),
        ));
    }
    // Operands cuBLAS cannot read in place are copied to contiguous first.
    let fit = |s: &CudaStorage, l: &Layout| -> Result<(Option<CudaStorage>, Operand)> {
        if let Some(o) = operand(l) {
            return Ok((None, o));
        }
        let c = cast(op, s, l, s.dtype())?;
        let o = operand(&Layout::contiguous(l.shape().clone()))
            .ok_or_else(|| Error::invalid(op, "a contiguous operand does not fit cuBLAS"))?;
        Ok((Some(c), Operand { offset: 0, ..o }))
    };
    let (ca, oa) = fit(a, la)?;
    let (cb, ob) = fit(b, lb)?;
    let pa = ca.as_ref().map_or(a.ptr_at(oa.offset), |c| c.ptr());
    let pb = cb.as_ref().map_or(b.ptr_at(ob.offset), |c| c.ptr());
    let handle = gpu.blas.lock();
    let (mi, ni, ki, bi) = (m as i32, n as i32, k as i32, batch as i32);
    let stride_c = (m * n) as i64;
    // SAFETY: the pointers address views the backend validated against their storages (or
    // fresh contiguous copies), with the leading dimensions and batch strides computed from
    // those views; the output holds batch * m * n elements.
    let r = unsafe {
        match (a.dtype(), gemm_ex_types(a.dtype())) {
            (_, Some((data, compute))) => {
                // The scale factors of a 32-bit compute type are f32.
                let (one, nil) = (1.0f32, 0.0f32);
                blas::gemm_strided_batched_ex(
                    handle.0,
                    ob.op,
                    oa.op,
                    ni,
                    mi,
                    ki,
                    (&one as *const f32).cast(),
                    pb as *const c_void,
                    data,
                    ob.ld as i32,
                    ob.batch_stride,
                    pa as *const c_void,
                    data,
                    oa.ld as i32,
                    oa.batch_stride,
                    (&nil as *const f32).cast(),
                    out.ptr() as *mut c_void,
                    data,
                    ni,
                    stride_c,
                    bi,
                    compute,
                    Algo::CUBLAS_GEMM_DFALT,
                )
            }
            (DType::F32, None) => {
                let (one, nil) = (1.0f32, 0.0f32);
                blas::sgemm_strided_batched(
                    handle.0,
                    ob.op,
                    oa.op,
                    ni,
                    mi,
                    ki,
                    &one,
                    pb as *const f32,
                    ob.ld as i32,
                    ob.batch_stride,
                    pa as *const f32,
                    oa.ld as i32,
                    oa.batch_stride,
                    &nil,
                    out.ptr() as *mut f32,
                    ni,
                    stride_c,
                    bi,
                )
            }
            (DType::F64, None) => {
                let (one, nil) = (1.0f64, 0.0f64);
                blas::dgemm_strided_batched(
                    handle.0,
                    ob.op,
                    oa.op,
                    ni,
                    mi,
                    ki,
                    &one,
                    pb as *const f64,
                    ob.ld as i32,
                    ob.batch_stride,
                    pa as *const f64,
                    oa.ld as i32,
                    oa.batch_stride,
                    &nil,
                    out.ptr() as *mut f64,
                    ni,
                    stride_c,
                    bi,
                )
            }
            (dt, None) => {
                return Err(Error::dtype(op, format!("cuBLAS multiplies f16, bf16, f32 and f64, got {dt}")));
            }
        }
    };
    r.map_err(|e| gpu.err("cuBLAS gemm", e))?;
    // The copies must outlive the queued product: dropping them returns their blocks to the
    // cache, where only work queued later can reuse them.
    drop((ca, cb));
    Ok(out)
}
