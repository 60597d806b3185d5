//! Elementwise functions of one tensor, out of place and in place.
//!
//! The per-element functions come from the op table (`ops/unary.rs`): its `float` and `int`
//! sections expand here into [`float_kernel`] and [`int_kernel`], which hand each op's
//! closure to the loops below (see the module docs of `crate::ops`).

use crate::Result;
use crate::backend::UnaryOp;
use crate::dtype::{Element, FloatElement, HalfElement};
use crate::host::iter::{GRAIN_CHEAP, GRAIN_COSTLY, Runs, fill_chunks, par_chunks, threads};
use crate::layout::Layout;
use crate::storage::{Buffer, CpuStorage, Storage};
use multiversion::multiversion;

/// A loop that applies a per-element function of one operand to a view: the out-of-place
/// and in-place maps below implement it. `grain` is the parallel chunk size the op asks for
/// (cheap or costly per element).
trait MapFn<T> {
    /// What running the loop gives.
    type Output;
    /// Runs the loop with `f`.
    fn run<F: Fn(T) -> T + Sync + Copy>(self, grain: usize, f: F) -> Self::Output;
}

/// Turns the unary table's `float` and `int` sections into [`float_kernel`] and
/// [`int_kernel`].
macro_rules! unary_kernels {
    ($(
        $(#[$meta:meta])*
        $V:ident $(( $($tp:ident: $tty:tt),* ))? $({ $($(#[$fmeta:meta])* $f:ident: $fty:tt),* })?
            => $method:ident,
            float $float:tt,
            int $int:tt,
            cuda $cuda:tt,
            tensor $tensor:tt,
            grad $grad:tt;
    )*) => {
        /// Runs `k` with the per-element function of `op` on the float type `T`.
        #[inline(always)]
        fn float_kernel<T: FloatElement, K: MapFn<T>>(op: UnaryOp, k: K) -> K::Output {
            match op {
                $( UnaryOp::$V $(( $($tp),* ))? $({ $($f),* })? => unary_kernels!(@float k, $float), )*
            }
        }

        /// Runs `k` with the per-element function of `op` on the integer type `T`: `None`
        /// for a float-only op, an error for parameters integers cannot take.
        #[allow(unused_variables)]
        #[inline(always)]
        fn int_kernel<T: Element, K: MapFn<T>>(op: UnaryOp, k: K) -> Result<Option<K::Output>> {
            match op {
                $( UnaryOp::$V $(( $($tp),* ))? $({ $($f),* })? => unary_kernels!(@int k, $int), )*
            }
        }
    };

    (@grain cheap) => { GRAIN_CHEAP };
    (@grain costly) => { GRAIN_COSTLY };

    (@float $k:ident, [$grain:ident using |$kk:ident, $g:ident| $body:expr]) => {{
        let $kk = $k;
        let $g = unary_kernels!(@grain $grain);
        $body
    }};
    (@float $k:ident, [$grain:ident $(let $l:ident $(: $lt:ty)? = $le:expr;)* |$x:ident| $body:expr]) => {{
        $(let $l $(: $lt)? = $le;)*
        $k.run(unary_kernels!(@grain $grain), move |$x: T| $body)
    }};

    (@int $k:ident, []) => {
        Ok(None)
    };
    (@int $k:ident, [using |$kk:ident, $g:ident| $body:expr]) => {{
        let $kk = $k;
        let $g = GRAIN_CHEAP;
        $body.map(Some)
    }};
    (@int $k:ident, [$(let $l:ident $(: $lt:ty)? = $le:expr;)* |$x:ident| $body:expr]) => {{
        $(let $l $(: $lt)? = $le;)*
        Ok(Some($k.run(GRAIN_CHEAP, move |$x: T| $body)))
    }};
}

crate::unary_table!(unary_kernels);

#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
pub(crate) fn map_contig<T: Copy, U: Copy, F: Fn(T) -> U>(src: &[T], dst: &mut [U], f: F) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = f(s);
    }
}

#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn map_in_place<T: Copy, F: Fn(T) -> T>(dst: &mut [T], f: F) {
    for d in dst.iter_mut() {
        *d = f(*d);
    }
}

// The stepped loops are multiversioned like the contiguous ones, so that an op compiles to
// the same instructions on every layout: `ceil` is `vroundps` there, which reads a
// subnormal as zero under the kernels' flush mode, but a call to `ceilf` in a baseline
// x86-64 loop, which does not.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn map_stepped<T: Copy, U: Copy, F: Fn(T) -> U>(src: &[T], step: usize, dst: &mut [U], f: F) {
    for (i, d) in dst.iter_mut().enumerate() {
        *d = f(src[i * step]);
    }
}

/// One value's result repeated over a run of a broadcast (stride 0) view; multiversioned for
/// the same reason as [`map_stepped`].
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn map_broadcast<T: Copy, U: Copy, F: Fn(T) -> U>(value: T, dst: &mut [U], f: F) {
    dst.fill(f(value));
}

#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn map_stepped_in_place<T: Copy, F: Fn(T) -> T>(dst: &mut [T], step: usize, len: usize, f: F) {
    for i in 0..len {
        let v = &mut dst[i * step];
        *v = f(*v);
    }
}

