//! Column matrices of sliding windows (im2col) and their adjoint (col2im), a block of rows
//! and columns at a time, plus the `unfold` and `fold` kernels built on them.
//!
//! Row `c * kh * kw + i * kw + j` of one image's column matrix holds tap `(i, j)` of channel
//! `c` at every kernel position (`y * ow + x`). The convolution kernels (`conv.rs`) fill a
//! block of a few hundred positions at a time, sized to stay in L2 while the matrix product
//! reads it. Within a row, the positions that read inside the input form one run per output
//! row, found once per tap column, so the copies are plain slices (or strided loops) with
//! zeros around them, never a bounds test per element.

use super::binary;
use crate::dtype::{Element, FloatElement};
use crate::host::iter::par_chunks;
use crate::layout::Layout;
use crate::ops::conv::SlidingWindow;
use crate::storage::{Buffer, CpuStorage};
use crate::{Error, Result};
use std::ops::Range;

/// One image's channels as a kernel reads them: where channel 0 starts and the strides of
/// the channel, row and column dimensions.
#[derive(Clone, Copy)]
pub(super) struct Planes<'a, T> {
    pub data: &'a [T],
    pub base: usize,
    pub channel: usize,
    pub row: usize,
    pub col: usize,
}

impl<'a, T> Planes<'a, T> {
    /// Image `n` of a validated `[N, C, h, w]` layout over `data`.
    pub fn of(data: &'a [T], l: &Layout, n: usize) -> Self {
        let s = l.strides();
        Planes { data, base: l.offset() + n * s[0], channel: s[1], row: s[2], col: s[3] }
    }
}

/// The output columns `x` whose input column `x * stride + offset - pad` lies in
/// `0..input`, as a range within `0..out`.
fn inside(out: usize, input: usize, stride: usize, offset: usize, pad: usize) -> Range<usize> {
    let lo = if pad > offset { (pad - offset).div_ceil(stride) } else { 0 };
    let hi = if input + pad > offset { (input + pad - offset).div_ceil(stride) } else { 0 };
    let lo = lo.min(out);
    lo..hi.clamp(lo, out)
}

/// Calls `f(offset_in_row, x_range, source_row)` for each output row met by positions
/// `cols` (`y * ow + x`), for tap `(i, j)`: `x_range` are the row's positions, and
/// `source_row` the input row they read (`None` where it lies in the padding).
#[inline(always)]
fn for_each_row(
    w: &SlidingWindow,
    cols: &Range<usize>,
    i: usize,
    mut f: impl FnMut(usize, Range<usize>, Option<usize>),
) {
    let ow = w.output[1];
    // One division per call, not per row: small images have many short rows per block.
    let (mut y, mut x0) = (cols.start / ow.max(1), cols.start % ow.max(1));
    let mut l = cols.start;
    while l < cols.end {
        let x1 = ow.min(x0 + (cols.end - l));
        let iy = (y * w.stride[0] + i * w.dilation[0]).checked_sub(w.padding[0]).filter(|&r| r < w.input[0]);
        f(l - cols.start, x0..x1, iy);
        l += x1 - x0;
        (y, x0) = (y + 1, 0);
    }
}

/// `dst.copy_from_slice(src)` for the short runs of small images, without a call into
/// `memcpy` per run: runs of 8 or more move as 8-element blocks (the last one overlapping),
/// shorter ones as at most two overlapping pairs of 4, 2 or 1.
#[inline(always)]
fn copy_run<T: Copy>(dst: &mut [T], src: &[T]) {
    let n = dst.len();
    let src = &src[..n];
    if n >= 64 {
        dst.copy_from_slice(src);
    } else if n >= 8 {
        let mut k = 0;
        while k + 8 <= n {
            copy_fixed::<T, 8>(&mut dst[k..], &src[k..]);
            k += 8;
        }
        if k < n {
            copy_fixed::<T, 8>(&mut dst[n - 8..], &src[n - 8..]);
        }
    } else if n >= 4 {
        copy_fixed::<T, 4>(dst, src);
        copy_fixed::<T, 4>(&mut dst[n - 4..], &src[n - 4..]);
    } else if n >= 2 {
        copy_fixed::<T, 2>(dst, src);
        copy_fixed::<T, 2>(&mut dst[n - 2..], &src[n - 2..]);
    } else if n == 1 {
        dst[0] = src[0];
    }
}

/// Copies the first `N` elements of `src` to `dst`, as a fixed-size move.
#[inline(always)]
fn copy_fixed<T: Copy, const N: usize>(dst: &mut [T], src: &[T]) {
    // A constant length: compiled to register moves, not a call.
    dst[..N].copy_from_slice(&src[..N]);
}

/// Fills `dst` with zeros; a no-op (no call into `memset`) when it is empty, as the padding
/// around most runs is.
#[inline(always)]
fn zero_run<T: Element>(dst: &mut [T]) {
    if !dst.is_empty() {
        dst.fill(T::ZERO);
    }
}

