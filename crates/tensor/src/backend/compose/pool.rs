//! The default bodies of the pooling kernels, composed from `gather`, `scatter_add`,
//! `reduce` and `matmul`: max pooling gathers every window (padded with `-inf` to the
//! longest window) and reduces it, the plane gather and scatter are the flat `gather` and
//! `scatter_add` over `[N * C, h * w]`, and a separable resampling is two batched products
//! with the dense matrices of its two dimensions. Indices and matrices are built on the
//! host and uploaded.

use crate::backend::kernels::Kernels;
use crate::backend::validate::pool::check_planes;
use crate::backend::{ReduceOp, View};
use crate::layout::Layout;
use crate::ops::pool::{AxisTaps, PoolWindows, Resample};
use crate::shape::Shape;
use crate::storage::{Buffer, CpuStorage, Storage};
use crate::{DType, Error, Result, Scalar};
use smallvec::smallvec;

/// `(N, C)` of a checked 4-d layout.
fn planes(l: &Layout) -> (usize, usize) {
    (l.shape()[0], l.shape()[1])
}

/// [`Backend::max_pool2d`](crate::backend::Backend::max_pool2d) through `gather` and `reduce`.
pub(crate) fn max_pool2d<B: Kernels + ?Sized>(
    b: &B,
    (s, l): View<'_>,
    windows: &PoolWindows,
) -> Result<(Storage, Storage)> {
    let op = "max_pool2d";
    windows.check(op)?;
    let l = check_planes(op, s, l, windows.input(), windows.output(), None)?;
    let (n, c) = planes(&l);
    let [h, w] = windows.input();
    let [oh, ow] = windows.output();
    let (rows, cols) = (&windows.rows, &windows.cols);
    let taps =
        rows.windows.iter().map(|r| r.1).max().unwrap_or(0) * cols.windows.iter().map(|c| c.1).max().unwrap_or(0);
    let taps = taps.max(1);
    // Flat source of tap `t` of position `p`, or `h * w` (the appended -inf) past a
    // shorter window's end.
    let pad = (h * w) as i64;
    let source = Buffer::<i64>::from_fn(op, oh * ow * taps, |e| {
        let (p, t) = (e / taps, e % taps);
        let ((r0, rn), (c0, cn)) = (rows.windows[p / ow], cols.windows[p % ow]);
        let (i, j) = t.checked_div(cn).map_or((rn, 0), |i| (i, t % cn));
        if i < rn && j < cn { ((r0 + i * rows.step) * w + c0 + j * cols.step) as i64 } else { pad }
    })?;
    let source = b.upload(CpuStorage::from(source))?;
    let p = n * c;
    let data = b.cast((s, &l), s.dtype())?;
    let fill = b.full(p, Scalar::Float(f64::NEG_INFINITY), s.dtype())?;
    let padded = b.cat(
        &[(&data, &Layout::contiguous(Shape::from([p, h * w]))), (&fill, &Layout::contiguous(Shape::from([p, 1])))],
        1,
    )?;
    let index = Layout::new(Shape::from([p, oh * ow * taps]), smallvec![0, 1], 0)?;
    let gathered = b.gather((&padded, &Layout::contiguous(Shape::from([p, h * w + 1]))), 1, (&source, &index))?;
    let grouped = Layout::contiguous(Shape::from([p, oh * ow, taps]));
    let values = b.reduce(ReduceOp::Max, (&gathered, &grouped), &[2])?;
    let tap = b.reduce(ReduceOp::ArgMax, (&gathered, &grouped), &[2])?;
    let table = Layout::new(Shape::from([p, oh * ow, taps]), smallvec![0, taps, 1], 0)?;
    let at = b.gather((&source, &table), 2, (&tap, &Layout::contiguous(Shape::from([p, oh * ow, 1]))))?;
    Ok((values, at))
}

