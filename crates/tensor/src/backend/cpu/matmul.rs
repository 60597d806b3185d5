//! Matrix products: `f32` and `f64` through the `gemm` crate, bf16 and f16 through the
//! low-precision kernels of `matmul_lowp`, all split into blocks over the threads alike.
//!
//! `gemm` reads arbitrary row and column strides, so transposed operands need no copy; a
//! deep `b` stored by columns is still copied into row-major order first where the
//! register transpose runs, which is faster than `gemm`'s packing of it (`copies_b`).
//! With the workspace's `x86-v4` feature `gemm` dispatches to AVX-512 kernels at run time
//! on machines that have them and to AVX2/FMA elsewhere.

use super::block::{BlockProduct, Mat, gemm_block};
use super::matmul_lowp::Lowp;
use super::transpose;
use crate::dtype::Element;
use crate::host::iter::{par_for, par_for_heavy, threads};
use crate::layout::Layout;
use crate::storage::{Buffer, CpuStorage};
use crate::{Error, Result};
use half::{bf16, f16};

/// Products with fewer multiply-adds than this run batches in parallel instead of
/// parallelising inside each product.
const SMALL_PRODUCT: usize = 64 * 64 * 64;

/// Products with fewer multiply-adds than this (a few microseconds of work) run on one
/// thread: splitting them costs more than it saves.
const SERIAL_PRODUCT: usize = 48 * 48 * 48;

/// Rows and columns of a split product start at multiples of this, so that each block
/// fills whole SIMD registers.
const SPLIT_ALIGN: usize = 16;

struct SendPtr<T>(*mut T);
// Not derived: a derived `Copy` would require `T: Copy`, and only the pointer is copied.
impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SendPtr<T> {}
// SAFETY: each batch writes a disjoint block of the output.
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}

/// Blocks computed by `gemm` in the operands' own dtype.
struct Gemm;

/// Whether `gemm` is faster computing a block as its transpose `b^T a^T` into a scratch
/// block that is then transposed into place: where `a` is a transposed view (its rows
/// adjacent, so `gemm` packs it) and `b` is read in place, in two cases of a Linear weight
/// gradient `g^T @ x`:
///
/// - `a` at least twice as tall as `b` is wide, `b` at least 128 wide (more outputs than
///   inputs): `gemm` then packs the smaller operand (`[768, 2048] @ [2048, 256]`: 129
///   against 144 GFLOP per CPU-second, `[1024, 2048] @ [2048, 256]`: 123 against 137, the
///   transpose included).
/// - `b` narrower than [`NARROW_OUTPUT`] (few inputs: an LSTM's input projection, a
///   first layer on a handful of features): the direct product packs all of the tall `a`
///   for a few output columns, the transposed one reads it in place (2 threads,
///   `[1024, 1792] @ [1792, 28]`: 0.91-0.95 against 0.68-0.74 ms; `[1024, 8192] @
///   [8192, 16]`: 3.7 against 2.2-2.4 ms; `[128, 4096] @ [4096, 10]`: 117-131 against
///   45-47 µs). From 32 columns on the two are within noise, and at 48 the direct product
///   is faster.
///
/// Shallow blocks are left alone: the transpose would cost more than it saves.
fn transposed_is_faster<T>(m: usize, n: usize, k: usize, a: &Mat<T>, b: &Mat<T>) -> bool {
    // Middle widths, `NARROW_OUTPUT..128`, are computed directly.
    a.cs != 1 && b.cs == 1 && m >= 2 * n && !(NARROW_OUTPUT..128).contains(&n) && k >= MIN_DEPTH_PART
}

/// Products whose output is narrower than this many columns are computed transposed where
/// `a` is a transposed view ([`transposed_is_faster`]).
const NARROW_OUTPUT: usize = 32;

/// Side of the square blocks [`Gemm::product`] transposes a scratch block in, so that both
/// the rows read and the rows written stay in the L1 cache.
const TRANSPOSE_BLOCK: usize = 32;

impl<T: Element> BlockProduct<T> for Gemm {
    unsafe fn product(&self, m: usize, n: usize, k: usize, dst: *mut T, dst_rs: usize, a: &Mat<T>, b: &Mat<T>) {
        if transposed_is_faster(m, n, k, a, b) {
            let mut scratch = vec![T::ZERO; m * n];
            let (bt, at) = (Mat { ptr: b.ptr, rs: b.cs, cs: b.rs }, Mat { ptr: a.ptr, rs: a.cs, cs: a.rs });
            // SAFETY: `scratch` is `n x m` row-major; `b^T` (`n x k`) and `a^T` (`k x m`)
            // address exactly the elements the caller vouches for as `b` and `a`.
            unsafe { gemm_block((n, m, k), (scratch.as_mut_ptr(), m), &bt, &at, false, T::ONE) };
            for r0 in (0..m).step_by(TRANSPOSE_BLOCK) {
                for c0 in (0..n).step_by(TRANSPOSE_BLOCK) {
                    for r in r0..(r0 + TRANSPOSE_BLOCK).min(m) {
                        for c in c0..(c0 + TRANSPOSE_BLOCK).min(n) {
                            // SAFETY: `dst` is `m x n` with rows `dst_rs` apart (the caller's
                            // contract), and `r < m`, `c < n`.
                            unsafe { *dst.add(r * dst_rs + c) = scratch[c * m + r] };
                        }
                    }
                }
            }
            return;
        }
        // SAFETY: guaranteed by the caller.
        unsafe { gemm_block((m, n, k), (dst, dst_rs), a, b, false, T::ONE) }
    }

    fn splits_depth(&self) -> bool {
        true
    }

    fn cuts_for_gemm(&self) -> bool {
        true
    }
}

/// A large product's larger output dimension is cut into at most this many blocks.
const SPLIT_PIECES: usize = 16;