/// Writes rows `channels` x taps, columns `cols` of an image's column matrix into `dst`
/// (row-major, `cols.len()` per row; channels counted from `channels.start`).
pub(super) fn im2col_block<T: Element>(
    src: Planes<'_, T>,
    w: &SlidingWindow,
    channels: Range<usize>,
    cols: Range<usize>,
    dst: &mut [T],
) {
    let len = cols.len();
    im2col_rows(src, w, channels, cols, dst, len);
}

/// [`im2col_block`] with the rows of `dst` `rs` apart (at least `cols.len()`), so that the
/// blocks of several images can sit side by side in one matrix.
pub(super) fn im2col_rows<T: Element>(
    src: Planes<'_, T>,
    w: &SlidingWindow,
    channels: Range<usize>,
    cols: Range<usize>,
    dst: &mut [T],
    rs: usize,
) {
    let [kh, kw] = w.kernel;
    let len = cols.len();
    let step = w.stride[1] * src.col;
    let mut row = 0;
    for c in channels {
        let plane = src.base + c * src.channel;
        for i in 0..kh {
            for j in 0..kw {
                let out = &mut dst[row * rs..row * rs + len];
                row += 1;
                let offset = j * w.dilation[1];
                let valid = inside(w.output[1], w.input[1], w.stride[1], offset, w.padding[1]);
                for_each_row(w, &cols, i, |at, xs, iy| {
                    let seg = &mut out[at..at + xs.len()];
                    let Some(iy) = iy else {
                        zero_run(seg);
                        return;
                    };
                    let a = valid.start.clamp(xs.start, xs.end);
                    let b = valid.end.clamp(a, xs.end);
                    zero_run(&mut seg[..a - xs.start]);
                    zero_run(&mut seg[b - xs.start..]);
                    if a == b {
                        return;
                    }
                    let first = plane + iy * src.row + (a * w.stride[1] + offset - w.padding[1]) * src.col;
                    let run = &mut seg[a - xs.start..b - xs.start];
                    if step == 1 {
                        copy_run(run, &src.data[first..]);
                    } else {
                        for (k, v) in run.iter_mut().enumerate() {
                            *v = src.data[first + k * step];
                        }
                    }
                });
            }
        }
    }
}

/// Adds rows `channels` x taps, columns `cols` of a column matrix (`src`, rows `src_rs`
/// apart) into contiguous `[channels.len(), h, w]` planes `dst`, where [`im2col_block`]
/// took them from.
pub(super) fn col2im_block<T: FloatElement>(
    src: &[T],
    src_rs: usize,
    w: &SlidingWindow,
    channels: usize,
    cols: Range<usize>,
    dst: &mut [T],
) {
    let [kh, kw] = w.kernel;
    let [h, width] = w.input;
    let stride = w.stride[1];
    let mut row = 0;
    for c in 0..channels {
        let plane = &mut dst[c * h * width..(c + 1) * h * width];
        for i in 0..kh {
            for j in 0..kw {
                let from = &src[row * src_rs..row * src_rs + cols.len()];
                row += 1;
                let offset = j * w.dilation[1];
                let valid = inside(w.output[1], width, stride, offset, w.padding[1]);
                for_each_row(w, &cols, i, |at, xs, iy| {
                    let Some(iy) = iy else { return };
                    let a = valid.start.clamp(xs.start, xs.end);
                    let b = valid.end.clamp(a, xs.end);
                    if a == b {
                        return;
                    }
                    let first = iy * width + a * stride + offset - w.padding[1];
                    let run = &from[at + a - xs.start..at + b - xs.start];
                    if stride == 1 {
                        for (d, &v) in plane[first..first + run.len()].iter_mut().zip(run) {
                            *d = *d + v;
                        }
                    } else {
                        for (k, &v) in run.iter().enumerate() {
                            let d = &mut plane[first + k * stride];
                            *d = *d + v;
                        }
                    }
                });
            }
        }
    }
}

/// Work (elements moved) below which `unfold` and `fold` run on one thread.
const SERIAL_ELEMENTS: usize = 1 << 15;

/// `unfold` of a validated `[n, c, h, w]` view: `[n, c * kh * kw, oh * ow]`.
pub(crate) fn unfold(src: &CpuStorage, l: &Layout, w: &SlidingWindow, (n, c): (usize, usize)) -> Result<CpuStorage> {
    fn go<T: Element>(s: &[T], l: &Layout, w: &SlidingWindow, (n, c): (usize, usize)) -> Result<Buffer<T>> {
        let per_channel = w.taps() * w.positions();
        let mut out = Buffer::<T>::uninit("unfold", n * c * per_channel)?;
        let block = |i: usize, chunk: &mut [T]| {
            let (image, channel) = (i / c, i % c);
            im2col_block(Planes::of(s, l, image), w, channel..channel + 1, 0..w.positions(), chunk);
        };
        if per_channel == 0 {
            return Ok(out);
        }
        if out.len() < SERIAL_ELEMENTS {
            for (i, chunk) in out.chunks_mut(per_channel).enumerate() {
                block(i, chunk);
            }
        } else {
            par_chunks(&mut out, per_channel, block);
        }
        Ok(out)
    }
    match src {
        CpuStorage::F32(s) => Ok(go(s, l, w, (n, c))?.into()),
        CpuStorage::F64(s) => Ok(go(s, l, w, (n, c))?.into()),
        other => Err(Error::dtype("unfold", format!("expected a float input, got {}", other.dtype()))),
    }
}

