//! Reductions (sum, prod, max, min, argmax, argmin) over any set of dimensions.
//!
//! The reduced dimensions are moved last. When the input then reads as contiguous rows,
//! each output element reduces one row with a multi-accumulator loop that vectorises
//! (floating-point addition is not associative, so the compiler needs the explicit lanes).
//! When the reduced dimensions are the leading ones of a contiguous input, rows are added
//! into the output as whole vectors ("column" reduction). Anything else is first copied
//! into the row form.

use super::unary::map;
use crate::backend::ReduceOp;
use crate::dtype::Element;
use crate::host::iter::{GRAIN_CHEAP, par_chunks, rows_per_task, threads};
use crate::layout::Layout;
use crate::storage::{Buffer, CpuStorage};
use crate::{Error, Result};
use multiversion::multiversion;

/// Lanes for the part of a row shorter than the wide accumulator (one AVX-512 register of f32).
const LANES: usize = 16;

/// A reduction as an associative combine with an identity.
pub(crate) trait Combine<T: Element>: Copy + Send + Sync {
    fn identity(self) -> T;
    fn combine(self, a: T, b: T) -> T;
}

#[derive(Clone, Copy)]
pub(crate) struct SumC;
#[derive(Clone, Copy)]
struct ProdC;
#[derive(Clone, Copy)]
pub(crate) struct MaxC;
#[derive(Clone, Copy)]
struct MinC;

impl<T: Element> Combine<T> for SumC {
    fn identity(self) -> T {
        T::ZERO
    }
    #[inline(always)]
    fn combine(self, a: T, b: T) -> T {
        a.wadd(b)
    }
}
impl<T: Element> Combine<T> for ProdC {
    fn identity(self) -> T {
        T::ONE
    }
    #[inline(always)]
    fn combine(self, a: T, b: T) -> T {
        a.wmul(b)
    }
}
impl<T: Element> Combine<T> for MaxC {
    fn identity(self) -> T {
        T::LOWEST
    }
    /// `b` is the incoming element: NaN in either operand wins as in `max_nan`, but the
    /// test of `b` does not depend on the accumulator, which leaves a two-step dependency
    /// chain (compare, blend) that vectorises without spilling mask registers.
    #[inline(always)]
    fn combine(self, a: T, b: T) -> T {
        if b > a || b.is_nan() { b } else { a }
    }
}
impl<T: Element> Combine<T> for MinC {
    fn identity(self) -> T {
        T::HIGHEST
    }
    /// As for [`MaxC`].
    #[inline(always)]
    fn combine(self, a: T, b: T) -> T {
        if b < a || b.is_nan() { b } else { a }
    }
}

/// Combines a row into one value.
pub(crate) fn reduce_row<T: Element, C: Combine<T>>(row: &[T], c: C) -> T {
    // 256 bytes of accumulators: four AVX-512 or eight AVX2 registers, enough independent
    // chains to hide the latency of each combine (a single register's chain halves the
    // throughput of a sum and quarters that of a NaN-propagating max).
    if std::mem::size_of::<T>() >= 8 { reduce_lanes::<T, C, 32>(row, c) } else { reduce_lanes::<T, C, 64>(row, c) }
}

#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn reduce_lanes<T: Element, C: Combine<T>, const L: usize>(row: &[T], c: C) -> T {
    let mut acc = [c.identity(); L];
    // Fixed-size chunks let the compiler keep `acc` in registers; with plain slices it
    // vectorised the lanes two at a time.
    let (wide, rest) = row.as_chunks::<L>();
    for ch in wide {
        for i in 0..L {
            acc[i] = c.combine(acc[i], ch[i]);
        }
    }
    let (narrow, tail) = rest.as_chunks::<LANES>();
    for ch in narrow {
        for i in 0..LANES {
            acc[i] = c.combine(acc[i], ch[i]);
        }
    }
    // Pairwise fold of the lanes keeps the error of long float sums low.
    let mut w = L;
    while w > 1 {
        w /= 2;
        for i in 0..w {
            acc[i] = c.combine(acc[i], acc[i + w]);
        }
    }
    tail.iter().fold(acc[0], |a, &v| c.combine(a, v))
}