/// `f` applied to every element of the view `(src, layout)`, into a new contiguous buffer.
pub(crate) fn map<T: Element, U: Element>(
    op: &'static str,
    src: &[T],
    layout: &Layout,
    grain: usize,
    f: impl Fn(T) -> U + Sync + Copy,
) -> Result<Buffer<U>> {
    let n = layout.numel();
    let mut out = Buffer::<U>::uninit(op, n)?;
    if let Some(r) = layout.contiguous_range() {
        let src = &src[r];
        fill_chunks(&mut out, grain, |start, chunk| map_contig(&src[start..start + chunk.len()], chunk, f));
        return Ok(out);
    }
    let runs = Runs::new([layout]);
    if reads_like_a_transpose(&runs) {
        map_transposed(src, &runs, &mut out, grain, f);
        return Ok(out);
    }
    let s = runs.inner_stride(0);
    fill_chunks(&mut out, grain, |start, chunk| {
        runs.for_each(start, start + chunk.len(), |[o], len, pos| {
            let dst = &mut chunk[pos - start..pos - start + len];
            match s {
                1 => map_contig(&src[o..o + len], dst, f),
                0 => map_broadcast(src[o], dst, f),
                _ => map_stepped(&src[o..], s, dst, f),
            }
        });
    });
    Ok(out)
}

/// Side of the square tiles in which [`map_transposed`] copies: 16 `f32` values are one
/// cache line, so a tile reads 16 lines of the input and writes 16 of the output.
const TILE: usize = 16;

/// Whether a (coalesced) view reads like a transpose: its last dimension strided in the
/// input and the one before it contiguous there, both at least a [`TILE`] long. Walking the
/// output row by row would then read every element of a row from its own cache line.
fn reads_like_a_transpose(runs: &Runs<1>) -> bool {
    let r = runs.shape.len();
    r >= 2
        && runs.strides[0][r - 1] > 1
        && runs.strides[0][r - 2] == 1
        && runs.shape[r - 1] >= TILE
        && runs.shape[r - 2] >= TILE
}

/// [`map`] of a view that [`reads_like_a_transpose`], in [`TILE`] x [`TILE`] tiles: the input
/// is read down each tile's columns (contiguous there) and the output written across its
/// rows, so both touch a tile's worth of cache lines. Tasks are bands of whole tile rows.
fn map_transposed<T: Element, U: Element>(
    src: &[T],
    runs: &Runs<1>,
    out: &mut [U],
    grain: usize,
    f: impl Fn(T) -> U + Sync + Copy,
) {
    let r = runs.shape.len();
    let (cols, step) = (runs.shape[r - 1], runs.strides[0][r - 1]);
    // Where output row `q` (all dimensions but the last, flattened) starts in the input.
    let row_start = |q: usize| {
        let (mut off, mut rem) = (runs.offsets[0], q);
        for d in (0..r - 1).rev() {
            off += rem % runs.shape[d] * runs.strides[0][d];
            rem /= runs.shape[d];
        }
        off
    };
    let band = |first_row: usize, chunk: &mut [U]| {
        for (t, rows) in chunk.chunks_mut(TILE * cols).enumerate() {
            let q0 = first_row + t * TILE;
            let n = rows.len() / cols;
            let starts: [usize; TILE] = std::array::from_fn(|i| if i < n { row_start(q0 + i) } else { 0 });
            map_tile_row(src, &starts[..n], step, rows, f);
        }
    };
    let tile_rows = (out.len() / cols).div_ceil(TILE);
    let bands = if out.len() < grain { 1 } else { tile_rows.min(threads() * 4) };
    let band_len = tile_rows.div_ceil(bands) * TILE * cols;
    if bands <= 1 {
        band(0, out);
    } else {
        par_chunks(out, band_len, |i, chunk| band(i * band_len / cols, chunk));
    }
}