/// Products are cut into at least this many tiles where both dimensions allow
/// ([`Tiles`]): with 2 threads each claims about four, so a helper that joins late or a
/// vCPU that runs slow for a moment leaves the other thread a tile or so to finish, not
/// half the product.
const MIN_TILES: usize = 8;

/// Tiles are about this many rows or columns wide at the least: narrower ones would repack
/// the shared operand more than their work pays for, and below 64 columns `gemm`'s widest
/// `f32` kernel (64 rows of its transposed product on AVX-512) runs part-empty.
const MIN_SPLIT: usize = 64;

/// Products with at least this many multiply-adds (about 70 µs on one thread) are heavy
/// loops ([`par_for_heavy`]): their tiles are always shared with the helper threads.
const HEAVY_PRODUCT: usize = 1 << 22;

/// The fewest inner-dimension steps of one part of a product split along its depth
/// ([`depth_parts`]): `gemm` packs its operands in blocks of a few hundred steps, so
/// shallower parts would repack more than they share.
const MIN_DEPTH_PART: usize = 256;

/// Into how many parts along `k` a product of `tiles` output tiles is cut: enough for
/// [`MIN_TILES`] tasks in all where the output has fewer tiles (a weight gradient
/// `[64, tokens] @ [tokens, 64]` is one tile, which would run on one thread whatever the
/// thread count), each part at least [`MIN_DEPTH_PART`] deep; 1 where the output alone
/// gives enough tiles. Like the tiles, the parts follow the shape alone.
fn depth_parts(tiles: usize, k: usize) -> usize {
    if tiles >= MIN_TILES {
        return 1;
    }
    MIN_TILES.div_ceil(tiles).min(k / MIN_DEPTH_PART).max(1)
}

/// How a product's `m x n` output is cut into tiles.
///
/// The larger output dimension is split first, columns on a tie, into up to
/// [`SPLIT_PIECES`] blocks: each row block packs all of `b`, each column block only its own
/// columns (measured on 2048x2048: 0.92 -> 0.96 of PyTorch's speed with columns). Where
/// that leaves fewer than [`MIN_TILES`] blocks (a 256x256 product has four column blocks),
/// the other dimension is split too.
///
/// The cut depends on the shape alone, never on the thread count: `gemm` may round a
/// narrow block differently from a wide one (its kernels and inner-dimension blocking
/// follow the block's shape), so blocks that followed the thread count made results differ
/// between thread counts. With the tiles fixed, every thread count computes the same tiles
/// and training is bitwise reproducible on any number of threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tiles {
    m: usize,
    n: usize,
    /// Blocks along the rows (`m`) and along the columns (`n`).
    row_blocks: usize,
    col_blocks: usize,
    /// Whether consecutive tile indices walk down a column block (columns split first) or
    /// along a row block: tiles that share the operand the first split does not cut are
    /// claimed one after another, mostly by the same thread.
    columns_first: bool,
}

impl Tiles {
    fn new(m: usize, n: usize) -> Tiles {
        let columns_first = n >= m;
        let (major, minor) = if columns_first { (n, m) } else { (m, n) };
        let major_blocks = split_count(major, SPLIT_PIECES);
        let minor_blocks = split_count(minor, MIN_TILES.div_ceil(major_blocks));
        let (row_blocks, col_blocks) =
            if columns_first { (minor_blocks, major_blocks) } else { (major_blocks, minor_blocks) };
        Tiles { m, n, row_blocks, col_blocks, columns_first }
    }

    fn count(&self) -> usize {
        self.row_blocks * self.col_blocks
    }

    /// Tile `t`'s rows and columns.
    fn tile(&self, t: usize) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
        let (r, c) = if self.columns_first {
            (t % self.row_blocks, t / self.row_blocks)
        } else {
            (t / self.col_blocks, t % self.col_blocks)
        };
        let span = |dim, blocks, p| block_start(dim, blocks, p)..block_start(dim, blocks, p + 1);
        (span(self.m, self.row_blocks, r), span(self.n, self.col_blocks, c))
    }
}

/// How many blocks, at most `most`, a dimension of extent `dim` is cut into: blocks of at
/// least [`MIN_SPLIT`].
fn split_count(dim: usize, most: usize) -> usize {
    (dim / MIN_SPLIT).clamp(1, most.max(1))
}

/// Where block `p` of `count` starts (`p == count` gives `dim`): near-equal blocks whose
/// starts are multiples of [`SPLIT_ALIGN`].
fn block_start(dim: usize, count: usize, p: usize) -> usize {
    if p >= count { dim } else { (p * dim / count) / SPLIT_ALIGN * SPLIT_ALIGN }
}

/// How many of ember's output columns `gemm` packs `b` for at a time (its row block of the
/// transposed product it computes, `mc`: eight 64-row kernels for `f32` on AVX-512): a
/// tile wider than this reads its rows of `a` once per such block.
const GEMM_PACKED_COLUMNS: usize = 512;

/// The most partial-output elements a product split along its depth may allocate
/// (16 MiB of `f32`): past that, writing and summing the parts costs more than the repacking
/// it saves.
const MAX_PARTIAL: usize = 1 << 22;

/// A product's cut into tasks: output [`Tiles`], each computed in `parts` slices of the
/// inner dimension (summed afterwards, [`depth_split`]) where `parts > 1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Plan {
    tiles: Tiles,
    parts: usize,
}

