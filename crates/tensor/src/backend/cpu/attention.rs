//! Memory-efficient scaled dot-product attention (flash-attention style): the scores exist
//! one `[BQ, BK]` block at a time, forward and backward.
//!
//! Forward, per batch matrix and chunk of `BQ`-row query blocks: for each block of `BK`
//! keys, the block's scores `scale * q k^T` (one `gemm`), masked; an online softmax keeps
//! each row's running maximum `m` and sum `l` of `e^(s - m)` and rescales the row's output
//! accumulator when the maximum grows; the accumulator gains `p @ v` (one `gemm`). The
//! output is the accumulator over `l`, and each row's log-sum-exp `m + ln l` is saved.
//!
//! Backward, per batch matrix and chunk of query blocks: each key block's probabilities are
//! recomputed as `e^(s - lse)`; with `D = rowsum(dO * O)`, `dS = P * (dO v^T - D)`, and
//! `dq += scale dS k`, `dk += scale dS^T q`, `dv += P^T dO` (four `gemm`s per block). A
//! chunk's `dk` and `dv` are private partial sums, added up at the end, so chunks of one
//! matrix run in parallel.
//!
//! Query, key, value, output and gradient are read as `[B, rows, cols]` matrices through
//! their strides whenever each row's elements are adjacent; any other view is copied first
//! (no more memory than the operand). Rows that lie apart, such as the heads of a
//! `[B, T, H, D]` projection viewed as `[B, H, T, D]` (rows `H * D` apart), are read in
//! place where a row is read alone and gathered into dense blocks where a block goes into a
//! product: each task gathers the keys and values its chunk reads once, and each query (and
//! output-gradient) block as it comes. The mask is read through its own strides, so a
//! broadcast `[L, S]` mask is never expanded.
//!
//! The output and the gradients are summed in dense blocks of the task's own and written
//! once through the dense layouts the caller asks for (in the operands' order of
//! dimensions, so the heads' rows `H * D` apart), each task addressing only its own rows.

use super::block::block_product;
use super::contiguous::Contiguous;
use crate::dtype::FloatElement;
use crate::host::iter::{GRAIN_CHEAP, par_for, par_for_heavy, threads};
use crate::layout::Layout;
use crate::ops::attention::{Attention, OP};
use crate::shape::Shape;
use crate::storage::{Buffer, CpuStorage};
use crate::{Error, Result};
use multiversion::multiversion;

/// Query rows per block where there is enough work to share ([`query_rows`]): tall blocks
/// make the products deep enough to run near the kernels' speed, since the key and value
/// gradients sum over a block's rows and each key block is packed once per query block
/// (`[16, 8, 256, 32]` heads on 2 threads: forward 10.0 ms with 64-row blocks, 9.2-9.3 ms
/// with 256; backward 24.6-25.1 against 23.0-23.4 ms; `[4, 4, 512, 64]`: 7.1 / 18.4
/// against 6.3 / 17.5 ms).
const BQ: usize = 256;

/// Query rows per block under a causal mask, or where tall blocks would leave too few
/// tasks ([`query_rows`]). Under the mask a block computes the scores of all the keys its
/// last row sees, so tall blocks would compute (and mask) most of the triangle above the
/// diagonal (causal `[16, 8, 256, 32]` heads: forward 7.2-7.3 ms with 64-row blocks, 9.3 ms
/// with 256; backward 19.5-21.4 against 24.6-25.2 ms).
const BQ_SHORT: usize = 64;

/// The fewest (batch matrix, tall query block) units for which [`BQ`]-row blocks are used:
/// enough for 8 threads to take one each. A single `[1, 1, 256, 64]` head in one tall
/// block ran on one thread (forward 0.19 ms against 0.12 in four short blocks).
const MIN_TALL_UNITS: usize = 8;

/// Query rows per block for `batch` matrices of `l` queries. Like every other cut of the
/// work, it follows the shape alone, never the thread count: the key and value gradients
/// are summed block by block, so another height would round them differently.
fn query_rows(batch: usize, l: usize, causal: bool) -> usize {
    if causal || batch.saturating_mul(l.div_ceil(BQ)) < MIN_TALL_UNITS { BQ_SHORT } else { BQ }
}

/// Keys per block.
const BK: usize = 256;

/// Multiply-adds below which a call runs on the calling thread: waking helpers costs tens
/// of microseconds, more than a few small heads take.
const PARALLEL_WORK: usize = 1 << 18;

/// Multiply-adds of a task from which its loop always offers its tasks to the helper
/// threads (`par_for_heavy`, tens of microseconds a task): the thread tuner's solo probes
/// would otherwise run dozens of such loops, a layer's whole attention each, on one thread.
const HEAVY_TASK: usize = 1 << 18;

/// Runs `task` for `0..n`: on the calling thread for small calls (`work` multiply-adds in
/// all), else in parallel, always shared with the helpers when each task does
/// `task_work` multiply-adds or more.
fn run_tasks(n: usize, work: usize, task_work: usize, task: impl Fn(usize) + Sync) {
    if n <= 1 || threads() <= 1 || work < PARALLEL_WORK {
        (0..n).for_each(task);
    } else if task_work >= HEAVY_TASK {
        par_for_heavy(n, task);
    } else {
        par_for(n, task);
    }
}

/// Runs `unit(u, scratch)` for the units `0..n` (a batch matrix's chunk of query blocks
/// each) through [`run_tasks`], `per_task` consecutive units to a task, each task with
/// one `scratch` of its own (from `scratch()`) that its units reuse: short sequences have
/// hundreds of small units, whose buffers cost as much to allocate and clear as the work.
/// Units are computed alike whoever runs them and with whichever others, so results do
/// not depend on the grouping.
fn run_units<S>(
    (n, per_task): (usize, usize),
    work: usize,
    unit_work: usize,
    scratch: impl Fn() -> S + Sync,
    unit: impl Fn(usize, &mut S) + Sync,
) {
    let per_task = per_task.max(1);
    run_tasks(n.div_ceil(per_task), work, unit_work.saturating_mul(per_task), |t| {
        let mut s = scratch();
        for u in t * per_task..((t + 1) * per_task).min(n) {
            unit(u, &mut s);
        }
    });
}