#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn accumulate_into<T: Element, C: Combine<T>>(acc: &mut [T], row: &[T], c: C) {
    for (a, &v) in acc.iter_mut().zip(row) {
        *a = c.combine(*a, v);
    }
}

/// Rows at least twice this long are reduced as a fixed sequence of blocks of this many
/// elements whose results are combined in block order. The blocks of one row may go to
/// different threads, yet the result depends only on the data: not on the number of
/// threads, nor on which finishes first (floating-point combining is not associative, so
/// anything else would make sums differ from run to run).
const BLOCK: usize = GRAIN_CHEAP;

/// One row's result, by blocks when it is long (see [`BLOCK`]).
fn reduce_long_row<T: Element, C: Combine<T>>(row: &[T], c: C) -> T {
    if row.len() < 2 * BLOCK {
        return reduce_row(row, c);
    }
    row.chunks(BLOCK).fold(c.identity(), |acc, b| c.combine(acc, reduce_row(b, c)))
}

/// [`reduce_long_row`] with the blocks spread over the worker threads; the same result.
fn reduce_long_row_parallel<T: Element, C: Combine<T>>(row: &[T], c: C) -> Result<T> {
    let blocks = row.len().div_ceil(BLOCK);
    let mut partial = Buffer::<T>::uninit("reduce", blocks)?;
    let per_task = blocks.div_ceil(threads() * 4).max(1);
    par_chunks(&mut partial, per_task, |ci, out| {
        for (i, o) in out.iter_mut().enumerate() {
            let start = (ci * per_task + i) * BLOCK;
            *o = reduce_row(&row[start..(start + BLOCK).min(row.len())], c);
        }
    });
    Ok(partial.iter().fold(c.identity(), |acc, &v| c.combine(acc, v)))
}

/// Reduces each of `rows` contiguous rows of length `len` in `src` into `out`.
fn reduce_rows<T: Element, C: Combine<T>>(src: &[T], rows: usize, len: usize, out: &mut [T], c: C) -> Result<()> {
    let threads = threads();
    if rows < threads && len >= 2 * BLOCK {
        // Few long rows: split each row across threads.
        for (r, o) in out.iter_mut().enumerate() {
            *o = reduce_long_row_parallel(&src[r * len..(r + 1) * len], c)?;
        }
        return Ok(());
    }
    let per_row_grain = rows_per_task(rows, len, GRAIN_CHEAP);
    if rows >= per_row_grain * 2 && threads > 1 {
        par_chunks(out, per_row_grain, |ci, chunk| {
            for (i, o) in chunk.iter_mut().enumerate() {
                let r = ci * per_row_grain + i;
                *o = reduce_long_row(&src[r * len..(r + 1) * len], c);
            }
        });
    } else {
        for (r, o) in out.iter_mut().enumerate() {
            *o = reduce_long_row(&src[r * len..(r + 1) * len], c);
        }
    }
    Ok(())
}

/// The most partial results a column reduction is cut into ([`col_parts`]): enough to
/// share among 16 threads.
const MAX_COL_PARTS: usize = 16;

/// Into how many parts of consecutive rows [`reduce_cols`] cuts an `[outer, inner]` block:
/// one where the columns alone are a grain of work per thread or more, else as many parts
/// of at least a grain of elements as the rows allow, up to [`MAX_COL_PARTS`]. A bias
/// gradient `[1792, 1024] -> [1024]` has too few columns to share: summed row after row on
/// one thread it took 316 µs, in 16 parts on 2 threads 189 (PyTorch 248). Like the blocks of a long row
/// ([`BLOCK`]), the parts follow the shape alone, so results do not depend on the thread
/// count.
fn col_parts(outer: usize, inner: usize) -> usize {
    if inner >= GRAIN_CHEAP {
        return 1;
    }
    (outer / GRAIN_CHEAP.div_ceil(inner.max(1))).clamp(1, MAX_COL_PARTS)
}