impl Plan {
    /// The cut for `gemm` blocks: of all grids of at most [`SPLIT_PIECES`] blocks each way
    /// (none narrower than [`MIN_SPLIT`]) and depth splits into parts of at least
    /// [`MIN_DEPTH_PART`] steps, the one with the least memory traffic among those giving
    /// [`MIN_TILES`] tasks (or as many as the shape allows).
    ///
    /// The traffic counted, in elements: every row block packs its columns of `b` (read and
    /// written: 2 per element); every column block reads its rows of `a` in place once per
    /// [`GEMM_PACKED_COLUMNS`] columns where `a`'s columns are adjacent (`a_in_place`: `gemm`
    /// streams it unpacked), else packs them (2 per element); every part after the first
    /// writes, zeroes and sums a partial output (4 per element). Narrow tall tiles repack
    /// `b` for few rows (a forward `[2048, 256] @ [256, 768]` in 16 row blocks of 128 ran at
    /// 150 against 190 GFLOP per CPU-second in 4x2 tiles) and a weight gradient's row tiles
    /// each pack all of the activations (`[768, 16384] @ [16384, 256]` in 12 row tiles: 128
    /// against 160 in three depth parts), so both are avoided.
    ///
    /// Depth splits only where `splits_depth` (the kernel sums in `T`). Like [`Tiles::new`]
    /// the plan follows the shape (and whether `a` is read in place) alone, never the thread
    /// count, so results are bitwise the same on any number of threads.
    fn for_gemm(m: usize, n: usize, k: usize, a_in_place: bool, splits_depth: bool) -> Plan {
        let (m64, n64, k64) = (m as f64, n as f64, k as f64);
        let max_parts = if splits_depth { (k / MIN_DEPTH_PART).clamp(1, MIN_TILES) } else { 1 };
        let mut best: Option<(usize, f64, Plan)> = None;
        for parts in 1..=max_parts {
            if (parts - 1).saturating_mul(m).saturating_mul(n) > MAX_PARTIAL {
                break;
            }
            for row_blocks in 1..=split_count(m, SPLIT_PIECES) {
                for col_blocks in 1..=split_count(n, SPLIT_PIECES) {
                    let tasks = (row_blocks * col_blocks * parts).min(MIN_TILES);
                    let width = n.div_ceil(col_blocks);
                    let a_reads = if a_in_place { width.div_ceil(GEMM_PACKED_COLUMNS) as f64 } else { 2.0 };
                    let traffic = 2.0 * row_blocks as f64 * n64 * k64
                        + col_blocks as f64 * a_reads * m64 * k64
                        + 4.0 * (parts - 1) as f64 * m64 * n64;
                    let better = match best {
                        None => true,
                        Some((t, c, _)) => tasks > t || (tasks == t && traffic < c),
                    };
                    if better {
                        let tiles = Tiles { m, n, row_blocks, col_blocks, columns_first: n >= m };
                        best = Some((tasks, traffic, Plan { tiles, parts }));
                    }
                }
            }
        }
        best.map_or(Plan { tiles: Tiles::new(m, n), parts: 1 }, |(_, _, plan)| plan)
    }

    /// The fixed cut by the shape ([`Tiles::new`], then [`depth_parts`] where the kernel
    /// sums in `T`), for kernels that do not block as `gemm` does.
    fn by_shape(m: usize, n: usize, k: usize, splits_depth: bool) -> Plan {
        let tiles = Tiles::new(m, n);
        Plan { tiles, parts: if splits_depth { depth_parts(tiles.count(), k) } else { 1 } }
    }

    fn tasks(&self) -> usize {
        self.tiles.count() * self.parts
    }
}

/// Whether `b` is first copied into row-major order: where it is stored by columns (a
/// Linear layer's forward `x @ W^T` reads `W^T`) with 4-byte elements and the register
/// transpose runs ([`transpose::is_fast`]). `gemm` packs such an operand element by
/// element, slowly for deep products: on 2 threads of an AMD EPYC, `[512, 1024] @
/// [1024, 256]^T` took 1.9 ms against 1.2 with the copy, `[2048, 1024] @ [1024, 256]^T`
/// 6.3 against 5.0, `[32, 1024] @ [1024, 1024]^T` 1.8 against 0.95, `[2048, 256] @
/// [256, 768]^T` 3.9-4.3 against 3.7. The copy pays from [`COPY_ALWAYS_DEPTH`] steps
/// deep whatever the rows, and from [`COPY_MIN_DEPTH`] where at least [`COPY_MIN_ROWS`]
/// rows reuse it (`[64, 256] @ [256, 1024]^T`: 0.28 ms direct, 0.46 with the copy;
/// `[256, 128] @ [128, 512]^T`: 0.17 against 0.22). A transposed `a` (a weight gradient's
/// `g^T`) is left to [`transposed_is_faster`]: copying it, often several MiB, gained
/// nothing on some shapes and lost on others. Like the cut into tiles, the choice follows
/// the shape and strides alone, so results do not depend on the thread count.
fn copies_b<T>(m: usize, n: usize, k: usize, b: &Mat<T>) -> bool {
    std::mem::size_of::<T>() == 4
        && b.rs == 1
        && b.cs != 1
        && n > 1
        && (k >= COPY_ALWAYS_DEPTH || (k >= COPY_MIN_DEPTH && m >= COPY_MIN_ROWS))
        && transpose::is_fast()
}

/// See [`copies_b`].
const COPY_ALWAYS_DEPTH: usize = 512;
/// See [`copies_b`].
const COPY_MIN_DEPTH: usize = 256;
/// See [`copies_b`].
const COPY_MIN_ROWS: usize = 128;

