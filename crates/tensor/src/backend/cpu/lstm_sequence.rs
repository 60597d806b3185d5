//! One LSTM direction over a whole sequence (see `ops/lstm.rs`), forward and backward,
//! each in one parallel loop.
//!
//! Every batch row's recurrence is independent of the others': row `r`'s state at step `t`
//! depends only on row `r` at step `t - 1`. So instead of one parallel product and one
//! parallel gate kernel per step (two synchronisations of the threads per step, and the
//! steps' slots joined at the end), the rows are cut into pieces and each piece runs through
//! all steps on its own thread: its product of its hidden rows with the recurrent weight
//! (on the calling thread through `gemm`), then its rows of the gate kernel, written straight
//! into the output. The threads meet once per sequence. The backward runs the same way from
//! the last step to the first, writing each step's gate gradients into the input
//! projection's gradient, which the caller then multiplies once for the weight's gradient.
//!
//! The pieces depend on the batch size alone, never on the number of threads, so results
//! are the same on any number of threads.

use super::block::block_product;
use super::contiguous::Contiguous;
use super::lstm::{Out, backward_rows, forward_row, slices};
use crate::dtype::FloatElement;
use crate::host::iter::{GRAIN_COSTLY, par_for};
use crate::layout::Layout;
use crate::ops::lstm::{LSTM_SLOTS, LstmRun};
use crate::storage::{Buffer, CpuStorage};
use crate::{Error, Result};
use std::ops::Range;

/// The rows a piece has when the batch allows several such pieces: narrower products
/// would waste the kernels' registers.
const PIECE_ROWS: usize = 16;

/// The fewest rows in a piece. A batch of 16 to 31 rows is cut into two pieces of 8 to 15
/// rows rather than run as one: one thread running the whole recurrence while the other
/// waits cost more than the narrower products (an `LSTM(28, 256)` step at batch 16, 2
/// threads, took 7.4-8.3 ms as one piece and 5.2-5.5 ms as two).
const MIN_PIECE_ROWS: usize = 8;

/// The most pieces a batch is cut into (enough to balance 16 threads).
const MAX_PIECES: usize = 16;

/// The batch rows of piece `p` of a batch of `b`: near-equal pieces (see [`pieces`]).
fn piece(b: usize, p: usize) -> Range<usize> {
    let count = pieces(b);
    let start = |p: usize| if p >= count { b } else { p * b / count };
    start(p)..start(p + 1)
}

/// How many pieces a batch of `b` rows is cut into: pieces of at least [`PIECE_ROWS`] rows,
/// but at least two pieces where each keeps [`MIN_PIECE_ROWS`]. The count depends on the
/// batch alone, never on the thread count, so that every row's arithmetic, and with it
/// the result, is the same on any number of threads.
fn pieces(b: usize) -> usize {
    (b / PIECE_ROWS).max((b / MIN_PIECE_ROWS).min(2)).clamp(1, MAX_PIECES)
}

/// Where row `r` of slot `k` of step `t` starts in a contiguous `[T, 7, B, H]` buffer.
fn slot_at(run: &LstmRun, t: usize, k: usize, r: usize) -> usize {
    ((t * LSTM_SLOTS + k) * run.batch + r) * run.hidden
}

/// A row-major `rows x cols` matrix copied with its rows a stride apart that spans an odd
/// number of cache lines, and that stride.
///
/// The per-step products read the recurrent weight in place, a column of it per step of
/// their inner loop: with rows a multiple of 4 KiB apart (`4H` `f32` at `H` = 256) every
/// such column falls into one set of the L1 cache, which holds 8 of its 256 lines, so each
/// step of the inner loop missed L1. An odd number of lines apart, the column spreads over
/// every set.
fn spread_rows<T: FloatElement>(op: &'static str, m: &[T], rows: usize, cols: usize) -> Result<(Buffer<T>, usize)> {
    const LINE: usize = 64;
    let per_line = (LINE / std::mem::size_of::<T>()).max(1);
    let lines = cols.div_ceil(per_line);
    let stride = (lines | 1) * per_line;
    let mut out = Buffer::<T>::uninit(op, rows * stride)?;
    if cols > 0 {
        for (dst, src) in out.chunks_exact_mut(stride).zip(m.chunks_exact(cols)) {
            dst[..cols].copy_from_slice(src);
        }
    }
    Ok((out, stride))
}