/// Reduces the leading `outer` rows of a contiguous `[outer, inner]` block into `out`
/// (of length `inner`): by column chunks in parallel where the columns are many, else
/// each part of rows ([`col_parts`]) into a partial result, the parts in parallel, their
/// partials then combined in part order.
fn reduce_cols<T: Element, C: Combine<T>>(src: &[T], outer: usize, inner: usize, out: &mut [T], c: C) -> Result<()> {
    out.fill(c.identity());
    if inner == 0 {
        return Ok(());
    }
    let parts = col_parts(outer, inner);
    if parts > 1 {
        let mut partial = Buffer::<T>::uninit("reduce", parts * inner)?;
        par_chunks(&mut partial, inner, |p, acc| {
            acc.fill(c.identity());
            for r in p * outer / parts..(p + 1) * outer / parts {
                accumulate_into(acc, &src[r * inner..(r + 1) * inner], c);
            }
        });
        for acc in partial.chunks(inner) {
            accumulate_into(out, acc, c);
        }
        return Ok(());
    }
    let parallel = inner >= GRAIN_CHEAP && threads() > 1;
    if parallel {
        let chunk = inner.div_ceil(threads() * 2).max(1024);
        par_chunks(out, chunk, |ci, o| {
            let start = ci * chunk;
            for r in 0..outer {
                accumulate_into(o, &src[r * inner + start..r * inner + start + o.len()], c);
            }
        });
    } else {
        for r in 0..outer {
            accumulate_into(out, &src[r * inner..(r + 1) * inner], c);
        }
    }
    Ok(())
}

/// The layout with the reduced `dims` moved last, and the number of kept and reduced
/// elements.
pub(crate) fn reduced_last(l: &Layout, dims: &[usize]) -> (Layout, usize, usize) {
    let kept: Vec<usize> = (0..l.rank()).filter(|d| !dims.contains(d)).collect();
    let perm: Vec<usize> = kept.iter().chain(dims.iter()).copied().collect();
    let k = kept.iter().map(|&d| l.shape()[d]).product();
    let r = dims.iter().map(|&d| l.shape()[d]).product();
    (l.permuted(&perm), k, r)
}

/// Where the reduced `dims` (ascending) are a leading block `0..lead` and a trailing block
/// `..rank` with the kept dims between them, both blocks non-empty: `Some(lead)`.
fn leading_and_trailing(rank: usize, dims: &[usize]) -> Option<usize> {
    let lead = dims.iter().enumerate().take_while(|&(i, &d)| i == d).count();
    let trailing = &dims[lead..];
    let contiguous_tail = trailing.iter().enumerate().all(|(i, &d)| d == rank - trailing.len() + i);
    (lead > 0 && !trailing.is_empty() && contiguous_tail && lead + trailing.len() < rank).then_some(lead)
}

fn contiguous_copy<T: Element>(src: &[T], l: &Layout) -> Result<Buffer<T>> {
    map("reduce", src, l, GRAIN_CHEAP, |v| v)
}

fn reduce_typed<T: Element, C: Combine<T>>(src: &[T], l: &Layout, dims: &[usize], c: C) -> Result<Buffer<T>> {
    let (pl, kept, red) = reduced_last(l, dims);
    let mut out = Buffer::<T>::uninit("reduce", kept)?;
    if red == 0 {
        out.fill(c.identity());
        return Ok(out);
    }
    if let Some(r) = pl.contiguous_range() {
        reduce_rows(&src[r], kept, red, &mut out, c)?;
        return Ok(out);
    }
    let leading = dims.iter().enumerate().all(|(i, &d)| i == d);
    if leading && let Some(r) = l.contiguous_range() {
        reduce_cols(&src[r], red, kept, &mut out, c)?;
        return Ok(out);
    }
    if let (Some(r), Some(lead)) = (l.contiguous_range(), leading_and_trailing(l.rank(), dims)) {
        // A conv bias gradient's `[B, C, H, W] -> [C]`: each `[H, W]` plane reduced as a row,
        // then the `[B, C]` results over the batch, with no copy of the input into
        // `[C, B, H, W]` order.
        let outer: usize = l.shape().dims()[..lead].iter().product();
        let mut rows = Buffer::<T>::uninit("reduce", outer * kept)?;
        reduce_rows(&src[r], outer * kept, red / outer, &mut rows, c)?;
        reduce_cols(&rows, outer, kept, &mut out, c)?;
        return Ok(out);
    }
    let copy = contiguous_copy(src, &pl)?;
    reduce_rows(&copy, kept, red, &mut out, c)?;
    Ok(out)
}

