//! Pooling and resampling of `[N, C, h, w]` planes: max pooling with its argmax, the plane
//! gather and scatter that carry a max pool's gradients, and separable linear maps
//! (average pooling, adaptive averages, interpolation and all their gradients).
//!
//! Every plane is independent, so the work splits into runs of whole planes, fixed by the
//! sizes alone (results do not depend on the number of threads). Inputs are read through
//! their strides (no copy for a transposed or sliced view); rows with unit column stride
//! are read as slices, and the common 2x2 max pool without dilation has a loop of its own.

use super::binary;
use crate::dtype::{Element, FloatElement};
use crate::host::iter::{GRAIN_CHEAP, par_for, threads};
use crate::layout::Layout;
use crate::ops::pool::{AxisTaps, PoolWindows, Resample};
use crate::storage::{Buffer, CpuStorage};
use crate::{Error, Result};
use multiversion::multiversion;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

/// A pointer to an output that may cross threads; every task writes its own planes.
#[derive(Clone, Copy)]
struct Out<T>(*mut T);
// SAFETY: only used by `for_planes`, whose tasks write disjoint planes of a buffer that
// outlives the loop.
unsafe impl<T> Send for Out<T> {}
unsafe impl<T> Sync for Out<T> {}
impl<T> Out<T> {
    /// Plane `p` of `len` elements; a method so that closures capture the whole wrapper.
    ///
    /// # Safety
    /// The buffer holds plane `p`, and no other task touches it.
    unsafe fn plane<'a>(self, p: usize, len: usize) -> &'a mut [T] {
        // SAFETY: guaranteed by the caller.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(p * len), len) }
    }
}

/// Where the planes of a validated `[N, C, h, w]` layout start, and its row and column
/// strides.
#[derive(Clone, Copy)]
struct Planes {
    offset: usize,
    batch: usize,
    channel: usize,
    channels: usize,
    row: usize,
    col: usize,
}

impl Planes {
    fn of(l: &Layout) -> Self {
        let s = l.strides();
        Planes { offset: l.offset(), batch: s[0], channel: s[1], channels: l.shape()[1], row: s[2], col: s[3] }
    }

    /// The storage index of plane `p`'s first element.
    fn base(&self, p: usize) -> usize {
        self.offset + p / self.channels.max(1) * self.batch + p % self.channels.max(1) * self.channel
    }
}

/// Calls `f(planes)` on consecutive runs of `0..planes`, in parallel when the whole costs
/// at least a few parallel grains (`per_plane` is a plane's cost in element reads). The
/// runs depend on the sizes alone.
fn for_planes(planes: usize, per_plane: usize, f: impl Fn(Range<usize>) + Sync) {
    let work = planes.saturating_mul(per_plane.max(1));
    if work < 2 * GRAIN_CHEAP || planes < 2 || threads() <= 1 {
        f(0..planes);
        return;
    }
    // Runs of at least a grain, and at most 64 of them.
    let per_task = (GRAIN_CHEAP / per_plane.max(1)).max(1).max(planes.div_ceil(64));
    par_for(planes.div_ceil(per_task), |t| f(t * per_task..((t + 1) * per_task).min(planes)));
}

/// The data of a float storage, or a dtype error naming `op`.
fn slice<'a, T: FloatElement>(op: &'static str, s: &'a CpuStorage) -> Result<&'a [T]> {
    s.as_slice::<T>().ok_or_else(|| Error::dtype(op, format!("expected {} operands, got {}", T::DTYPE, s.dtype())))
}

/// The `i64` elements of an index view in row-major order: the storage itself when
/// contiguous, else a copy kept in `held`.
fn indices<'a>(op: &'static str, s: &'a CpuStorage, l: &Layout, held: &'a mut Option<CpuStorage>) -> Result<&'a [i64]> {
    let data = if l.is_contiguous() { s } else { held.insert(binary::cast(s, l, crate::DType::I64)?) };
    let off = if l.is_contiguous() { l.offset() } else { 0 };
    let all =
        data.as_slice::<i64>().ok_or_else(|| Error::dtype(op, format!("expected an i64 index, got {}", s.dtype())))?;
    Ok(&all[off..off + l.numel()])
}

