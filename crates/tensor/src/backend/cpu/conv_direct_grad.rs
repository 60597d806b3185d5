//! The gradient with respect to the weight of the convolutions the direct kernel computes
//! (`conv_direct.rs`: small images, stride 1, no dilation, one group), without column
//! matrices.
//!
//! `dw[o, c, ky, kx]` is the sum over images and output positions of
//! `dy[o, y, x] * x[c, y + ky, x + kx]`. Through `gemm` (`conv.rs`) each image first becomes
//! a column matrix whose runs are as short as an output row (8 values for LeNet's second
//! convolution) and then a product too small for `gemm` to reach its speed: LeNet's weight
//! gradients ran at about 20 GFLOP/s that way. Here a register block of `CHANNELS` output
//! channels by up to `TAPS` kernel columns keeps one `LANES`-wide vector of partial sums per
//! pair, for one input channel and one kernel row: every output-gradient vector serves
//! `TAPS` taps and every input vector `CHANNELS` channels. The block sweeps every output
//! position of every image of its piece before its lanes are added up, so the partial sums
//! stay in registers across the whole piece.
//!
//! Inputs are copied into zero-padded planes as the forward kernel does, `LANES`-aligned
//! columns wide, and the output gradient too where its rows are not whole vectors, so that
//! vectors past an output row read zeros.
//!
//! Work is split into a fixed number of image chunks, independent of the number of threads;
//! each sums its images in order and the chunks' sums are added in chunk order, so results
//! are bitwise the same on any number of threads.

use super::conv_direct::{LANES, Padding};
use super::conv_pieces::{Out, Scratch, run_pieces, sum_partials, work};
use super::im2col::Planes;
use crate::Result;
use crate::dtype::FloatElement;
use crate::layout::Layout;
use crate::ops::conv::ConvGeometry;
use crate::storage::Buffer;

/// Output channels per register block: each input vector read serves this many channels.
const CHANNELS: usize = 4;

/// The most kernel columns per register block: each output-gradient vector read serves this
/// many taps. With `CHANNELS` this keeps 20 vectors of partial sums, which AVX-512's 32
/// registers hold beside the operands.
const TAPS: usize = 5;

/// Image chunks the batch is split into at most: enough to balance 16 threads. A constant,
/// so that results do not depend on the thread count.
const CHUNKS: usize = 16;

/// What one image contributes, and where the kernel reads it from a chunk's scratch block.
struct Plan {
    /// How an image's input planes are copied.
    input: Padding,
    /// Output channels.
    outputs: usize,
    /// Kernel extents.
    kernel: [usize; 2],
    /// Output rows.
    rows: usize,
    /// Output columns.
    cols: usize,
    /// Output columns rounded up to whole vectors: the row length of the gradient planes
    /// the kernel reads.
    width: usize,
}

impl Plan {
    /// Elements of one image's padded input planes.
    fn input_len(&self) -> usize {
        self.input.len()
    }

    /// Elements of one image's padded output-gradient planes; zero where the kernel reads
    /// the gradient where it lies (rows that are whole vectors).
    fn grad_len(&self) -> usize {
        if self.width == self.cols { 0 } else { self.outputs * self.rows * self.width }
    }

    /// Whether the padded input planes cover every position a register block reads (rows
    /// `ky..ky + oh`, columns `kx..kx + width + K - 1`) and the gradient rows are whole
    /// vectors: true by construction, checked once because the explicit-vector loops read
    /// without bounds tests.
    fn check(&self, op: &'static str) -> Result<()> {
        let [kh, kw] = self.kernel;
        let [hp, wp] = self.input.padded;
        let fits = kh > 0
            && kw > 0
            && hp >= self.rows + kh - 1
            && wp >= self.width + kw - 1
            && self.width.is_multiple_of(LANES)
            && self.width >= self.cols;
        if fits {
            Ok(())
        } else {
            Err(crate::Error::invalid(op, format!("padded planes {hp}x{wp} too small for the direct kernel's blocks")))
        }
    }

    /// Elements of the weight gradient.
    fn size(&self) -> usize {
        self.outputs * self.input.channels * self.kernel[0] * self.kernel[1]
    }
}

