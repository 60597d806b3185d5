//! Strided iteration and parallel splitting for elementwise kernels.
//!
//! Kernels write a fresh contiguous output. They coalesce the output and input layouts into
//! as few dimensions as possible ([`crate::layout::coalesce`]), then walk *runs*: stretches
//! of the innermost dimension, where each input advances by a fixed stride. A run is handed
//! to a tight loop specialised for unit or zero strides, so contiguous and row-broadcast
//! operations reach memory bandwidth whatever their rank.

use super::team::Grain;
pub(crate) use super::team::threads;
use crate::layout::{Layout, Strides, coalesce};
use rayon::prelude::*;
use smallvec::SmallVec;

/// Elements below which a cheap elementwise kernel runs on one thread: splitting smaller
/// work costs more in scheduling than it saves.
pub(crate) const GRAIN_CHEAP: usize = 1 << 15;
/// The same threshold for transcendental kernels (exp, tanh, ...), which pay off sooner.
pub(crate) const GRAIN_COSTLY: usize = 1 << 12;

/// A coalesced iteration space over an output of `numel` elements and `N` inputs.
pub(crate) struct Runs<const N: usize> {
    pub shape: Strides,
    pub strides: [Strides; N],
    pub offsets: [usize; N],
}

impl<const N: usize> Runs<N> {
    /// The iteration space of `N` input layouts that share the output shape of the first.
    pub fn new(layouts: [&Layout; N]) -> Self {
        let shape = layouts[0].shape().clone();
        let strides_in: [&[usize]; N] = std::array::from_fn(|k| layouts[k].strides());
        // Coalesce together with the output's contiguous strides so that every run is also
        // one contiguous stretch of the output.
        let out_strides = shape.contiguous_strides();
        let mut all: SmallVec<[&[usize]; 4]> = SmallVec::new();
        all.push(&out_strides);
        all.extend_from_slice(&strides_in);
        let (cshape, cstrides) = coalesce_dyn(&shape, &all);
        Runs {
            shape: cshape,
            strides: std::array::from_fn(|k| cstrides[k + 1].clone()),
            offsets: std::array::from_fn(|k| layouts[k].offset()),
        }
    }

    /// The inner stride of input `k` (0 when the space is a single element).
    pub fn inner_stride(&self, k: usize) -> usize {
        self.strides[k].last().copied().unwrap_or(0)
    }

    /// Calls `f(input_offsets, run_len, output_position)` for each run covering the output
    /// positions `start..end`.
    pub fn for_each(&self, start: usize, end: usize, mut f: impl FnMut([usize; N], usize, usize)) {
        if start >= end {
            return;
        }
        let rank = self.shape.len();
        if rank == 0 {
            f(self.offsets, 1, start);
            return;
        }
        let inner = self.shape[rank - 1];
        // The multi-index of `start` and the matching input offsets.
        let mut idx: SmallVec<[usize; 4]> = SmallVec::from_elem(0, rank);
        let mut rem = start;
        for d in (0..rank).rev() {
            idx[d] = rem % self.shape[d];
            rem /= self.shape[d];
        }
        let mut offs = self.offsets;
        for k in 0..N {
            for d in 0..rank {
                offs[k] += idx[d] * self.strides[k][d];
            }
        }
        let mut pos = start;
        loop {
            let col = idx[rank - 1];
            let len = (inner - col).min(end - pos);
            f(offs, len, pos);
            pos += len;
            if pos >= end {
                return;
            }
            // Back to column 0, then carry into the outer dimensions.
            for k in 0..N {
                offs[k] -= col * self.strides[k][rank - 1];
            }
            idx[rank - 1] = 0;
            let mut d = rank - 1;
            while d > 0 {
                d -= 1;
                idx[d] += 1;
                for k in 0..N {
                    offs[k] += self.strides[k][d];
                }
                if idx[d] < self.shape[d] {
                    break;
                }
                for k in 0..N {
                    offs[k] -= self.shape[d] * self.strides[k][d];
                }
                idx[d] = 0;
            }
        }
    }
}

fn coalesce_dyn(shape: &[usize], strides: &[&[usize]]) -> (Strides, SmallVec<[Strides; 4]>) {
    match strides.len() {
        2 => {
            let (s, [a, b]) = coalesce(shape, [strides[0], strides[1]]);
            (s, SmallVec::from_iter([a, b]))
        }
        3 => {
            let (s, [a, b, c]) = coalesce(shape, [strides[0], strides[1], strides[2]]);
            (s, SmallVec::from_iter([a, b, c]))
        }
        _ => {
            let (s, [a, b, c, d]) = coalesce(shape, [strides[0], strides[1], strides[2], strides[3]]);
            (s, SmallVec::from_iter([a, b, c, d]))
        }
    }
}

/// Fills `out` by calling `f(chunk_start, chunk)` on disjoint chunks, in parallel when `out`
/// has at least `grain` elements.
///
/// Inlined, so that the call of small work is the caller's own loop: a kernel of a few
/// elements otherwise paid a call and a closure for every tensor.
#[inline]
pub(crate) fn fill_chunks<T: Send>(out: &mut [T], grain: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    // Small work never asks rayon for its thread count (a thread-local lookup per call).
    if out.len() < grain {
        f(0, out);
        return;
    }
    fill_chunks_parallel(out, grain, f);
}