/// The float elements of a view in row-major order, as [`indices`].
fn values<'a, T: FloatElement>(
    op: &'static str,
    s: &'a CpuStorage,
    l: &Layout,
    held: &'a mut Option<CpuStorage>,
) -> Result<&'a [T]> {
    if l.is_contiguous() {
        return Ok(&slice::<T>(op, s)?[l.offset()..l.offset() + l.numel()]);
    }
    slice::<T>(op, held.insert(binary::cast(s, l, T::DTYPE)?))
}

/// Max pooling ([`crate::backend::Backend::max_pool2d`]) of a validated view.
pub(crate) fn max_pool2d(s: &CpuStorage, l: &Layout, win: &PoolWindows) -> Result<(CpuStorage, CpuStorage)> {
    fn go<T: FloatElement>(s: &CpuStorage, l: &Layout, win: &PoolWindows) -> Result<(CpuStorage, CpuStorage)> {
        let op = "max_pool2d";
        let x = slice::<T>(op, s)?;
        let pl = Planes::of(l);
        let count = l.shape()[0] * l.shape()[1];
        let [oh, ow] = win.output();
        let len = oh * ow;
        let mut out = Buffer::<T>::uninit(op, count * len)?;
        let mut at = Buffer::<i64>::uninit(op, count * len)?;
        let (po, pi) = (Out(out.as_mut_ptr()), Out(at.as_mut_ptr()));
        let (rows, cols) = (&win.rows, &win.cols);
        let pairs = |w: &[(usize, usize)], step: usize| {
            w.iter().enumerate().all(|(o, &(s, c))| c == 2 && s == 2 * o && step == 1)
        };
        let two_by_two = pl.col == 1 && pairs(&rows.windows, rows.step) && pairs(&cols.windows, cols.step);
        let taps =
            rows.windows.iter().map(|w| w.1).max().unwrap_or(0) * cols.windows.iter().map(|w| w.1).max().unwrap_or(0);
        for_planes(count, len * taps.max(1), |run| {
            for p in run {
                // SAFETY: plane `p` of both outputs belongs to this call alone.
                let (vals, idx) = unsafe { (po.plane(p, len), pi.plane(p, len)) };
                let base = pl.base(p);
                if two_by_two {
                    pool_two_by_two(x, base, pl.row, ow, vals, idx);
                    continue;
                }
                let w = cols.input;
                for (y, &(r0, rn)) in rows.windows.iter().enumerate() {
                    for (xo, &(c0, cn)) in cols.windows.iter().enumerate() {
                        let mut best = T::LOWEST;
                        let mut arg = (r0 * w + c0) as i64;
                        for i in 0..rn {
                            let r = r0 + i * rows.step;
                            let row = base + r * pl.row;
                            for j in 0..cn {
                                let c = c0 + j * cols.step;
                                let v = x[row + c * pl.col];
                                // PyTorch's rule: a larger value or any NaN takes the place.
                                if v > best || v.is_nan() {
                                    best = v;
                                    arg = (r * w + c) as i64;
                                }
                            }
                        }
                        vals[y * ow + xo] = best;
                        idx[y * ow + xo] = arg;
                    }
                }
            }
        });
        Ok((T::into_storage(out), at.into()))
    }
    match s {
        CpuStorage::F32(_) => go::<f32>(s, l, win),
        CpuStorage::F64(_) => go::<f64>(s, l, win),
        other => Err(Error::dtype("max_pool2d", format!("expected a float input, got {}", other.dtype()))),
    }
}

