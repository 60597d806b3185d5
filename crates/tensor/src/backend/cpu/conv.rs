//! 2-d convolutions: the forward pass, the transposed convolution (which is also the
//! gradient with respect to the input) and the gradient with respect to the weight, as
//! matrix products through `gemm` on column matrices built a block at a time.
//!
//! Why this shape: an implicit-GEMM kernel would need a microkernel of our own, while
//! `gemm` already runs at a large fraction of the machine's peak on its AVX-512/AVX2
//! kernels. Building the whole column matrix of an image first (`C * kh * kw` by
//! `oh * ow`, 7 MB for 64 channels of 56x56 in f32) writes it to memory and reads it back;
//! built a block of positions at a time it stays in L2 between im2col and the product.
//! Measured on a 2-core AVX-512 machine (batch 8, 3x3, f32): the forward of 64 channels on
//! 56x56 took about 10% longer with whole-image column matrices than with blocks, and
//! blocks of 64 KiB to 1 MiB were within noise of each other (`BLOCK_BYTES`). At 2 threads
//! the whole layer (forward and backward) ran about twice as fast as PyTorch 2.15's on the
//! same machine (tools/bench/conv_compare.sh). A 1x1 convolution with stride 1 and no
//! padding reads its input as the column matrix, with no copy.
//!
//! Images with fewer than `WIDE_COLUMNS` output positions (ResNet-50's 14x14 and 7x7
//! stages) take several images to a forward product instead of one: one image's product
//! there is 49 or 196 columns wide, so `gemm` packs the whole weight again for little work
//! and its tiles run part-empty. Their column matrices are built side by side (a copy even
//! for a 1x1 kernel) and the product's parts copied into place. Measured at one thread
//! (`resnet_convs`, CPU time, on a loaded 2-core Zen 4): ResNet-50's convolutions went
//! from 739 to 721 ms per batch of 8, its 3x3 convolutions on 7x7 from 24.0 to 21.2 ms
//! and its strided 1x1 shortcuts on 28x28 and 14x14 from 20.0 to 17.3 ms each.
//!
//! The forward pass of small images goes to a direct kernel instead (`conv_direct.rs`;
//! stride 1, no dilation, one group, `(C_in + C_out) * kh * kw <= 1024` and
//! `(C_in + C_out) * h * w <= 32768`): there the column matrix's runs are as short as the
//! output rows and the per-image products too narrow for `gemm`. Measured with
//! `conv_bench --lenet --threads 1` on a 2-vCPU Zen 4 (`EMBER_CONV_DIRECT=0` selects this
//! file's path on the same build), LeNet's `Conv2d(6, 16, 5)` on 12x12, batch 64, took
//! 0.43 ms forward against 0.68 ms here (medians of 3), its `Conv2d(1, 6, 5)` on 28x28
//! 0.41 against 0.50 ms. For `f32` on processors with AVX-512 the direct kernel runs an
//! explicit-vector loop with twice the sums in registers: `conv_kernels` (batch 256, one
//! thread, the thread's CPU time, 2-vCPU Xeon) timed the two forward passes at 1.1 and
//! 0.92 ms against 2.3 and 2.3 ms for the plain loop and 1.6-1.8 and 2.7-3.0 ms here.
//! The bounds keep ResNet-like layers (64 channels, 3x3, 56x56) on
//! this path; shapes between the two were not measured. The weight gradient of the same
//! shapes goes to a direct kernel too (`conv_direct_grad.rs`, explicit AVX2/AVX-512 vectors
//! for `f32`): `conv_kernels` (batch 256, one thread, the thread's CPU time, on a loaded
//! 2-vCPU Xeon with AVX-512) timed LeNet's two weight gradients at 0.81 and 1.6 ms against
//! 1.75 and 3.8 ms here. An earlier direct weight gradient in plain Rust was slower than the
//! products, because the compiler vectorised it across channels rather than positions. A
//! direct input gradient (the correlation of the padded output gradient with the flipped
//! weight) was slower too: its padding leaves half its register blocks reading zeros on
//! 12x12 images. So the input gradient of every shape runs here.
//!
//! `f32` convolutions with a 3x3 kernel, stride 1, no dilation and one group, at least 16
//! channels on each side, go to Winograd (`conv_winograd.rs`) before either path here: the
//! forward pass and the transposed convolution (the input gradient), unless
//! `crate::set_conv_winograd(false)` forbids it. Measured on the same 2-vCPU Zen 4 with
//! `EMBER_CONV_WINOGRAD=0` selecting this file's path on the same build (CPU time per call,
//! batch 8, loaded machine), the forward pass of 64 channels on 56x56 went from 22-23 to
//! 13-15 ms, 128 on 28x28 from 22 to 11-12 ms, 256 on 14x14 from 22 to 11-15 ms, and the
//! direct kernel's CIFAR-sized layers (batch 32, 16 channels on 32x32 to 64 on 8x8) ran 2-3
//! times faster too. The weight gradient stays here.
//!
//! Work is split into fixed pieces, independent of the number of threads, so results are
//! bitwise the same on any number of threads:
//! - forward: (image, group, block of positions), each writing its own output columns;
//! - transposed: (image, group, block of channels), each summing its columns into its own
//!   channels' planes;
//! - weight gradient: (chunk of images, group, block of channels), each accumulating its own
//!   weight columns over its images; the chunks' partial sums are then added in order.
//!
//! Every piece takes a scratch block from a small stack allocated before the loop (one per
//! thread at most), so the loop allocates nothing.