/// One row of tiles of [`map_transposed`]: output rows `rows` (each `rows.len() / starts.len()`
/// long) whose elements `c` are `f(src[starts[i] + c * step])`. Multiversioned like
/// [`map_stepped`], so that an op compiles to the same instructions as on other layouts.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn map_tile_row<T: Copy, U: Copy, F: Fn(T) -> U>(src: &[T], starts: &[usize], step: usize, rows: &mut [U], f: F) {
    let cols = rows.len() / starts.len().max(1);
    for c0 in (0..cols).step_by(TILE) {
        let c1 = (c0 + TILE).min(cols);
        for (i, &start) in starts.iter().enumerate() {
            for (c, o) in (c0..c1).zip(&mut rows[i * cols + c0..i * cols + c1]) {
                *o = f(src[start + c * step]);
            }
        }
    }
}

/// `f` applied in place to every element `layout` addresses. The layout must not address an
/// element twice (the tensor layer rejects in-place writes to expanded views).
pub(crate) fn map_inplace<T: Element>(dst: &mut [T], layout: &Layout, grain: usize, f: impl Fn(T) -> T + Sync + Copy) {
    if let Some(r) = layout.contiguous_range() {
        fill_chunks(&mut dst[r], grain, |_, chunk| map_in_place(chunk, f));
        return;
    }
    let runs = Runs::new([layout]);
    let s = runs.inner_stride(0);
    runs.for_each(0, layout.numel(), |[o], len, _| {
        if s == 1 {
            map_in_place(&mut dst[o..o + len], f);
        } else {
            map_stepped_in_place(&mut dst[o..], s, len, f);
        }
    });
}

/// The out-of-place loop of an op: its function applied to the view `(src, layout)`.
struct Map<'a, T> {
    name: &'static str,
    src: &'a [T],
    layout: &'a Layout,
}

impl<T: Element> MapFn<T> for Map<'_, T> {
    type Output = Result<Buffer<T>>;
    #[inline(always)]
    fn run<F: Fn(T) -> T + Sync + Copy>(self, grain: usize, f: F) -> Self::Output {
        map(self.name, self.src, self.layout, grain, f)
    }
}

/// The out-of-place loop of an op on 16-bit elements: the `f32` function applied to each
/// element loaded into `f32`, the result rounded once (no widened copy of the operand).
struct MapHalf<'a, H> {
    name: &'static str,
    src: &'a [H],
    layout: &'a Layout,
}

impl<H: HalfElement> MapFn<f32> for MapHalf<'_, H> {
    type Output = Result<Buffer<H>>;
    #[inline(always)]
    fn run<F: Fn(f32) -> f32 + Sync + Copy>(self, grain: usize, f: F) -> Self::Output {
        map(self.name, self.src, self.layout, grain, move |x: H| H::narrow(f(x.widen())))
    }
}

/// [`MapHalf`] in place.
struct MapHalfInPlace<'a, H> {
    dst: &'a mut [H],
    layout: &'a Layout,
}

impl<H: HalfElement> MapFn<f32> for MapHalfInPlace<'_, H> {
    type Output = ();
    #[inline(always)]
    fn run<F: Fn(f32) -> f32 + Sync + Copy>(self, grain: usize, f: F) {
        map_inplace(self.dst, self.layout, grain, move |x: H| H::narrow(f(x.widen())))
    }
}

/// The in-place loop of an op: its function applied to the elements `layout` addresses.
struct MapInPlace<'a, T> {
    dst: &'a mut [T],
    layout: &'a Layout,
}

impl<T: Element> MapFn<T> for MapInPlace<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run<F: Fn(T) -> T + Sync + Copy>(self, grain: usize, f: F) {
        map_inplace(self.dst, self.layout, grain, f)
    }
}