/// The forward's operands as contiguous slices; `w_t` is `w_hh^T`, `[H, 4H]`, its rows
/// `w_rs` apart ([`spread_rows`]).
struct Inputs<'a, T> {
    gi: &'a [T],
    w_t: &'a [T],
    w_rs: usize,
    h0: &'a [T],
    c0: &'a [T],
    run: &'a LstmRun,
}

/// Runs the rows `rows` through every step, writing their slots into `out`
/// (`[T, 7, B, H]`).
fn forward_piece<T: FloatElement>(s: &Inputs<'_, T>, out: Out<T>, rows: Range<usize>) {
    let (b, h, g) = (s.run.batch, s.run.hidden, 4 * s.run.hidden);
    let (r0, n) = (rows.start, rows.len());
    let mut a = vec![T::ZERO; n * g];
    let mut prev: Option<usize> = None;
    for t in s.run.order() {
        let (hp, cp): (&[T], &[T]) = match prev {
            None => (&s.h0[r0 * h..(r0 + n) * h], &s.c0[r0 * h..(r0 + n) * h]),
            // SAFETY: the `n` rows of the previous step's slots 5 (h) and 4 (c) from row
            // `r0` are contiguous, inside the buffer, written by this piece alone, and not
            // written again while these borrows live (this step writes step `t`'s slots).
            Some(p) => unsafe {
                (
                    std::slice::from_raw_parts(out.at(slot_at(s.run, p, 5, r0)), n * h),
                    std::slice::from_raw_parts(out.at(slot_at(s.run, p, 4, r0)), n * h),
                )
            },
        };
        block_product(n, g, h, &mut a, g, false, (hp, h, 1), (s.w_t, s.w_rs, 1), T::ONE);
        for r in 0..n {
            // SAFETY: row `r0 + r` of each slot of step `t` belongs to this piece alone and
            // lies inside the buffer; the seven rows are disjoint from each other and from
            // the previous step's rows read above.
            let slots = std::array::from_fn(|k| unsafe {
                std::slice::from_raw_parts_mut(out.at(slot_at(s.run, t, k, r0 + r)), h)
            });
            let gi = &s.gi[(t * b + r0 + r) * g..(t * b + r0 + r + 1) * g];
            forward_row(&a[r * g..(r + 1) * g], gi, &cp[r * h..(r + 1) * h], slots);
        }
        prev = Some(t);
    }
}

fn forward_typed<T: FloatElement>(s: &Inputs<'_, T>) -> Result<Buffer<T>> {
    let run = s.run;
    let mut out = Buffer::<T>::uninit("lstm_sequence", run.steps * LSTM_SLOTS * run.batch * run.hidden)?;
    let dst = Out(out.as_mut_ptr());
    par_for(pieces(run.batch), |p| forward_piece(s, dst, piece(run.batch, p)));
    Ok(out)
}

/// See [`crate::backend::Backend::lstm_sequence`]; operands validated.
pub(crate) fn forward([gi, w_hh, h0, c0]: [(&CpuStorage, &Layout); 4], run: &LstmRun) -> Result<CpuStorage> {
    let op = "lstm_sequence";
    fn go<T: FloatElement>(op: &'static str, v: [(&CpuStorage, &Layout); 4], run: &LstmRun) -> Result<Buffer<T>> {
        let t = slices::<T>(op, &[v[0].0, v[1].0, v[2].0, v[3].0])?;
        let gi = Contiguous::of(op, t[0], v[0].1, GRAIN_COSTLY)?;
        // Each step multiplies by the transpose: lay it out once.
        let w_t = Contiguous::of(op, t[1], &v[1].1.transposed(0, 1), GRAIN_COSTLY)?;
        let (w_t, w_rs) = spread_rows(op, w_t.slice(), run.hidden, 4 * run.hidden)?;
        let h0 = Contiguous::of(op, t[2], v[2].1, GRAIN_COSTLY)?;
        let c0 = Contiguous::of(op, t[3], v[3].1, GRAIN_COSTLY)?;
        forward_typed(&Inputs { gi: gi.slice(), w_t: &w_t, w_rs, h0: h0.slice(), c0: c0.slice(), run })
    }
    match gi.0 {
        CpuStorage::F32(_) => Ok(go::<f32>(op, [gi, w_hh, h0, c0], run)?.into()),
        CpuStorage::F64(_) => Ok(go::<f64>(op, [gi, w_hh, h0, c0], run)?.into()),
        other => Err(Error::dtype(op, format!("the operands must be float, got {}", other.dtype()))),
    }
}