use super::conv_direct;
use super::conv_direct_grad;
use super::conv_pieces::{Bias, Mat, Out, Scratch, bias_view, contiguous, product, run_pieces, sum_partials, work};
use super::conv_winograd::{self, Winograd};
use super::im2col::{Planes, col2im_block, im2col_block, im2col_rows};
use crate::conv_settings::conv_winograd;
use crate::dtype::FloatElement;
use crate::layout::Layout;
use crate::ops::conv::ConvGeometry;
use crate::storage::{Buffer, CpuStorage};
use crate::{Error, Result};

/// The size of a column block, in bytes: it is written by im2col and read right away by the
/// product, and should stay in L2 (1-2 MB per core on current x86) with room for the
/// product's packed panels.
const BLOCK_BYTES: usize = 256 * 1024;

/// The fewest positions in a block: narrower blocks make the products inefficient.
const MIN_BLOCK_COLUMNS: usize = 64;

/// Columns the forward pass's products should have at the least: images with fewer
/// positions are taken several to a product ([`forward_images`]).
const WIDE_COLUMNS: usize = 256;

/// Pieces the backward kernels aim for: enough to balance 16 threads, few enough that each
/// product stays large. A constant, not the thread count, so that results do not depend on
/// the number of threads.
const TARGET_PIECES: usize = 16;

/// The most elements the weight gradient's per-chunk partial sums may take together.
const PARTIAL_ELEMENTS: usize = 1 << 24;

/// Whether the convolution reads its input as the column matrix (1x1 kernel, stride 1, no
/// padding, every position inside the input) and the input's planes are contiguous rows.
fn direct(geom: &ConvGeometry, lx: Option<&Layout>) -> bool {
    let w = &geom.window;
    let plain = w.kernel == [1, 1] && w.stride == [1, 1] && w.padding == [0, 0] && w.output == w.input;
    // A zero channel stride (an input expanded over channels) is left to the general path:
    // the products are only given matrices with positive strides.
    plain && lx.is_none_or(|l| l.strides()[3] == 1 && l.strides()[2] == w.input[1] && l.strides()[1] != 0)
}

/// Positions per column block for `rows` rows of `T`.
fn block_columns<T>(rows: usize, positions: usize) -> usize {
    let fit = BLOCK_BYTES / (rows.max(1) * std::mem::size_of::<T>());
    fit.max(MIN_BLOCK_COLUMNS).next_multiple_of(16).min(positions.max(1))
}

/// Blocks of at least `min` channels out of `channels`, about `wanted` of them: returns
/// `(channels per block, blocks)`.
fn channel_blocks(channels: usize, wanted: usize, min: usize) -> (usize, usize) {
    let most = (channels / min.max(1)).max(1);
    let per = channels.div_ceil(wanted.clamp(1, most)).max(1);
    (per, channels.div_ceil(per).max(1))
}

/// The convolution ([`crate::backend::Backend::conv2d`]) of validated views.
pub(crate) fn conv2d(
    x: (&CpuStorage, &Layout),
    w: (&CpuStorage, &Layout),
    bias: Option<(&CpuStorage, &Layout)>,
    geom: &ConvGeometry,
    n: usize,
) -> Result<CpuStorage> {
    conv2d_by(x, w, bias, geom, n, conv_winograd())
}