/// `op` applied to the view `(src, layout)`.
///
/// It returns the backend's `Storage` itself, so that the result is written where the
/// caller's caller wants it rather than copied there (the copy read words just written, and
/// stalled).
pub(crate) fn unary(op: UnaryOp, src: &CpuStorage, layout: &Layout) -> Result<Storage> {
    let name = op.name();
    let out: CpuStorage = match src {
        CpuStorage::F32(b) => float_kernel(op, Map { name, src: b, layout })?.into(),
        CpuStorage::F64(b) => float_kernel(op, Map { name, src: b, layout })?.into(),
        CpuStorage::I64(b) => match int_kernel(op, Map { name, src: b, layout })? {
            Some(out) => out?.into(),
            None => return Err(op.not_for_ints(src.dtype())),
        },
        CpuStorage::U8(b) => match int_kernel(op, Map { name, src: b, layout })? {
            Some(out) => out?.into(),
            None => return Err(op.not_for_ints(src.dtype())),
        },
        CpuStorage::F16(b) => float_kernel(op, MapHalf { name, src: b, layout })?.into(),
        CpuStorage::BF16(b) => float_kernel(op, MapHalf { name, src: b, layout })?.into(),
    };
    Ok(Storage::Cpu(out))
}

/// `op` applied in place to the elements of `dst` that `layout` addresses.
pub(crate) fn unary_inplace(op: UnaryOp, dst: &mut CpuStorage, layout: &Layout) -> Result<()> {
    let dtype = dst.dtype();
    match dst {
        CpuStorage::F32(b) => float_kernel(op, MapInPlace { dst: b, layout }),
        CpuStorage::F64(b) => float_kernel(op, MapInPlace { dst: b, layout }),
        CpuStorage::I64(b) => int_kernel(op, MapInPlace { dst: b, layout })?.ok_or_else(|| op.not_for_ints(dtype))?,
        CpuStorage::U8(b) => int_kernel(op, MapInPlace { dst: b, layout })?.ok_or_else(|| op.not_for_ints(dtype))?,
        CpuStorage::F16(b) => float_kernel(op, MapHalfInPlace { dst: b, layout }),
        CpuStorage::BF16(b) => float_kernel(op, MapHalfInPlace { dst: b, layout }),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::{DType, Tensor};

    /// `[B, R, C]` values of `x[b, c, r]` for a contiguous `[B, C, R]` tensor of `0..`.
    fn transposed_values(b: usize, c: usize, r: usize) -> Vec<i64> {
        let mut v = Vec::with_capacity(b * r * c);
        for bi in 0..b {
            for ri in 0..r {
                for ci in 0..c {
                    v.push(((bi * c + ci) * r + ri) as i64);
                }
            }
        }
        v
    }

    /// Views that read like a transpose go through the tiled copy, serial and (above the
    /// grain) in parallel bands, with tiles cut at the edges and rows of one tile that
    /// belong to different matrices of a batch: every element lands where the plain walk
    /// puts it, in copies, casts and unary ops alike.
    #[test]
    fn transposed_views_map_like_element_by_element_reads() {
        for (b, c, r) in [(1, 37, 50), (1, 300, 211), (3, 40, 33), (2, 17, 300)] {
            let x = Tensor::arange(0, (b * c * r) as i64).unwrap().reshape([b, c, r]).unwrap();
            let t = x.transpose(1, 2).unwrap();
            let want = transposed_values(b, c, r);
            assert_eq!(t.contiguous().to_vec::<i64>().unwrap(), want, "copy {b}x{c}x{r}");
            let as_f32 = t.to_dtype(DType::F32).to_vec::<f32>().unwrap();
            assert!(as_f32.iter().zip(&want).all(|(&a, &w)| a == w as f32), "cast {b}x{c}x{r}");
            let neg = t.to_dtype(DType::F64).neg().to_vec::<f64>().unwrap();
            assert!(neg.iter().zip(&want).all(|(&a, &w)| a == -(w as f64)), "neg {b}x{c}x{r}");
        }
        // An offset view whose rows are not the start of the storage.
        let x = Tensor::arange(0, 60 * 40).unwrap().reshape([60, 40]).unwrap();
        let v = x.narrow(0, 5, 50).unwrap().narrow(1, 3, 20).unwrap().t().unwrap(); // [20, 50]
        let want: Vec<i64> = (0..20).flat_map(|i| (0..50).map(move |j| ((j + 5) * 40 + i + 3) as i64)).collect();
        assert_eq!(v.contiguous().to_vec::<i64>().unwrap(), want);
    }
}