/// How many units ([`run_units`]) a task takes: with one chunk per batch matrix, as many
/// as leave about `per_thread` tasks per thread; else one.
fn units_per_task(batch: usize, chunks: usize, per_thread: usize) -> usize {
    if chunks > 1 { 1 } else { (batch / (per_thread * threads()).max(1)).max(1) }
}

/// The mask as the kernel reads it.
enum Mask<'a, T> {
    None,
    /// Non-zero where the key takes part.
    Bool(&'a [u8], &'a Layout),
    /// Added to the scores.
    Float(&'a [T], &'a Layout),
}

/// Where batch matrix `b` of a `[batch.., rows, cols]` layout starts.
fn batch_offset(l: &Layout, mut b: usize) -> usize {
    let r = l.rank();
    let mut off = l.offset();
    for d in (0..r - 2).rev() {
        let n = l.shape()[d];
        off += (b % n) * l.strides()[d];
        b /= n;
    }
    off
}

/// An operand as `[B, rows, cols]` matrices whose rows are `rs` apart with adjacent
/// elements: the storage itself when its view has unit column stride, else a contiguous
/// copy.
struct Matrices<'a, T: FloatElement> {
    data: Contiguous<'a, T>,
    /// The view read in place; `None` for a copy, whose matrices follow one another.
    layout: Option<&'a Layout>,
    rows: usize,
    rs: usize,
}

impl<'a, T: FloatElement> Matrices<'a, T> {
    /// `l`'s view of `s`, read in place when its rows have adjacent elements.
    fn of(s: &'a CpuStorage, l: &'a Layout) -> Result<Self> {
        let data = s.as_slice::<T>().ok_or_else(|| Error::dtype(OP, format!("unexpected dtype {}", s.dtype())))?;
        let r = l.rank();
        let (rows, cols) = (l.shape()[r - 2], l.shape()[r - 1]);
        let adjacent = cols <= 1 || l.strides()[r - 1] == 1;
        let in_place = adjacent && l.numel() > 0 && l.contiguous_range().is_none();
        Ok(if in_place {
            let rs = if rows <= 1 { cols } else { l.strides()[r - 2] };
            Matrices { data: Contiguous::Borrowed(data), layout: Some(l), rows, rs }
        } else {
            Matrices { data: Contiguous::of(OP, data, l, GRAIN_CHEAP)?, layout: None, rows, rs: cols }
        })
    }

    /// Row `row` of batch matrix `b` and everything after it.
    fn rows_from(&self, b: usize, row: usize) -> &[T] {
        let start = match self.layout {
            Some(l) => batch_offset(l, b),
            None => b * self.rows * self.rs,
        };
        &self.data.slice()[start + row * self.rs..]
    }

    /// Row `row` of batch matrix `b`, `cols` elements.
    fn row(&self, b: usize, row: usize, cols: usize) -> &[T] {
        &self.rows_from(b, row)[..cols]
    }

    /// Rows `row..row + rows` of batch matrix `b` (`cols` elements each) and their row
    /// stride: read in place when they lie next to one another, else gathered into `buf`.
    /// The heads of a `[B, T, H, D]` projection have their rows `H * D` apart: read in
    /// place, the blocks' few elements per row are spread over many pages and a few cache
    /// sets, and `gemm` packs them far more slowly than a dense block (the forward of
    /// `[16, 8, 256, 32]` heads took a quarter longer than contiguous ones).
    fn gather<'b>(&'b self, b: usize, row: usize, rows: usize, cols: usize, buf: &'b mut Vec<T>) -> (&'b [T], usize) {
        let src = self.rows_from(b, row);
        if self.rs == cols || rows <= 1 {
            return (src, self.rs);
        }
        // Grown (and cleared) only when too small: every element used is written below.
        if buf.len() < rows * cols {
            buf.resize(rows * cols, T::ZERO);
        }
        let buf = &mut buf[..rows * cols];
        for (r, dst) in buf.chunks_exact_mut(cols).enumerate() {
            copy_row(dst, &src[r * self.rs..r * self.rs + cols]);
        }
        (buf, cols)
    }
}

impl<T: FloatElement> Mask<'_, T> {
    /// Applies the mask (and the causal triangle) to block `s` (`rows x cols`, row stride
    /// `cols`) of batch `b` starting at query `i0` and key `j0`.
    fn apply(&self, s: &mut [T], b: usize, (i0, rows): (usize, usize), (j0, cols): (usize, usize), causal: bool) {
        let neg = T::from_f64(f64::NEG_INFINITY);
        match self {
            Mask::None => {}
            Mask::Bool(m, l) => {
                let (off, rs, cs) = (batch_offset(l, b), l.strides()[l.rank() - 2], l.strides()[l.rank() - 1]);
                for r in 0..rows {
                    let base = off + (i0 + r) * rs + j0 * cs;
                    for (c, x) in s[r * cols..(r + 1) * cols].iter_mut().enumerate() {
                        if m[base + c * cs] == 0 {
                            *x = neg;
                        }
                    }
                }
            }
            Mask::Float(m, l) => {
                let (off, rs, cs) = (batch_offset(l, b), l.strides()[l.rank() - 2], l.strides()[l.rank() - 1]);
                for r in 0..rows {
                    let base = off + (i0 + r) * rs + j0 * cs;
                    for (c, x) in s[r * cols..(r + 1) * cols].iter_mut().enumerate() {
                        *x = *x + m[base + c * cs];
                    }
                }
            }
        }
        if causal {
            for r in 0..rows {
                // Query i sees keys 0..=i.
                let first = (i0 + r + 1).saturating_sub(j0).min(cols);
                s[r * cols + first..(r + 1) * cols].fill(neg);
            }
        }
    }
}

