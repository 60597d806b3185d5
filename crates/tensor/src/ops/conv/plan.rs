//! PyTorch's output-size rules for convolutions, transposed convolutions and
//! `unfold`/`fold`, and their errors: the resolution of [`ConvArgs`], [`ConvTransposeArgs`]
//! and [`UnfoldArgs`] into the geometry a backend computes with ([`ConvGeometry`],
//! [`SlidingWindow`]).
//!
//! Every operation works on two spatial dimensions underneath: a 1-d operation is the 2-d
//! one over a height of 1, so the resolution lifts 1-d arguments to 2-d after checking them
//! in their own terms (errors name the shapes the caller passed).

use super::args::{ConvArgs, ConvTransposeArgs, Padding, UnfoldArgs};
use super::geometry::{ConvGeometry, SlidingWindow};
use crate::shape::{Shape, checked_numel};
use crate::{Error, Result};

/// `"(a x b)"` or `"(a)"`, PyTorch's way of printing spatial sizes in errors.
fn sizes(v: &[impl std::fmt::Display]) -> String {
    let parts: Vec<String> = v.iter().map(|x| x.to_string()).collect();
    format!("({})", parts.join(" x "))
}

/// An error unless every entry is at least 1.
fn positive(op: &'static str, what: &str, v: &[usize]) -> Result<()> {
    if v.contains(&0) {
        return Err(Error::invalid(op, format!("{what} must be positive, got {}", sizes(v))));
    }
    Ok(())
}

/// A size that indexing arithmetic handles without overflow; larger arguments are refused.
const MAX_EXTENT: usize = 1 << 40;

/// An error unless every entry is below [`MAX_EXTENT`].
fn bounded(op: &'static str, what: &str, v: &[usize]) -> Result<()> {
    if v.iter().any(|&x| x >= MAX_EXTENT) {
        return Err(Error::invalid(op, format!("{what} {} is too large", sizes(v))));
    }
    Ok(())
}

/// `v` lifted to two spatial dimensions: a 1-d value gets `fill` for the added height.
fn lift<const D: usize>(v: [usize; D], fill: usize) -> [usize; 2] {
    match D {
        1 => [fill, v[0]],
        _ => [v[0], v[D - 1]],
    }
}

/// An error unless `D` is 1 or 2, the spatial ranks ember computes.
fn supported<const D: usize>(op: &'static str) -> Result<()> {
    if D == 0 || D > 2 {
        return Err(Error::invalid(op, format!("{D}-d convolutions are not supported (only 1-d and 2-d)")));
    }
    Ok(())
}

/// The extent of the kernel with its dilation, `d * (k - 1) + 1`.
fn dilated(kernel: usize, dilation: usize) -> usize {
    dilation * (kernel - 1) + 1
}

/// The number of kernel positions along a dimension of `input` padded by `before + after`:
/// PyTorch's `(in + pads - d (k - 1) - 1) / s + 1`; `None` when the dilated kernel does not
/// fit the padded input.
fn positions(
    input: usize,
    before: usize,
    after: usize,
    kernel: usize,
    stride: usize,
    dilation: usize,
) -> Option<usize> {
    let padded = input + before + after;
    let extent = dilated(kernel, dilation);
    (padded >= extent).then(|| (padded - extent) / stride + 1)
}