/// `dst[m, n] = a[m, k] @ b[k, n]` (`dst` contiguous) on up to `threads` threads.
///
/// Large products are cut by a [`Plan`] into tiles (and depth parts, [`depth_split`]) run
/// by [`par_for`] (or [`par_for_heavy`] from [`HEAVY_PRODUCT`] multiply-adds), each index
/// one task claimed by whichever thread comes next, never parallelised by `gemm` itself: `gemm`'s `rayon` entry puts the caller
/// to sleep and pays two thread wake-ups (tens of microseconds on a virtual machine, as long
/// as a whole 256x256 product), and its tasks would run on `rayon`'s threads without the
/// kernels' float mode (see `float_mode`), which only tasks that ember starts can set. The
/// split was faster on two threads at every size measured, and on 16 (a Xeon: 1.8 against
/// 2.6-2.9 ms for 1024x1024, 14 against 20-26 ms for 2048x2048); on 4 the two were within
/// noise. One thread computes the same tiles one after another.
///
/// `block` computes each tile: `gemm` for `f32` and `f64`, the low-precision kernels
/// (`matmul_lowp`) for bf16 and f16, which are split the same way.
///
/// # Safety
/// As for [`BlockProduct::product`] with `dst_rs = n`.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemm_parallel<T: Element, P: BlockProduct<T>>(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut T,
    a: &Mat<T>,
    b: &Mat<T>,
    threads: usize,
    block: &P,
) {
    let work = m.saturating_mul(n).saturating_mul(k);
    if work < SERIAL_PRODUCT {
        // SAFETY: guaranteed by the caller.
        return unsafe { block.product(m, n, k, dst, n, a, b) };
    }
    if block.cuts_for_gemm() && copies_b(m, n, k, b) {
        // Without memory for the copy the product reads `b` where it is.
        if let Ok(mut copy) = Buffer::<T>::uninit("matmul", k * n) {
            // SAFETY: `b` addresses a `k x n` matrix (the caller's contract) and `copy` holds
            // `k * n` elements of a 4-byte type (`copies_b`).
            unsafe { transpose::to_row_major(b, k, n, copy.as_mut_ptr(), threads) };
            let b = Mat { ptr: copy.as_ptr(), rs: n as isize, cs: 1 };
            // SAFETY: the copy is a row-major `k x n` matrix that lives until the end.
            return unsafe { gemm_parallel(m, n, k, dst, a, &b, threads, block) };
        }
    }
    let plan = if block.cuts_for_gemm() {
        Plan::for_gemm(m, n, k, a.cs == 1, block.splits_depth())
    } else {
        Plan::by_shape(m, n, k, block.splits_depth())
    };
    if plan.tasks() < 2 {
        // SAFETY: guaranteed by the caller.
        return unsafe { block.product(m, n, k, dst, n, a, b) };
    }
    let (tiles, parts) = (plan.tiles, plan.parts);
    if parts > 1 {
        // SAFETY: guaranteed by the caller.
        return unsafe { depth_split(m, n, k, dst, a, b, (tiles, parts), threads, block) };
    }
    let dst = SendPtr(dst);
    let run_tile = |t: usize| {
        let (rows, cols) = tiles.tile(t);
        let d = dst;
        // SAFETY: tile `t` is rows `rows` and columns `cols` of the product: it reads the
        // matching rows of `a` and columns of `b` and writes only its own part of `dst`.
        unsafe {
            let am = Mat { ptr: a.ptr.offset(rows.start as isize * a.rs), rs: a.rs, cs: a.cs };
            let bm = Mat { ptr: b.ptr.offset(cols.start as isize * b.cs), rs: b.rs, cs: b.cs };
            block.product(rows.len(), cols.len(), k, d.0.add(rows.start * n + cols.start), n, &am, &bm);
        }
    };
    if threads <= 1 {
        (0..tiles.count()).for_each(run_tile);
    } else if work >= HEAVY_PRODUCT {
        par_for_heavy(tiles.count(), run_tile);
    } else {
        par_for(tiles.count(), run_tile);
    }
}

/// [`gemm_parallel`] for a product whose output has too few tiles to share: every tile is
/// computed in `parts` slices of the inner dimension ([`depth_parts`]), the first into
/// `dst` and the others into partial outputs, which are then added to `dst` in part order
/// ([`sum_parts`]). Which thread computes a part or sums a block never changes the sum, so
/// results are the same on any number of threads.
///
/// # Safety
/// As for [`gemm_parallel`].
#[allow(clippy::too_many_arguments)]
unsafe fn depth_split<T: Element, P: BlockProduct<T>>(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut T,
    a: &Mat<T>,
    b: &Mat<T>,
    (tiles, parts): (Tiles, usize),
    threads: usize,
    block: &P,
) {
    let len = m * n;
    // Not zeroed: every task overwrites its whole tile (`gemm` is told not to read it), and
    // the tiles of each part cover its output, so nothing is read before it is written.
    // Zeroing was a serial pass over all the partial outputs before any task started.
    let mut partial: Vec<T> = Vec::with_capacity((parts - 1) * len);
    let (out, spare) = (SendPtr(dst), SendPtr(partial.as_mut_ptr()));
    let depth = |p: usize| p * k / parts;
    let run = |i: usize| {
        let (t, p) = (i % tiles.count(), i / tiles.count());
        let (rows, cols) = tiles.tile(t);
        let (k0, k1) = (depth(p), depth(p + 1));
        let (o, s) = (out, spare);
        // SAFETY: task (t, p) reads rows `rows` and steps `k0..k1` of `a`, steps `k0..k1`
        // and columns `cols` of `b`, and writes only tile `t` of output `p`: `dst` for the
        // first part, else its own `m x n` slice of `partial`'s capacity.
        unsafe {
            let target = if p == 0 { o.0 } else { s.0.add((p - 1) * len) };
            let am = Mat { ptr: a.ptr.offset(rows.start as isize * a.rs + k0 as isize * a.cs), rs: a.rs, cs: a.cs };
            let bm = Mat { ptr: b.ptr.offset(k0 as isize * b.rs + cols.start as isize * b.cs), rs: b.rs, cs: b.cs };
            block.product(rows.len(), cols.len(), k1 - k0, target.add(rows.start * n + cols.start), n, &am, &bm);
        }
    };
    let tasks = tiles.count() * parts;
    let heavy = m.saturating_mul(n).saturating_mul(k) >= HEAVY_PRODUCT;
    if threads <= 1 {
        (0..tasks).for_each(run);
    } else if heavy {
        par_for_heavy(tasks, run);
    } else {
        par_for(tasks, run);
    }
    // SAFETY: no task runs now; the tasks wrote all `(parts - 1) * len` partial elements,
    // and `dst` is `m x n` and contiguous (the caller's contract).
    unsafe { sum_parts(dst, spare.0, len, parts - 1, threads, heavy) };
}