/// The weight gradient of `n` images (`x` under `lx`) for the contiguous output gradient
/// `dy` (`[n, o, oh, ow]`), for a geometry `conv_direct::eligible` takes: `[o, c, kh, kw]`.
pub(super) fn weight_grad<T: FloatElement>(
    x: &[T],
    lx: &Layout,
    dy: &[T],
    geom: &ConvGeometry,
    n: usize,
) -> Result<Buffer<T>> {
    let op = "conv2d_weight_grad";
    let w = &geom.window;
    let [rows, cols] = w.output;
    let width = cols.next_multiple_of(LANES);
    let padded = [rows + w.kernel[0] - 1, width + w.kernel[1] - 1];
    let channels = geom.in_channels;
    let plan = Plan {
        input: Padding { channels, planes: channels, source: w.input, pad: w.padding, padded },
        outputs: geom.out_channels,
        kernel: w.kernel,
        rows,
        cols,
        width,
    };
    plan.check(op)?;
    let size = plan.size();
    let mut out = Buffer::<T>::uninit(op, size)?;
    if size == 0 {
        return Ok(out);
    }
    let per_chunk = n.div_ceil(CHUNKS.min(n).max(1)).max(1);
    let chunks = n.div_ceil(per_chunk);
    if chunks == 0 {
        out.fill(T::ZERO);
        return Ok(out);
    }
    let mut partial = if chunks > 1 { Some(Buffer::<T>::uninit(op, chunks * size)?) } else { None };
    let (xlen, glen) = (plan.input_len(), plan.grad_len());
    let scratch = Scratch::<T>::new(op, chunks, per_chunk * (xlen + glen))?;
    let dst = Out(partial.as_mut().map_or(out.as_mut_ptr(), |b| b.as_mut_ptr()));
    let image_grad = plan.outputs * rows * cols;
    run_pieces(chunks, work(&[n, size, rows * cols]), |chunk| {
        let images = chunk * per_chunk..((chunk + 1) * per_chunk).min(n);
        // SAFETY: piece `chunk` alone writes elements `chunk * size..` of the partial sums
        // (or the whole output, when there is one chunk).
        let sums = unsafe { std::slice::from_raw_parts_mut(dst.get().add(chunk * size), size) };
        scratch.with(op, images.len() * (xlen + glen), |block| {
            let (xs, gs) = block.split_at_mut(images.len() * xlen);
            for (k, image) in images.clone().enumerate() {
                plan.input.copy(Planes::of(x, lx, image), &mut xs[k * xlen..][..xlen]);
            }
            let grads = &dy[images.start * image_grad..images.end * image_grad];
            let (grads, glen) = if glen == 0 {
                (grads, image_grad)
            } else {
                pad_rows(grads, &plan, gs);
                (&*gs, glen)
            };
            accumulate(xs, grads, glen, images.len(), &plan, sums);
        });
    });
    if let Some(partial) = &partial {
        sum_partials(&mut out, partial, chunks);
    }
    Ok(out)
}

/// Copies the output gradients of a chunk's images (`[images, o, oh, ow]`) into `dst` with
/// rows `plan.width` long, zero past `ow`.
fn pad_rows<T: FloatElement>(grads: &[T], plan: &Plan, dst: &mut [T]) {
    for (src, row) in grads.chunks_exact(plan.cols).zip(dst.chunks_exact_mut(plan.width)) {
        row[..plan.cols].copy_from_slice(src);
        row[plan.cols..].fill(T::ZERO);
    }
}

/// One chunk's weight gradient into `sums` (`[o, c, kh, kw]`): `xs` holds its images'
/// padded input planes, `grads` their output-gradient planes (`glen` elements per image,
/// rows `plan.width` long).
fn accumulate<T: FloatElement>(xs: &[T], grads: &[T], glen: usize, images: usize, plan: &Plan, sums: &mut [T]) {
    let [kh, kw] = plan.kernel;
    let c = plan.input.channels;
    let plane = plan.rows * plan.width;
    // Every read of the kernels below lies inside the chunk's planes (kernel rows and
    // columns inside the padded input planes, gradient rows inside their planes):
    // `weight_grad` checked the plan and sized the chunk's slices from it.
    debug_assert!(xs.len() >= images * plan.input.len() && grads.len() >= images * glen);
    debug_assert!(glen >= plan.outputs * plane);
    let kernel = Kernel::for_type::<T>();
    for first in (0..plan.outputs).step_by(CHANNELS) {
        // Channels past the last read the last one's gradient; their sums are dropped.
        let channels: [usize; CHANNELS] = std::array::from_fn(|k| (first + k).min(plan.outputs - 1) * plane);
        for ch in 0..c {
            for ky in 0..kh {
                let mut kx = 0;
                while kx < kw {
                    let at = Block { xs, grads, glen, images, plan, first, channels, ch, ky, kx };
                    kx += match kw - kx {
                        1 => at.run::<1>(kernel, sums),
                        2 => at.run::<2>(kernel, sums),
                        3 => at.run::<3>(kernel, sums),
                        4 => at.run::<4>(kernel, sums),
                        _ => at.run::<TAPS>(kernel, sums),
                    };
                }
            }
        }
    }
}