/// `dst = src` for one row of a head (tens of elements): in blocks of 8 that compile to
/// plain vector moves, where `copy_from_slice` called `memcpy` once per row, a call that
/// cost as much as the copy for rows of 32 elements.
#[inline]
fn copy_row<T: Copy>(dst: &mut [T], src: &[T]) {
    let (s8, st) = src[..dst.len()].as_chunks::<8>();
    let (d8, dt) = dst.as_chunks_mut::<8>();
    for (d, s) in d8.iter_mut().zip(s8) {
        *d = *s;
    }
    for (d, s) in dt.iter_mut().zip(st) {
        *d = *s;
    }
}

/// The largest element of a row (`-inf` for an empty one).
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn row_max<T: FloatElement>(row: &[T]) -> T {
    let mut acc = [T::from_f64(f64::NEG_INFINITY); 16];
    let (chunks, tail) = row.as_chunks::<16>();
    for c in chunks {
        for i in 0..16 {
            acc[i] = if c[i] > acc[i] { c[i] } else { acc[i] };
        }
    }
    let mut m = acc.iter().fold(T::from_f64(f64::NEG_INFINITY), |a, &b| if b > a { b } else { a });
    for &v in tail {
        m = if v > m { v } else { m };
    }
    m
}

/// `row[j] = e^(row[j] - shift)` in place, returning the sum. `-inf` entries give 0.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn exp_sub<T: FloatElement>(row: &mut [T], shift: T) -> T {
    let mut acc = [T::ZERO; 16];
    let (chunks, tail) = row.as_chunks_mut::<16>();
    for c in chunks {
        // Blocks whose shifted scores all stay where e^x is normal (all but masked or
        // far-off keys) take the cheaper exponential, which gives the same bits there;
        // NaN fails the test and takes the general one.
        let mut normal = true;
        for &v in c.iter() {
            normal &= v - shift >= T::EXP_NORMAL_MIN;
        }
        if normal {
            for i in 0..16 {
                c[i] = (c[i] - shift).exp_normal_where(fma_clone!());
                acc[i] = acc[i] + c[i];
            }
        } else {
            for i in 0..16 {
                c[i] = (c[i] - shift).exp();
                acc[i] = acc[i] + c[i];
            }
        }
    }
    let mut sum = acc.iter().fold(T::ZERO, |a, &b| a + b);
    for v in tail {
        *v = (*v - shift).exp();
        sum = sum + *v;
    }
    sum
}

/// `ds[j] = p[j] * (ds[j] - d)` in place.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn score_grad<T: FloatElement>(ds: &mut [T], p: &[T], d: T) {
    for (x, &pv) in ds.iter_mut().zip(p) {
        *x = pv * (*x - d);
    }
}

/// The sizes of one call.
#[derive(Clone, Copy)]
struct Dims {
    batch: usize,
    l: usize,
    s: usize,
    e: usize,
    ev: usize,
    /// Query rows per block ([`query_rows`]).
    bq: usize,
}

impl Dims {
    /// Multiply-adds of the forward's two products.
    fn work(&self) -> usize {
        self.batch.saturating_mul(self.l).saturating_mul(self.s).saturating_mul(self.e + self.ev)
    }

    /// The keys query block `i0..i0 + rows` can see.
    fn keys(&self, i0: usize, rows: usize, causal: bool) -> usize {
        if causal { self.s.min(i0 + rows) } else { self.s }
    }

    /// The keys query blocks `first..last` see (those of the last one, which sees the
    /// most); 0 for no block.
    fn chunk_keys(&self, first: usize, last: usize, causal: bool) -> usize {
        if first >= last {
            return 0;
        }
        let i0 = (last - 1) * self.bq;
        self.keys(i0, self.bq.min(self.l - i0), causal)
    }
}

/// A raw pointer handed to parallel tasks that write disjoint parts of its buffer.
#[derive(Clone, Copy)]
struct Out<T>(*mut T);
// SAFETY: every task writes only the rows of its own (batch, query block) or its own
// partial sum, as the callers say at each use.
unsafe impl<T> Send for Out<T> {}
unsafe impl<T> Sync for Out<T> {}

impl<T> Out<T> {
    /// `len` elements from `start`.
    ///
    /// # Safety
    /// The range lies in the buffer, and no other task touches it meanwhile.
    #[allow(clippy::mut_from_ref)]
    unsafe fn part(&self, start: usize, len: usize) -> &mut [T] {
        // SAFETY: guaranteed by the caller.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(start), len) }
    }
}

/// A result stored through a dense layout of `[B, rows, cols]` (see
/// [`crate::ops::attention::laid_out_like`]): the rows of one batch matrix are `rs` apart,
/// and the rows of other matrices (other heads) may lie between them, so the tasks that
/// write it address their rows through a raw pointer, never a slice spanning them.
#[derive(Clone, Copy)]
struct Dest<'a, T> {
    ptr: Out<T>,
    layout: &'a Layout,
    rs: usize,
}

impl<'a, T: FloatElement> Dest<'a, T> {
    /// `buf` read through `layout`, which the caller checked is dense over `buf`.
    fn new(buf: &mut Buffer<T>, layout: &'a Layout) -> Self {
        let r = layout.rank();
        let (rows, cols) = (layout.shape()[r - 2], layout.shape()[r - 1]);
        let rs = if rows <= 1 { cols } else { layout.strides()[r - 2] };
        Dest { ptr: Out(buf.as_mut_ptr()), layout, rs }
    }

    /// Where row `row` of batch matrix `b` starts in the buffer.
    fn at(&self, b: usize, row: usize) -> usize {
        batch_offset(self.layout, b) + row * self.rs
    }