/// A 2x2 max pool with stride 2 over one plane whose rows are `row` apart with unit column
/// stride: every window reads two pairs of neighbours.
#[inline]
fn pool_two_by_two<T: FloatElement>(x: &[T], base: usize, row: usize, ow: usize, vals: &mut [T], idx: &mut [i64]) {
    let w = 2 * ow;
    for (y, (vrow, irow)) in vals.chunks_mut(ow.max(1)).zip(idx.chunks_mut(ow.max(1))).enumerate() {
        let top = &x[base + 2 * y * row..][..w];
        let bottom = &x[base + (2 * y + 1) * row..][..w];
        pool_row_two_by_two(top, bottom, (2 * y * w) as i64, w as i64, vrow, irow);
    }
}

/// One output row of [`pool_two_by_two`]: `top` and `bottom` are the window rows, `first`
/// the plane index of `top[0]` and `w` the plane's width. Written as selects, not branches,
/// so that it compiles to vector code.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn pool_row_two_by_two<T: FloatElement>(top: &[T], bottom: &[T], first: i64, w: i64, vals: &mut [T], idx: &mut [i64]) {
    let pairs = top.chunks_exact(2).zip(bottom.chunks_exact(2));
    for (xo, ((t, b), (v, i))) in pairs.zip(vals.iter_mut().zip(idx.iter_mut())).enumerate() {
        // PyTorch's rule, taps in row-major order from a start of tap 0: a larger value or
        // any NaN takes the place.
        let (mut best, mut at) = (t[0], 0);
        for (cand, offset) in [(t[1], 1), (b[0], w), (b[1], w + 1)] {
            #[allow(clippy::eq_op)] // `c != c`: NaN, without a call the vectoriser cannot see through
            let take = cand > best || cand != cand;
            best = if take { cand } else { best };
            at = if take { offset } else { at };
        }
        *v = best;
        *i = first + 2 * xo as i64 + at;
    }
}

/// A max pool's gradient: each element of `src` added at its plane position `index`
/// ([`crate::backend::Backend::scatter_planes`]).
pub(crate) fn scatter_planes(
    (s, l): (&CpuStorage, &Layout),
    (si, li): (&CpuStorage, &Layout),
    plane: [usize; 2],
) -> Result<CpuStorage> {
    fn go<T: FloatElement>(
        s: &CpuStorage,
        l: &Layout,
        si: &CpuStorage,
        li: &Layout,
        plane: [usize; 2],
    ) -> Result<Buffer<T>> {
        let op = "max_pool2d_backward";
        let (mut hs, mut hi) = (None, None);
        let src = values::<T>(op, s, l, &mut hs)?;
        let at = indices(op, si, li, &mut hi)?;
        let count = l.shape()[0] * l.shape()[1];
        let (len, from) = (plane[0] * plane[1], l.shape()[2] * l.shape()[3]);
        let mut out = Buffer::<T>::zeros(op, count * len)?;
        let po = Out(out.as_mut_ptr());
        let bad = AtomicBool::new(false);
        for_planes(count, from, |run| {
            for p in run {
                // SAFETY: plane `p` of the output belongs to this call alone.
                let dst = unsafe { po.plane(p, len) };
                for (v, &i) in src[p * from..(p + 1) * from].iter().zip(&at[p * from..(p + 1) * from]) {
                    match dst.get_mut(i as usize) {
                        Some(d) if i >= 0 => *d = *d + *v,
                        _ => bad.store(true, Ordering::Relaxed),
                    }
                }
            }
        });
        if bad.load(Ordering::Relaxed) {
            return Err(Error::index(op, format!("an index outside planes of {len} elements")));
        }
        Ok(out)
    }
    match s {
        CpuStorage::F32(_) => Ok(go::<f32>(s, l, si, li, plane)?.into()),
        CpuStorage::F64(_) => Ok(go::<f64>(s, l, si, li, plane)?.into()),
        CpuStorage::BF16(_) => Ok(scatter_planes_half::<half::bf16>(s, l, si, li, plane)?.into()),
        CpuStorage::F16(_) => Ok(scatter_planes_half::<half::f16>(s, l, si, li, plane)?.into()),
        other => Err(Error::dtype("max_pool2d_backward", format!("expected a float input, got {}", other.dtype()))),
    }
}

