//! A direct 2-d convolution for small images (stride 1, no dilation, one group): the
//! forward pass without a column matrix.
//!
//! On small images the column matrix of the `gemm` path (`conv.rs`) is made of runs as
//! short as the output rows (8 values for LeNet's second convolution), so building it costs
//! about as much as the product, and the products are too narrow (one image's positions)
//! for `gemm` to reach its speed. Here each image is first copied into zero-padded planes
//! wide enough that every output row is a whole number of `LANES`-wide vectors, and the
//! kernel then reads those planes directly: a register block of `ROWS` output rows by
//! `CHANNELS` output channels by `LANES` output columns accumulates
//! `w[o, c, ky, kx] * x[c, y + ky, x + kx ..]` over every tap, each input vector serving
//! `CHANNELS` channels and each weight `ROWS` rows. For `f32` on processors with AVX-512
//! an explicit-vector loop (`x86` below) takes `WIDE_ROWS` rows per block instead, which
//! its 32 registers hold.
//!
//! Each output element is summed over its taps in one fixed order, so results do not
//! depend on the number of threads (pieces are images).

use super::conv_pieces::{Bias, Out, Scratch, run_pieces, work};
use super::im2col::Planes;
use crate::Result;
use crate::dtype::FloatElement;
use crate::layout::Layout;
use crate::ops::conv::ConvGeometry;
use crate::storage::Buffer;
use multiversion::multiversion;

/// Output columns per register block: one AVX2 register of `f32` (two of `f64`), and exactly
/// one output row of LeNet's second convolution.
pub(super) const LANES: usize = 8;

/// Output rows per register block: each weight read serves this many rows.
const ROWS: usize = 2;

/// Output rows per register block of the AVX-512 loop for `f32` (`x86` below): with
/// `CHANNELS` this keeps 16 vectors of sums, which AVX-512's 32 registers hold beside the
/// operands. A multiple of `ROWS`, so planes padded for it serve both loops.
const WIDE_ROWS: usize = 4;

/// Output channels per register block: each input vector read serves this many channels;
/// with `ROWS` this keeps 8 AVX2 accumulators of `f32`.
const CHANNELS: usize = 4;

/// The most `(in_channels + out_channels) * kh * kw` taken by the direct path: above it the
/// column matrix has long enough rows and columns for `gemm` to win.
const MOST_TAPS: usize = 1024;

/// The most `(in_channels + out_channels) * h * w` elements of one image (input and output)
/// taken by the direct path, so that an image's padded planes stay in L2.
const MOST_IMAGE: usize = 1 << 15;

/// Whether the direct kernel computes this convolution's forward pass: stride 1, no
/// dilation, one group, the same padding after the input as before it, and small images
/// with few channels.
pub(super) fn eligible(geom: &ConvGeometry) -> bool {
    enabled() && shape_eligible(geom)
}

/// Whether the direct path may run: `EMBER_CONV_DIRECT=0` turns it off, so that one build
/// can time both paths (the eligibility rule was chosen that way).
fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("EMBER_CONV_DIRECT").map_or(true, |v| v.trim() != "0"))
}

/// The shape rule: see [`eligible`].
fn shape_eligible(geom: &ConvGeometry) -> bool {
    let w = &geom.window;
    let (c, o) = (geom.in_channels, geom.out_channels);
    let unit = w.stride == [1, 1] && w.dilation == [1, 1] && geom.groups == 1;
    // The output extents the padded copies assume; anything else goes to the general path.
    let consistent = (0..2).all(|d| w.output[d] > 0 && w.output[d] + w.kernel[d] == w.input[d] + 2 * w.padding[d] + 1);
    let taps = (c + o).saturating_mul(w.taps());
    let image = (c + o).saturating_mul(w.input[0].saturating_mul(w.input[1]));
    unit && consistent && c > 0 && o > 0 && taps <= MOST_TAPS && image <= MOST_IMAGE
}