/// [`conv2d`], by Winograd (`conv_winograd.rs`) where `winograd` allows it and the shape
/// measured faster that way, else by this file's column matrices.
fn conv2d_by(
    (sx, lx): (&CpuStorage, &Layout),
    (sw, lw): (&CpuStorage, &Layout),
    bias: Option<(&CpuStorage, &Layout)>,
    geom: &ConvGeometry,
    n: usize,
    winograd: bool,
) -> Result<CpuStorage> {
    fn go<T: FloatElement>(
        sx: &CpuStorage,
        lx: &Layout,
        sw: &CpuStorage,
        lw: &Layout,
        bias: Option<(&CpuStorage, &Layout)>,
        geom: &ConvGeometry,
        n: usize,
    ) -> Result<Buffer<T>> {
        let op = "conv2d";
        let x = sx.as_slice::<T>().ok_or_else(|| Error::dtype(op, "operands of mixed dtypes"))?;
        let mut held_weight = None;
        let weight = contiguous::<T>(sw, lw, &mut held_weight)?;
        let bias = bias_view::<T>(bias)?;
        if conv_direct::eligible(geom) {
            return conv_direct::forward(x, lx, weight, bias, geom, n);
        }
        let (g, o) = (geom.groups, geom.out_channels);
        let (cg, og) = (geom.in_channels / g, o / g);
        let (l, rows) = (geom.window.positions(), geom.in_channels / g * geom.window.taps());
        let mut out = Buffer::<T>::uninit(op, n * o * l)?;
        if out.is_empty() {
            return Ok(out);
        }
        let per = images_per_piece(l, n);
        if per > 1 {
            forward_images(x, lx, weight, bias, geom, n, per, &mut out)?;
            return Ok(out);
        }
        let direct = direct(geom, Some(lx));
        let cols = block_columns::<T>(rows, l);
        let blocks = l.div_ceil(cols);
        let pieces = n * g * blocks;
        let scratch = Scratch::<T>::new(op, pieces, if direct { 0 } else { rows * cols })?;
        let dst = Out(out.as_mut_ptr());
        run_pieces(pieces, work(&[n, o, l, rows]), |p| {
            let (image, group, block) = (p / (g * blocks), p / blocks % g, p % blocks);
            let start = block * cols;
            let len = cols.min(l - start);
            let a = Mat { ptr: weight[group * og * rows..].as_ptr(), rs: rows as isize, cs: 1 };
            let d = dst;
            // SAFETY: piece `p` writes output rows `group * og..` of `image`, columns
            // `start..start + len` only; the matrices lie inside `x`, `weight` and `block`.
            let d = unsafe { d.get().add((image * o + group * og) * l + start) };
            let run = |b: Mat<T>| unsafe { product(og, len, rows, d, l, a, b, false) };
            let planes = Planes::of(x, lx, image);
            if direct {
                let first = planes.base + group * cg * planes.channel + start;
                run(Mat { ptr: x[first..].as_ptr(), rs: planes.channel as isize, cs: 1 });
            } else {
                scratch.with(op, rows * len, |block| {
                    im2col_block(planes, &geom.window, group * cg..(group + 1) * cg, start..start + len, block);
                    run(Mat { ptr: block.as_ptr(), rs: len as isize, cs: 1 });
                });
            }
            if let Some(bias) = &bias {
                for r in 0..og {
                    let v = bias.get(group * og + r);
                    // SAFETY: row `r` of this piece's output block, written just above.
                    let row = unsafe { std::slice::from_raw_parts_mut(d.add(r * l), len) };
                    for e in row {
                        *e = *e + v;
                    }
                }
            }
        });
        Ok(out)
    }
    match sx {
        CpuStorage::F32(_) => match Winograd::forward(geom, n).filter(|_| winograd) {
            Some(plan) => Ok(conv_winograd::conv2d((sx, lx), (sw, lw), bias, &plan, n)?.into()),
            None => Ok(go::<f32>(sx, lx, sw, lw, bias, geom, n)?.into()),
        },
        CpuStorage::F64(_) => Ok(go::<f64>(sx, lx, sw, lw, bias, geom, n)?.into()),
        other => Err(Error::dtype("conv2d", format!("expected float operands, got {}", other.dtype()))),
    }
}

/// How many images one piece of the forward pass takes: one where an image has enough
/// positions for a wide product, else enough images for about [`WIDE_COLUMNS`] columns,
/// leaving at least two pieces where there are two images.
fn images_per_piece(positions: usize, n: usize) -> usize {
    if positions >= WIDE_COLUMNS || n < 2 {
        return 1;
    }
    WIDE_COLUMNS.div_ceil(positions.max(1)).min(n.div_ceil(2)).max(1)
}

