//! Indexing kernels (`index_select`, `gather`, `scatter_add`) and joins.
//!
//! The index kernels check every index on the device and raise a flag for one out of
//! range; the host reads the flag back (waiting for the kernel) and reports the first bad
//! index with the CPU backend's message.

use super::elementwise::{convert, same_dtype, zero};
use super::launch::{Strided, arg, launch_elems};
use super::memory::{CudaStorage, download};
use super::sfx;
use crate::dtype::DType;
use crate::layout::Layout;
use crate::shape::Shape;
use crate::{Error, Result};

fn indices_dtype(op: &'static str, index: &CudaStorage) -> Result<()> {
    if index.dtype() != DType::I64 {
        return Err(Error::dtype(op, format!("indices must be i64, got {}", index.dtype())));
    }
    Ok(())
}

/// A zeroed flag (one `int` in the kernels) for a kernel to raise.
fn flag(op: &'static str, index: &CudaStorage) -> Result<CudaStorage> {
    let f = CudaStorage::alloc(index.gpu(), op, 4, DType::U8)?;
    zero(index.gpu(), &f)?;
    Ok(f)
}

/// `Ok` unless the kernel raised `flag`; then the error names the first index outside
/// `0..bound`.
fn check_flag(
    op: &'static str,
    flag: &CudaStorage,
    index: &CudaStorage,
    li: &Layout,
    bound: usize,
    dim: usize,
) -> Result<()> {
    let raised = download(flag)?.as_slice::<u8>().is_some_and(|f| f.iter().any(|&b| b != 0));
    if !raised {
        return Ok(());
    }
    let host = super::elementwise::download(index, li)?;
    let bad = host.as_slice::<i64>().and_then(|s| s.iter().copied().find(|&i| i < 0 || i as u64 >= bound as u64));
    let i = bad.unwrap_or(-1);
    Err(Error::index(op, format!("index {i} is out of range for dimension {dim} of size {bound}")))
}

pub(crate) fn index_select(
    src: &CudaStorage,
    l: &Layout,
    dim: usize,
    index: &CudaStorage,
    li: &Layout,
) -> Result<CudaStorage> {
    let op = "index_select";
    indices_dtype(op, index)?;
    let gpu = src.gpu();
    let size = l.shape()[dim];
    let k = li.numel();
    let outer: usize = l.shape()[..dim].iter().product();
    let inner: usize = l.shape()[dim + 1..].iter().product();
    let n = outer.checked_mul(k).and_then(|n| n.checked_mul(inner)).ok_or(Error::Alloc {
        op,
        elements: usize::MAX,
        dtype: src.dtype().name(),
    })?;
    let out = CudaStorage::alloc(gpu, op, n, src.dtype())?;
    let bad = flag(op, index)?;
    let (ls, lix) = (Strided::of(op, l)?, Strided::of(op, li)?);
    let f = gpu.func(("index_select", sfx(src.dtype()), ""))?;
    let (n64, k64, in64, sz) = (n as i64, k as i64, inner as i64, size as i64);
    let (po, ps, pi, pb) = (out.ptr(), src.ptr(), index.ptr(), bad.ptr());
    launch_elems(
        gpu,
        f,
        n,
        &mut [arg(&n64), arg(&k64), arg(&in64), arg(&sz), arg(&po), arg(&ps), arg(&ls), arg(&pi), arg(&lix), arg(&pb)],
    )?;
    if n > 0 {
        check_flag(op, &bad, index, li, size, dim)?;
    } else if k > 0 && size == 0 {
        return Err(Error::index(op, format!("index is out of range for dimension {dim} of size 0")));
    }
    Ok(out)
}

pub(crate) fn gather(
    src: &CudaStorage,
    l: &Layout,
    dim: usize,
    index: &CudaStorage,
    li: &Layout,
) -> Result<CudaStorage> {
    let op = "gather";
    indices_dtype(op, index)?;
    let gpu = src.gpu();
    let n = li.numel();
    let size = l.shape()[dim];
    let out = CudaStorage::alloc(gpu, op, n, src.dtype())?;
    let bad = flag(op, index)?;
    let ls = Strided::unmerged(op, li.shape(), l.strides(), l.offset())?;
    let lix = Strided::of(op, li)?;
    let f = gpu.func(("gather", sfx(src.dtype()), ""))?;
    let (n64, d32, sz) = (n as i64, dim as i32, size as i64);
    let (po, ps, pi, pb) = (out.ptr(), src.ptr(), index.ptr(), bad.ptr());
    launch_elems(
        gpu,
        f,
        n,
        &mut [arg(&n64), arg(&d32), arg(&sz), arg(&po), arg(&ps), arg(&ls), arg(&pi), arg(&lix), arg(&pb)],
    )?;
    if n > 0 {
        check_flag(op, &bad, index, li, size, dim)?;
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn scatter_add(
    dst: &CudaStorage,
    ld: &Layout,
    dim: usize,
    index: &CudaStorage,
    li: &Layout,
    src: &CudaStorage,
    ls: &Layout,
) -> Result<CudaStorage> {
    let op = "scatter_add";
    indices_dtype(op, index)?;
    same_dtype(op, dst.dtype(), src.dtype())?;
    let gpu = dst.gpu();
    let out = super::elementwise::cast(op, dst, ld, dst.dtype())?;
    let n = li.numel();
    let size = ld.shape()[dim];
    let bad = flag(op, index)?;
    let dense = Layout::contiguous(ld.shape().clone());
    let lo = Strided::unmerged(op, li.shape(), dense.strides(), 0)?;
    let lsrc = Strided::new(op, li.shape(), ls.strides(), ls.offset())?;
    let lix = Strided::of(op, li)?;
    let f = gpu.func(("scatter_add", sfx(dst.dtype()), ""))?;
    let (n64, d32, sz) = (n as i64, dim as i32, size as i64);
    let (po, ps, pi, pb) = (out.ptr(), src.ptr(), index.ptr(), bad.ptr());
    launch_elems(
        gpu,
        f,
        n,
        &mut [arg(&n64), arg(&d32), arg(&sz), arg(&po), arg(&lo), arg(&ps), arg(&lsrc), arg(&pi), arg(&lix), arg(&pb)],
    )?;
    if n > 0 {
        check_flag(op, &bad, index, li, size, dim)?;
    }
    Ok(out)
}

/// The views joined along `dim` into a new storage of `shape` (checked by the caller).
pub(crate) fn cat(srcs: &[(&CudaStorage, &Layout)], dim: usize, shape: &Shape) -> Result<CudaStorage> {
    let op = "cat";
    let first = srcs[0].0;
    let gpu = first.gpu();
    let out = CudaStorage::alloc(gpu, op, shape.numel(), first.dtype())?;
    let dense = Layout::contiguous(shape.clone());
    let mut at = 0usize;
    for &(s, l) in srcs {
        let dst = Strided::new(op, l.shape(), dense.strides(), at * dense.strides()[dim])?;
        convert(gpu, l.numel(), &out, &dst, s, &Strided::of(op, l)?)?;
        at += l.shape()[dim];
    }
    Ok(out)
}