/// [`fill_chunks`] of at least `grain` elements.
#[inline(never)]
fn fill_chunks_parallel<T: Send>(out: &mut [T], grain: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    let n = out.len();
    let threads = threads();
    if threads <= 1 {
        f(0, out);
        return;
    }
    let chunks = (n / grain).clamp(1, threads * 4);
    let chunk = n.div_ceil(chunks);
    par_chunks(out, chunk, |i, c| f(i * chunk, c));
}

/// A raw pointer that may cross threads; users hand each thread a disjoint part.
struct SendPtr<T>(*mut T);
// Not derived: the derive would require `T: Copy`.
impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SendPtr<T> {}
impl<T> SendPtr<T> {
    /// The pointer; a method so that closures capture the whole `Send` wrapper.
    fn get(self) -> *mut T {
        self.0
    }
}
// SAFETY: only used by `par_chunks`, which gives every index (and so every chunk) to
// exactly one thread.
unsafe impl<T: Send> Send for SendPtr<T> {}
unsafe impl<T: Send> Sync for SendPtr<T> {}

/// Calls `f(i)` for every `i` in `0..n`, in parallel on the worker threads. From a thread
/// outside the `rayon` pool the caller works along with [`super::team`]'s helpers; inside
/// it, `rayon` splits the work as usual. `rayon`'s threads also run the program's own work,
/// so each task sets the kernels' float mode for itself, and the caller waits in its own
/// mode: while it waits, `rayon` may hand it the program's work.
#[inline]
pub(crate) fn par_for<F: Fn(usize) + Sync>(n: usize, f: F) {
    par_for_dyn(n, Grain::Tuned, site::<F>(), &f);
}

/// A value fixed per closure type, so per call site of [`par_for`]: the address of the
/// type's name (which names the generic arguments of the function that made the closure,
/// so a kernel shared by several ops gives each its own).
#[inline]
fn site<F>() -> usize {
    std::any::type_name::<F>().as_ptr() as usize
}

/// [`par_for`] for loops whose every index is tens of microseconds of work or more (blocks
/// of a large matrix product): from outside `rayon`'s pool the helpers are always offered
/// the loop, whatever the thread tuner thinks of short loops ([`Grain::Heavy`]).
#[inline]
pub(crate) fn par_for_heavy<F: Fn(usize) + Sync>(n: usize, f: F) {
    par_for_dyn(n, Grain::Heavy, site::<F>(), &f);
}

/// The body of [`par_for`], compiled once. Were it generic, `rayon`'s splitting and job
/// machinery would be compiled again for every kernel's closure (most of this crate's
/// machine code, and most of its build time), while the indirect call per index costs
/// nothing next to an index's share of a kernel; the team path takes `&dyn Fn` anyway.
fn par_for_dyn(n: usize, grain: Grain, site: usize, f: &(dyn Fn(usize) + Sync)) {
    if rayon::current_thread_index().is_some() {
        super::float_mode::outside(|| {
            (0..n).into_par_iter().for_each(|i| {
                let _mode = super::float_mode::enter_task();
                f(i);
            })
        });
        return;
    }
    super::team::run(n, threads() - 1, grain, super::team_tuner::loop_key(site, n), f);
}

/// Calls `f(index, chunk)` for the consecutive `chunk_len`-element chunks of `out` (the last
/// may be shorter), in parallel on the worker threads ([`par_for`]).
pub(crate) fn par_chunks<T: Send>(out: &mut [T], chunk_len: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    let n = out.len();
    let chunk_len = chunk_len.max(1);
    let base = SendPtr(out.as_mut_ptr());
    par_for(n.div_ceil(chunk_len), |i| {
        let start = i * chunk_len;
        let len = chunk_len.min(n - start);
        // SAFETY: `par_for` calls each index once, so the chunks are disjoint parts of
        // `out`, which stays mutably borrowed until it returns.
        let chunk = unsafe { std::slice::from_raw_parts_mut(base.get().add(start), len) };
        f(i, chunk);
    });
}

/// Rows per parallel task for a row-wise kernel over `n_rows` rows of `row_len` elements:
/// at least `grain` elements per task, and at most about four tasks per thread, because
/// thousands of tiny tasks cost more in scheduling than the rows do in work.
pub(crate) fn rows_per_task(n_rows: usize, row_len: usize, grain: usize) -> usize {
    let by_grain = (grain / row_len.max(1)).max(1);
    by_grain.max(n_rows.div_ceil(threads() * 4))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shape::Shape;

    fn collect(runs: &Runs<1>, start: usize, end: usize) -> Vec<(usize, usize, usize)> {
        let mut v = vec![];
        runs.for_each(start, end, |[o], len, pos| v.push((o, len, pos)));
        v
    }

    #[test]
    fn transposed_runs_walk_columns() {
        let l = Layout::contiguous(Shape::from([2, 3])).transposed(0, 1); // [3, 2], strides [1, 3]
        let runs = Runs::new([&l]);
        assert_eq!(collect(&runs, 0, 6), vec![(0, 2, 0), (1, 2, 2), (2, 2, 4)]);
        // A range that starts and ends mid-run.
        assert_eq!(collect(&runs, 1, 4), vec![(3, 1, 1), (1, 2, 2)]);
    }

    #[test]
    fn contiguous_is_one_run() {
        let l = Layout::contiguous(Shape::from([4, 5, 6]));
        assert_eq!(collect(&Runs::new([&l]), 0, 120), vec![(0, 120, 0)]);
    }

    #[test]
    fn scalar_space() {
        let l = Layout::contiguous(Shape::scalar());
        assert_eq!(collect(&Runs::new([&l]), 0, 1), vec![(0, 1, 0)]);
    }
}