/// The geometry of a convolution of `input` (`[N, C, spatial..]`, `D` spatial dimensions)
/// by `weight` (`[out, C / groups, kernel..]`) with an optional `bias` (`[out]`), or the
/// error PyTorch would give, naming `op` and the shapes.
///
/// ```
/// use ember_tensor::ops::conv::{conv_geometry, ConvArgs, Padding};
/// let g = conv_geometry("conv2d", &[8, 3, 32, 32], &[16, 3, 5, 5], None, &ConvArgs::<2>::default().stride(2))?;
/// assert_eq!(g.window.output, [14, 14]);
/// let same = ConvArgs::<2>::default().padding(Padding::Same);
/// let g = conv_geometry("conv2d", &[1, 3, 10, 10], &[4, 3, 4, 4], None, &same)?;
/// // A total padding of 3: 1 before, 2 after.
/// assert_eq!((g.window.padding, g.window.output), ([1, 1], [10, 10]));
/// let e = conv_geometry("conv2d", &[1, 4, 10, 10], &[4, 3, 3, 3], None, &ConvArgs::<2>::default());
/// assert!(e.unwrap_err().to_string().contains("to have 3 channels, but got 4"));
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn conv_geometry<const D: usize>(
    op: &'static str,
    input: &[usize],
    weight: &[usize],
    bias: Option<&[usize]>,
    args: &ConvArgs<D>,
) -> Result<ConvGeometry> {
    supported::<D>(op)?;
    let ConvArgs { stride, padding, dilation, groups } = *args;
    check_operands(op, input, weight, D)?;
    if groups == 0 {
        return Err(Error::invalid(op, "groups must be positive, got 0"));
    }
    positive(op, "stride", &stride)?;
    positive(op, "dilation", &dilation)?;
    bounded(op, "stride", &stride)?;
    bounded(op, "dilation", &dilation)?;
    let (channels, out_channels) = (input[1], weight[0]);
    let kernel: [usize; D] = std::array::from_fn(|d| weight[2 + d]);
    let spatial: [usize; D] = std::array::from_fn(|d| input[2 + d]);
    positive(op, "kernel size", &kernel)?;
    bounded(op, "kernel size", &kernel)?;
    if !out_channels.is_multiple_of(groups) {
        return Err(Error::shape(
            op,
            format!(
                "given groups={groups}, expected weight to be divisible by {groups} at dimension 0, but got weight of \
                 size {weight:?} instead"
            ),
        ));
    }
    if weight[1] * groups != channels {
        return Err(Error::shape(
            op,
            format!(
                "given groups={groups}, weight of size {weight:?}, expected input{input:?} to have {} channels, but \
                 got {channels} channels instead",
                weight[1] * groups
            ),
        ));
    }
    check_bias(op, weight, bias, out_channels)?;
    // Padding before and after each dimension.
    let (before, after): ([usize; D], [usize; D]) = match padding {
        Padding::Explicit(p) => {
            bounded(op, "padding", &p)?;
            (p, p)
        }
        Padding::Valid => ([0; D], [0; D]),
        Padding::Same => {
            if stride.iter().any(|&s| s != 1) {
                return Err(Error::invalid(
                    op,
                    format!(
                        "padding \"same\" is not supported for strided convolutions, got stride {}",
                        sizes(&stride)
                    ),
                ));
            }
            let total: [usize; D] = std::array::from_fn(|d| dilation[d] * (kernel[d] - 1));
            bounded(op, "padding", &total)?;
            (std::array::from_fn(|d| total[d] / 2), std::array::from_fn(|d| total[d] - total[d] / 2))
        }
    };
    let mut output = [0; D];
    for d in 0..D {
        match positions(spatial[d], before[d], after[d], kernel[d], stride[d], dilation[d]) {
            Some(n) => output[d] = n,
            None => {
                let padded: Vec<usize> = (0..D).map(|i| spatial[i] + before[i] + after[i]).collect();
                let extent: Vec<usize> = (0..D).map(|i| dilated(kernel[i], dilation[i])).collect();
                return Err(Error::shape(
                    op,
                    format!(
                        "calculated padded input size per channel: {}. Kernel size: {}. Kernel size can't be greater \
                         than actual input size (input {input:?}, weight {weight:?})",
                        sizes(&padded),
                        sizes(&extent)
                    ),
                ));
            }
        }
    }
    let window = SlidingWindow {
        input: lift(spatial, 1),
        output: lift(output, 1),
        kernel: lift(kernel, 1),
        stride: lift(stride, 1),
        padding: lift(before, 0),
        dilation: lift(dilation, 1),
    };
    Ok(ConvGeometry { in_channels: channels, out_channels, groups, window })
}