    /// Writes `rows` dense rows of `cols` elements from `src` to the rows starting at
    /// `start`, `rs` apart.
    ///
    /// # Safety
    /// The rows lie in the buffer, and no other task touches them meanwhile.
    unsafe fn write_rows(&self, start: usize, rows: usize, cols: usize, src: &[T]) {
        for r in 0..rows {
            // SAFETY: guaranteed by the caller.
            copy_row(unsafe { self.ptr.part(start + r * self.rs, cols) }, &src[r * cols..(r + 1) * cols]);
        }
    }
}

fn forward_typed<T: FloatElement>(
    q: &Matrices<'_, T>,
    k: &Matrices<'_, T>,
    v: &Matrices<'_, T>,
    mask: &Mask<'_, T>,
    d: Dims,
    spec: &Attention,
    out_layout: &Layout,
) -> Result<(Buffer<T>, Buffer<T>)> {
    // Every row of both is written below.
    let mut out = Buffer::<T>::uninit(OP, d.batch * d.l * d.ev)?;
    let mut lse = Buffer::<T>::uninit(OP, d.batch * d.l)?;
    let blocks = d.l.div_ceil(d.bq);
    // Small tasks: nothing is summed across them, and a thread that runs slow holds up
    // less of the call. Each gathers the keys and values it reads (if their rows are
    // apart), so a head's whole set of blocks is one task when there are enough heads.
    let (chunks, per_chunk) = split_blocks(d.batch, blocks, 16);
    let (po, pl) = (Dest::new(&mut out, out_layout), Out(lse.as_mut_ptr()));
    let scale = T::from_f64(spec.scale);
    let neg = T::from_f64(f64::NEG_INFINITY);
    // A task's buffers: gathered keys, values and queries, a block of scores and the
    // output accumulator. Only as many score columns as there are keys: a short sequence's
    // block is small, and a full `BK`-wide one would be zeroed for nothing.
    let scratch = || {
        (
            Vec::new(),
            Vec::new(),
            Vec::new(),
            vec![T::ZERO; d.bq.min(d.l) * BK.min(d.s)],
            vec![T::ZERO; d.bq.min(d.l) * d.ev],
        )
    };
    let task = |t: usize, scratch: &mut ForwardScratch<T>| {
        let (kbuf, vbuf, qbuf, s, acc) = scratch;
        let (b, c) = (t / chunks, t % chunks);
        let first = c * per_chunk;
        let last = ((c + 1) * per_chunk).min(blocks);
        if first >= last {
            return;
        }
        // The keys and values every block of the chunk reads, gathered once.
        let keys_seen = d.chunk_keys(first, last, spec.causal);
        let (km, krs) = k.gather(b, 0, keys_seen, d.e, kbuf);
        let (vm, vrs) = v.gather(b, 0, keys_seen, d.ev, vbuf);
        let mut m = [neg; BQ];
        let mut sum = [T::ZERO; BQ];
        for qb in first..last {
            let i0 = qb * d.bq;
            let rows = d.bq.min(d.l - i0);
            let (qm, qrs) = q.gather(b, i0, rows, d.e, qbuf);
            let acc = &mut acc[..rows * d.ev];
            acc.fill(T::ZERO);
            m[..rows].fill(neg);
            sum[..rows].fill(T::ZERO);
            let keys = d.keys(i0, rows, spec.causal);
            for j0 in (0..keys).step_by(BK) {
                let cols = BK.min(keys - j0);
                let s = &mut s[..rows * cols];
                block_product(rows, cols, d.e, s, cols, false, (qm, qrs, 1), (&km[j0 * krs..], 1, krs), scale);
                mask.apply(s, b, (i0, rows), (j0, cols), spec.causal);
                for r in 0..rows {
                    let row = &mut s[r * cols..(r + 1) * cols];
                    let top = row_max(row);
                    let new_m = if top > m[r] { top } else { m[r] };
                    if new_m == neg {
                        // Nothing seen yet in this row: its probabilities are all 0.
                        row.fill(T::ZERO);
                        continue;
                    }
                    let add = exp_sub(row, new_m);
                    if m[r] != new_m {
                        let corr = if m[r] == neg { T::ZERO } else { (m[r] - new_m).exp() };
                        sum[r] = sum[r] * corr;
                        for a in &mut acc[r * d.ev..(r + 1) * d.ev] {
                            *a = *a * corr;
                        }
                        m[r] = new_m;
                    }
                    sum[r] = sum[r] + add;
                }
                block_product(rows, d.ev, cols, acc, d.ev, true, (s, cols, 1), (&vm[j0 * vrs..], vrs, 1), T::ONE);
            }
            let base = po.at(b, i0);
            // SAFETY: task (b, chunk) alone writes rows i0..i0 + rows of batch matrix b
            // (query block qb is the chunk's), `ev` elements each, which the dense output
            // layout gives no other (batch, row); and the same rows of the log-sum-exp,
            // contiguous.
            let lrow = unsafe { pl.part(b * d.l + i0, rows) };
            for r in 0..rows {
                let dst = unsafe { po.ptr.part(base + r * po.rs, d.ev) };
                if sum[r] > T::ZERO {
                    let inv = T::ONE / sum[r];
                    for (o, &a) in dst.iter_mut().zip(&acc[r * d.ev..(r + 1) * d.ev]) {
                        *o = a * inv;
                    }
                    lrow[r] = m[r] + sum[r].ln();
                } else {
                    // No key to attend to: the output is 0.
                    dst.fill(T::ZERO);
                    lrow[r] = neg;
                }
            }
        }
    };
    // A unit is a chunk of query blocks against every key.
    let unit_work = (per_chunk * d.bq).min(d.l).saturating_mul(d.s).saturating_mul(d.e + d.ev);
    let units = (d.batch * chunks, units_per_task(d.batch, chunks, 16));
    run_units(units, d.work(), unit_work, scratch, task);
    Ok((out, lse))
}