/// [`scatter_planes`] of a 16-bit gradient: each plane is summed in an `f32` plane and
/// rounded once, as widening the gradient to `f32` would give, without a widened copy of
/// the whole gradient and of the whole result (a training step's largest transient under
/// autocast).
fn scatter_planes_half<T: Element>(
    s: &CpuStorage,
    l: &Layout,
    si: &CpuStorage,
    li: &Layout,
    plane: [usize; 2],
) -> Result<Buffer<T>> {
    let op = "max_pool2d_backward";
    let (mut hs, mut hi) = (None, None);
    let src: &[T] = if l.is_contiguous() {
        let all = s.as_slice::<T>().ok_or_else(|| Error::dtype(op, format!("expected {} operands", T::DTYPE)))?;
        &all[l.offset()..l.offset() + l.numel()]
    } else {
        let held: &CpuStorage = hs.insert(binary::cast(s, l, T::DTYPE)?);
        held.as_slice::<T>().ok_or_else(|| Error::dtype(op, format!("expected {} operands", T::DTYPE)))?
    };
    let at = indices(op, si, li, &mut hi)?;
    let count = l.shape()[0] * l.shape()[1];
    let (len, from) = (plane[0] * plane[1], l.shape()[2] * l.shape()[3]);
    let mut out = Buffer::<T>::zeros(op, count * len)?;
    let po = Out(out.as_mut_ptr());
    let bad = AtomicBool::new(false);
    for_planes(count, from, |run| {
        let mut acc = vec![0f32; len];
        for p in run {
            acc.fill(0.0);
            for (v, &i) in src[p * from..(p + 1) * from].iter().zip(&at[p * from..(p + 1) * from]) {
                match acc.get_mut(i as usize) {
                    Some(d) if i >= 0 => *d += v.to_f32(),
                    _ => bad.store(true, Ordering::Relaxed),
                }
            }
            // SAFETY: plane `p` of the output belongs to this call alone.
            let dst = unsafe { po.plane(p, len) };
            for (d, &a) in dst.iter_mut().zip(&acc) {
                *d = T::from_f32(a);
            }
        }
    });
    if bad.load(Ordering::Relaxed) {
        return Err(Error::index(op, format!("an index outside planes of {len} elements")));
    }
    Ok(out)
}

/// The adjoint of [`scatter_planes`]: `out[p] = src[index[p]]` within each plane
/// ([`crate::backend::Backend::gather_planes`]).
pub(crate) fn gather_planes((s, l): (&CpuStorage, &Layout), (si, li): (&CpuStorage, &Layout)) -> Result<CpuStorage> {
    fn go<T: FloatElement>(s: &CpuStorage, l: &Layout, si: &CpuStorage, li: &Layout) -> Result<Buffer<T>> {
        let op = "max_pool2d_backward";
        let x = slice::<T>(op, s)?;
        let mut hi = None;
        let at = indices(op, si, li, &mut hi)?;
        let pl = Planes::of(l);
        let w = l.shape()[3];
        let len_in = l.shape()[2] * w;
        let count = li.shape()[0] * li.shape()[1];
        let len = li.shape()[2] * li.shape()[3];
        let mut out = Buffer::<T>::uninit(op, count * len)?;
        let po = Out(out.as_mut_ptr());
        let bad = AtomicBool::new(false);
        for_planes(count, len, |run| {
            for p in run {
                // SAFETY: plane `p` of the output belongs to this call alone.
                let dst = unsafe { po.plane(p, len) };
                let base = pl.base(p);
                for (d, &i) in dst.iter_mut().zip(&at[p * len..(p + 1) * len]) {
                    if i < 0 || i as usize >= len_in {
                        bad.store(true, Ordering::Relaxed);
                        *d = T::ZERO;
                        continue;
                    }
                    let i = i as usize;
                    *d = x[base + i / w * pl.row + i % w * pl.col];
                }
            }
        });
        if bad.load(Ordering::Relaxed) {
            return Err(Error::index(op, format!("an index outside planes of {len_in} elements")));
        }
        Ok(out)
    }
    match s {
        CpuStorage::F32(_) => Ok(go::<f32>(s, l, si, li)?.into()),
        CpuStorage::F64(_) => Ok(go::<f64>(s, l, si, li)?.into()),
        other => Err(Error::dtype("max_pool2d_backward", format!("expected a float input, got {}", other.dtype()))),
    }
}

