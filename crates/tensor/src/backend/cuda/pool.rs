//! Max pooling and its backward (the plane gather and scatter) as direct kernels.

use super::elementwise::zero;
use super::launch::{Strided, arg, launch_elems};
use super::memory::{CudaStorage, download, upload};
use super::sfx;
use crate::dtype::DType;
use crate::layout::Layout;
use crate::ops::pool::PoolWindows;
use crate::storage::{Buffer, CpuStorage};
use crate::{Error, Result};

/// The largest value of each window and its flat position in its plane, both
/// `[N, C, oh, ow]`, for a checked input view `[N, C, h, w]`.
pub(crate) fn max_pool2d(s: &CudaStorage, l: &Layout, win: &PoolWindows) -> Result<(CudaStorage, CudaStorage)> {
    let op = "max_pool2d";
    let gpu = s.gpu();
    let (n, c) = (l.shape()[0], l.shape()[1]);
    let [oh, ow] = win.output();
    let total = n * c * oh * ow;
    let values = CudaStorage::alloc(gpu, op, total, s.dtype())?;
    let at = CudaStorage::alloc(gpu, op, total, DType::I64)?;
    if total == 0 {
        return Ok((values, at));
    }
    // Each output row's window, then each output column's, as (start, count) pairs.
    let pairs: Vec<i64> =
        win.rows.windows.iter().chain(&win.cols.windows).flat_map(|&(s0, k)| [s0 as i64, k as i64]).collect();
    let table = upload(gpu, &CpuStorage::from(Buffer::from_slice(op, &pairs)?))?;
    let f = gpu.func(("max_pool", sfx(s.dtype()), ""))?;
    let st: Vec<i64> = l.strides().iter().map(|&v| v as i64).collect();
    let (t64, c64, w64, oh64, ow64) = (total as i64, c as i64, win.cols.input as i64, oh as i64, ow as i64);
    let (rstep, cstep, off) = (win.rows.step as i64, win.cols.step as i64, l.offset() as i64);
    let (pw, ps, pv, pa) = (table.ptr(), s.ptr(), values.ptr(), at.ptr());
    let mut args = [
        arg(&t64),
        arg(&c64),
        arg(&w64),
        arg(&oh64),
        arg(&ow64),
        arg(&rstep),
        arg(&cstep),
        arg(&pw),
        arg(&ps),
        arg(&st[0]),
        arg(&st[1]),
        arg(&st[2]),
        arg(&st[3]),
        arg(&off),
        arg(&pv),
        arg(&pa),
    ];
    launch_elems(gpu, f, total, &mut args)?;
    Ok((values, at))
}

/// Launches the plane kernel `name` over `n` elements (`per` to a plane of the indexed
/// side, `plane` to a plane of the other) with a flag it raises for an index outside the
/// plane, and reports one.
fn checked_launch(
    name: &'static str,
    n: usize,
    per: usize,
    plane: usize,
    (s, ls): (&CudaStorage, &Strided),
    (i, li): (&CudaStorage, &Strided),
    out: &CudaStorage,
) -> Result<()> {
    let op = "max_pool2d_backward";
    let gpu = s.gpu();
    let bad = CudaStorage::alloc(gpu, op, 4, DType::U8)?;
    zero(gpu, &bad)?;
    let f = gpu.func((name, sfx(s.dtype()), ""))?;
    let (n64, p64, pl64, ps, pi, po, pb) = (n as i64, per as i64, plane as i64, s.ptr(), i.ptr(), out.ptr(), bad.ptr());
    launch_elems(
        gpu,
        f,
        n,
        &mut [arg(&n64), arg(&p64), arg(&pl64), arg(&ps), arg(ls), arg(&pi), arg(li), arg(&po), arg(&pb)],
    )?;
    if n > 0 && download(&bad)?.as_slice::<u8>().is_some_and(|b| b.iter().any(|&v| v != 0)) {
        return Err(Error::index(op, format!("an index outside planes of {plane} elements")));
    }
    Ok(())
}

/// `out[n, c, q] = src[n, c, index[n, c, q]]` for checked views.
pub(crate) fn gather_planes(s: &CudaStorage, l: &Layout, i: &CudaStorage, li: &Layout) -> Result<CudaStorage> {
    let gpu = s.gpu();
    let n = li.numel();
    let out = CudaStorage::alloc(gpu, "max_pool2d_backward", n, s.dtype())?;
    let (plane, per) = (l.shape()[2] * l.shape()[3], li.shape()[2] * li.shape()[3]);
    let (ls, lis) = (Strided::of("max_pool2d_backward", l)?, Strided::of("max_pool2d_backward", li)?);
    checked_launch("gather_planes", n, per, plane, (s, &ls), (i, &lis), &out)?;
    Ok(out)
}

/// Zero planes of extent `plane` with each value of `src` added at its index.
pub(crate) fn scatter_planes(
    s: &CudaStorage,
    l: &Layout,
    i: &CudaStorage,
    li: &Layout,
    plane: [usize; 2],
) -> Result<CudaStorage> {
    let gpu = s.gpu();
    let n = l.numel();
    let (count, per, len) = (l.shape()[0] * l.shape()[1], l.shape()[2] * l.shape()[3], plane[0] * plane[1]);
    let out = CudaStorage::alloc(gpu, "max_pool2d_backward", count * len, s.dtype())?;
    zero(gpu, &out)?;
    let (ls, lis) = (Strided::of("max_pool2d_backward", l)?, Strided::of("max_pool2d_backward", li)?);
    checked_launch("scatter_planes", n, per, len, (s, &ls), (i, &lis), &out)?;
    Ok(out)
}