/// How the query blocks of each batch matrix are shared out: `(chunks, per_chunk)`, enough
/// chunks for about `per_thread` tasks per thread, each of whole query blocks (the last may
/// be shorter).
fn split_blocks(batch: usize, blocks: usize, per_thread: usize) -> (usize, usize) {
    let chunks = (per_thread * threads()).div_ceil(batch.max(1)).clamp(1, blocks.max(1));
    let per_chunk = blocks.div_ceil(chunks).max(1);
    (blocks.div_ceil(per_chunk).max(1), per_chunk)
}

/// The buffers of one forward task ([`run_units`]): gathered keys, values and queries, a
/// block of scores and the output accumulator.
type ForwardScratch<T> = (Vec<T>, Vec<T>, Vec<T>, Vec<T>, Vec<T>);

/// The buffers of one backward task ([`run_units`]).
struct BackwardScratch<T> {
    /// Keys, values, queries and output gradients gathered into dense blocks.
    gathered: [Vec<T>; 4],
    p: Vec<T>,
    ds: Vec<T>,
    dk: Vec<T>,
    dv: Vec<T>,
    dq: Vec<T>,
}

/// The operands of the backward.
struct Saved<'a, T: FloatElement> {
    q: Matrices<'a, T>,
    k: Matrices<'a, T>,
    v: Matrices<'a, T>,
    out: Matrices<'a, T>,
    lse: &'a [T],
    grad: Matrices<'a, T>,
}

fn backward_typed<T: FloatElement>(
    x: &Saved<'_, T>,
    mask: &Mask<'_, T>,
    d: Dims,
    spec: &Attention,
    [lq, lk, lv]: [&Layout; 3],
) -> Result<[Buffer<T>; 3]> {
    let blocks = d.l.div_ceil(d.bq);
    // Each chunk of a batch matrix sums its own key and value gradients, added up at the
    // end: few chunks.
    let (chunks, per_chunk) = split_blocks(d.batch, blocks, 4);
    // Every row of the three is written below: each task writes its query blocks' rows
    // of `dq` and all `S` rows of its `dk` and `dv` sums.
    let mut dq = Buffer::<T>::uninit(OP, d.batch * d.l * d.e)?;
    let mut dk = Buffer::<T>::uninit(OP, d.batch * chunks * d.s * d.e)?;
    let mut dv = Buffer::<T>::uninit(OP, d.batch * chunks * d.s * d.ev)?;
    // With one chunk per batch matrix its sums are the gradients, written through their
    // layouts; with more, each chunk sums into a private contiguous matrix (number `t`,
    // the task's, in both cases), added into the gradients at the end.
    let partials = |cols: usize| Layout::contiguous(Shape::from([d.batch * chunks, d.s, cols].as_slice()));
    let (part_k, part_v) = (partials(d.e), partials(d.ev));
    let (lk_sums, lv_sums) = if chunks == 1 { (lk, lv) } else { (&part_k, &part_v) };
    let (pq, pk, pv) = (Dest::new(&mut dq, lq), Dest::new(&mut dk, lk_sums), Dest::new(&mut dv, lv_sums));
    let scale = T::from_f64(spec.scale);
    // A task's buffers, reused by its units: gathered keys, values, queries and output
    // gradients; on the heap, blocks of probabilities and score gradients (two f64 blocks
    // are up to 1 MiB, too much for a worker thread's stack), no larger than the call's blocks
    // (for short sequences a full `BQ x BK` block would be mostly zeroed for nothing); the
    // unit's key and value gradient sums (all `S` rows) and a query block's gradient.
    let block = d.bq.min(d.l) * BK.min(d.s);
    let scratch = || BackwardScratch {
        gathered: Default::default(),
        p: vec![T::ZERO; block],
        ds: vec![T::ZERO; block],
        dk: vec![T::ZERO; d.s * d.e],
        dv: vec![T::ZERO; d.s * d.ev],
        dq: vec![T::ZERO; d.bq.min(d.l) * d.e],
    };
    let task = |t: usize, scratch: &mut BackwardScratch<T>| {
        let BackwardScratch { gathered: [kbuf, vbuf, qbuf, gbuf], p, ds, dk: dk_sum, dv: dv_sum, dq: dq_block } =
            scratch;
        let (b, c) = (t / chunks, t % chunks);
        let first = c * per_chunk;
        let last = ((c + 1) * per_chunk).min(blocks);
        // No query at all (`L = 0`): the key and value gradients are written as zeros.
        let keys_seen = d.chunk_keys(first, last, spec.causal);
        let (km, krs) = x.k.gather(b, 0, keys_seen, d.e, kbuf);
        let (vm, vrs) = x.v.gather(b, 0, keys_seen, d.ev, vbuf);
        // The rows of keys the chunk does not see (past the causal diagonal) stay 0.
        dk_sum.fill(T::ZERO);
        dv_sum.fill(T::ZERO);
        let mut dd = [T::ZERO; BQ];
        for qb in first..last {
            let i0 = qb * d.bq;
            let rows = d.bq.min(d.l - i0);
            let (qm, qrs) = x.q.gather(b, i0, rows, d.e, qbuf);
            let (gm, grs) = x.grad.gather(b, i0, rows, d.ev, gbuf);
            let lse = &x.lse[b * d.l + i0..b * d.l + i0 + rows];
            for r in 0..rows {
                let (g, o) = (&gm[r * grs..r * grs + d.ev], x.out.row(b, i0 + r, d.ev));
                dd[r] = g.iter().zip(o).fold(T::ZERO, |a, (&g, &o)| a + g * o);
            }
            let dq_block = &mut dq_block[..rows * d.e];
            dq_block.fill(T::ZERO);
            let keys = d.keys(i0, rows, spec.causal);
            for j0 in (0..keys).step_by(BK) {
                let cols = BK.min(keys - j0);
                let (p, ds) = (&mut p[..rows * cols], &mut ds[..rows * cols]);
                let (kj, vj) = (&km[j0 * krs..], &vm[j0 * vrs..]);
                block_product(rows, cols, d.e, p, cols, false, (qm, qrs, 1), (kj, 1, krs), scale);
                mask.apply(p, b, (i0, rows), (j0, cols), spec.causal);
                for r in 0..rows {
                    let row = &mut p[r * cols..(r + 1) * cols];
                    if lse[r] == T::from_f64(f64::NEG_INFINITY) {
                        row.fill(T::ZERO);
                    } else {
                        exp_sub(row, lse[r]);
                    }
                }
                // dS = P * (dO v^T - D)
                block_product(rows, cols, d.ev, ds, cols, false, (gm, grs, 1), (vj, 1, vrs), T::ONE);
                for r in 0..rows {
                    score_grad(&mut ds[r * cols..(r + 1) * cols], &p[r * cols..(r + 1) * cols], dd[r]);
                }
                // dv[j0..] += P^T dO, dq += scale dS k, dk[j0..] += scale dS^T q
                let dv_rows = &mut dv_sum[j0 * d.ev..(j0 + cols) * d.ev];
                block_product(cols, d.ev, rows, dv_rows, d.ev, true, (p, 1, cols), (gm, grs, 1), T::ONE);
                block_product(rows, d.e, cols, dq_block, d.e, true, (ds, cols, 1), (kj, krs, 1), scale);
                let dk_rows = &mut dk_sum[j0 * d.e..(j0 + cols) * d.e];
                block_product(cols, d.e, rows, dk_rows, d.e, true, (ds, 1, cols), (qm, qrs, 1), scale);
            }
            // SAFETY: rows i0..i0 + rows of dq's batch matrix b belong to query block qb,
            // this chunk's alone; the dense layout gives those rows to no other (matrix, row).
            unsafe { pq.write_rows(pq.at(b, i0), rows, d.e, dq_block) };
        }
        // SAFETY: sum matrix t (dk, dv) belongs to this task alone (its batch matrix's
        // gradient with one chunk, its private partial sum with more); the dense layouts
        // give its rows to no other (matrix, row).
        unsafe {
            pk.write_rows(pk.at(t, 0), d.s, d.e, dk_sum);
            pv.write_rows(pv.at(t, 0), d.s, d.ev, dv_sum);
        }
    };
    // A unit is `per_chunk` query blocks against every key, twice the forward's products.
    let unit_work = (per_chunk * d.bq).min(d.l).saturating_mul(d.s).saturating_mul(2 * (d.e + d.ev));
    let units = (d.batch * chunks, units_per_task(d.batch, chunks, 4));
    run_units(units, d.work(), unit_work, scratch, task);
    if chunks == 1 {
        return Ok([dq, dk, dv]);
    }
    Ok([dq, sum_chunks(&dk, chunks, d.e, lk)?, sum_chunks(&dv, chunks, d.ev, lv)?])
}