/// [`Backend::gather_planes`](crate::backend::Backend::gather_planes) through a flat `gather`.
pub(crate) fn gather_planes<B: Kernels + ?Sized>(b: &B, (s, l): View<'_>, (si, li): View<'_>) -> Result<Storage> {
    let op = "max_pool2d_backward";
    let dims = li.shape().dims();
    if dims.len() != 4 || l.rank() != 4 || l.shape()[..2] != dims[..2] {
        return Err(Error::shape(
            op,
            format!("an index of shape {} does not fit planes of shape {}", li.shape(), l.shape()),
        ));
    }
    let (p, plane, out) = (dims[0] * dims[1], l.shape()[2] * l.shape()[3], dims[2] * dims[3]);
    let src = b.cast((s, l), s.dtype())?;
    let index = b.cast((si, li), DType::I64)?;
    let flat = |n: usize| Layout::contiguous(Shape::from([p, n]));
    b.gather((&src, &flat(plane)), 1, (&index, &flat(out)))
}

/// [`Backend::scatter_planes`](crate::backend::Backend::scatter_planes) through a flat `scatter_add` into zeros.
pub(crate) fn scatter_planes<B: Kernels + ?Sized>(
    b: &B,
    (s, l): View<'_>,
    (si, li): View<'_>,
    plane: [usize; 2],
) -> Result<Storage> {
    let op = "max_pool2d_backward";
    if l.rank() != 4 || l.shape() != li.shape() {
        return Err(Error::shape(
            op,
            format!("an index of shape {} does not fit values of shape {}", li.shape(), l.shape()),
        ));
    }
    let dims = l.shape().dims();
    let (p, out) = (dims[0] * dims[1], dims[2] * dims[3]);
    let src = b.cast((s, l), s.dtype())?;
    let index = b.cast((si, li), DType::I64)?;
    let flat = |n: usize| Layout::contiguous(Shape::from([p, n]));
    let zeros = b.full(p * plane[0] * plane[1], Scalar::Int(0), s.dtype())?;
    b.scatter_add((&zeros, &flat(plane[0] * plane[1])), 1, (&index, &flat(out)), (&src, &flat(out)))
}

/// The dense `[output, input]` matrix of one dimension, or its transpose.
fn dense(op: &'static str, taps: &AxisTaps, transposed: bool, dtype: DType) -> Result<CpuStorage> {
    let (o, i) = (taps.output(), taps.input);
    let mut m = vec![0.0f64; o * i];
    for y in 0..o {
        for (x, wt) in taps.taps(y) {
            let at = if transposed { x * o + y } else { y * i + x };
            m[at] += wt;
        }
    }
    Ok(match dtype {
        DType::F32 => Buffer::<f32>::from_fn(op, m.len(), |k| m[k] as f32)?.into(),
        DType::F64 => Buffer::<f64>::from_slice(op, &m)?.into(),
        other => return Err(Error::dtype(op, format!("expected a float input, got {other}"))),
    })
}

/// [`Backend::resample2d`](crate::backend::Backend::resample2d) as `rows @ plane @ colsᵀ` with dense matrices.
pub(crate) fn resample2d<B: Kernels + ?Sized>(b: &B, (s, l): View<'_>, map: &Resample) -> Result<Storage> {
    let op = "resample2d";
    map.check(op)?;
    let l = check_planes(op, s, l, map.input(), map.output(), None)?;
    let (n, c) = planes(&l);
    let [h, w] = map.input();
    let [oh, ow] = map.output();
    let p = n * c;
    let data = b.cast((s, &l), s.dtype())?;
    let cols_t = b.upload(dense(op, &map.cols, true, s.dtype())?)?;
    let rows = b.upload(dense(op, &map.rows, false, s.dtype())?)?;
    let across = b.matmul(
        (&data, &Layout::contiguous(Shape::from([p, h, w]))),
        (&cols_t, &Layout::new(Shape::from([p, w, ow]), smallvec![0, ow, 1], 0)?),
    )?;
    b.matmul(
        (&rows, &Layout::new(Shape::from([p, oh, h]), smallvec![0, h, 1], 0)?),
        (&across, &Layout::contiguous(Shape::from([p, h, ow]))),
    )
}