/// The geometry of a transposed convolution of `input` (`[N, in, spatial..]`) by `weight`
/// (`[in, out / groups, kernel..]`, PyTorch's layout) with an optional `bias` (`[out]`):
/// the geometry of the convolution it transposes, which maps the transposed convolution's
/// output (`(in - 1) s - 2 p + d (k - 1) + output_padding + 1` per dimension) to its input.
///
/// ```
/// use ember_tensor::ops::conv::{conv_transpose_geometry, ConvTransposeArgs};
/// let args = ConvTransposeArgs::<2>::default().stride(2).padding(1).output_padding(1);
/// let g = conv_transpose_geometry("conv_transpose2d", &[1, 8, 7, 7], &[8, 4, 3, 3], None, &args)?;
/// // The transposed convolution's output is the convolution's input.
/// assert_eq!((g.in_channels, g.out_channels, g.window.input, g.window.output), (4, 8, [14, 14], [7, 7]));
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn conv_transpose_geometry<const D: usize>(
    op: &'static str,
    input: &[usize],
    weight: &[usize],
    bias: Option<&[usize]>,
    args: &ConvTransposeArgs<D>,
) -> Result<ConvGeometry> {
    supported::<D>(op)?;
    let ConvTransposeArgs { stride, padding, output_padding, dilation, groups } = *args;
    check_operands(op, input, weight, D)?;
    if groups == 0 {
        return Err(Error::invalid(op, "groups must be positive, got 0"));
    }
    positive(op, "stride", &stride)?;
    positive(op, "dilation", &dilation)?;
    for (what, v) in
        [("stride", &stride), ("dilation", &dilation), ("padding", &padding), ("output padding", &output_padding)]
    {
        bounded(op, what, v)?;
    }
    let channels = input[1];
    let kernel: [usize; D] = std::array::from_fn(|d| weight[2 + d]);
    let spatial: [usize; D] = std::array::from_fn(|d| input[2 + d]);
    positive(op, "kernel size", &kernel)?;
    bounded(op, "kernel size", &kernel)?;
    if weight[0] != channels {
        return Err(Error::shape(
            op,
            format!(
                "given transposed=1, weight of size {weight:?}, expected input{input:?} to have {} channels, but got \
                 {channels} channels instead",
                weight[0]
            ),
        ));
    }
    if !channels.is_multiple_of(groups) {
        return Err(Error::shape(
            op,
            format!(
                "given groups={groups}, expected weight to be divisible by {groups} at dimension 0, but got weight of \
                 size {weight:?} instead"
            ),
        ));
    }
    for d in 0..D {
        if output_padding[d] >= stride[d] && output_padding[d] >= dilation[d] {
            return Err(Error::invalid(
                op,
                format!(
                    "output padding must be smaller than either stride or dilation, got output padding {}, stride {} \
                     and dilation {}",
                    sizes(&output_padding),
                    sizes(&stride),
                    sizes(&dilation)
                ),
            ));
        }
    }
    let out_channels = weight[1] * groups;
    check_bias(op, weight, bias, out_channels)?;
    let mut output = [0usize; D];
    for d in 0..D {
        // (in - 1) s - 2 p + d (k - 1) + output_padding + 1, in signed arithmetic: every
        // term is below 2^40, so nothing overflows.
        let n = (spatial[d] as i128 - 1) * stride[d] as i128 - 2 * padding[d] as i128
            + (dilation[d] * (kernel[d] - 1)) as i128
            + output_padding[d] as i128
            + 1;
        if n < 1 || spatial[d] == 0 {
            let want: Vec<i128> = (0..D)
                .map(|i| {
                    (spatial[i] as i128 - 1) * stride[i] as i128 - 2 * padding[i] as i128
                        + (dilation[i] * (kernel[i] - 1)) as i128
                        + output_padding[i] as i128
                        + 1
                })
                .collect();
            return Err(Error::shape(
                op,
                format!(
                    "given input{input:?} and weight {weight:?}, the calculated output size {} is too small",
                    sizes(&want)
                ),
            ));
        }
        output[d] = n as usize;
    }
    let window = SlidingWindow {
        input: lift(output, 1),
        output: lift(spatial, 1),
        kernel: lift(kernel, 1),
        stride: lift(stride, 1),
        padding: lift(padding, 0),
        dilation: lift(dilation, 1),
    };
    Ok(ConvGeometry { in_channels: out_channels, out_channels: channels, groups, window })
}