/// `[batch * chunks, S, cols]` partial sums added up over the chunks into a `[batch, S,
/// cols]` buffer read through the dense `layout`.
fn sum_chunks<T: FloatElement>(parts: &[T], chunks: usize, cols: usize, layout: &Layout) -> Result<Buffer<T>> {
    let mut out = Buffer::<T>::zeros(OP, layout.numel())?;
    let r = layout.rank();
    let (batch, s) = (layout.numel() / (layout.shape()[r - 2] * cols).max(1), layout.shape()[r - 2]);
    let rs = if s <= 1 { cols } else { layout.strides()[r - 2] };
    for b in 0..batch {
        let base = batch_offset(layout, b);
        for j in 0..s {
            let o = &mut out[base + j * rs..base + j * rs + cols];
            for c in 0..chunks {
                let part = &parts[((b * chunks + c) * s + j) * cols..][..cols];
                for (x, &y) in o.iter_mut().zip(part) {
                    *x = *x + y;
                }
            }
        }
    }
    Ok(out)
}

/// A view's elements in row-major order (the log-sum-exp rows).
fn contiguous<'a, T: FloatElement>(s: &'a CpuStorage, l: &Layout) -> Result<Contiguous<'a, T>> {
    let data = s.as_slice::<T>().ok_or_else(|| Error::dtype(OP, format!("unexpected dtype {}", s.dtype())))?;
    Contiguous::of(OP, data, l, GRAIN_CHEAP)
}

fn mask_of<'a, T: FloatElement>(m: Option<(&'a CpuStorage, &'a Layout)>) -> Result<Mask<'a, T>> {
    Ok(match m {
        None => Mask::None,
        Some((s, l)) => match s.as_slice::<u8>() {
            Some(b) => Mask::Bool(b, l),
            None => Mask::Float(
                s.as_slice::<T>().ok_or_else(|| Error::dtype(OP, format!("unexpected mask dtype {}", s.dtype())))?,
                l,
            ),
        },
    })
}

fn dims(q: &Layout, k: &Layout, v: &Layout, spec: &Attention) -> Dims {
    let r = q.rank();
    let (batch, l) = (q.shape()[..r - 2].iter().product(), q.shape()[r - 2]);
    Dims {
        batch,
        l,
        s: k.shape()[r - 2],
        e: q.shape()[r - 1],
        ev: v.shape()[r - 1],
        bq: query_rows(batch, l, spec.causal),
    }
}