/// The backward's operands as contiguous slices; `w` is `w_hh`, `[4H, H]`, its rows `w_rs`
/// apart ([`spread_rows`]), `gs` the state gradient `[T, 2, B, H]`.
struct Grads<'a, T> {
    y: &'a [T],
    gs: &'a [T],
    w: &'a [T],
    w_rs: usize,
    c0: &'a [T],
    run: &'a LstmRun,
}

/// The backward's outputs: the input projection's gradient `[T, B, 4H]` and the initial
/// state's, `[B, H]` each.
#[derive(Clone, Copy)]
struct GradsOut<T> {
    d_gi: Out<T>,
    dh0: Out<T>,
    dc0: Out<T>,
}

/// Runs the rows `rows` back through every step, writing their gate gradients into `d_gi`
/// and their initial state's gradients into `dh0` and `dc0`.
fn backward_piece<T: FloatElement>(s: &Grads<'_, T>, out: GradsOut<T>, rows: Range<usize>) {
    let (b, h, g) = (s.run.batch, s.run.hidden, 4 * s.run.hidden);
    let (r0, n) = (rows.start, rows.len());
    let (mut dh, mut dc, mut dc_prev) = (vec![T::ZERO; n * h], vec![T::ZERO; n * h], vec![T::ZERO; n * h]);
    let order: Vec<usize> = s.run.order().collect();
    // The piece's rows of slot `k` of step `t` in `y`: one contiguous block.
    let slot_rows = |t: usize, k: usize| &s.y[slot_at(s.run, t, k, r0)..slot_at(s.run, t, k, r0) + n * h];
    // Its rows of the gradient of `c_t` (`k` 0) or `h_t` (1).
    let state_rows = |t: usize, k: usize| &s.gs[((t * 2 + k) * b + r0) * h..((t * 2 + k) * b + r0 + n) * h];
    for (m, &t) in order.iter().enumerate().rev() {
        let c_prev = match m {
            0 => &s.c0[r0 * h..(r0 + n) * h],
            _ => slot_rows(order[m - 1], 4),
        };
        // SAFETY: rows `r0..r0 + n` of step `t` of the `[T, B, 4H]` gradient are one
        // contiguous block inside the buffer that belongs to this piece alone.
        let dp = unsafe { std::slice::from_raw_parts_mut(out.d_gi.at((t * b + r0) * g), n * g) };
        let y = std::array::from_fn(|k| slot_rows(t, k));
        // The state's own gradient joins the one from the next step before the gates'.
        for (d, &e) in dc.iter_mut().zip(state_rows(t, 0)) {
            *d = *d + e;
        }
        for (d, &e) in dh.iter_mut().zip(state_rows(t, 1)) {
            *d = *d + e;
        }
        backward_rows(h, y, None, (&dh, &dc, c_prev), dp, &mut dc_prev);
        std::mem::swap(&mut dc, &mut dc_prev);
        block_product(n, h, g, &mut dh, h, false, (dp, g, 1), (s.w, s.w_rs, 1), T::ONE);
    }
    // SAFETY: rows `r0..r0 + n` of the `[B, H]` state gradients belong to this piece alone.
    unsafe {
        std::slice::from_raw_parts_mut(out.dh0.at(r0 * h), n * h).copy_from_slice(&dh);
        std::slice::from_raw_parts_mut(out.dc0.at(r0 * h), n * h).copy_from_slice(&dc);
    }
}