/// What a convolution does to its operands' shapes: the resolved geometry, the shapes the
/// 2-d kernel reads the input and weight as (a 1-d operand gets a height of 1, an unbatched
/// input a batch of 1), and the result's shape as the caller sees it. Reshaping to
/// `input` and `weight` only inserts dimensions of extent 1, so it never copies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvPlan {
    /// The geometry the backend computes with.
    pub geometry: ConvGeometry,
    /// The input as `[N, C, h, w]`.
    pub input: Shape,
    /// The weight as `[O, C / groups, kh, kw]` (for a transposed convolution, the
    /// transposed convolution's weight `[in, out / groups, kh, kw]`).
    pub weight: Shape,
    /// The result's shape: batched or not, with `D` spatial dimensions, like the input.
    pub output: Shape,
}

/// The batch-1 shape of an unbatched input (`rank == D + 1`), or the input's own shape
/// (`rank == D + 2`); an error for any other rank.
fn batched(op: &'static str, input: &[usize], spatial: usize) -> Result<(Vec<usize>, bool)> {
    if input.len() == spatial + 2 {
        Ok((input.to_vec(), true))
    } else if input.len() == spatial + 1 {
        Ok((std::iter::once(1).chain(input.iter().copied()).collect(), false))
    } else {
        Err(Error::shape(
            op,
            format!(
                "expected {}-d (unbatched) or {}-d (batched) input, but got input of size {input:?}",
                spatial + 1,
                spatial + 2
            ),
        ))
    }
}

/// `[a, b, spatial..]` lifted to two spatial dimensions.
fn lift_shape(shape: &[usize]) -> Shape {
    match shape.len() {
        3 => Shape::from([shape[0], shape[1], 1, shape[2]]),
        _ => Shape::from(shape),
    }
}

/// The plan for a batched 2-d result `[N, C, h, w]` shown as the caller's input was given:
/// `spatial` dimensions, without the batch when `keep_batch` is false.
fn caller_shape(result: Shape, spatial: usize, keep_batch: bool) -> Shape {
    let mut dims = result.to_vec();
    if spatial == 1 {
        dims.remove(2);
    }
    if !keep_batch {
        dims.remove(0);
    }
    Shape::from(dims)
}

/// The plan of a `D`-dimensional convolution of `input` (`[N, C, spatial..]`, or unbatched
/// `[C, spatial..]`) by `weight` (`[out, C / groups, kernel..]`) with an optional `bias`
/// (`[out]`), or the error PyTorch would give, naming `op` and the shapes.
///
/// ```
/// use ember_tensor::ops::conv::{conv_plan, ConvArgs, Padding};
/// let p = conv_plan("conv1d", &[3, 10], &[4, 3, 5], None, &ConvArgs::<1>::default().padding(Padding::Same))?;
/// assert_eq!((p.input.dims(), p.weight.dims(), p.output.dims()), (&[1, 3, 1, 10][..], &[4, 3, 1, 5][..], &[4, 10][..]));
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn conv_plan<const D: usize>(
    op: &'static str,
    input: &[usize],
    weight: &[usize],
    bias: Option<&[usize]>,
    args: &ConvArgs<D>,
) -> Result<ConvPlan> {
    supported::<D>(op)?;
    let (full, keep_batch) = batched(op, input, D)?;
    let geometry = conv_geometry(op, &full, weight, bias, args)?;
    let output = caller_shape(geometry.output_shape(full[0]), D, keep_batch);
    Ok(ConvPlan { geometry, input: lift_shape(&full), weight: lift_shape(weight), output })
}