/// Index of the first extreme element of each row (`max` picks the maximum). NaN counts
/// as the extreme, like PyTorch.
fn arg_rows<T: Element>(src: &[T], rows: usize, len: usize, max: bool) -> Result<Buffer<i64>> {
    let mut out = Buffer::<i64>::uninit("argmax", rows)?;
    let per_row_grain = rows_per_task(rows, len, GRAIN_CHEAP);
    let one = |r: usize| -> i64 {
        let row = &src[r * len..(r + 1) * len];
        let mut best = 0usize;
        let mut bv = row[0];
        for (i, &v) in row.iter().enumerate().skip(1) {
            if bv.is_nan() {
                break;
            }
            let better = v.is_nan() || if max { v > bv } else { v < bv };
            if better {
                best = i;
                bv = v;
            }
        }
        best as i64
    };
    let fill = |ci: usize, chunk: &mut [i64]| {
        for (i, o) in chunk.iter_mut().enumerate() {
            *o = one(ci * per_row_grain + i);
        }
    };
    // Small inputs (a batch of class scores) are not worth a trip to the worker pool.
    if rows >= per_row_grain * 2 && threads() > 1 {
        par_chunks(&mut out, per_row_grain, fill);
    } else {
        fill(0, &mut out);
    }
    Ok(out)
}

fn arg_typed<T: Element>(src: &[T], l: &Layout, dims: &[usize], max: bool) -> Result<Buffer<i64>> {
    let name = if max { "argmax" } else { "argmin" };
    let (pl, kept, red) = reduced_last(l, dims);
    if red == 0 {
        return Err(Error::shape(name, format!("cannot take {name} over an empty dimension of shape {}", l.shape())));
    }
    if let Some(r) = pl.contiguous_range() {
        return arg_rows(&src[r], kept, red, max);
    }
    let copy = contiguous_copy(src, &pl)?;
    arg_rows(&copy, kept, red, max)
}