/// The output, stored through the checked dense layout `out`, and the per-row log-sum-exp
/// of checked operands (see [`crate::backend::Backend::attention_laid_out`]).
pub(crate) fn forward(
    (q, lq): (&CpuStorage, &Layout),
    (k, lk): (&CpuStorage, &Layout),
    (v, lv): (&CpuStorage, &Layout),
    mask: Option<(&CpuStorage, &Layout)>,
    spec: &Attention,
    out: &Layout,
) -> Result<[CpuStorage; 2]> {
    fn go<T: FloatElement>(
        q: (&CpuStorage, &Layout),
        k: (&CpuStorage, &Layout),
        v: (&CpuStorage, &Layout),
        mask: Option<(&CpuStorage, &Layout)>,
        spec: &Attention,
        out: &Layout,
    ) -> Result<[CpuStorage; 2]>
    where
        Buffer<T>: Into<CpuStorage>,
    {
        let (mq, mk, mv) = (Matrices::of(q.0, q.1)?, Matrices::of(k.0, k.1)?, Matrices::of(v.0, v.1)?);
        let d = dims(q.1, k.1, v.1, spec);
        let (out, lse) = forward_typed(&mq, &mk, &mv, &mask_of::<T>(mask)?, d, spec, out)?;
        Ok([out.into(), lse.into()])
    }
    match q {
        CpuStorage::F32(_) => go::<f32>((q, lq), (k, lk), (v, lv), mask, spec, out),
        CpuStorage::F64(_) => go::<f64>((q, lq), (k, lk), (v, lv), mask, spec, out),
        _ => Err(Error::dtype(OP, format!("the query must be float, got {}", q.dtype()))),
    }
}