/// The plan of a `D`-dimensional transposed convolution (see [`conv_transpose_geometry`]);
/// `input` may be unbatched.
pub fn conv_transpose_plan<const D: usize>(
    op: &'static str,
    input: &[usize],
    weight: &[usize],
    bias: Option<&[usize]>,
    args: &ConvTransposeArgs<D>,
) -> Result<ConvPlan> {
    supported::<D>(op)?;
    let (full, keep_batch) = batched(op, input, D)?;
    let geometry = conv_transpose_geometry(op, &full, weight, bias, args)?;
    let output = caller_shape(geometry.input_shape(full[0]), D, keep_batch);
    Ok(ConvPlan { geometry, input: lift_shape(&full), weight: lift_shape(weight), output })
}

/// What `unfold` or `fold` does to its input's shape: the window, the input as the kernel
/// reads it (batched) and the result as the caller sees it (batched like the input).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowPlan {
    /// The window the backend computes with.
    pub window: SlidingWindow,
    /// The input, batched (`[N, C, h, w]` for `unfold`, `[N, C * kh * kw, L]` for `fold`).
    pub input: Shape,
    /// The result's shape.
    pub output: Shape,
}

/// The plan of `unfold` of `input` (`[N, C, h, w]` or unbatched `[C, h, w]`): the result is
/// `[N, C * kh * kw, L]` (or `[C * kh * kw, L]`).
pub fn unfold_plan(input: &[usize], args: &UnfoldArgs) -> Result<WindowPlan> {
    let op = "unfold";
    let (full, keep_batch) = batched(op, input, 2)?;
    let window = unfold_window(&full, args)?;
    let too_large = || Error::shape(op, format!("input {input:?} is too large"));
    let rows = full[1].checked_mul(window.taps()).ok_or_else(too_large)?;
    // Checked: large paddings make each side of the block grid fit while their product
    // does not.
    let positions = window.output[0].checked_mul(window.output[1]).ok_or_else(too_large)?;
    let mut output = vec![full[0], rows, positions];
    if !keep_batch {
        output.remove(0);
    }
    let output = Shape::from(output);
    checked_numel(op, &output)?;
    Ok(WindowPlan { window, input: Shape::from(full), output })
}

/// The plan of `fold` of `input` (`[N, C * kh * kw, L]` or unbatched `[C * kh * kw, L]`)
/// into `output_size`: the result is `[N, C, h, w]` (or `[C, h, w]`).
pub fn fold_plan(input: &[usize], output_size: [usize; 2], args: &UnfoldArgs) -> Result<WindowPlan> {
    let op = "fold";
    let (full, keep_batch) = batched(op, input, 1)?;
    let (window, channels) = fold_window(&full, output_size, args)?;
    let mut output = vec![full[0], channels, output_size[0], output_size[1]];
    if !keep_batch {
        output.remove(0);
    }
    let output = Shape::from(output);
    checked_numel(op, &output)?;
    Ok(WindowPlan { window, input: Shape::from(full), output })
}

/// An error unless `input` is `[N, C, spatial..]` and `weight` `[out, in, kernel..]` with
/// `spatial` dimensions each.
fn check_operands(op: &'static str, input: &[usize], weight: &[usize], spatial: usize) -> Result<()> {
    if input.len() != spatial + 2 {
        return Err(Error::shape(
            op,
            format!("expected a {}-d (batched) input, got input of size {input:?}", spatial + 2),
        ));
    }
    if weight.len() != spatial + 2 {
        return Err(Error::shape(op, format!("expected a {}-d weight, got weight of size {weight:?}", spatial + 2)));
    }
    Ok(())
}

/// An error unless `bias` is absent or `[channels]`.
fn check_bias(op: &'static str, weight: &[usize], bias: Option<&[usize]>, channels: usize) -> Result<()> {
    if let Some(b) = bias
        && b != [channels]
    {
        return Err(Error::shape(
            op,
            format!(
                "given weight of size {weight:?}, expected bias to be 1-dimensional with {channels} elements, but got \
                 bias of size {b:?} instead"
            ),
        ));
    }
    Ok(())
}