/// A dimension's taps with weights in the element type.
struct Taps<T> {
    offsets: Vec<usize>,
    index: Vec<usize>,
    weight: Vec<T>,
}

impl<T: FloatElement> Taps<T> {
    fn of(a: &AxisTaps) -> Self {
        Taps {
            offsets: a.offsets.clone(),
            index: a.index.clone(),
            weight: a.weight.iter().map(|&w| T::from_f64(w)).collect(),
        }
    }
}

/// A separable linear map ([`crate::backend::Backend::resample2d`]) of a validated view:
/// along the columns into a scratch plane of `h` rows by `ow`, then along the rows.
pub(crate) fn resample2d(s: &CpuStorage, l: &Layout, map: &Resample) -> Result<CpuStorage> {
    fn go<T: FloatElement>(s: &CpuStorage, l: &Layout, map: &Resample) -> Result<Buffer<T>> {
        let op = "resample2d";
        let x = slice::<T>(op, s)?;
        let pl = Planes::of(l);
        let count = l.shape()[0] * l.shape()[1];
        let [h, _] = map.input();
        let [oh, ow] = map.output();
        let (rows, cols) = (Taps::<T>::of(&map.rows), Taps::<T>::of(&map.cols));
        let len = oh * ow;
        let mut out = Buffer::<T>::uninit(op, count * len)?;
        if out.is_empty() {
            return Ok(out);
        }
        let po = Out(out.as_mut_ptr());
        let per_plane = h * cols.index.len() + ow * rows.index.len();
        for_planes(count, per_plane, |run| {
            // One scratch plane per run of planes.
            let mut tmp = vec![T::ZERO; h * ow];
            for p in run {
                let base = pl.base(p);
                for r in 0..h {
                    let row = base + r * pl.row;
                    let t = &mut tmp[r * ow..(r + 1) * ow];
                    for (xo, d) in t.iter_mut().enumerate() {
                        let mut acc = T::ZERO;
                        for k in cols.offsets[xo]..cols.offsets[xo + 1] {
                            acc = acc + cols.weight[k] * x[row + cols.index[k] * pl.col];
                        }
                        *d = acc;
                    }
                }
                // SAFETY: plane `p` of the output belongs to this call alone.
                let dst = unsafe { po.plane(p, len) };
                for (y, drow) in dst.chunks_mut(ow.max(1)).enumerate().take(oh) {
                    drow.fill(T::ZERO);
                    for k in rows.offsets[y]..rows.offsets[y + 1] {
                        let (wt, src) = (rows.weight[k], &tmp[rows.index[k] * ow..(rows.index[k] + 1) * ow]);
                        for (d, &v) in drow.iter_mut().zip(src) {
                            *d = *d + wt * v;
                        }
                    }
                }
            }
        });
        Ok(out)
    }
    match s {
        CpuStorage::F32(_) => Ok(go::<f32>(s, l, map)?.into()),
        CpuStorage::F64(_) => Ok(go::<f64>(s, l, map)?.into()),
        other => Err(Error::dtype("resample2d", format!("expected a float input, got {}", other.dtype()))),
    }
}