/// The gradients with respect to query, key and value of checked operands, each stored
/// through its checked dense layout in `grads` (see
/// [`crate::backend::Backend::attention_backward_laid_out`]).
pub(crate) fn backward(
    [q, k, v, out, lse, grad]: [(&CpuStorage, &Layout); 6],
    mask: Option<(&CpuStorage, &Layout)>,
    spec: &Attention,
    grads: [&Layout; 3],
) -> Result<[CpuStorage; 3]> {
    fn go<T: FloatElement>(
        ops: [(&CpuStorage, &Layout); 6],
        mask: Option<(&CpuStorage, &Layout)>,
        spec: &Attention,
        grads: [&Layout; 3],
    ) -> Result<[CpuStorage; 3]>
    where
        Buffer<T>: Into<CpuStorage>,
    {
        let lse = contiguous::<T>(ops[4].0, ops[4].1)?;
        let saved = Saved {
            q: Matrices::of(ops[0].0, ops[0].1)?,
            k: Matrices::of(ops[1].0, ops[1].1)?,
            v: Matrices::of(ops[2].0, ops[2].1)?,
            out: Matrices::of(ops[3].0, ops[3].1)?,
            lse: lse.slice(),
            grad: Matrices::of(ops[5].0, ops[5].1)?,
        };
        let d = dims(ops[0].1, ops[1].1, ops[2].1, spec);
        let [dq, dk, dv] = backward_typed(&saved, &mask_of::<T>(mask)?, d, spec, grads)?;
        Ok([dq.into(), dk.into(), dv.into()])
    }
    let ops = [q, k, v, out, lse, grad];
    match q.0 {
        CpuStorage::F32(_) => go::<f32>(ops, mask, spec, grads),
        CpuStorage::F64(_) => go::<f64>(ops, mask, spec, grads),
        _ => Err(Error::dtype(OP, format!("the query must be float, got {}", q.0.dtype()))),
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::attention::Attention;
    use crate::{DType, Tensor};

    /// The heads of `[B, T, H, D]` data viewed as `[B, H, T, D]`, as multi-head attention
    /// splits its projections.
    fn heads(b: usize, t: usize, h: usize, d: usize) -> Tensor {
        Tensor::randn([b, t, h, d]).unwrap().to_dtype(DType::F64).permute(&[0, 2, 1, 3]).unwrap()
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
        let (a, b) = (a.to_vec_f64().unwrap(), b.to_vec_f64().unwrap());
        assert_eq!(a.len(), b.len());
        a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
    }

    /// Views whose rows lie apart (gathered into dense blocks), a broadcast key and value
    /// (read in place), a key and value per head (gathered) and a transposed query
    /// (copied) give what their contiguous copies give, forward and backward, with and
    /// without the causal triangle, over several query and key blocks, with few batch
    /// matrices (each split into chunks) and many (one chunk each, summed into the
    /// gradient's layout). The output and gradients lie in memory as their operands do:
    /// the heads' as `[B, T, H, D]`, the broadcast ones and the transposed query's
    /// contiguous.
    #[test]
    fn strided_views_match_contiguous_copies() {
        for (b, h) in [(2, 3), (8, 4)] {
            strided_views_match(b, h);
        }
    }

    /// The output and gradients are allocated without clearing: every element is written,
    /// including a fully masked row's output (0) and, with no query at all, the key and
    /// value gradients (0). Each call follows the release of a buffer of NaNs of the
    /// result's size, which the buffer pool hands out again.
    #[test]
    fn every_element_of_the_results_is_written() {
        let stale = |shape: [usize; 4]| drop(Tensor::full(shape, f64::NAN, DType::F64).unwrap());
        let spec = Attention { scale: 0.5, causal: false };
        let (q, k, v) = (heads(2, 70, 3, 8), heads(2, 40, 3, 8), heads(2, 40, 3, 8));
        // Query row 5 sees no key.
        let keep: Vec<f64> = (0..70 * 40).map(|i| if i / 40 == 5 { 0.0 } else { 1.0 }).collect();
        let mask = Tensor::from_vec(keep, [70, 40]).unwrap().to_dtype(DType::U8);
        stale([2, 3, 70, 8]);
        let (out, lse) = q.attention(&k, &v, Some(&mask), &spec).unwrap();
        let out_v = out.to_vec_f64().unwrap();
        assert!(out_v.iter().all(|x| x.is_finite()));
        assert!(out.narrow(2, 5, 1).unwrap().to_vec_f64().unwrap().iter().all(|&x| x == 0.0));
        let g = heads(2, 70, 3, 8);
        stale([2, 3, 40, 8]);
        let grads = q.attention_backward(&k, &v, Some(&mask), &out, &lse, &g, &spec).unwrap();
        for grad in [&grads.0, &grads.1, &grads.2] {
            assert!(grad.to_vec_f64().unwrap().iter().all(|x| x.is_finite()));
        }
        // No query: zero key and value gradients.
        let (q0, g0) = (heads(2, 0, 3, 8), heads(2, 0, 3, 8));
        let (out0, lse0) = q0.attention(&k, &v, None, &spec).unwrap();
        stale([2, 3, 40, 8]);
        let grads = q0.attention_backward(&k, &v, None, &out0, &lse0, &g0, &spec).unwrap();
        assert_eq!(grads.0.numel(), 0);
        for grad in [&grads.1, &grads.2] {
            assert_eq!(grad.shape(), &[2, 3, 40, 8]);
            assert!(grad.to_vec_f64().unwrap().iter().all(|&x| x == 0.0));
        }
    }

    /// Tall query blocks only without the causal mask and where they leave enough units.
    #[test]
    fn query_blocks_are_tall_only_with_enough_units_and_no_causal_mask() {
        use super::{BQ, BQ_SHORT, query_rows};
        assert_eq!(query_rows(128, 256, false), BQ);
        assert_eq!(query_rows(4, 270, false), BQ);
        assert_eq!(query_rows(128, 256, true), BQ_SHORT);
        assert_eq!(query_rows(1, 256, false), BQ_SHORT);
        assert_eq!(query_rows(2, 270, false), BQ_SHORT);
    }

    /// Short heads share a task and its buffers (gathered blocks, score blocks, gradient
    /// sums): each head's output and gradients are bitwise those of a call on that head
    /// alone, whose task has buffers of its own, with and without the causal triangle.
    #[test]
    fn heads_sharing_a_task_match_a_call_per_head() {
        crate::manual_seed(5);
        let (b, h, t, d) = (8, 32, 12, 4);
        let (q, k, v, g) = (heads(b, t, h, d), heads(b, t, h, d), heads(b, t, h, d), heads(b, t, h, d));
        let one = |x: &Tensor, i: usize, j: usize| x.narrow(0, i, 1).unwrap().narrow(1, j, 1).unwrap();
        for causal in [false, true] {
            let spec = Attention { scale: 0.5, causal };
            let (out, lse) = q.attention(&k, &v, None, &spec).unwrap();
            let (dq, dk, dv) = q.attention_backward(&k, &v, None, &out, &lse, &g, &spec).unwrap();
            for (i, j) in [(0, 0), (0, 1), (3, 17), (7, 31)] {
                let (qi, ki, vi, gi) = (one(&q, i, j), one(&k, i, j), one(&v, i, j), one(&g, i, j));
                let (out_i, lse_i) = qi.attention(&ki, &vi, None, &spec).unwrap();
                let grads_i = qi.attention_backward(&ki, &vi, None, &out_i, &lse_i, &gi, &spec).unwrap();
                let pairs = [(&out, &out_i), (&lse, &lse_i), (&dq, &grads_i.0), (&dk, &grads_i.1), (&dv, &grads_i.2)];
                for (n, (all, alone)) in pairs.into_iter().enumerate() {
                    let all = one(all, i, j).to_vec_f64().unwrap();
                    assert_eq!(all, alone.to_vec_f64().unwrap(), "result {n} of head ({i}, {j}), causal {causal}");
                }
            }
        }
    }

    fn strided_views_match(b: usize, h: usize) {
        crate::manual_seed(11);
        let (l, s, d) = (150, 300, 8);
        let q = heads(b, l, h, d);
        // One key and value head shared by every head (batch stride 0, rows adjacent), and
        // a key and value per head (rows `H * D` apart, gathered by each task).
        let shared = [0, 1].map(|_| heads(b, s, 1, d).expand([b, h, s, d]).unwrap());
        let per_head = [0, 1].map(|_| heads(b, s, h, d));
        let qt = Tensor::randn([b, h, d, l]).unwrap().to_dtype(DType::F64).transpose(2, 3).unwrap();
        let g = heads(b, l, h, d);
        let heads_order = |t: &Tensor| t.permute(&[0, 2, 1, 3]).unwrap().is_contiguous();
        for query in [&q, &qt] {
            for ([k, v], kv_heads) in [(&shared, false), (&per_head, true)] {
                for causal in [false, true] {
                    let spec = Attention { scale: 0.3, causal };
                    let (qc, kc, vc, gc) = (query.contiguous(), k.contiguous(), v.contiguous(), g.contiguous());
                    let (out, lse) = query.attention(k, v, None, &spec).unwrap();
                    let (out_c, lse_c) = qc.attention(&kc, &vc, None, &spec).unwrap();
                    assert!(max_diff(&out, &out_c) < 1e-12 && max_diff(&lse, &lse_c) < 1e-12);
                    let as_query = std::ptr::eq(query, &q);
                    assert!(if as_query { heads_order(&out) } else { out.is_contiguous() });
                    // The output read back through a strided view of itself, as the backward
                    // of the heads' merge hands it over.
                    let out_view = out.permute(&[0, 2, 1, 3]).unwrap().contiguous().permute(&[0, 2, 1, 3]).unwrap();
                    let grads = query.attention_backward(k, v, None, &out_view, &lse, &g, &spec).unwrap();
                    let grads_c = qc.attention_backward(&kc, &vc, None, &out_c, &lse_c, &gc, &spec).unwrap();
                    for (x, y) in [(&grads.0, &grads_c.0), (&grads.1, &grads_c.1), (&grads.2, &grads_c.2)] {
                        assert!(max_diff(x, y) < 1e-11, "causal {causal}: {}", max_diff(x, y));
                    }
                    assert!(if as_query { heads_order(&grads.0) } else { grads.0.is_contiguous() });
                    for grad in [&grads.1, &grads.2] {
                        assert!(if kv_heads { heads_order(grad) } else { grad.is_contiguous() });
                    }
                }
            }
        }
    }
}