/// Which loop sums a register block.
#[derive(Clone, Copy)]
enum Kernel {
    /// `f32` on AVX-512 (32 vector registers, so the partial sums never spill).
    #[cfg(target_arch = "x86_64")]
    Avx512,
    /// `f32` on AVX2 with FMA.
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// Any element type, in plain Rust.
    Portable,
}

impl Kernel {
    fn for_type<T: FloatElement>() -> Kernel {
        #[cfg(target_arch = "x86_64")]
        if T::DTYPE == crate::DType::F32 {
            if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vl") {
                return Kernel::Avx512;
            }
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                return Kernel::Avx2;
            }
        }
        Kernel::Portable
    }
}

/// A register block's place: `CHANNELS` output channels from `first` (their planes'
/// offsets in an image's gradient), input channel `ch`, kernel row `ky`, kernel columns from
/// `kx`, over a chunk's `images`.
struct Block<'a, T> {
    xs: &'a [T],
    grads: &'a [T],
    glen: usize,
    images: usize,
    plan: &'a Plan,
    first: usize,
    channels: [usize; CHANNELS],
    ch: usize,
    ky: usize,
    kx: usize,
}

impl<T: FloatElement> Block<'_, T> {
    /// Sums taps `kx..kx + K` of this block over the chunk's images into `sums`; returns `K`.
    fn run<const K: usize>(&self, kernel: Kernel, sums: &mut [T]) -> usize {
        let block: [[T; K]; CHANNELS] = match kernel {
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 | Kernel::Avx2 => {
                // SAFETY: these kernels are chosen for `f32` elements only, so the slices
                // are `f32` slices and so is the result.
                let (xs, grads) = unsafe { (cast::<T, f32>(self.xs), cast::<T, f32>(self.grads)) };
                let sums = self.with(xs, grads).sums_x86::<K>(matches!(kernel, Kernel::Avx512));
                // SAFETY: as above, `T` is `f32`.
                unsafe { std::mem::transmute_copy(&sums) }
            }
            Kernel::Portable => self.sums::<K>(),
        };
        let (c, [kh, kw]) = (self.plan.input.channels, self.plan.kernel);
        for (k, taps) in block.iter().enumerate() {
            let o = self.first + k;
            if o >= self.plan.outputs {
                break;
            }
            let at = ((o * c + self.ch) * kh + self.ky) * kw + self.kx;
            sums[at..at + K].copy_from_slice(taps);
        }
        K
    }

    /// This block over other slices of the same planes.
    #[cfg(target_arch = "x86_64")]
    fn with<'b, U>(&self, xs: &'b [U], grads: &'b [U]) -> Block<'b, U>
    where
        Self: 'b,
    {
        let Block { glen, images, plan, first, channels, ch, ky, kx, .. } = *self;
        Block { xs, grads, glen, images, plan, first, channels, ch, ky, kx }
    }

    /// The portable loop: each lane of each `(channel, tap)` accumulates one output column
    /// per vector, over every row of every image; the lanes are added in order at the end.
    #[inline(always)]
    fn sums<const K: usize>(&self) -> [[T; K]; CHANNELS] {
        let plan = self.plan;
        let [hp, wp] = plan.input.padded;
        let xlen = plan.input.len();
        let mut acc = [[[T::ZERO; LANES]; K]; CHANNELS];
        for image in 0..self.images {
            let x = &self.xs[image * xlen + self.ch * hp * wp..][..hp * wp];
            let g = &self.grads[image * self.glen..][..self.glen];
            for y in 0..plan.rows {
                let xrow = &x[(y + self.ky) * wp + self.kx..];
                for ox in (0..plan.width).step_by(LANES) {
                    let mut d = [[T::ZERO; LANES]; CHANNELS];
                    for (dv, &at) in d.iter_mut().zip(&self.channels) {
                        dv.copy_from_slice(&g[at + y * plan.width + ox..][..LANES]);
                    }
                    // One bounds test for the `K` shifted input vectors, not one per load.
                    let span = &xrow[ox..][..K - 1 + LANES];
                    for t in 0..K {
                        let xv = &span[t..][..LANES];
                        for (a, dv) in acc.iter_mut().zip(&d) {
                            for v in 0..LANES {
                                a[t][v] = dv[v].fused_mul_add(xv[v], a[t][v]);
                            }
                        }
                    }
                }
            }
        }
        acc.map(|taps| taps.map(add_lanes))
    }
}