/// Checks the arguments shared by `unfold` and `fold`.
fn check_unfold_args(op: &'static str, args: &UnfoldArgs) -> Result<()> {
    positive(op, "kernel size", &args.kernel_size)?;
    positive(op, "dilation", &args.dilation)?;
    positive(op, "stride", &args.stride)?;
    for (what, v) in [
        ("kernel size", &args.kernel_size),
        ("dilation", &args.dilation),
        ("padding", &args.padding),
        ("stride", &args.stride),
    ] {
        bounded(op, what, v)?;
    }
    Ok(())
}

/// The blocks of `args` over a `[h, w]` input, or PyTorch's error when there are none.
fn blocks(op: &'static str, spatial: [usize; 2], args: &UnfoldArgs) -> Result<SlidingWindow> {
    let UnfoldArgs { kernel_size, dilation, padding, stride } = *args;
    let n: [Option<usize>; 2] =
        std::array::from_fn(|d| positions(spatial[d], padding[d], padding[d], kernel_size[d], stride[d], dilation[d]));
    match n {
        [Some(oh), Some(ow)] if oh > 0 && ow > 0 => {
            Ok(SlidingWindow { input: spatial, output: [oh, ow], kernel: kernel_size, stride, padding, dilation })
        }
        _ => {
            let calc: Vec<i128> = (0..2)
                .map(|d| {
                    (spatial[d] as i128 + 2 * padding[d] as i128 - dilated(kernel_size[d], dilation[d]) as i128)
                        .div_euclid(stride[d] as i128)
                        + 1
                })
                .collect();
            Err(Error::shape(
                op,
                format!(
                    "given input with spatial size {}, kernel_size={}, dilation={}, padding={}, stride={}, the \
                     calculated shape of the array of sliding blocks is {}, but its components must be at least one",
                    sizes(&spatial),
                    sizes(&kernel_size),
                    sizes(&dilation),
                    sizes(&padding),
                    sizes(&stride),
                    sizes(&calc)
                ),
            ))
        }
    }
}

/// The sliding window of `unfold` over a batched `[N, C, H, W]` input.
///
/// ```
/// use ember_tensor::ops::conv::{unfold_window, UnfoldArgs};
/// let w = unfold_window(&[2, 3, 5, 6], &UnfoldArgs::new(2).stride(2))?;
/// assert_eq!(w.output, [2, 3]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn unfold_window(input: &[usize], args: &UnfoldArgs) -> Result<SlidingWindow> {
    let op = "unfold";
    check_unfold_args(op, args)?;
    if input.len() != 4 {
        return Err(Error::shape(op, format!("expected a 4-d (batched) input, got input of size {input:?}")));
    }
    blocks(op, [input[2], input[3]], args)
}