/// Planes copied into zero-padded scratch planes: `channels` planes of `source` extents,
/// placed `pad` rows and columns in from the corner of the first of `planes` (at least
/// `channels`) planes of `padded` extents.
#[derive(Clone, Copy)]
pub(super) struct Padding {
    /// Planes copied.
    pub(super) channels: usize,
    /// Planes of the scratch block, the ones past `channels` all zero.
    pub(super) planes: usize,
    /// Extents of the planes copied.
    pub(super) source: [usize; 2],
    /// Zero rows above and zero columns left of the copied planes.
    pub(super) pad: [usize; 2],
    /// Extents of the scratch planes.
    pub(super) padded: [usize; 2],
}

impl Padding {
    /// Elements of the padded planes.
    pub(super) fn len(&self) -> usize {
        self.planes * self.padded[0] * self.padded[1]
    }

    /// Writes `src`'s planes into `dst` (at least [`Padding::len`] long; everything past the
    /// copied planes is zeroed).
    pub(super) fn copy<T: FloatElement>(&self, src: Planes<'_, T>, dst: &mut [T]) {
        dst.fill(T::ZERO);
        let [hp, wp] = self.padded;
        let [pt, pl] = self.pad;
        let rows = self.source[0].min(hp.saturating_sub(pt));
        let cols = self.source[1].min(wp.saturating_sub(pl));
        for c in 0..self.channels {
            for y in 0..rows {
                let from = src.base + c * src.channel + y * src.row;
                let to = &mut dst[(c * hp + pt + y) * wp + pl..][..cols];
                if src.col == 1 {
                    to.copy_from_slice(&src.data[from..from + cols]);
                } else {
                    for (k, d) in to.iter_mut().enumerate() {
                        *d = src.data[from + k * src.col];
                    }
                }
            }
        }
    }
}

/// A stride-1 correlation of one image: `inputs` padded planes in, `outputs` planes of
/// `output` extents out, through weights packed by [`Correlation::pack`].
struct Correlation {
    /// How an image's planes are copied before the kernel reads them.
    input: Padding,
    /// Output channels.
    outputs: usize,
    /// Kernel extents.
    kernel: [usize; 2],
    /// Output extents.
    output: [usize; 2],
}

impl Correlation {
    /// The correlation of `inputs` planes of `source` extents, zero-padded by `pad`, giving
    /// `outputs` planes of `output` extents.
    fn new(
        inputs: usize,
        outputs: usize,
        kernel: [usize; 2],
        source: [usize; 2],
        pad: [usize; 2],
        output: [usize; 2],
    ) -> Self {
        // Whole register blocks everywhere: rows and columns past the output read zeros
        // instead of being bounds-tested, and are not stored.
        let padded =
            [output[0].next_multiple_of(WIDE_ROWS) + kernel[0] - 1, output[1].next_multiple_of(LANES) + kernel[1] - 1];
        Correlation {
            input: Padding { channels: inputs, planes: inputs, source, pad, padded },
            outputs,
            kernel,
            output,
        }
    }

    /// Taps per output channel.
    fn reach(&self) -> usize {
        self.input.channels * self.kernel[0] * self.kernel[1]
    }

    /// Packs weights: element `[block, t, k]` is `tap(block * CHANNELS + k, t)`, zero for the
    /// channels past `outputs`, where `t` counts input channel, kernel row and kernel column.
    fn pack<T: FloatElement>(&self, op: &'static str, tap: impl Fn(usize, usize) -> T) -> Result<Buffer<T>> {
        let reach = self.reach();
        let mut packed = Buffer::<T>::zeros(op, self.outputs.div_ceil(CHANNELS) * CHANNELS * reach)?;
        for o in 0..self.outputs {
            for t in 0..reach {
                packed[(o / CHANNELS * reach + t) * CHANNELS + o % CHANNELS] = tap(o, t);
            }
        }
        Ok(packed)
    }

