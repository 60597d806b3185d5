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
use crate::ops::pool::{AxisTaps, AxisWindows, PoolWindows, Resample};
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
fn slice<'a, T: Element>(op: &'static str, s: &'a CpuStorage) -> Result<&'a [T]> {
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
fn values<'a, T: Element>(
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
        let interior = if pl.col == 1 { Interior::of(cols) } else { None };
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
                if let Some(inner) = &interior {
                    pool_by_taps(x, base, pl.row, rows, cols, inner, vals, idx);
                    continue;
                }
                pool_general(x, base, (pl.row, pl.col), rows, cols, vals, idx);
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

/// A max pool over one plane whose rows and columns are `row` and `col` apart, window by
/// window.
fn pool_general<T: FloatElement>(
    x: &[T],
    base: usize,
    (row, col): (usize, usize),
    rows: &AxisWindows,
    cols: &AxisWindows,
    vals: &mut [T],
    idx: &mut [i64],
) {
    let (w, ow) = (cols.input, cols.output());
    for (y, &(r0, rn)) in rows.windows.iter().enumerate() {
        for (xo, &(c0, cn)) in cols.windows.iter().enumerate() {
            let mut best = T::LOWEST;
            let mut arg = (r0 * w + c0) as i64;
            for i in 0..rn {
                let r = r0 + i * rows.step;
                let at = base + r * row;
                for j in 0..cn {
                    let c = c0 + j * cols.step;
                    let v = x[at + c * col];
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

/// The output columns whose windows are whole and evenly spaced (all but the few that the
/// padding clips): output column `x` in `range` reads input columns `start + (x -
/// range.start) * stride + j * step` for `j < taps`.
struct Interior {
    range: Range<usize>,
    start: usize,
    stride: usize,
    taps: usize,
}

impl Interior {
    /// The interior of a dimension's windows, when it holds at least two outputs (below
    /// that the general loop is as fast).
    fn of(cols: &AxisWindows) -> Option<Interior> {
        let w = &cols.windows;
        let taps = w.iter().map(|c| c.1).max()?;
        let lo = w.iter().position(|c| c.1 == taps)?;
        let hi = lo + w[lo..].iter().take_while(|c| c.1 == taps).count();
        if hi - lo < 2 || taps == 0 {
            return None;
        }
        let (start, stride) = (w[lo].0, w[lo + 1].0.checked_sub(w[lo].0)?);
        let even = w[lo..hi].iter().enumerate().all(|(k, c)| c.0 == start + k * stride);
        even.then_some(Interior { range: lo..hi, start, stride, taps })
    }
}

/// A max pool over one plane whose rows are `row` apart with unit column stride, tap by tap:
/// for each window row and tap column, one pass over the interior outputs (a loop the
/// compiler vectorises) and a scalar one over the clipped windows at the edges. Every output
/// still sees its taps in row-major order, so values and indices are the general loop's.
#[allow(clippy::too_many_arguments)]
fn pool_by_taps<T: FloatElement>(
    x: &[T],
    base: usize,
    row: usize,
    rows: &AxisWindows,
    cols: &AxisWindows,
    inner: &Interior,
    vals: &mut [T],
    idx: &mut [i64],
) {
    let (w, ow) = (cols.input, cols.output());
    let (lo, hi) = (inner.range.start, inner.range.end);
    for (y, &(r0, rn)) in rows.windows.iter().enumerate() {
        let vrow = &mut vals[y * ow..(y + 1) * ow];
        let irow = &mut idx[y * ow..(y + 1) * ow];
        vrow.fill(T::LOWEST);
        for (i, &(c0, _)) in irow.iter_mut().zip(&cols.windows) {
            *i = (r0 * w + c0) as i64;
        }
        for k in 0..rn {
            let r = r0 + k * rows.step;
            let input = &x[base + r * row..][..w];
            let first = (r * w) as i64;
            for j in 0..inner.taps {
                let at = inner.start + j * cols.step;
                merge_strided(input, at, inner.stride, first, &mut vrow[lo..hi], &mut irow[lo..hi]);
            }
            for xo in (0..lo).chain(hi..ow) {
                let (c0, cn) = cols.windows[xo];
                for j in 0..cn {
                    let c = c0 + j * cols.step;
                    let v = input[c];
                    if v > vrow[xo] || v.is_nan() {
                        vrow[xo] = v;
                        irow[xo] = first + c as i64;
                    }
                }
            }
        }
    }
}

/// `vals[k]` (with its index) replaced by `input[at + k * stride]` where that is larger or
/// NaN (PyTorch's rule); `first` is the plane index of `input[0]`. Selects, not branches,
/// so that it compiles to vector code.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn merge_strided<T: FloatElement>(input: &[T], at: usize, stride: usize, first: i64, vals: &mut [T], idx: &mut [i64]) {
    let Some(last) = vals.len().checked_sub(1) else { return };
    let input = &input[at..=at + last * stride];
    for (k, (v, i)) in vals.iter_mut().zip(idx.iter_mut()).enumerate() {
        let c = k * stride;
        let cand = input[c];
        #[allow(clippy::eq_op)] // `c != c`: NaN, without a call the vectoriser cannot see through
        let take = cand > *v || cand != cand;
        *v = if take { cand } else { *v };
        *i = if take { first + (at + c) as i64 } else { *i };
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
/// ([`crate::backend::Backend::scatter_planes`]). A 16-bit gradient is summed in `f32` and
/// rounded once per plane, as widening the gradient to `f32` would give, without a widened
/// copy of the whole gradient and of the whole result (a training step's largest transient
/// under autocast).
pub(crate) fn scatter_planes(
    (s, l): (&CpuStorage, &Layout),
    (si, li): (&CpuStorage, &Layout),
    plane: [usize; 2],
) -> Result<CpuStorage> {
    let at = (si, li);
    match s {
        CpuStorage::F32(_) => Ok(scatter_in::<f32, f32>((s, l), at, plane, |v| v, |a| a)?.into()),
        CpuStorage::F64(_) => Ok(scatter_in::<f64, f64>((s, l), at, plane, |v| v, |a| a)?.into()),
        CpuStorage::BF16(_) => {
            Ok(scatter_in::<half::bf16, f32>((s, l), at, plane, |v| v.to_f32(), half::bf16::from_f32)?.into())
        }
        CpuStorage::F16(_) => {
            Ok(scatter_in::<half::f16, f32>((s, l), at, plane, |v| v.to_f32(), half::f16::from_f32)?.into())
        }
        other => Err(Error::dtype("max_pool2d_backward", format!("expected a float input, got {}", other.dtype()))),
    }
}

/// [`scatter_planes`] of `T` elements summed in `A`: each plane is accumulated in a
/// zeroed plane of `A` (`widen` each element in) and written out once (`narrow`).
fn scatter_in<T: Element, A: Copy + Default + std::ops::Add<Output = A> + Send>(
    (s, l): (&CpuStorage, &Layout),
    (si, li): (&CpuStorage, &Layout),
    plane: [usize; 2],
    widen: impl Fn(T) -> A + Sync,
    narrow: impl Fn(A) -> T + Sync,
) -> Result<Buffer<T>> {
    let op = "max_pool2d_backward";
    let (mut hs, mut hi) = (None, None);
    let src = values::<T>(op, s, l, &mut hs)?;
    let at = indices(op, si, li, &mut hi)?;
    let count = l.shape()[0] * l.shape()[1];
    let (len, from) = (plane[0] * plane[1], l.shape()[2] * l.shape()[3]);
    let mut out = Buffer::<T>::uninit(op, count * len)?;
    let po = Out(out.as_mut_ptr());
    let bad = AtomicBool::new(false);
    for_planes(count, from, |run| {
        let mut acc = vec![A::default(); len];
        for p in run {
            acc.fill(A::default());
            for (v, &i) in src[p * from..(p + 1) * from].iter().zip(&at[p * from..(p + 1) * from]) {
                match acc.get_mut(i as usize) {
                    Some(d) if i >= 0 => *d = *d + widen(*v),
                    _ => bad.store(true, Ordering::Relaxed),
                }
            }
            // SAFETY: plane `p` of the output belongs to this call alone.
            let dst = unsafe { po.plane(p, len) };
            for (d, &a) in dst.iter_mut().zip(&acc) {
                *d = narrow(a);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::pool::{MaxPoolArgs, max_pool_plan};

    /// Values from a handful of levels (so that windows hold ties), with some NaNs and
    /// infinities when `special`.
    fn plane(len: usize, seed: u64, special: bool) -> Vec<f32> {
        let mut state = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (0..len)
            .map(|_| {
                state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                let r = (state >> 33) % 23;
                match r {
                    20 if special => f32::NAN,
                    21 if special => f32::NEG_INFINITY,
                    22 if special => f32::INFINITY,
                    _ => (r % 5) as f32 - 2.0,
                }
            })
            .collect()
    }

    /// The tap-by-tap pool gives the general loop's values and indices (ties: the first tap
    /// in row-major order; NaN: the last NaN) on every window shape it takes, ResNet's 3x3
    /// stride-2 padding-1 stem pool among them.
    #[test]
    fn pooling_tap_by_tap_matches_the_general_loop() {
        let mut taken = 0;
        // (h, w, kernel, stride, padding, dilation, ceil_mode)
        let cases = [
            (112, 112, [3, 3], [2, 2], [1, 1], 1, false),
            (13, 17, [3, 3], [2, 2], [1, 1], 1, true),
            (9, 10, [2, 2], [1, 1], [0, 0], 1, false),
            (11, 12, [3, 3], [3, 3], [1, 1], 1, true),
            (10, 15, [3, 3], [1, 1], [1, 1], 2, false),
            (8, 8, [5, 5], [2, 2], [2, 2], 1, false),
            (7, 9, [2, 3], [1, 2], [1, 1], 1, false),
        ];
        for (seed, &(h, w, k, s, p, d, ceil)) in cases.iter().enumerate() {
            let args = MaxPoolArgs::new(k).stride(s).padding(p).dilation(d).ceil_mode(ceil);
            let win = max_pool_plan("max_pool2d", &[1, 1, h, w], &args).unwrap().map;
            let Some(inner) = Interior::of(&win.cols) else { continue };
            taken += 1;
            let [oh, ow] = win.output();
            for special in [false, true] {
                let x = plane(h * w + 3, seed as u64, special);
                let (mut v1, mut i1) = (vec![0.0f32; oh * ow], vec![0i64; oh * ow]);
                let (mut v2, mut i2) = (vec![0.0f32; oh * ow], vec![0i64; oh * ow]);
                pool_by_taps(&x, 3, w, &win.rows, &win.cols, &inner, &mut v1, &mut i1);
                pool_general(&x, 3, (w, 1), &win.rows, &win.cols, &mut v2, &mut i2);
                assert_eq!(i1, i2, "indices of case {seed}, special {special}");
                let same = v1.iter().zip(&v2).all(|(a, b)| a == b || (a.is_nan() && b.is_nan()));
                assert!(same, "values of case {seed}, special {special}: {v1:?} vs {v2:?}");
            }
        }
        assert!(taken >= 6, "only {taken} cases took the tap-by-tap path");
    }
}