/// The sliding window of `fold` of a batched `[N, C * kh * kw, L]` input into
/// `output_size`, and the number of channels `C`.
///
/// ```
/// use ember_tensor::ops::conv::{fold_window, UnfoldArgs};
/// let (w, channels) = fold_window(&[2, 12, 6], [4, 6], &UnfoldArgs::new(2).stride(2))?;
/// assert_eq!((w.output, channels), ([2, 3], 3));
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn fold_window(input: &[usize], output_size: [usize; 2], args: &UnfoldArgs) -> Result<(SlidingWindow, usize)> {
    let op = "fold";
    check_unfold_args(op, args)?;
    bounded(op, "output size", &output_size)?;
    if input.len() != 3 {
        return Err(Error::shape(op, format!("expected a 3-d (batched) input, got input of size {input:?}")));
    }
    let taps = args.kernel_size[0] * args.kernel_size[1];
    if !input[1].is_multiple_of(taps) {
        return Err(Error::shape(
            op,
            format!(
                "expected size of input's dimension 1 to be divisible by the product of kernel_size, but got \
                 input.size(1)={} and kernel_size={}",
                input[1],
                sizes(&args.kernel_size)
            ),
        ));
    }
    let window = blocks(op, output_size, args)?;
    let [oh, ow] = window.output;
    if input[2] != oh * ow {
        return Err(Error::shape(
            op,
            format!(
                "given output_size={}, kernel_size={}, dilation={}, padding={}, stride={}, expected size of input's \
                 dimension 2 to match the calculated number of sliding blocks {oh} * {ow} = {}, but got input.size(2)={}",
                sizes(&output_size),
                sizes(&args.kernel_size),
                sizes(&args.dilation),
                sizes(&args.padding),
                sizes(&args.stride),
                oh * ow,
                input[2]
            ),
        ));
    }
    Ok((window, input[1] / taps))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_sizes_follow_pytorch() {
        let g =
            conv_geometry("conv2d", &[1, 2, 7, 9], &[4, 1, 3, 2], None, &ConvArgs::<2>::default().groups(2)).unwrap();
        assert_eq!(g.window.output, [5, 8]);
        let args = ConvArgs::<2>::default().stride([2, 3]).padding([1, 2]).dilation([2, 1]);
        let g = conv_geometry("conv2d", &[1, 1, 10, 11], &[1, 1, 3, 3], None, &args).unwrap();
        // (10 + 2 - 4 - 1) / 2 + 1 = 4; (11 + 4 - 2 - 1) / 3 + 1 = 5.
        assert_eq!(g.window.output, [4, 5]);
        let g = conv_geometry(
            "conv1d",
            &[2, 3, 10],
            &[5, 3, 4],
            Some(&[5]),
            &ConvArgs::<1>::default().padding(Padding::Same),
        )
        .unwrap();
        assert_eq!((g.window.input, g.window.output, g.window.padding), ([1, 10], [1, 10], [0, 1]));
        let t = conv_transpose_geometry(
            "conv_transpose1d",
            &[1, 4, 5],
            &[4, 3, 3],
            None,
            &ConvTransposeArgs::<1>::default().stride(3).padding(1).output_padding(2).groups(2),
        )
        .unwrap();
        // (5 - 1) 3 - 2 + 2 + 2 + 1 = 15 outputs, 6 channels.
        assert_eq!((t.window.input, t.in_channels, t.out_channels), ([1, 15], 6, 4));
    }

    #[test]
    fn bad_arguments_are_errors() {
        let err = |r: Result<ConvGeometry>| r.unwrap_err().to_string();
        let a = ConvArgs::<2>::default();
        assert!(err(conv_geometry("conv2d", &[1, 1, 2, 2], &[1, 1, 3, 3], None, &a)).contains("Kernel size can't be"));
        assert!(
            err(conv_geometry("conv2d", &[1, 4, 5, 5], &[3, 2, 3, 3], None, &a.groups(2))).contains("divisible by 2")
        );
        assert!(err(conv_geometry("conv2d", &[1, 1, 5, 5], &[1, 1, 3, 3], None, &a.stride(0))).contains("stride"));
        assert!(
            err(conv_geometry("conv2d", &[1, 1, 5, 5], &[1, 1, 3, 3], None, &a.stride(2).padding(Padding::Same)))
                .contains("strided")
        );
        assert!(err(conv_geometry("conv2d", &[1, 1, 5, 5], &[2, 1, 3, 3], Some(&[3]), &a)).contains("bias"));
        assert!(err(conv_geometry("conv2d", &[1, 5, 5], &[2, 1, 3, 3], None, &a)).contains("[1, 5, 5]"));
        let t = ConvTransposeArgs::<2>::default().stride(2).output_padding(2);
        assert!(
            err(conv_transpose_geometry("conv_transpose2d", &[1, 1, 3, 3], &[1, 1, 3, 3], None, &t))
                .contains("output padding")
        );
        assert!("full".parse::<Padding<2>>().is_err());
        assert_eq!("same".parse::<Padding<2>>().unwrap(), Padding::Same);
    }
}