/// The lanes of a vector of partial sums added in lane order.
#[inline(always)]
fn add_lanes<T: FloatElement>(lanes: [T; LANES]) -> T {
    lanes.into_iter().fold(T::ZERO, |s, v| s + v)
}

/// `s` read as a slice of `U`.
///
/// # Safety
/// `T` and `U` must be the same type.
#[cfg(target_arch = "x86_64")]
unsafe fn cast<T, U>(s: &[T]) -> &[U] {
    // SAFETY: the caller guarantees `T` is `U`.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<U>(), s.len()) }
}

#[cfg(target_arch = "x86_64")]
impl Block<'_, f32> {
    /// [`Block::sums`] for `f32` with AVX intrinsics: one 8-lane register per `(channel,
    /// tap)`, the gradient vectors loaded once per position for all taps, the input vector
    /// once per tap for all channels. `avx512` selects the AVX-512 build of the same loop
    /// (its 32 registers hold all 20 partial sums beside the operands).
    fn sums_x86<const K: usize>(&self, avx512: bool) -> [[f32; K]; CHANNELS] {
        // SAFETY: `accumulate` chose the kernel after detecting these features, and
        // `weight_grad` checked that the planes hold every position the loop reads.
        unsafe { if avx512 { x86::sums_avx512::<K>(self) } else { x86::sums_avx2::<K>(self) } }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Block, CHANNELS, LANES, add_lanes};
    use std::arch::x86_64::*;

    /// The loop for processors with AVX-512.
    ///
    /// # Safety
    /// The processor must have AVX-512F and VL, and `b`'s planes must hold every position
    /// the loop reads (as `weight_grad` checks).
    #[target_feature(enable = "avx2,fma,avx512f,avx512vl")]
    pub(super) unsafe fn sums_avx512<const K: usize>(b: &Block<'_, f32>) -> [[f32; K]; CHANNELS] {
        // SAFETY: as this function's.
        unsafe { sums::<K>(b) }
    }

    /// The loop for processors with AVX2 and FMA.
    ///
    /// # Safety
    /// As [`sums_avx512`], for AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn sums_avx2<const K: usize>(b: &Block<'_, f32>) -> [[f32; K]; CHANNELS] {
        // SAFETY: as this function's.
        unsafe { sums::<K>(b) }
    }

    /// The loop itself, inlined into each of the two builds above.
    ///
    /// # Safety
    /// As [`sums_avx2`].
    #[inline(always)]
    unsafe fn sums<const K: usize>(b: &Block<'_, f32>) -> [[f32; K]; CHANNELS] {
        let plan = b.plan;
        let [hp, wp] = plan.input.padded;
        let xlen = plan.input.len();
        // SAFETY: the caller guarantees the features and that every read below lies inside
        // the planes: rows `ky..ky + rows` and columns `kx..kx + width + K - 1` of the input
        // plane, rows `0..rows` of each gradient plane.
        unsafe {
            let mut acc = [[_mm256_setzero_ps(); K]; CHANNELS];
            for image in 0..b.images {
                let x = b.xs.as_ptr().add(image * xlen + b.ch * hp * wp + b.ky * wp + b.kx);
                let g = b.grads.as_ptr().add(image * b.glen);
                for y in 0..plan.rows {
                    let xrow = x.add(y * wp);
                    let grow = g.add(y * plan.width);
                    for ox in (0..plan.width).step_by(LANES) {
                        let mut d = [_mm256_setzero_ps(); CHANNELS];
                        for (dv, &at) in d.iter_mut().zip(&b.channels) {
                            *dv = _mm256_loadu_ps(grow.add(at + ox));
                        }
                        for t in 0..K {
                            let xv = _mm256_loadu_ps(xrow.add(ox + t));
                            for (a, &dv) in acc.iter_mut().zip(&d) {
                                a[t] = _mm256_fmadd_ps(dv, xv, a[t]);
                            }
                        }
                    }
                }
            }
            acc.map(|taps| {
                taps.map(|v| {
                    let mut lanes = [0f32; LANES];
                    _mm256_storeu_ps(lanes.as_mut_ptr(), v);
                    add_lanes(lanes)
                })
            })
        }
    }
}