    /// Whether the padded planes cover every position a register block reads (rows up to
    /// the output's rounded up to `WIDE_ROWS`, columns up to its rounded up to `LANES`, plus
    /// the kernel's reach) and `packed` (of `packed` elements) holds every block's weights:
    /// true by construction, checked once here because the explicit-vector loop reads
    /// without bounds tests.
    fn check(&self, op: &'static str, packed: usize) -> Result<()> {
        let [kh, kw] = self.kernel;
        let [oh, ow] = self.output;
        let [hp, wp] = self.input.padded;
        let fits = kh > 0
            && kw > 0
            && hp >= oh.next_multiple_of(WIDE_ROWS) + kh - 1
            && wp >= ow.next_multiple_of(LANES) + kw - 1
            && packed >= self.outputs.div_ceil(CHANNELS) * CHANNELS * self.reach();
        if fits {
            Ok(())
        } else {
            Err(crate::Error::invalid(op, format!("padded planes {hp}x{wp} too small for the direct kernel's blocks")))
        }
    }

    /// Runs the correlation on `n` images: image `i`'s planes are `planes(i)`, its output the
    /// `outputs * oh * ow` elements from `i * outputs * oh * ow` of `out`.
    fn run<'a, T: FloatElement>(
        &self,
        op: &'static str,
        n: usize,
        planes: impl Fn(usize) -> Planes<'a, T> + Sync,
        packed: &[T],
        bias: Option<Bias<'_, T>>,
    ) -> Result<Buffer<T>> {
        let plane = self.output[0] * self.output[1];
        let size = self.outputs * plane;
        self.check(op, packed.len())?;
        let mut out = Buffer::<T>::uninit(op, n * size)?;
        let scratch = Scratch::<T>::new(op, n, self.input.len())?;
        let dst = Out(out.as_mut_ptr());
        run_pieces(n, work(&[n, size, self.reach()]), |image| {
            // SAFETY: piece `image` writes only that image's output planes.
            let out = unsafe { std::slice::from_raw_parts_mut(dst.get().add(image * size), size) };
            scratch.with(op, self.input.len(), |block| {
                self.input.copy(planes(image), block);
                correlate_any(block, self, packed, bias, out);
            });
        });
        Ok(out)
    }
}

/// [`correlate`], or for `f32` on a processor with AVX-512 the explicit-vector loop of
/// `x86`, which keeps twice the sums in registers (the compiler's vectors of `correlate`
/// stop at 8 sums).
fn correlate_any<T: FloatElement>(x: &[T], c: &Correlation, packed: &[T], bias: Option<Bias<'_, T>>, out: &mut [T]) {
    #[cfg(target_arch = "x86_64")]
    if T::DTYPE == crate::DType::F32 && x86::available() {
        // SAFETY: `T` is `f32` (its dtype says so), so every slice is an `f32` slice; the
        // processor has the features `available` checked; `run` checked the plan against
        // `packed` and hands over the image's whole padded block and output planes.
        unsafe {
            let f = |s: &[T]| std::slice::from_raw_parts(s.as_ptr().cast::<f32>(), s.len());
            let bias = bias.map(|b| Bias { data: f(b.data), offset: b.offset, stride: b.stride });
            let out = std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<f32>(), out.len());
            x86::correlate(f(x), c, f(packed), bias, out);
        }
        return;
    }
    correlate(x, c, packed, bias, out)
}