/// The forward pass of images with few positions each (ResNet's last stages: 14x14 and
/// 7x7): each piece takes `per` images and one group, builds their column matrices side by
/// side (`[rows, per * positions]`, a copy even for a 1x1 kernel) and makes one product of
/// them, so that `gemm` gets one wide product instead of `per` narrow ones (each of which
/// would pack the whole weight again and leave its kernels' tiles part-empty), then copies
/// each image's part of the product (plus the bias) into place.
#[allow(clippy::too_many_arguments)]
fn forward_images<T: FloatElement>(
    x: &[T],
    lx: &Layout,
    weight: &[T],
    bias: Option<Bias<'_, T>>,
    geom: &ConvGeometry,
    n: usize,
    per: usize,
    out: &mut Buffer<T>,
) -> Result<()> {
    let op = "conv2d";
    let (g, o) = (geom.groups, geom.out_channels);
    let (cg, og) = (geom.in_channels / g, o / g);
    let (l, rows) = (geom.window.positions(), cg * geom.window.taps());
    let width = per * l;
    let pieces = n.div_ceil(per) * g;
    let scratch = Scratch::<T>::new(op, pieces, (rows + og) * width)?;
    let dst = Out(out.as_mut_ptr());
    run_pieces(pieces, work(&[n, o, l, rows]), |p| {
        let (chunk, group) = (p / g, p % g);
        let images = chunk * per..((chunk + 1) * per).min(n);
        let cols = images.len() * l;
        scratch.with(op, (rows + og) * width, |buf| {
            let (block, product_out) = buf.split_at_mut(rows * width);
            for (j, image) in images.clone().enumerate() {
                let planes = Planes::of(x, lx, image);
                im2col_rows(planes, &geom.window, group * cg..(group + 1) * cg, 0..l, &mut block[j * l..], cols);
            }
            let a = Mat { ptr: weight[group * og * rows..].as_ptr(), rs: rows as isize, cs: 1 };
            let b = Mat { ptr: block.as_ptr(), rs: cols as isize, cs: 1 };
            // SAFETY: `product_out` is `[og, cols]`; `a` lies inside `weight`, `b` inside
            // `block` (`[rows, cols]`).
            unsafe { product(og, cols, rows, product_out.as_mut_ptr(), cols, a, b, false) };
            for (j, image) in images.enumerate() {
                for r in 0..og {
                    let src = &product_out[r * cols + j * l..][..l];
                    // SAFETY: piece `p` alone writes output rows `group * og..(group + 1) * og`
                    // of its images.
                    let d =
                        unsafe { std::slice::from_raw_parts_mut(dst.get().add((image * o + group * og + r) * l), l) };
                    match &bias {
                        Some(bias) => {
                            let v = bias.get(group * og + r);
                            for (d, &s) in d.iter_mut().zip(src) {
                                *d = s + v;
                            }
                        }
                        None => d.copy_from_slice(src),
                    }
                }
            }
        });
    });
    Ok(())
}

/// The transposed convolution ([`crate::backend::Backend::conv_transpose2d`]) of validated
/// views: `y` has the convolution's output shape.
pub(crate) fn conv_transpose2d(
    y: (&CpuStorage, &Layout),
    w: (&CpuStorage, &Layout),
    bias: Option<(&CpuStorage, &Layout)>,
    geom: &ConvGeometry,
    n: usize,
) -> Result<CpuStorage> {
    conv_transpose2d_by(y, w, bias, geom, n, conv_winograd())
}