/// Turns the reduction table's `cpu` sections into [`reduce`]: a `value` row names its
/// [`Combine`], an `arg` row the extreme it looks for.
macro_rules! reduce_kernels {
    ($(
        $(#[$meta:meta])*
        $V:ident => $method:ident, $kind:ident, cpu [$cpu:ident], cuda $cuda:tt;
    )*) => {
        /// `op` over `dims` of the view `(src, l)`; see [`crate::backend::Backend::reduce`].
        pub(crate) fn reduce(op: ReduceOp, src: &CpuStorage, l: &Layout, dims: &[usize]) -> Result<CpuStorage> {
            fn go<T: Element>(op: ReduceOp, s: &[T], l: &Layout, dims: &[usize]) -> Result<CpuStorage> {
                Ok(match op {
                    $( ReduceOp::$V => reduce_kernels!(@$kind $cpu, s, l, dims), )*
                })
            }
            crate::cpu_dispatch!(src, s => go(op, s, l, dims))
        }
    };

    (@value $c:ident, $s:ident, $l:ident, $dims:ident) => { T::into_storage(reduce_typed($s, $l, $dims, $c)?) };
    (@arg max, $s:ident, $l:ident, $dims:ident) => { arg_typed($s, $l, $dims, true)?.into() };
    (@arg min, $s:ident, $l:ident, $dims:ident) => { arg_typed($s, $l, $dims, false)?.into() };
}

crate::reduce_table!(reduce_kernels);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shape::{Shape, reduced_shape};

    fn naive_sum(src: &[f64], shape: &[usize], dims: &[usize]) -> Vec<f64> {
        naive_fold(src, shape, dims, 0.0, |a, v| a + v)
    }

    /// Each output element folded from its inputs in memory order.
    fn naive_fold(src: &[f64], shape: &[usize], dims: &[usize], init: f64, f: impl Fn(f64, f64) -> f64) -> Vec<f64> {
        let l = Layout::contiguous(Shape::from(shape));
        let out_shape = reduced_shape(l.shape(), dims, true);
        let mut out = vec![init; out_shape.numel()];
        let ostr = out_shape.contiguous_strides();
        let mut idx = vec![0usize; shape.len()];
        for &v in src {
            let o: usize = idx.iter().enumerate().map(|(d, &i)| if dims.contains(&d) { 0 } else { i * ostr[d] }).sum();
            out[o] = f(out[o], v);
            for d in (0..shape.len()).rev() {
                idx[d] += 1;
                if idx[d] < shape[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        out
    }

    #[test]
    fn every_dim_subset_matches_naive() {
        let shape = [3usize, 4, 5];
        let src: Vec<f64> = (0..60).map(|i| (i as f64 * 0.37).sin()).collect();
        let b = Buffer::from_slice("t", &src).unwrap();
        let l = Layout::contiguous(Shape::from(shape));
        for mask in 1..8u32 {
            let dims: Vec<usize> = (0..3).filter(|d| mask & (1 << d) != 0).collect();
            let got = reduce_typed(&b, &l, &dims, SumC).unwrap();
            let want = naive_sum(&src, &shape, &dims);
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() < 1e-12, "dims {dims:?}: {g} vs {w}");
            }
        }
    }

    #[test]
    fn rows_of_every_length_match_naive() {
        // Lengths around the wide (32/64) and narrow (16) accumulator stages and their tails.
        for len in (0usize..300).chain([1023, 1024, 1025, 4099]) {
            let row32: Vec<f32> = (0..len).map(|i| ((i * 7919) % 1013) as f32 * 0.01 - 5.0).collect();
            let row64: Vec<f64> = row32.iter().map(|&v| v as f64).collect();
            let want: f64 = row64.iter().sum();
            assert!((reduce_row(&row64, SumC) - want).abs() < 1e-9, "f64 sum, len {len}");
            assert!((reduce_row(&row32, SumC) as f64 - want).abs() < 1e-3 * (1.0 + len as f64).sqrt(), "len {len}");
            let max = row32.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let min = row32.iter().copied().fold(f32::INFINITY, f32::min);
            assert_eq!(reduce_row(&row32, MaxC), max, "max, len {len}");
            assert_eq!(reduce_row(&row32, MinC), min, "min, len {len}");
            let ints: Vec<i64> = (0..len as i64).map(|i| i * 3 - 100).collect();
            assert_eq!(reduce_row(&ints, SumC), ints.iter().sum::<i64>(), "i64 sum, len {len}");
            // A NaN anywhere, in a wide chunk, a narrow chunk or the tail, wins a max.
            for at in [0, len / 2, len.saturating_sub(1)] {
                if len == 0 {
                    continue;
                }
                let mut r = row32.clone();
                r[at] = f32::NAN;
                assert!(reduce_row(&r, MaxC).is_nan(), "NaN at {at} of {len}");
                assert!(reduce_row(&r, MinC).is_nan(), "NaN at {at} of {len}");
            }
        }
    }

    /// Test values of `shape` (`f32`, and the same as `f64`) and their `f32` sum over `dims`,
    /// checked to be bitwise the same on 1, 2 and 5 threads.
    fn sum_on_any_threads(shape: &[usize], dims: &[usize]) -> (Vec<f32>, Vec<f64>, Vec<f32>) {
        let n: usize = shape.iter().product();
        let src: Vec<f32> = (0..n).map(|i| ((i * 7919) % 1013) as f32 * 0.01 - 5.0).collect();
        let src64: Vec<f64> = src.iter().map(|&v| v as f64).collect();
        let b = Buffer::from_slice("t", &src).unwrap();
        let l = Layout::contiguous(Shape::from(shape));
        let sum = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            pool.install(|| reduce_typed(&b, &l, dims, SumC).unwrap().to_vec())
        };
        let one = sum(1);
        assert_eq!(sum(2), one, "{shape:?}");
        assert_eq!(sum(5), one, "{shape:?}");
        (src, src64, one)
    }

    #[test]
    fn tall_column_reductions_match_naive_bitwise_on_any_threads() {
        // Blocks of few columns and many rows, cut into parts of rows; the leading dims
        // reduced, one or two of them.
        for (shape, dims) in [
            (vec![1792usize, 100], vec![0usize]),
            (vec![2000, 33], vec![0]),
            (vec![80, 50, 20], vec![0, 1]),
            (vec![70_000, 1], vec![0]),
        ] {
            let (outer, inner): (usize, usize) =
                (dims.iter().map(|&d| shape[d]).product(), shape[dims.len()..].iter().product());
            assert!(col_parts(outer, inner) > 1, "{shape:?}");
            let (src, src64, one) = sum_on_any_threads(&shape, &dims);
            let (n, l) = (src.len(), Layout::contiguous(Shape::from(shape.clone())));
            for (g, w) in one.iter().zip(naive_sum(&src64, &shape, &dims)) {
                assert!((*g as f64 - w).abs() < 1e-3 * (outer as f64).sqrt(), "{shape:?}: {g} vs {w}");
            }
            // Max and min combine the parts like the rows; a NaN in any part wins.
            let mut with_nan = src.clone();
            with_nan[n - inner] = f32::NAN;
            let bn = Buffer::from_slice("t", &with_nan).unwrap();
            let max = reduce_typed(&bn, &l, &dims, MaxC).unwrap();
            assert!(max[0].is_nan(), "{shape:?}");
            let want_max = (0..outer).map(|r| src[r * inner + inner - 1]).fold(f32::NEG_INFINITY, f32::max);
            if inner > 1 {
                assert_eq!(max[inner - 1], want_max, "{shape:?}");
            }
        }
        // Nothing kept: an empty result, however many rows.
        let empty = Buffer::<f32>::from_slice("t", &[]).unwrap();
        let l0 = Layout::contiguous(Shape::from([100_000usize, 0]));
        assert!(reduce_typed(&empty, &l0, &[0], SumC).unwrap().is_empty());
        // Wide blocks keep the column split (no partial results); short ones run as one part.
        assert_eq!(col_parts(64, GRAIN_CHEAP), 1);
        assert_eq!(col_parts(16, 1024), 1);
        assert_eq!(col_parts(1 << 20, 1), MAX_COL_PARTS);
    }

    #[test]
    fn leading_and_trailing_dims_reduce_plane_by_plane_like_naive() {
        // A conv bias gradient's `[B, C, H, W] -> [C]` and its relatives: each trailing block
        // reduced as rows, then the leading dims; the same on any number of threads.
        for (shape, dims) in [
            (vec![8usize, 16, 20, 20], vec![0usize, 2, 3]),
            (vec![3, 5, 7], vec![0, 2]),
            (vec![2, 3, 4, 5, 6], vec![0, 1, 4]),
            (vec![300, 2, 200], vec![0, 2]),
        ] {
            assert!(leading_and_trailing(shape.len(), &dims).is_some(), "{shape:?} {dims:?}");
            let (src, src64, one) = sum_on_any_threads(&shape, &dims);
            let (b, l) = (Buffer::from_slice("t", &src).unwrap(), Layout::contiguous(Shape::from(shape.clone())));
            let red: usize = dims.iter().map(|&d| shape[d]).product();
            for (g, w) in one.iter().zip(naive_sum(&src64, &shape, &dims)) {
                assert!((*g as f64 - w).abs() < 1e-3 * (red as f64).sqrt(), "{shape:?}: {g} vs {w}");
            }
            let max = reduce_typed(&b, &l, &dims, MaxC).unwrap();
            let want = naive_fold(&src64, &shape, &dims, f64::NEG_INFINITY, f64::max);
            assert_eq!(max.iter().map(|&v| v as f64).collect::<Vec<_>>(), want, "{shape:?}");
        }
        // Other patterns take the general path.
        assert_eq!(leading_and_trailing(4, &[0, 1]), None);
        assert_eq!(leading_and_trailing(4, &[2, 3]), None);
        assert_eq!(leading_and_trailing(4, &[0, 2]), None);
        assert_eq!(leading_and_trailing(4, &[1, 3]), None);
        assert_eq!(leading_and_trailing(3, &[0, 2]), Some(1));
    }

    #[test]
    fn argmax_prefers_first_and_nan() {
        let b = Buffer::from_slice("t", &[1.0f32, 3.0, 3.0, f32::NAN, 0.0, 5.0]).unwrap();
        let l = Layout::contiguous(Shape::from([2, 3]));
        assert_eq!(&arg_typed(&b, &l, &[1], true).unwrap()[..], &[1, 0]);
        assert_eq!(&arg_typed(&b, &l, &[1], false).unwrap()[..], &[0, 0]);
    }
}