/// Elements of a depth-split product's output that one task of [`sum_parts`] sums, at the
/// least: fewer would cost more to hand out than to add.
const SUM_BLOCK: usize = 1 << 14;

/// `dst[i] += partial[p * len + i]` for the parts `p` in order, in blocks of `dst` shared
/// over the threads: each element is added in the same order whoever sums its block.
///
/// # Safety
/// `dst` must be `len` writable elements and `partial` `parts * len` initialised ones,
/// neither used elsewhere meanwhile.
unsafe fn sum_parts<T: Element>(dst: *mut T, partial: *const T, len: usize, parts: usize, threads: usize, heavy: bool) {
    let blocks = (len / SUM_BLOCK).clamp(1, MIN_TILES);
    // Blocks start at multiples of SPLIT_ALIGN, so that each fills whole SIMD registers.
    let start = |b: usize| block_start(len, blocks, b);
    let (dst, partial) = (SendPtr(dst), SendPtr(partial.cast_mut()));
    let sum = |b: usize| {
        let (lo, hi) = (start(b), start(b + 1));
        let (d, q) = (dst, partial);
        // SAFETY: block `b` is elements `lo..hi` of `dst` and of each part, disjoint from
        // every other block's, and inside the bounds the caller vouches for.
        let (out, parts) = unsafe {
            (
                std::slice::from_raw_parts_mut(d.0.add(lo), hi - lo),
                std::slice::from_raw_parts(q.0.cast_const(), parts * len),
            )
        };
        for part in parts.chunks_exact(len.max(1)) {
            // Added in `T`: one rounding per addition, as the single longer sum would have.
            for (x, &y) in out.iter_mut().zip(&part[lo..hi]) {
                *x = x.wadd(y);
            }
        }
    };
    if threads <= 1 || blocks == 1 {
        (0..blocks).for_each(sum);
    } else if heavy {
        par_for_heavy(blocks, sum);
    } else {
        par_for(blocks, sum);
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

/// The product of two validated views of one dtype, each block computed by `block`.
fn typed<T: Element, P: BlockProduct<T>>(a: &[T], la: &Layout, b: &[T], lb: &Layout, block: &P) -> Result<Buffer<T>> {
    let rank = la.rank();
    let (m, k, n) = (la.shape()[rank - 2], la.shape()[rank - 1], lb.shape()[rank - 1]);
    let batch: usize = la.shape()[..rank - 2].iter().product();
    if batch * m * n == 0 || k == 0 {
        return Buffer::zeros("matmul", batch * m * n);
    }
    // `gemm` is told not to read `dst` (alpha 0, `read_dst` false), so every element is
    // overwritten: zeroing first would be one more pass over the whole output.
    let mut out = Buffer::<T>::uninit("matmul", batch * m * n)?;
    // SAFETY: `out` holds `batch * m * n` elements, and `k > 0`.
    unsafe { product_into(a, la, b, lb, out.as_mut_ptr(), block) };
    Ok(out)
}

/// Writes the product of two validated views of one dtype (`k > 0`) into `out`, row-major
/// `[batch.., m, n]`, overwriting every element.
///
/// # Safety
/// `out` must be valid for writes of `batch * m * n` elements that nothing else reads or
/// writes meanwhile.
unsafe fn product_into<T: Element, P: BlockProduct<T>>(
    a: &[T],
    la: &Layout,
    b: &[T],
    lb: &Layout,
    out: *mut T,
    block: &P,
) {
    let rank = la.rank();
    let (m, k, n) = (la.shape()[rank - 2], la.shape()[rank - 1], lb.shape()[rank - 1]);
    let batch_shape = &la.shape()[..rank - 2];
    let batch: usize = batch_shape.iter().product();
    // The stride of a dimension of extent 1 is never used to reach another element, so it
    // may be anything a layout says (even past `isize::MAX`); `gemm` gets a harmless one.
    let stride = |extent: usize, s: usize| if extent > 1 { s as isize } else { 1 };
    let (ars, acs) = (stride(m, la.strides()[rank - 2]), stride(k, la.strides()[rank - 1]));
    let (brs, bcs) = (stride(k, lb.strides()[rank - 2]), stride(n, lb.strides()[rank - 1]));
    let threads = threads();

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
        // rows are exactly the rows of the batch; the caller vouches for `out`.
        unsafe { gemm_parallel(batch * m, n, k, out, &am, &bm, threads, block) };
        return;
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
    let dst = SendPtr(out);
    let run = |i: usize, threads: usize| {
        let (oa, ob) = batch_offsets(i);
        let am = Mat { ptr: a[oa..].as_ptr(), rs: ars, cs: acs };
        let bm = Mat { ptr: b[ob..].as_ptr(), rs: brs, cs: bcs };
        let d = dst;
        // SAFETY: batch `i` writes only `out[i*m*n..(i+1)*m*n]`.
        unsafe { gemm_parallel(m, n, k, d.0.add(i * m * n), &am, &bm, threads, block) };
    };
    if batch > 1 && m * n * k < SMALL_PRODUCT && threads > 1 {
        par_for(batch, |i| run(i, 1));
    } else {
        for i in 0..batch {
            run(i, threads);
        }
    }
}

/// `[batch.., m, k] @ [batch.., k, n]` for float storages of one dtype; bf16 and f16 sum in
/// `f32` and round each output once (`matmul_lowp`).
pub(crate) fn matmul(a: &CpuStorage, la: &Layout, b: &CpuStorage, lb: &Layout) -> Result<CpuStorage> {
    match (a, b) {
        (CpuStorage::F32(x), CpuStorage::F32(y)) => Ok(typed(x, la, y, lb, &Gemm)?.into()),
        (CpuStorage::F64(x), CpuStorage::F64(y)) => Ok(typed(x, la, y, lb, &Gemm)?.into()),
        (CpuStorage::BF16(x), CpuStorage::BF16(y)) => Ok(typed(x, la, y, lb, &Lowp::best::<bf16>())?.into()),
        (CpuStorage::F16(x), CpuStorage::F16(y)) => Ok(typed(x, la, y, lb, &Lowp::best::<f16>())?.into()),
        _ => Err(Error::dtype(
            "matmul",
            format!("matmul needs two operands of one float dtype, got {} and {}", a.dtype(), b.dtype()),
        )),
    }
}

/// [`matmul`] written into the contiguous elements `ld` addresses in `dst` (validated, of
/// the product's shape and the operands' dtype, another storage than theirs). Returns
/// false, writing nothing, for dtypes this path does not take (the caller copies a product
/// in then).
pub(crate) fn matmul_into(
    a: &CpuStorage,
    la: &Layout,
    b: &CpuStorage,
    lb: &Layout,
    dst: &mut CpuStorage,
    ld: &Layout,
) -> bool {
    fn go<T: Element>(a: &[T], la: &Layout, b: &[T], lb: &Layout, d: &mut [T], ld: &Layout) {
        let rank = la.rank();
        let k = la.shape()[rank - 1];
        let out = &mut d[ld.offset()..ld.offset() + ld.numel()];
        if out.is_empty() {
            return;
        }
        if k == 0 {
            out.fill(T::from_f64(0.0));
            return;
        }
        // SAFETY: `out` is the `batch * m * n` elements of the destination, borrowed mutably.
        unsafe { product_into(a, la, b, lb, out.as_mut_ptr(), &Gemm) }
    }
    match (a, b, dst) {
        (CpuStorage::F32(x), CpuStorage::F32(y), CpuStorage::F32(d)) => go(x, la, y, lb, d, ld),
        (CpuStorage::F64(x), CpuStorage::F64(y), CpuStorage::F64(d)) => go(x, la, y, lb, d, ld),
        _ => return false,
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many tiles cover each output element.
    fn coverage(t: &Tiles) -> Vec<u32> {
        let mut hits = vec![0u32; t.m * t.n];
        for i in 0..t.count() {
            let (rows, cols) = t.tile(i);
            for r in rows {
                for c in cols.clone() {
                    hits[r * t.n + c] += 1;
                }
            }
        }
        hits
    }

    #[test]
    fn tiles_cover_every_output_element_once() {
        for (m, n) in
            [(256, 256), (512, 512), (1024, 1024), (2048, 2048), (100, 3000), (3000, 100), (129, 65), (64, 64)]
        {
            let t = Tiles::new(m, n);
            assert!(coverage(&t).iter().all(|&h| h == 1), "{m}x{n}: {t:?}");
        }
    }

    #[test]
    fn mid_sized_products_are_cut_finely_and_large_ones_by_columns() {
        // A 256x256 product gets eight tiles (four column blocks, each cut in two), so two
        // threads claim about four each; larger ones keep whole-height column blocks.
        let count = |m, n| {
            let t = Tiles::new(m, n);
            (t.row_blocks, t.col_blocks)
        };
        assert_eq!(count(256, 256), (2, 4));
        assert_eq!(count(512, 512), (1, 8));
        assert_eq!(count(1024, 1024), (1, 16));
        assert_eq!(count(2048, 2048), (1, 16));
        // Tall products are cut by rows first.
        assert_eq!(count(4096, 128), (16, 1));
        assert_eq!(count(256, 128), (4, 2));
        // Never narrower than the smallest block.
        assert_eq!(count(100, 100), (1, 1));
    }

    #[test]
    fn tiled_f32_products_are_bitwise_the_same_on_one_and_many_threads() {
        // The tiles follow the shape alone, so whichever thread runs a tile and however many
        // there are, every output element is the same sum in the same order.
        for (m, n, k) in [(256, 256, 256), (300, 200, 600), (1024, 64, 96), (96, 1024, 80)] {
            let a: Vec<f32> = (0..m * k).map(|i| ((i * 7919) % 2003) as f32 / 1001.0 - 1.0).collect();
            let b: Vec<f32> = (0..k * n).map(|i| ((i * 104_729) % 1999) as f32 / 999.0 - 1.0).collect();
            let product = |threads: usize| {
                let mut out = vec![0f32; m * n];
                let am = Mat { ptr: a.as_ptr(), rs: k as isize, cs: 1 };
                let bm = Mat { ptr: b.as_ptr(), rs: n as isize, cs: 1 };
                // SAFETY: `a` is `m x k` and `b` is `k x n`, both row-major; `out` is `m x n`.
                unsafe { gemm_parallel(m, n, k, out.as_mut_ptr(), &am, &bm, threads, &Gemm) };
                out
            };
            let one = product(1);
            assert!(Plan::for_gemm(m, n, k, true, true).tasks() > 1, "{m}x{n} is split");
            assert_eq!(product(2), one, "{m}x{k} @ {k}x{n}");
            assert_eq!(product(8), one, "{m}x{k} @ {k}x{n}");
            // And the product is right: one element against a plain sum.
            let (r, c) = (m - 1, n / 2);
            let exact: f64 = (0..k).map(|p| a[r * k + p] as f64 * b[p * n + c] as f64).sum();
            assert!((one[r * n + c] as f64 - exact).abs() <= 1e-4 * k as f64, "{m}x{k} @ {k}x{n}");
        }
    }

    #[test]
    fn b_stored_by_columns_is_copied_and_gives_the_row_major_product_bitwise() {
        // Deep enough for any rows, deep enough with 128 rows, and too shallow to copy.
        for (m, n, k, copied) in
            [(16, 70, 520, true), (160, 100, 256, true), (100, 100, 256, false), (300, 40, 128, false)]
        {
            let a: Vec<f32> = (0..m * k).map(|i| ((i * 7919) % 2003) as f32 / 1001.0 - 1.0).collect();
            let b: Vec<f32> = (0..k * n).map(|i| ((i * 104_729) % 1999) as f32 / 999.0 - 1.0).collect();
            let bt: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
            let am = Mat { ptr: a.as_ptr(), rs: k as isize, cs: 1 };
            let by_rows = Mat { ptr: b.as_ptr(), rs: n as isize, cs: 1 };
            let by_columns = Mat { ptr: bt.as_ptr(), rs: 1, cs: k as isize };
            assert_eq!(copies_b(m, n, k, &by_columns), copied && transpose::is_fast(), "{m}x{n}x{k}");
            assert!(!copies_b(m, n, k, &by_rows));
            let product = |bm: &Mat<f32>, threads: usize| {
                let mut out = vec![0f32; m * n];
                // SAFETY: `a` is `m x k` row-major, `bm` addresses `k x n`; `out` is `m x n`.
                unsafe { gemm_parallel(m, n, k, out.as_mut_ptr(), &am, bm, threads, &Gemm) };
                out
            };
            let one = product(&by_columns, 1);
            assert_eq!(product(&by_columns, 2), one, "{m}x{n}x{k}");
            assert_eq!(product(&by_columns, 8), one, "{m}x{n}x{k}");
            if copies_b(m, n, k, &by_columns) {
                // The copy is the row-major matrix itself, so the product is the same sum.
                assert_eq!(product(&by_rows, 2), one, "{m}x{n}x{k}");
            }
            for (r, c) in [(0, 0), (m - 1, n - 1), (m / 2, n / 3)] {
                let exact: f64 = (0..k).map(|p| a[r * k + p] as f64 * b[p * n + c] as f64).sum();
                assert!((one[r * n + c] as f64 - exact).abs() <= 1e-4 * k as f64, "{m}x{n}x{k} ({r}, {c})");
            }
        }
    }

    #[test]
    fn deep_products_with_small_outputs_are_split_along_k_bitwise_alike_on_any_threads() {
        // A weight gradient's shape: a small output over many tokens. Its tiles alone are
        // too few to share, so the depth is cut too, by the shape alone.
        assert_eq!(depth_parts(Tiles::new(64, 64).count(), 4096), 8);
        assert_eq!(depth_parts(Tiles::new(192, 64).count(), 4096), 3);
        assert_eq!(depth_parts(Tiles::new(64, 64).count(), 300), 1);
        assert_eq!(depth_parts(Tiles::new(256, 256).count(), 4096), 1);
        for (m, n, k) in [(64, 64, 4096), (192, 64, 1000), (64, 256, 700)] {
            let a: Vec<f32> = (0..m * k).map(|i| ((i * 7919) % 2003) as f32 / 1001.0 - 1.0).collect();
            let b: Vec<f32> = (0..k * n).map(|i| ((i * 104_729) % 1999) as f32 / 999.0 - 1.0).collect();
            // `a` read transposed, as a weight gradient reads its activations.
            let at: Vec<f32> = (0..k * m).map(|i| a[(i % m) * k + i / m]).collect();
            let product = |threads: usize| {
                let mut out = vec![0f32; m * n];
                let am = Mat { ptr: at.as_ptr(), rs: 1, cs: m as isize };
                let bm = Mat { ptr: b.as_ptr(), rs: n as isize, cs: 1 };
                // SAFETY: `at` is `m x k` column-major, `b` is `k x n` row-major; `out` is `m x n`.
                unsafe { gemm_parallel(m, n, k, out.as_mut_ptr(), &am, &bm, threads, &Gemm) };
                out
            };
            let one = product(1);
            assert!(Plan::for_gemm(m, n, k, false, true).parts > 1, "{m}x{k} @ {k}x{n} is split along k");
            assert_eq!(product(2), one, "{m}x{k} @ {k}x{n}");
            assert_eq!(product(8), one, "{m}x{k} @ {k}x{n}");
            for (r, c) in [(0, 0), (m - 1, n - 1), (m / 2, n / 3)] {
                let exact: f64 = (0..k).map(|p| a[r * k + p] as f64 * b[p * n + c] as f64).sum();
                assert!((one[r * n + c] as f64 - exact).abs() <= 1e-4 * k as f64, "{m}x{k} @ {k}x{n} at ({r}, {c})");
            }
        }
    }

    #[test]
    fn partial_outputs_are_summed_in_part_order_whoever_sums_a_block() {
        // Lengths below one block, of several blocks, and not a multiple of the alignment.
        for (len, parts) in [(100, 1), (SUM_BLOCK * 3 + 37, 3), (SUM_BLOCK * 20 + 5, 7)] {
            // Values of very different sizes, so that another order of the additions would
            // round differently.
            let value = |i: usize| ((i * 7919) % 2003) as f32 * 10f32.powi((i % 9) as i32 - 4) - 1.0;
            let first: Vec<f32> = (0..len).map(value).collect();
            let partial: Vec<f32> =
                (0..parts * len).map(|i| value(i + 17) * if i % 3 == 0 { -1.0 } else { 1.0 }).collect();
            let want: Vec<f32> =
                (0..len).map(|i| (0..parts).fold(first[i], |acc, p| acc + partial[p * len + i])).collect();
            for threads in [1, 2, 8] {
                let mut dst = first.clone();
                // SAFETY: `dst` holds `len` elements and `partial` `parts * len`.
                unsafe { sum_parts(dst.as_mut_ptr(), partial.as_ptr(), len, parts, threads, true) };
                assert_eq!(dst, want, "len {len}, {parts} parts, {threads} threads");
            }
        }
    }

    #[test]
    fn gemm_plans_cover_every_output_element_once_in_enough_tasks() {
        for (m, n, k) in [(256, 256, 256), (2048, 2048, 2048), (100, 3000, 50), (3000, 100, 4096), (129, 65, 999)] {
            for a_in_place in [true, false] {
                let plan = Plan::for_gemm(m, n, k, a_in_place, true);
                assert!(coverage(&plan.tiles).iter().all(|&h| h == 1), "{m}x{n}: {plan:?}");
                // Never fewer tasks than the fixed cut gives, so the threads share as evenly.
                let fixed = Plan::by_shape(m, n, k, true).tasks().min(MIN_TILES);
                assert!(plan.tasks() >= fixed, "{m}x{n}x{k}: {plan:?}");
            }
        }
    }

    #[test]
    fn gemm_plans_keep_tiles_wide_and_split_weight_gradients_along_k() {
        let cut = |m, n, k, a_in_place| {
            let p = Plan::for_gemm(m, n, k, a_in_place, true);
            (p.tiles.row_blocks, p.tiles.col_blocks, p.parts)
        };
        // Square products: 2x4 tiles (1024x512 at 2048), not 16 column blocks that each
        // read all of `a`.
        assert_eq!(cut(2048, 2048, 2048, true), (2, 4, 1));
        assert_eq!(cut(256, 256, 256, true), (2, 4, 1));
        // A Linear forward over 2048 tokens, [2048, 256] @ [256, 768]: 512-row tiles, not 16
        // row blocks that each repack the whole weight.
        assert_eq!(cut(2048, 768, 256, true), (4, 2, 1));
        // Its weight gradient [768, 16384] @ [16384, 256], `a` a transposed view: the whole
        // output in eight depth parts, not row tiles that each pack all the activations.
        assert_eq!(cut(768, 256, 16384, false), (1, 1, 8));
        // Without depth splits (a kernel that does not sum in `T`), tiles only.
        assert_eq!(Plan::for_gemm(768, 256, 16384, false, false).parts, 1);
        // No partial outputs past the bound: a large deep product is cut into tiles.
        assert_eq!(Plan::for_gemm(4096, 4096, 65536, false, true).parts, 1);
    }

    /// `[m, k] @ [k, n]` with `a` a transposed view and `b` read in place, where each block
    /// is computed as its transpose: checked bitwise the same on 1, 2 and 8 threads and
    /// against the exact sum at a few elements.
    fn check_transposed_product(m: usize, n: usize, k: usize) {
        let a: Vec<f32> = (0..m * k).map(|i| ((i * 7919) % 2003) as f32 / 1001.0 - 1.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| ((i * 104_729) % 1999) as f32 / 999.0 - 1.0).collect();
        let at: Vec<f32> = (0..k * m).map(|i| a[(i % m) * k + i / m]).collect();
        let am = Mat { ptr: at.as_ptr(), rs: 1, cs: m as isize };
        let bm = Mat { ptr: b.as_ptr(), rs: n as isize, cs: 1 };
        assert!(transposed_is_faster(m, n, k, &am, &bm), "{m}x{n}x{k}");
        let product = |threads: usize| {
            let mut out = vec![0f32; m * n];
            // SAFETY: `at` is `m x k` column-major, `b` is `k x n` row-major; `out` is `m x n`.
            unsafe { gemm_parallel(m, n, k, out.as_mut_ptr(), &am, &bm, threads, &Gemm) };
            out
        };
        let one = product(1);
        assert_eq!(product(2), one, "{m}x{n}x{k}");
        assert_eq!(product(8), one, "{m}x{n}x{k}");
        for r in [0, 1, m / 2, m - 1] {
            for c in [0, 1.min(n - 1), n / 3, n / 2, n - 1] {
                let exact: f64 = (0..k).map(|p| a[r * k + p] as f64 * b[p * n + c] as f64).sum();
                assert!((one[r * n + c] as f64 - exact).abs() <= 1e-4 * k as f64, "{m}x{n}x{k} ({r}, {c})");
            }
        }
    }

    #[test]
    fn tall_weight_gradients_computed_transposed_match_the_sum_bitwise_on_any_threads() {
        // More outputs than inputs (m >= 2n, n >= 128).
        check_transposed_product(384, 128, 1024);
        // Where `a` is read in place, or the block is of middle width, the block is computed
        // directly.
        let (m, n, k) = (384, 128, 1024);
        let (a, b) = (vec![0f32; m * k], vec![0f32; k * n]);
        let am = Mat { ptr: a.as_ptr(), rs: 1, cs: m as isize };
        let ar = Mat { ptr: a.as_ptr(), rs: k as isize, cs: 1 };
        let bm = Mat { ptr: b.as_ptr(), rs: n as isize, cs: 1 };
        assert!(!transposed_is_faster(m, n, k, &ar, &bm));
        assert!(!transposed_is_faster(m, 64, k, &am, &bm));
        assert!(!transposed_is_faster(m, NARROW_OUTPUT, k, &am, &bm));
    }

    #[test]
    fn narrow_weight_gradients_computed_transposed_match_the_sum_bitwise_on_any_threads() {
        // `n` below `NARROW_OUTPUT`, as in the weight gradient of a Linear layer on 28
        // features; tiles split along `k` included.
        for (m, n, k) in [(1024, 28, 1792), (200, 7, 600), (96, 1, 4096)] {
            check_transposed_product(m, n, k);
        }
    }

    #[test]
    fn consecutive_tiles_share_the_operand_the_first_cut_keeps_whole() {
        // Columns split first: tiles 0 and 1 are the two halves of the first column block.
        let t = Tiles::new(256, 256);
        assert_eq!(t.tile(0), (0..128, 0..64));
        assert_eq!(t.tile(1), (128..256, 0..64));
        assert_eq!(t.tile(2), (0..128, 64..128));
    }
}