/// `fold` of a validated `[n, c * kh * kw, oh * ow]` view: `[n, c, h, w]`.
pub(crate) fn fold(src: &CpuStorage, l: &Layout, w: &SlidingWindow, (n, c): (usize, usize)) -> Result<CpuStorage> {
    fn go<T: FloatElement>(s: &[T], w: &SlidingWindow, (n, c): (usize, usize)) -> Result<Buffer<T>> {
        let plane = w.input[0] * w.input[1];
        let (taps, l) = (w.taps(), w.positions());
        let mut out = Buffer::<T>::uninit("fold", n * c * plane)?;
        let block = |i: usize, chunk: &mut [T]| {
            chunk.fill(T::ZERO);
            col2im_block(&s[i * taps * l..(i + 1) * taps * l], l, w, 1, 0..l, chunk);
        };
        if plane == 0 {
            return Ok(out);
        }
        if n * c * taps * l < SERIAL_ELEMENTS {
            for (i, chunk) in out.chunks_mut(plane).enumerate() {
                block(i, chunk);
            }
        } else {
            par_chunks(&mut out, plane, block);
        }
        Ok(out)
    }
    // The columns are read row by row: a strided view is copied first.
    let contiguous;
    let src = if l.is_contiguous() {
        src
    } else {
        contiguous = binary::cast(src, l, src.dtype())?;
        &contiguous
    };
    let start = if l.is_contiguous() { l.offset() } else { 0 };
    match src {
        CpuStorage::F32(s) => Ok(go(&s[start..], w, (n, c))?.into()),
        CpuStorage::F64(s) => Ok(go(&s[start..], w, (n, c))?.into()),
        other => Err(Error::dtype("fold", format!("expected a float input, got {}", other.dtype()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The column matrix of one channel, entry by entry from the definition.
    fn naive(x: &[f64], w: &SlidingWindow) -> Vec<f64> {
        let mut out = vec![];
        for i in 0..w.kernel[0] {
            for j in 0..w.kernel[1] {
                for y in 0..w.output[0] {
                    for xx in 0..w.output[1] {
                        let iy = (y * w.stride[0] + i * w.dilation[0]) as i64 - w.padding[0] as i64;
                        let ix = (xx * w.stride[1] + j * w.dilation[1]) as i64 - w.padding[1] as i64;
                        let inside = (0..w.input[0] as i64).contains(&iy) && (0..w.input[1] as i64).contains(&ix);
                        out.push(if inside { x[(iy * w.input[1] as i64 + ix) as usize] } else { 0.0 });
                    }
                }
            }
        }
        out
    }

    #[test]
    fn blocks_match_the_definition_and_fold_is_the_adjoint() {
        let w = SlidingWindow {
            input: [5, 7],
            output: [4, 5],
            kernel: [2, 3],
            stride: [2, 1],
            padding: [1, 2],
            dilation: [1, 2],
        };
        let x: Vec<f64> = (0..35).map(|v| v as f64 + 1.0).collect();
        let want = naive(&x, &w);
        let l = w.positions();
        let planes = Planes { data: &x, base: 0, channel: 35, row: 7, col: 1 };
        // Every block of columns, including ones that start and end inside an output row.
        for cols in [0..l, 3..11, 7..8, 0..5] {
            let mut got = vec![f64::NAN; w.taps() * cols.len()];
            im2col_block(planes, &w, 0..1, cols.clone(), &mut got);
            for r in 0..w.taps() {
                assert_eq!(&got[r * cols.len()..(r + 1) * cols.len()], &want[r * l + cols.start..r * l + cols.end]);
            }
        }
        // <unfold(x), y> == <x, fold(y)> for a column matrix y.
        let y: Vec<f64> = (0..w.taps() * l).map(|v| ((v * 7) % 11) as f64 - 5.0).collect();
        let mut folded = vec![0.0; 35];
        col2im_block(&y, l, &w, 1, 0..l, &mut folded);
        let lhs: f64 = want.iter().zip(&y).map(|(a, b)| a * b).sum();
        let rhs: f64 = x.iter().zip(&folded).map(|(a, b)| a * b).sum();
        assert_eq!(lhs, rhs);
    }
}