/// One image's correlation: `x` holds the padded planes, `out` the `[outputs, oh, ow]`
/// result (plus `bias`).
#[multiversion(targets("x86_64+avx2+fma"))]
fn correlate<T: FloatElement>(x: &[T], c: &Correlation, packed: &[T], bias: Option<Bias<'_, T>>, out: &mut [T]) {
    let [kh, kw] = c.kernel;
    let [oh, ow] = c.output;
    let wp = c.input.padded[1];
    let hp = c.input.padded[0];
    let reach = c.reach();
    for (block, weights) in packed.chunks_exact(reach * CHANNELS).enumerate() {
        for oy in (0..oh).step_by(ROWS) {
            for ox in (0..ow).step_by(LANES) {
                let mut acc = [[[T::ZERO; LANES]; CHANNELS]; ROWS];
                // Kernel rows that read only padding rows for all `ROWS` output rows add
                // zero: skipped, as they are a large part of a padded small image's taps.
                let first = (c.input.pad[0] + 1).saturating_sub(oy + ROWS).min(kh);
                let end = (c.input.pad[0] + c.input.source[0]).saturating_sub(oy).clamp(first, kh);
                for ch in 0..c.input.channels {
                    for ky in first..end {
                        let at = (ch * hp + oy + ky) * wp + ox;
                        let w = &weights[(ch * kh + ky) * kw * CHANNELS..][..kw * CHANNELS];
                        // One bounds test for the inputs of the `ROWS` rows, not one per load.
                        let span = &x[at..][..(ROWS - 1) * wp + kw - 1 + LANES];
                        for (kx, wv) in w.chunks_exact(CHANNELS).enumerate() {
                            for (r, acc) in acc.iter_mut().enumerate() {
                                let xv = &span[r * wp + kx..][..LANES];
                                for (a, &wk) in acc.iter_mut().zip(wv) {
                                    for v in 0..LANES {
                                        a[v] = a[v] + wk * xv[v];
                                    }
                                }
                            }
                        }
                    }
                }
                let width = LANES.min(ow - ox);
                for (r, acc) in acc.iter().enumerate().take(oh - oy) {
                    for (k, a) in acc.iter().enumerate() {
                        let o = block * CHANNELS + k;
                        if o >= c.outputs {
                            break;
                        }
                        let row = &mut out[(o * oh + oy + r) * ow + ox..][..width];
                        match bias {
                            Some(b) => {
                                let b = b.get(o);
                                for (d, &s) in row.iter_mut().zip(a) {
                                    *d = s + b;
                                }
                            }
                            None => row.copy_from_slice(&a[..width]),
                        }
                    }
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Bias, CHANNELS, Correlation, LANES, WIDE_ROWS};
    use std::arch::x86_64::*;

    /// Whether the processor runs [`correlate`].
    pub(super) fn available() -> bool {
        is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vl") && is_x86_feature_detected!("fma")
    }

    /// `super::correlate` for `f32`: a register block of `WIDE_ROWS` output rows by
    /// `CHANNELS` output channels by `LANES` columns, each input vector serving `CHANNELS`
    /// channels and each broadcast weight `WIDE_ROWS` rows; sums are fused multiply-adds in
    /// one fixed order of taps.
    ///
    /// # Safety
    /// The processor must have what [`available`] checks, and `c` must have passed
    /// `Correlation::check` with `packed`, `x` holding its padded planes and `out` its
    /// output planes.
    #[target_feature(enable = "avx2,fma,avx512f,avx512vl")]
    pub(super) unsafe fn correlate(
        x: &[f32],
        c: &Correlation,
        packed: &[f32],
        bias: Option<Bias<'_, f32>>,
        out: &mut [f32],
    ) {
        let [kh, kw] = c.kernel;
        let [oh, ow] = c.output;
        let [hp, wp] = c.input.padded;
        let reach = c.reach();
        // Every load below lies inside the padded planes and the packed weights (rows
        // `oy + ky + r < oh` rounded up to `WIDE_ROWS`, plus `kh - 1`; columns
        // `ox + kx + LANES <=` `ow` rounded up to `LANES`, plus `kw - 1`): `Correlation::run`
        // checked the plan, and gives `x` and `out` their full lengths.
        debug_assert!(x.len() >= c.input.len() && out.len() >= c.outputs * oh * ow);
        debug_assert!(packed.len() >= c.outputs.div_ceil(CHANNELS) * CHANNELS * reach);
        for (block, weights) in packed.chunks_exact(reach * CHANNELS).enumerate() {
            for oy in (0..oh).step_by(WIDE_ROWS) {
                // Kernel rows that read only padding rows for every row of the block add
                // zero: skipped, as in the portable loop.
                let first = (c.input.pad[0] + 1).saturating_sub(oy + WIDE_ROWS).min(kh);
                let end = (c.input.pad[0] + c.input.source[0]).saturating_sub(oy).clamp(first, kh);
                for ox in (0..ow).step_by(LANES) {
                    // SAFETY: the loads lie inside `x` and `weights` (checked above), the
                    // features are the caller's guarantee.
                    let acc = unsafe {
                        let mut acc = [[_mm256_setzero_ps(); CHANNELS]; WIDE_ROWS];
                        for ch in 0..c.input.channels {
                            for ky in first..end {
                                let xp = x.as_ptr().add((ch * hp + oy + ky) * wp + ox);
                                let wq = weights.as_ptr().add((ch * kh + ky) * kw * CHANNELS);
                                for kx in 0..kw {
                                    let mut w = [_mm256_setzero_ps(); CHANNELS];
                                    for (k, wv) in w.iter_mut().enumerate() {
                                        *wv = _mm256_broadcast_ss(&*wq.add(kx * CHANNELS + k));
                                    }
                                    for (r, acc) in acc.iter_mut().enumerate() {
                                        let xv = _mm256_loadu_ps(xp.add(r * wp + kx));
                                        for (a, &wv) in acc.iter_mut().zip(&w) {
                                            *a = _mm256_fmadd_ps(wv, xv, *a);
                                        }
                                    }
                                }
                            }
                        }
                        acc
                    };
                    let width = LANES.min(ow - ox);
                    for (r, acc) in acc.iter().enumerate().take(oh - oy) {
                        for (k, &a) in acc.iter().enumerate() {
                            let o = block * CHANNELS + k;
                            if o >= c.outputs {
                                break;
                            }
                            let mut lanes = [0f32; LANES];
                            // SAFETY: `lanes` holds `LANES` values.
                            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), a) };
                            let row = &mut out[(o * oh + oy + r) * ow + ox..][..width];
                            match bias {
                                Some(b) => {
                                    let b = b.get(o);
                                    for (d, &s) in row.iter_mut().zip(&lanes) {
                                        *d = s + b;
                                    }
                                }
                                None => row.copy_from_slice(&lanes[..width]),
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The convolution of `n` images (`x` under `lx`) with a contiguous `[o, c, kh, kw]`
/// `weight`, for an [`eligible`] geometry.
pub(super) fn forward<T: FloatElement>(
    x: &[T],
    lx: &Layout,
    weight: &[T],
    bias: Option<Bias<'_, T>>,
    geom: &ConvGeometry,
    n: usize,
) -> Result<Buffer<T>> {
    let w = &geom.window;
    let plan = Correlation::new(geom.in_channels, geom.out_channels, w.kernel, w.input, w.padding, w.output);
    let reach = plan.reach();
    let packed = plan.pack("conv2d", |o, t| weight[o * reach + t])?;
    plan.run("conv2d", n, |image| Planes::of(x, lx, image), &packed, bias)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::conv::SlidingWindow;
    use crate::shape::Shape;

    /// `(n, c, o, [h, w], [kh, kw], [ph, pw])`.
    type Case = (usize, usize, usize, [usize; 2], [usize; 2], [usize; 2]);

    /// Shapes the direct path takes: LeNet's two convolutions, odd extents (rows and columns
    /// that are not whole register blocks, channels that are not whole blocks), padding, 1x1
    /// kernels, and batches that are not a whole number of weight-gradient chunks.
    const CASES: [Case; 8] = [
        (3, 1, 6, [28, 28], [5, 5], [0, 0]),
        (9, 6, 16, [12, 12], [5, 5], [0, 0]),
        (2, 3, 5, [7, 9], [3, 2], [1, 0]),
        (17, 2, 9, [5, 11], [3, 3], [2, 1]),
        (4, 5, 3, [4, 4], [1, 1], [0, 0]),
        (1, 1, 1, [1, 1], [1, 1], [0, 0]),
        (2, 7, 10, [6, 3], [2, 3], [1, 2]),
        // Padding wider than the kernel: whole rows and blocks of zeros.
        (2, 2, 3, [3, 3], [2, 2], [2, 2]),
    ];

    /// The geometry of a case: stride 1, no dilation, one group, the output it implies.
    fn geometry(&(_, c, o, input, kernel, padding): &Case) -> ConvGeometry {
        let output = [0, 1].map(|d| input[d] + 2 * padding[d] + 1 - kernel[d]);
        let window = SlidingWindow { input, output, kernel, stride: [1, 1], padding, dilation: [1, 1] };
        ConvGeometry { in_channels: c, out_channels: o, groups: 1, window }
    }

    /// Deterministic values in about [-1, 1].
    fn values(len: usize, seed: usize) -> Vec<f64> {
        (0..len).map(|i| (((i * 7919 + seed * 104_729) % 2003) as f64 / 1001.0) - 1.0).collect()
    }

    /// Calls `f(image, o, c, oy, ox, ky, kx, iy, ix)` for every product of the convolution's
    /// definition whose input position lies inside the image.
    fn each_product(case: &Case, mut f: impl FnMut([usize; 9])) {
        let g = geometry(case);
        let w = &g.window;
        let (n, c, o) = (case.0, case.1, case.2);
        for image in 0..n {
            for oc in 0..o {
                for ch in 0..c {
                    for oy in 0..w.output[0] {
                        for ox in 0..w.output[1] {
                            for ky in 0..w.kernel[0] {
                                for kx in 0..w.kernel[1] {
                                    let iy = (oy + ky).checked_sub(w.padding[0]).filter(|&v| v < w.input[0]);
                                    let ix = (ox + kx).checked_sub(w.padding[1]).filter(|&v| v < w.input[1]);
                                    if let (Some(iy), Some(ix)) = (iy, ix) {
                                        f([image, oc, ch, oy, ox, ky, kx, iy, ix]);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// Asserts `got` (of `T`) equals the `f64` reference `want` within `T`'s rounding.
    fn assert_close<T: FloatElement + Into<f64>>(what: &str, case: &Case, got: &[T], want: &[f64]) {
        assert_eq!(got.len(), want.len(), "{what} {case:?}: length");
        let tol = if std::mem::size_of::<T>() == 4 { 1e-4 } else { 1e-12 };
        for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
            let g: f64 = g.into();
            assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{what} {case:?}: element {i}: {g} vs {w}");
        }
    }

    /// The forward kernel (with and without bias) and the weight gradient against the
    /// definition, for `T`, with the input read through a strided (width-major) layout when
    /// `strided`.
    fn check<T: FloatElement + Into<f64> + From<f32>>(strided: bool) {
        let cast = |v: &[f64]| v.iter().map(|&e| T::from(e as f32)).collect::<Vec<T>>();
        for case in &CASES {
            let g = geometry(case);
            assert!(shape_eligible(&g), "{case:?} should take the direct path");
            let (n, c, o, [h, wd], [kh, kw], _) = *case;
            let [oh, ow] = g.window.output;
            // Inputs rounded to `f32` first so that the `f64` reference sees the same values.
            let round = |v: Vec<f64>| v.iter().map(|&e| e as f32 as f64).collect::<Vec<f64>>();
            let x = round(values(n * c * h * wd, 1));
            let weight = round(values(o * c * kh * kw, 2));
            let bias = round(values(o, 3));
            let (xt, wt, bt) = (cast(&x), cast(&weight), cast(&bias));
            // The input stored width-major and read through swapped strides.
            let (xs, lx) = if strided {
                let mut xs = vec![T::ZERO; x.len()];
                for (i, &v) in xt.iter().enumerate() {
                    let (p, col, row) = (i / (h * wd), i % wd, i / wd % h);
                    xs[p * h * wd + col * h + row] = v;
                }
                let strides = [c * h * wd, h * wd, 1, h].into_iter().collect();
                (xs, Layout::new(Shape::from([n, c, h, wd]), strides, 0).unwrap())
            } else {
                (xt.clone(), Layout::contiguous(Shape::from([n, c, h, wd])))
            };
            for with_bias in [false, true] {
                let b = with_bias.then_some(Bias { data: &bt, offset: 0, stride: 1 });
                let mut want = vec![0.0; n * o * oh * ow];
                each_product(case, |[i, oc, ch, oy, ox, ky, kx, iy, ix]| {
                    want[((i * o + oc) * oh + oy) * ow + ox] +=
                        weight[((oc * c + ch) * kh + ky) * kw + kx] * x[((i * c + ch) * h + iy) * wd + ix];
                });
                if with_bias {
                    for (k, e) in want.iter_mut().enumerate() {
                        *e += bias[k / (oh * ow) % o];
                    }
                }
                assert_close("forward", case, &forward(&xs, &lx, &wt, b, &g, n).unwrap(), &want);
            }
            // The weight gradient (`conv_direct_grad.rs`) for an output gradient of the same
            // values, against the definition.
            let dy = round(values(n * o * oh * ow, 4));
            let mut want = vec![0.0; o * c * kh * kw];
            each_product(case, |[i, oc, ch, oy, ox, ky, kx, iy, ix]| {
                want[((oc * c + ch) * kh + ky) * kw + kx] +=
                    dy[((i * o + oc) * oh + oy) * ow + ox] * x[((i * c + ch) * h + iy) * wd + ix];
            });
            let got = super::super::conv_direct_grad::weight_grad(&xs, &lx, &cast(&dy), &g, n).unwrap();
            assert_close("weight gradient", case, &got, &want);
        }
    }

    /// `f32` against the definition.
    #[test]
    fn direct_kernels_match_the_definition_f32() {
        check::<f32>(false);
    }

    /// `f64` against the definition.
    #[test]
    fn direct_kernels_match_the_definition_f64() {
        check::<f64>(false);
    }

    /// An input whose rows are not contiguous.
    #[test]
    fn direct_kernels_read_strided_inputs() {
        check::<f64>(true);
    }

    /// LeNet's shape takes the direct path; strides, groups, dilation, ResNet's size and
    /// uneven padding do not.
    #[test]
    fn eligibility_follows_the_shape() {
        let lenet = geometry(&(64, 6, 16, [12, 12], [5, 5], [0, 0]));
        assert!(shape_eligible(&lenet));
        // ResNet's 64 -> 64 3x3 on 56x56 stays on the gemm path (too many taps and too large).
        let resnet = geometry(&(8, 64, 64, [56, 56], [3, 3], [1, 1]));
        assert!(!shape_eligible(&resnet));
        let mut strided = lenet;
        strided.window.stride = [2, 2];
        strided.window.output = [4, 4];
        assert!(!shape_eligible(&strided));
        let mut grouped = lenet;
        grouped.groups = 2;
        assert!(!shape_eligible(&grouped));
        let mut dilated = lenet;
        dilated.window.dilation = [2, 2];
        dilated.window.output = [4, 4];
        assert!(!shape_eligible(&dilated));
        // Padding after the input that differs from `padding` (PyTorch's "same" with an even
        // kernel) stays on the gemm path.
        let mut same = geometry(&(1, 2, 3, [6, 6], [2, 2], [1, 1]));
        same.window.output = [6, 6];
        assert!(!shape_eligible(&same));
    }
}