fn backward_typed<T: FloatElement>(s: &Grads<'_, T>) -> Result<[Buffer<T>; 3]> {
    let op = "lstm_sequence_backward";
    let run = s.run;
    let mut d_gi = Buffer::<T>::uninit(op, run.steps * run.batch * 4 * run.hidden)?;
    let mut dh0 = Buffer::<T>::uninit(op, run.batch * run.hidden)?;
    let mut dc0 = Buffer::<T>::uninit(op, run.batch * run.hidden)?;
    let out = GradsOut { d_gi: Out(d_gi.as_mut_ptr()), dh0: Out(dh0.as_mut_ptr()), dc0: Out(dc0.as_mut_ptr()) };
    par_for(pieces(run.batch), |p| backward_piece(s, out, piece(run.batch, p)));
    Ok([d_gi, dh0, dc0])
}

/// See [`crate::backend::Backend::lstm_sequence_backward`]; operands validated.
pub(crate) fn backward([y, gs, w_hh, c0]: [(&CpuStorage, &Layout); 4], run: &LstmRun) -> Result<[CpuStorage; 3]> {
    let op = "lstm_sequence_backward";
    fn go<T: FloatElement>(op: &'static str, v: [(&CpuStorage, &Layout); 4], run: &LstmRun) -> Result<[CpuStorage; 3]>
    where
        CpuStorage: From<Buffer<T>>,
    {
        let t = slices::<T>(op, &[v[0].0, v[1].0, v[2].0, v[3].0])?;
        let [y, gs, w, c0] = [0, 1, 2, 3].map(|i| Contiguous::of(op, t[i], v[i].1, GRAIN_COSTLY));
        let (y, gs, w, c0) = (y?, gs?, w?, c0?);
        let (w, w_rs) = spread_rows(op, w.slice(), 4 * run.hidden, run.hidden)?;
        let s = Grads { y: y.slice(), gs: gs.slice(), w: &w, w_rs, c0: c0.slice(), run };
        Ok(backward_typed(&s)?.map(CpuStorage::from))
    }
    match y.0 {
        CpuStorage::F32(_) => go::<f32>(op, [y, gs, w_hh, c0], run),
        CpuStorage::F64(_) => go::<f64>(op, [y, gs, w_hh, c0], run),
        other => Err(Error::dtype(op, format!("the operands must be float, got {}", other.dtype()))),
    }
}

#[cfg(test)]
mod tests {
    use super::{MIN_PIECE_ROWS, piece, pieces, spread_rows};
    use crate::backend::compose;
    use crate::backend::cpu::CpuBackend;
    use crate::ops::lstm::{LSTM_STATE_SLOT, LstmRun};
    use crate::storage::Storage;
    use crate::{Result, Tensor};
    use std::ops::Range;

    /// A tensor of varied values in about `[-1.5, 1.5]`.
    fn values(shape: &[usize], seed: f64) -> Result<Tensor> {
        let n = shape.iter().product::<usize>();
        let v: Vec<f64> = (0..n).map(|i| ((i as f64 * 0.37 + seed) * 0.7).sin() * 1.5).collect();
        Tensor::from_vec(v, shape.to_vec())
    }

    fn to_vec(s: &Storage) -> Vec<f64> {
        s.as_cpu().and_then(|c| c.as_slice::<f64>()).map(<[f64]>::to_vec).unwrap_or_default()
    }

    fn assert_close(what: &str, a: &[f64], b: &[f64]) {
        assert_eq!(a.len(), b.len(), "{what}");
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!((x - y).abs() < 1e-12, "{what}[{i}]: {x} vs {y}");
        }
    }

    /// The fused sequence against the default composition (a product and a step kernel per
    /// step), forward and backward, in both directions, for batches of one piece, of
    /// uneven pieces and of pieces that are not multiples of the vector width; the weight
    /// transposed and the state a strided view, so the kernels' copies are exercised too.
    #[test]
    fn sequence_kernels_match_the_composition_per_step() -> Result<()> {
        for (steps, batch, hidden) in [(1, 3, 4), (5, 37, 6), (4, 70, 17)] {
            let gi = values(&[steps, batch, 4 * hidden], 1.0)?;
            let w_hh = values(&[hidden, 4 * hidden], 2.0)?.t()?.mul_scalar(0.3);
            let h0 = values(&[hidden, batch], 3.0)?.t()?;
            let c0 = values(&[batch, hidden], 4.0)?;
            let gy = values(&[steps, 2, batch, hidden], 5.0)?;
            for reverse in [false, true] {
                let run = LstmRun { steps, batch, hidden, reverse };
                let fused = Tensor::lstm_sequence(&gi, &w_hh, &h0, &c0, reverse)?;
                let composed = gi.read3(&w_hh, &h0, |vg, vw, vh| {
                    c0.read(|vc| compose::lstm::sequence(&CpuBackend, vg, vw, vh, vc, &run))
                })?;
                assert_close("forward", &fused.to_vec::<f64>()?, &to_vec(&composed));

                let (d_gi, dh0, dc0) = Tensor::lstm_sequence_backward(&fused, &gy, &w_hh, &c0, reverse)?;
                let [e_gi, e_h, e_c] = fused.read3(&gy, &w_hh, |vy, vg, vw| {
                    c0.read(|vc| compose::lstm::sequence_backward(&CpuBackend, vy, vg, vw, vc, &run))
                })?;
                assert_close("d_gi", &d_gi.to_vec::<f64>()?, &to_vec(&e_gi));
                assert_close("dh0", &dh0.to_vec::<f64>()?, &to_vec(&e_h));
                assert_close("dc0", &dc0.to_vec::<f64>()?, &to_vec(&e_c));
            }
        }
        Ok(())
    }

    /// Rows keep their values at a stride of an odd number of 64-byte lines, whatever the
    /// width: one line, a multiple of 4 KiB (`4H` at `H` = 256), an odd count already.
    #[test]
    fn spread_rows_keeps_the_rows_an_odd_number_of_lines_apart() -> Result<()> {
        for (rows, cols, want) in [(3, 1, 16), (2, 1024, 1040), (4, 256, 272), (2, 48, 48), (5, 17, 48), (1, 0, 16)] {
            let m: Vec<f32> = (0..rows * cols).map(|i| i as f32).collect();
            let (out, stride) = spread_rows("test", &m, rows, cols)?;
            assert_eq!(stride, want, "{rows} x {cols}");
            assert_eq!((stride * 4 / 64) % 2, 1, "{rows} x {cols}");
            for r in 0..rows {
                assert_eq!(
                    &out[r * stride..r * stride + cols],
                    &m[r * cols..(r + 1) * cols],
                    "row {r} of {rows} x {cols}"
                );
            }
        }
        Ok(())
    }

    /// The pieces follow the batch alone, so one thread and several give the same bits.
    #[test]
    fn pieces_cover_the_batch_with_two_pieces_from_sixteen_rows() {
        let counts: Vec<usize> = [1, 8, 15, 16, 31, 32, 50, 64, 1000].iter().map(|&b| pieces(b)).collect();
        assert_eq!(counts, [1, 1, 1, 2, 2, 2, 3, 4, 16]);
        for b in 1..300 {
            let cut: Vec<Range<usize>> = (0..pieces(b)).map(|p| piece(b, p)).collect();
            assert_eq!(cut.first().map(|r| r.start), Some(0), "batch {b}");
            assert_eq!(cut.last().map(|r| r.end), Some(b), "batch {b}");
            assert!(cut.windows(2).all(|w| w[0].end == w[1].start), "batch {b}: {cut:?}");
            assert!(cut.len() == 1 || cut.iter().all(|r| r.len() >= MIN_PIECE_ROWS), "batch {b}: {cut:?}");
        }
    }

    #[test]
    fn results_do_not_depend_on_the_number_of_threads() -> Result<()> {
        let (steps, batch, hidden) = (3, 50, 8);
        let gi = values(&[steps, batch, 4 * hidden], 1.0)?.to_dtype(crate::DType::F32);
        let w_hh = values(&[4 * hidden, hidden], 2.0)?.to_dtype(crate::DType::F32);
        let c0 = values(&[batch, hidden], 4.0)?.to_dtype(crate::DType::F32);
        let gy = values(&[steps, 2, batch, hidden], 5.0)?.to_dtype(crate::DType::F32);
        let run = || -> Result<Vec<Vec<f32>>> {
            let y = Tensor::lstm_sequence(&gi, &w_hh, &c0, &c0, false)?;
            let (d_gi, dh0, dc0) = Tensor::lstm_sequence_backward(&y, &gy, &w_hh, &c0, false)?;
            [y, d_gi, dh0, dc0].iter().map(|t| t.to_vec::<f32>()).collect()
        };
        let want = run()?;
        for threads in [1, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .map_err(|e| crate::Error::invalid("test", e.to_string()))?;
            assert_eq!(pool.install(run)?, want, "{threads} threads");
        }
        Ok(())
    }

    /// The state view widens back to exactly the output it was taken from, and nothing
    /// else does: another slot's view, a copy, or a view cut in the batch.
    #[test]
    fn only_the_state_view_of_an_output_widens_to_it() -> Result<()> {
        let (steps, batch, hidden) = (3, 4, 5);
        let gi = values(&[steps, batch, 4 * hidden], 1.0)?;
        let w_hh = values(&[4 * hidden, hidden], 2.0)?;
        let s = values(&[batch, hidden], 3.0)?;
        let y = Tensor::lstm_sequence(&gi, &w_hh, &s, &s, false)?;
        let states = y.narrow(1, LSTM_STATE_SLOT, 2)?;
        let whole = Tensor::lstm_sequence_slots(&states)?;
        assert!(whole.shares_storage(&y) && whole.layout() == y.layout());
        assert_eq!(whole.to_vec::<f64>()?, y.to_vec::<f64>()?);
        for other in [
            y.narrow(1, LSTM_STATE_SLOT - 1, 2)?,
            y.narrow(1, LSTM_STATE_SLOT + 1, 2)?,
            states.contiguous(),
            states.narrow(2, 1, 2)?,
        ] {
            let err = Tensor::lstm_sequence_slots(&other).unwrap_err().to_string();
            assert!(err.contains("lstm_sequence_slots") && err.contains("state view"), "{err}");
        }
        Ok(())
    }

    #[test]
    fn operands_that_do_not_fit_are_errors_naming_the_op_and_shapes() -> Result<()> {
        let gi = values(&[2, 3, 8], 0.0)?;
        let w_hh = values(&[8, 2], 0.0)?;
        let s = values(&[3, 2], 0.0)?;
        let err = Tensor::lstm_sequence(&gi, &values(&[8, 3], 0.0)?, &s, &s, false).unwrap_err().to_string();
        assert!(err.contains("lstm_sequence") && err.contains("[8, 3]"), "{err}");
        let err = Tensor::lstm_sequence(&gi, &w_hh, &values(&[2, 2], 0.0)?, &s, false).unwrap_err().to_string();
        assert!(err.contains("h0") && err.contains("[3, 2]") && err.contains("[2, 2]"), "{err}");
        let err = Tensor::lstm_sequence(&values(&[0, 3, 8], 0.0)?, &w_hh, &s, &s, false).unwrap_err().to_string();
        assert!(err.contains("at least one step"), "{err}");
        let y = Tensor::lstm_sequence(&gi, &w_hh, &s, &s, false)?;
        let err =
            Tensor::lstm_sequence_backward(&y, &values(&[2, 7, 3, 3], 0.0)?, &w_hh, &s, false).unwrap_err().to_string();
        assert!(
            err.contains("lstm_sequence_backward") && err.contains("gradient") && err.contains("[2, 7, 3, 3]"),
            "{err}"
        );
        Ok(())
    }
}