/// [`conv_transpose2d`], by Winograd where `winograd` allows it and the shape measured
/// faster that way, else by this file's products and col2im.
fn conv_transpose2d_by(
    (sy, ly): (&CpuStorage, &Layout),
    (sw, lw): (&CpuStorage, &Layout),
    bias: Option<(&CpuStorage, &Layout)>,
    geom: &ConvGeometry,
    n: usize,
    winograd: bool,
) -> Result<CpuStorage> {
    fn go<T: FloatElement>(
        sy: &CpuStorage,
        ly: &Layout,
        sw: &CpuStorage,
        lw: &Layout,
        bias: Option<(&CpuStorage, &Layout)>,
        geom: &ConvGeometry,
        n: usize,
    ) -> Result<Buffer<T>> {
        let op = "conv_transpose2d";
        let mut held_grads = None;
        let y = contiguous::<T>(sy, ly, &mut held_grads)?;
        let mut held_weight = None;
        let weight = contiguous::<T>(sw, lw, &mut held_weight)?;
        let bias = bias_view::<T>(bias)?;
        let (g, c, o) = (geom.groups, geom.in_channels, geom.out_channels);
        let (cg, og, taps) = (c / g, o / g, geom.window.taps());
        let rows = cg * taps;
        let (l, plane) = (geom.window.positions(), geom.window.input[0] * geom.window.input[1]);
        let mut out = Buffer::<T>::uninit(op, n * c * plane)?;
        if out.is_empty() {
            return Ok(out);
        }
        let direct = direct(geom, None);
        let wanted = TARGET_PIECES.div_ceil(n * g);
        let (per, blocks) = channel_blocks(cg, wanted, 4);
        let cols = block_columns::<T>(per * taps, l);
        let pieces = n * g * blocks;
        let scratch = Scratch::<T>::new(op, pieces, if direct { 0 } else { per * taps * cols })?;
        let dst = Out(out.as_mut_ptr());
        run_pieces(pieces, work(&[n, c, l, og, taps]), |p| {
            let (image, group, block) = (p / (g * blocks), p / blocks % g, p % blocks);
            let first = block * per;
            let count = per.min(cg - first);
            let channel = group * cg + first;
            // SAFETY: piece `p` owns the planes of channels `channel..channel + count` of
            // `image`.
            let planes =
                unsafe { std::slice::from_raw_parts_mut(dst.get().add((image * c + channel) * plane), count * plane) };
            // Rows `first * taps..` of the group's transposed weight `[rows, og]`.
            let a = Mat { ptr: weight[group * og * rows + first * taps..].as_ptr(), rs: 1, cs: rows as isize };
            let grads = &y[(image * o + group * og) * l..];
            if direct {
                let b = Mat { ptr: grads.as_ptr(), rs: l as isize, cs: 1 };
                // SAFETY: `planes` is `[count, l]`, the matrices lie inside `weight` and `y`.
                unsafe { product(count, l, og, planes.as_mut_ptr(), l, a, b, false) };
            } else {
                planes.fill(T::ZERO);
                let mut start = 0;
                while start < l {
                    let len = cols.min(l - start);
                    scratch.with(op, count * taps * len, |block| {
                        let b = Mat { ptr: grads[start..].as_ptr(), rs: l as isize, cs: 1 };
                        // SAFETY: `block` is `[count * taps, len]`; `a` and `b` lie inside
                        // `weight` and `y`.
                        unsafe { product(count * taps, len, og, block.as_mut_ptr(), len, a, b, false) };
                        col2im_block(block, len, &geom.window, count, start..start + len, planes);
                    });
                    start += len;
                }
            }
            if let Some(bias) = &bias {
                for (k, chunk) in planes.chunks_mut(plane).enumerate() {
                    let v = bias.get(channel + k);
                    for e in chunk {
                        *e = *e + v;
                    }
                }
            }
        });
        Ok(out)
    }
    match sy {
        CpuStorage::F32(_) => match Winograd::transposed(geom, n).filter(|_| winograd) {
            Some(plan) => Ok(conv_winograd::conv_transpose2d((sy, ly), (sw, lw), bias, &plan, n)?.into()),
            None => Ok(go::<f32>(sy, ly, sw, lw, bias, geom, n)?.into()),
        },
        CpuStorage::F64(_) => Ok(go::<f64>(sy, ly, sw, lw, bias, geom, n)?.into()),
        other => Err(Error::dtype("conv_transpose2d", format!("expected float operands, got {}", other.dtype()))),
    }
}

/// The weight gradient ([`crate::backend::Backend::conv2d_weight_grad`]) of validated
/// views: `x` is the convolution's input, `y` the gradient of its output.
pub(crate) fn conv2d_weight_grad(
    (sx, lx): (&CpuStorage, &Layout),
    (sy, ly): (&CpuStorage, &Layout),
    geom: &ConvGeometry,
    n: usize,
) -> Result<CpuStorage> {
    fn go<T: FloatElement>(
        sx: &CpuStorage,
        lx: &Layout,
        sy: &CpuStorage,
        ly: &Layout,
        geom: &ConvGeometry,
        n: usize,
    ) -> Result<Buffer<T>> {
        let op = "conv2d_weight_grad";
        let x = sx.as_slice::<T>().ok_or_else(|| Error::dtype(op, "operands of mixed dtypes"))?;
        let mut held_grads = None;
        let y = contiguous::<T>(sy, ly, &mut held_grads)?;
        if conv_direct::eligible(geom) {
            return conv_direct_grad::weight_grad(x, lx, y, geom, n);
        }
        let (g, o) = (geom.groups, geom.out_channels);
        let (cg, og, taps) = (geom.in_channels / g, o / g, geom.window.taps());
        let rows = cg * taps;
        let l = geom.window.positions();
        let size = o * rows;
        let mut out = Buffer::<T>::uninit(op, size)?;
        if out.is_empty() {
            return Ok(out);
        }
        let direct = direct(geom, Some(lx));
        let (per, blocks) = channel_blocks(cg, TARGET_PIECES.div_ceil(g), (64 / taps).max(1));
        let chunks = TARGET_PIECES.div_ceil(g * blocks).min(n).min((PARTIAL_ELEMENTS / size).max(1)).max(1);
        let images_per_chunk = n.div_ceil(chunks).max(1);
        let chunks = n.div_ceil(images_per_chunk).max(1);
        let mut partial = if chunks > 1 { Some(Buffer::<T>::uninit(op, chunks * size)?) } else { None };
        let cols = block_columns::<T>(per * taps, l);
        let pieces = chunks * g * blocks;
        let scratch = Scratch::<T>::new(op, pieces, if direct { 0 } else { per * taps * cols })?;
        let dst = Out(partial.as_mut().map_or(out.as_mut_ptr(), |b| b.as_mut_ptr()));
        run_pieces(pieces, work(&[n, o, l, rows]), |p| {
            let (chunk, group, block) = (p / (g * blocks), p / blocks % g, p % blocks);
            let first = block * per;
            let count = per.min(cg - first);
            let channel = group * cg + first;
            // SAFETY: piece `p` owns columns `first * taps..(first + count) * taps` of rows
            // `group * og..` of its chunk's partial sum.
            let d = unsafe { dst.get().add(chunk * size + group * og * rows + first * taps) };
            let images = chunk * images_per_chunk..((chunk + 1) * images_per_chunk).min(n);
            let mut accumulate = false;
            for image in images {
                let grads = &y[(image * o + group * og) * l..];
                let planes = Planes::of(x, lx, image);
                let mut start = 0;
                while start < l {
                    let len = if direct { l } else { cols.min(l - start) };
                    let a = Mat { ptr: grads[start..].as_ptr(), rs: l as isize, cs: 1 };
                    let run = |b: Mat<T>| {
                        // SAFETY: `d` addresses `[og, count * taps]` with rows `rows` apart
                        // inside this piece's part; `a` and `b` lie inside `y`, `x` or the
                        // scratch block.
                        unsafe { product(og, count * taps, len, d, rows, a, b, accumulate) }
                    };
                    if direct {
                        let at = planes.base + channel * planes.channel;
                        run(Mat { ptr: x[at..].as_ptr(), rs: 1, cs: planes.channel as isize });
                    } else {
                        scratch.with(op, count * taps * len, |block| {
                            im2col_block(planes, &geom.window, channel..channel + count, start..start + len, block);
                            // The block read as its transpose, `[len, count * taps]`.
                            run(Mat { ptr: block.as_ptr(), rs: 1, cs: len as isize });
                        });
                    }
                    accumulate = true;
                    start += len;
                }
            }
            if !accumulate {
                // No images (or no positions): the gradient is zero.
                for r in 0..og {
                    // SAFETY: as above.
                    unsafe { std::slice::from_raw_parts_mut(d.add(r * rows), count * taps).fill(T::ZERO) };
                }
            }
        });
        if let Some(partial) = &partial {
            sum_partials(&mut out, partial, chunks);
        }
        Ok(out)
    }
    match sx {
        CpuStorage::F32(_) => Ok(go::<f32>(sx, lx, sy, ly, geom, n)?.into()),
        CpuStorage::F64(_) => Ok(go::<f64>(sx, lx, sy, ly, geom, n)?.into()),
        other => Err(Error::dtype("conv2d_weight_grad", format!("expected float operands, got {}", other.dtype()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::conv::SlidingWindow;
    use crate::shape::Shape;

    /// `(n, c, o, groups, [h, w], kernel, stride, padding, dilation)`.
    type Case = (usize, usize, usize, usize, [usize; 2], usize, usize, usize, usize);

    /// Small images with several to a product: 1x1 (plain and strided, as ResNet's
    /// shortcuts), 3x3 with padding and stride, groups, dilation, and batches that are not
    /// a whole number of pieces.
    const CASES: [Case; 6] = [
        (5, 8, 12, 1, [7, 7], 1, 1, 0, 1),
        (3, 6, 10, 1, [14, 14], 1, 2, 0, 1),
        (4, 9, 6, 1, [9, 8], 3, 1, 1, 1),
        (7, 4, 8, 1, [11, 11], 3, 2, 1, 1),
        (3, 6, 9, 3, [6, 7], 3, 1, 1, 1),
        (2, 5, 4, 1, [9, 9], 3, 1, 2, 2),
    ];

    fn geometry(&(_, c, o, groups, input, k, stride, pad, dil): &Case) -> ConvGeometry {
        let output = input.map(|e| (e + 2 * pad - dil * (k - 1) - 1) / stride + 1);
        let window =
            SlidingWindow { input, output, kernel: [k, k], stride: [stride; 2], padding: [pad; 2], dilation: [dil; 2] };
        ConvGeometry { in_channels: c, out_channels: o, groups, window }
    }

    /// Deterministic values in about [-1, 1], exact in `f32`.
    fn values(len: usize, seed: usize) -> Vec<f64> {
        (0..len).map(|i| (((i * 7919 + seed * 104_729) % 2003) as f64 / 1024.0) - 1.0).collect()
    }

    /// The convolution by its definition, in `f64`.
    fn reference(case: &Case, x: &[f64], w: &[f64], bias: &[f64]) -> Vec<f64> {
        let g = geometry(case);
        let (n, c, o, groups) = (case.0, case.1, case.2, case.3);
        let (cg, og) = (c / groups, o / groups);
        let win = &g.window;
        let ([h, wd], [oh, ow], [k, _]) = (win.input, win.output, win.kernel);
        let mut out = vec![0.0; n * o * oh * ow];
        for image in 0..n {
            for oc in 0..o {
                let group = oc / og;
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut s = bias[oc];
                        for ci in 0..cg {
                            for ky in 0..k {
                                for kx in 0..k {
                                    let iy = (oy * win.stride[0] + ky * win.dilation[0]).checked_sub(win.padding[0]);
                                    let ix = (ox * win.stride[1] + kx * win.dilation[1]).checked_sub(win.padding[1]);
                                    if let (Some(iy), Some(ix)) = (iy.filter(|&v| v < h), ix.filter(|&v| v < wd)) {
                                        let ch = group * cg + ci;
                                        s += w[((oc * cg + ci) * k + ky) * k + kx]
                                            * x[((image * c + ch) * h + iy) * wd + ix];
                                    }
                                }
                            }
                        }
                        out[((image * o + oc) * oh + oy) * ow + ox] = s;
                    }
                }
            }
        }
        out
    }

    /// Several images to a product give the definition's values, in `f32` and `f64`, with
    /// and without bias, for every count of images per piece.
    #[test]
    fn products_of_several_images_match_the_definition() {
        for case in &CASES {
            let g = geometry(case);
            let (n, c, o, [h, wd], k) = (case.0, case.1, case.2, case.4, case.5);
            let x = values(n * c * h * wd, 1);
            let w = values(o * c / case.3 * k * k, 2);
            let bias = values(o, 3);
            let lx = Layout::contiguous(Shape::from([n, c, h, wd]));
            for with_bias in [false, true] {
                let zeros = vec![0.0; o];
                let want = reference(case, &x, &w, if with_bias { &bias } else { &zeros });
                for per in 2..=n {
                    let b = with_bias.then_some(Bias { data: &bias, offset: 0, stride: 1 });
                    let mut out = Buffer::<f64>::uninit("test", want.len()).unwrap();
                    forward_images(&x, &lx, &w, b, &g, n, per, &mut out).unwrap();
                    for (i, (&got, &e)) in out.iter().zip(&want).enumerate() {
                        assert!((got - e).abs() <= 1e-12 * (1.0 + e.abs()), "{case:?} per {per}: {i}: {got} vs {e}");
                    }
                    let [x32, w32, b32] = [&x, &w, &bias].map(|v| v.iter().map(|&e| e as f32).collect::<Vec<f32>>());
                    let b = with_bias.then_some(Bias { data: &b32, offset: 0, stride: 1 });
                    let mut out = Buffer::<f32>::uninit("test", want.len()).unwrap();
                    forward_images(&x32, &lx, &w32, b, &g, n, per, &mut out).unwrap();
                    for (i, (&got, &e)) in out.iter().zip(&want).enumerate() {
                        assert!(
                            (got as f64 - e).abs() <= 1e-4 * (1.0 + e.abs()),
                            "{case:?} per {per}: {i}: {got} vs {e}"
                        );
                    }
                }
            }
        }
    }

    /// The forward pass and the input gradient of a shape Winograd takes: with Winograd
    /// forbidden they are the column-matrix path's (which sums each output's terms in
    /// another order than Winograd, so some bits differ from Winograd's), allowed they are
    /// Winograd's; both agree with the `f64` definition to rounding.
    #[test]
    fn winograd_switch() {
        let case: Case = (2, 48, 40, 1, [24, 23], 3, 1, 1, 1);
        let g = geometry(&case);
        let (n, c, o, [h, wd]) = (case.0, case.1, case.2, case.4);
        assert!(Winograd::forward(&g, n).is_some() && Winograd::transposed(&g, n).is_some());
        let [oh, ow] = g.window.output;
        let x = values(n * c * h * wd, 1);
        let w = values(o * c * 9, 2);
        let bias = values(o.max(c), 3);
        let dy = values(n * o * oh * ow, 4);
        let store = |v: &[f64]| {
            let v32: Vec<f32> = v.iter().map(|&e| e as f32).collect();
            CpuStorage::from(Buffer::from_slice("test", &v32).unwrap())
        };
        let (sx, sw, sb, sy) = (store(&x), store(&w), store(&bias), store(&dy));
        let lx = Layout::contiguous(Shape::from([n, c, h, wd]));
        let lw = Layout::contiguous(Shape::from([o, c, 3, 3]));
        let ly = Layout::contiguous(Shape::from([n, o, oh, ow]));
        let lb = |len: usize| Layout::contiguous(Shape::from([len]));
        let as_f64 = |s: &CpuStorage| s.as_slice::<f32>().unwrap().iter().map(|&e| e as f64).collect::<Vec<f64>>();
        let close = |got: &[f64], want: &[f64], what: &str| {
            assert_eq!(got.len(), want.len());
            for (i, (&a, &b)) in got.iter().zip(want).enumerate() {
                // 432 terms of magnitude up to 1: 1e-4 is about 1e-6 of their magnitude sum.
                assert!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "{what} {i}: {a} vs {b}");
            }
        };

        let want = reference(&case, &x, &w, &bias[..o]);
        let mut results = vec![];
        for winograd in [false, true] {
            let out = conv2d_by((&sx, &lx), (&sw, &lw), Some((&sb, &lb(o))), &g, n, winograd).unwrap();
            let out = as_f64(&out);
            close(&out, &want, "forward");
            results.push(out);
        }
        assert_ne!(results[0], results[1], "Winograd did not run");
        let columns = conv2d_by((&sx, &lx), (&sw, &lw), Some((&sb, &lb(o))), &g, n, false).unwrap();
        assert_eq!(as_f64(&columns), results[0], "the column path is not deterministic");

        // The transposed convolution by its definition: `dx[c, y, x] = sum dy[o, y', x'] *
        // w[o, c, y - y' + 1, x - x' + 1]`, plus the bias of channel `c`.
        let mut want = vec![0.0; n * c * h * wd];
        for image in 0..n {
            for ci in 0..c {
                for y in 0..h {
                    for xx in 0..wd {
                        let mut s = bias[ci];
                        for oc in 0..o {
                            for ky in 0..3 {
                                for kx in 0..3 {
                                    let (yy, xo) = ((y + 1).checked_sub(ky), (xx + 1).checked_sub(kx));
                                    if let (Some(yy), Some(xo)) = (yy.filter(|&v| v < oh), xo.filter(|&v| v < ow)) {
                                        s += dy[((image * o + oc) * oh + yy) * ow + xo]
                                            * w[((oc * c + ci) * 3 + ky) * 3 + kx];
                                    }
                                }
                            }
                        }
                        want[((image * c + ci) * h + y) * wd + xx] = s;
                    }
                }
            }
        }
        let mut results = vec![];
        for winograd in [false, true] {
            let out = conv_transpose2d_by((&sy, &ly), (&sw, &lw), Some((&sb, &lb(c))), &g, n, winograd).unwrap();
            let out = as_f64(&out);
            close(&out, &want, "transposed");
            results.push(out);
        }
        assert_ne!(results[0], results[1], "Winograd did not run");
    }

    /// ResNet-50's last stages take several images to a product; its first ones, and a
    /// single image, one.
    #[test]
    fn small_images_share_products() {
        assert_eq!(images_per_piece(49, 8), 4);
        assert_eq!(images_per_piece(196, 8), 2);
        assert_eq!(images_per_piece(784, 8), 1);
        assert_eq!(images_per_piece(49, 1), 1);
        assert_eq!(images_per_piece(49, 3), 2);
    }
}
