//! PyTorch's output-size rules for pooling and interpolation, and their errors: the
//! resolution of [`MaxPoolArgs`], [`AvgPoolArgs`] and [`InterpolateArgs`] into the maps a
//! backend computes with ([`PoolWindows`], [`Resample`]).

use super::args::{AvgPoolArgs, InterpolateArgs, InterpolateMode, MaxPoolArgs};
use super::windows::{AxisTaps, AxisWindows, PoolWindows, Resample};
use crate::shape::{Shape, checked_numel};
use crate::storage::check_allocatable;
use crate::{DType, Error, Result};

/// A pooling or interpolation resolved for the kernels: the 4-d view of the input they
/// read, the map, and the shape of the result as the caller sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolPlan<M> {
    /// The input as `[N, C, h, w]`.
    pub input: Shape,
    /// What the kernel computes.
    pub map: M,
    /// The result's shape, of the input's rank.
    pub output: Shape,
}

/// The input of a `D`-dimensional operation lifted to `[N, C, h, w]`, and the shape of the
/// result for output extents `[oh, ow]`.
struct Lifted {
    input: [usize; 4],
    prefix: Vec<usize>,
    one_d: bool,
}

impl Lifted {
    fn output(&self, out: [usize; 2]) -> Shape {
        let mut dims = self.prefix.clone();
        if self.one_d {
            dims.push(out[1]);
        } else {
            dims.extend(out);
        }
        Shape::from(dims)
    }

    /// `(C x h x w)` as PyTorch prints sizes in its errors (the 2-d view for 1-d ops).
    fn sizes(&self, out: Option<[usize; 2]>) -> String {
        let [_, c, h, w] = self.input;
        let [h, w] = out.unwrap_or([h, w]);
        format!("({c}x{h}x{w})")
    }
}

/// Checks the rank (`D + 1` unbatched or `D + 2` batched, when `unbatched` allows the
/// former) and that no dimension but the batch is empty.
fn lift<const D: usize>(op: &'static str, input: &[usize], unbatched: bool) -> Result<Lifted> {
    let batched = input.len() == D + 2;
    let ok_rank = batched || (unbatched && input.len() == D + 1);
    let first = if batched { 1 } else { 0 };
    if !ok_rank || input[first.min(input.len())..].contains(&0) {
        let ranks = if unbatched { format!("{}D or {}D", D + 1, D + 2) } else { format!("{}D", D + 2) };
        return Err(Error::shape(
            op,
            format!(
                "expected a {ranks} (batch mode) tensor with non-zero sizes except an optional batch of 0, but got: {input:?}"
            ),
        ));
    }
    let n = if batched { input[0] } else { 1 };
    let c = input[first];
    let spatial = &input[first + 1..];
    let (h, w) = if D == 1 { (1, spatial[0]) } else { (spatial[0], spatial[1]) };
    Ok(Lifted { input: [n, c, h, w], prefix: input[..first + 1].to_vec(), one_d: D == 1 })
}

/// Lifts per-dimension arguments of a `D`-dimensional op to two dimensions (`fill` on the
/// added height).
fn two<const D: usize>(v: [usize; D], fill: usize) -> [usize; 2] {
    if D == 1 { [fill, v[0]] } else { [v[0], v[D - 1]] }
}

/// PyTorch's pooling output size: `floor` (or, with `ceil`, `ceil`) of
/// `(input + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1`, where a `ceil` window
/// must start inside the input or the left padding.
fn pooled_extent(input: usize, kernel: usize, pad: usize, stride: usize, dilation: usize, ceil: bool) -> i64 {
    let (i, k, p, s, d) = (input as i64, kernel as i64, pad as i64, stride as i64, dilation as i64);
    let span = i + 2 * p - d * (k - 1) - 1 + if ceil { s - 1 } else { 0 };
    let mut out = span.div_euclid(s) + 1;
    if ceil && (out - 1) * s >= i + p {
        out -= 1;
    }
    out
}

/// The checks PyTorch makes on a window's arguments, and the output extents `[oh, ow]`.
fn window_extents(
    op: &'static str,
    lifted: &Lifted,
    (kernel, stride, padding, dilation): ([usize; 2], [usize; 2], [usize; 2], [usize; 2]),
    ceil: bool,
) -> Result<[usize; 2]> {
    if kernel.contains(&0) {
        return Err(Error::invalid(op, format!("kernel size should be greater than zero, but got {kernel:?}")));
    }
    if stride.contains(&0) {
        return Err(Error::invalid(op, format!("stride should not be zero, but got {stride:?}")));
    }
    if dilation.contains(&0) {
        return Err(Error::invalid(op, format!("dilation should be greater than zero, but got {dilation:?}")));
    }
    for d in 0..2 {
        let effective = (kernel[d] - 1).saturating_mul(dilation[d]).saturating_add(1);
        if padding[d] > effective / 2 || padding[d] > kernel[d] / 2 {
            return Err(Error::invalid(
                op,
                format!(
                    "padding should be at most half of effective kernel size, but got padding={}, kernel_size={} and dilation={}",
                    padding[d], kernel[d], dilation[d]
                ),
            ));
        }
    }
    let [_, _, h, w] = lifted.input;
    let big = |v: usize| v >= 1 << 40;
    if [h, w].into_iter().chain(kernel).chain(stride).chain(padding).chain(dilation).any(big) {
        return Err(Error::invalid(op, "window arguments and sizes must be below 2^40"));
    }
    let oh = pooled_extent(h, kernel[0], padding[0], stride[0], dilation[0], ceil);
    let ow = pooled_extent(w, kernel[1], padding[1], stride[1], dilation[1], ceil);
    if oh < 1 || ow < 1 {
        let (c, oh, ow) = (lifted.input[1], oh.max(0), ow.max(0));
        return Err(Error::shape(
            op,
            format!(
                "Given input size: {}. Calculated output size: ({c}x{oh}x{ow}). Output size is too small",
                lifted.sizes(None)
            ),
        ));
    }
    Ok([oh as usize, ow as usize])
}

/// The windows of one dimension of a max pool.
fn max_axis(input: usize, out: usize, kernel: usize, stride: usize, pad: usize, dilation: usize) -> AxisWindows {
    let (i, k, d) = (input as i64, kernel as i64, dilation as i64);
    let windows = (0..out as i64)
        .map(|o| {
            let start = o * stride as i64 - pad as i64;
            // The first and last taps `start + j * d` inside `0..input`.
            let first = if start < 0 { (-start + d - 1) / d } else { 0 };
            let last = if start > i - 1 { -1 } else { ((i - 1 - start) / d).min(k - 1) };
            if last < first { (0, 0) } else { ((start + first * d) as usize, (last - first + 1) as usize) }
        })
        .collect();
    AxisWindows { input, step: dilation, windows }
}

/// Resolves `max_pool1d` / `max_pool2d` (`D` = 1, 2) for an input of shape `input`
/// (`[N, C, ..]` or unbatched `[C, ..]`).
pub fn max_pool_plan<const D: usize>(
    op: &'static str,
    input: &[usize],
    args: &MaxPoolArgs<D>,
) -> Result<PoolPlan<PoolWindows>> {
    let lifted = lift::<D>(op, input, true)?;
    let kernel = two(args.kernel_size, 1);
    let stride = two(args.stride.unwrap_or(args.kernel_size), 1);
    let (padding, dilation) = (two(args.padding, 0), two(args.dilation, 1));
    let [oh, ow] = window_extents(op, &lifted, (kernel, stride, padding, dilation), args.ceil_mode)?;
    let [_, _, h, w] = lifted.input;
    let map = PoolWindows {
        rows: max_axis(h, oh, kernel[0], stride[0], padding[0], dilation[0]),
        cols: max_axis(w, ow, kernel[1], stride[1], padding[1], dilation[1]),
    };
    Ok(PoolPlan { input: Shape::from(lifted.input), map, output: lifted.output([oh, ow]) })
}

/// One dimension of an average pool: PyTorch's window clipped to the input, each tap
/// weighted by `1 / divisor` (the window's length clipped to the padded input with
/// `count_include_pad`, else clipped to the input; or `1` when `unit`).
fn avg_axis(
    input: usize,
    out: usize,
    kernel: usize,
    stride: usize,
    pad: usize,
    include_pad: bool,
    unit: bool,
) -> AxisTaps {
    let mut taps = AxisTaps::new(input);
    let (i, p) = (input as i64, pad as i64);
    for o in 0..out as i64 {
        let start = o * stride as i64 - p;
        let end = (start + kernel as i64).min(i + p);
        let padded_len = end - start;
        let (start, end) = (start.max(0), end.min(i));
        let divisor = if include_pad { padded_len } else { end - start };
        let weight = if unit { 1.0 } else { 1.0 / divisor.max(1) as f64 };
        taps.push((start..end.max(start)).map(|t| (t as usize, weight)));
    }
    taps
}

/// Resolves `avg_pool1d` / `avg_pool2d` for an input of shape `input`.
pub fn avg_pool_plan<const D: usize>(
    op: &'static str,
    input: &[usize],
    args: &AvgPoolArgs<D>,
) -> Result<PoolPlan<Resample>> {
    let lifted = lift::<D>(op, input, true)?;
    let kernel = two(args.kernel_size, 1);
    let stride = two(args.stride.unwrap_or(args.kernel_size), 1);
    let padding = two(args.padding, 0);
    if args.divisor_override == Some(0) {
        return Err(Error::invalid(op, "divisor must be not zero"));
    }
    let [oh, ow] = window_extents(op, &lifted, (kernel, stride, padding, [1, 1]), args.ceil_mode)?;
    let [_, _, h, w] = lifted.input;
    let unit = args.divisor_override.is_some();
    let mut rows = avg_axis(h, oh, kernel[0], stride[0], padding[0], args.count_include_pad, unit);
    let cols = avg_axis(w, ow, kernel[1], stride[1], padding[1], args.count_include_pad, unit);
    if let Some(d) = args.divisor_override {
        rows.weight.iter_mut().for_each(|v| *v = 1.0 / d as f64);
    }
    Ok(PoolPlan { input: Shape::from(lifted.input), map: Resample { rows, cols }, output: lifted.output([oh, ow]) })
}

/// PyTorch's adaptive window of output `o` of `out` over `input`:
/// `floor(o * input / out)..ceil((o + 1) * input / out)`.
fn adaptive_window(o: usize, out: usize, input: usize) -> (usize, usize) {
    let start = o * input / out;
    let end = ((o + 1) * input).div_ceil(out);
    (start, end)
}

/// Output sides from which a plan's per-axis maps (16 to 40 bytes an entry) are large
/// enough to need the output's allocation checked first.
const LONG_SIDE: usize = 1 << 20;

/// Refuses an output that cannot exist or cannot be allocated before the maps of its sides
/// are built. The count is checked against ember's element limit; an output with a side of
/// [`LONG_SIDE`] or more must also be allocatable ([`check_allocatable`]), so a countable
/// but unallocatable request (`[1, 1, 2^31, 2^20]`: 2^51 elements) is an allocation error
/// instead of first building a 2^31-entry map. Once the output can be allocated, the maps
/// are at most a fixed multiple of it.
fn reserve_output(op: &'static str, output: &Shape, sides: [usize; 2], dtype: DType) -> Result<()> {
    let elements = checked_numel(op, output)?;
    if sides[0].max(sides[1]) < LONG_SIDE {
        return Ok(());
    }
    check_allocatable(op, elements, dtype)
}

/// Checks an adaptive pool's input and output size; returns the lifted input.
fn adaptive_lift<const D: usize>(op: &'static str, input: &[usize], size: [usize; D]) -> Result<Lifted> {
    let lifted = lift::<D>(op, input, true)?;
    let [_, _, h, w] = lifted.input;
    if h.max(w).max(size.into_iter().max().unwrap_or(0)) >= 1 << 32 {
        return Err(Error::invalid(op, "sizes must be below 2^32"));
    }
    // Before the per-axis windows, which are as long as the output's sides: an output too
    // large to hold must not first build them. The dtype is not known here: the bound is the
    // smallest output either float dtype gives.
    reserve_output(op, &lifted.output(two(size, 1)), two(size, 1), DType::F32)?;
    Ok(lifted)
}

/// Resolves `adaptive_avg_pool1d` / `adaptive_avg_pool2d` to an output of `size`.
pub fn adaptive_avg_pool_plan<const D: usize>(
    op: &'static str,
    input: &[usize],
    size: [usize; D],
) -> Result<PoolPlan<Resample>> {
    let lifted = adaptive_lift::<D>(op, input, size)?;
    let [_, _, h, w] = lifted.input;
    let [oh, ow] = two(size, 1);
    let axis = |input: usize, out: usize| -> Result<AxisTaps> {
        // Consecutive windows overlap by at most one position: `input + out` taps in all.
        let mut taps = AxisTaps::with_capacity(op, input, out, input + out)?;
        for o in 0..out {
            let (s, e) = adaptive_window(o, out, input);
            let wt = 1.0 / (e - s).max(1) as f64;
            taps.push((s..e).map(|t| (t, wt)));
        }
        Ok(taps)
    };
    let map = Resample { rows: axis(h, oh)?, cols: axis(w, ow)? };
    Ok(PoolPlan { input: Shape::from(lifted.input), map, output: lifted.output([oh, ow]) })
}

/// Resolves `adaptive_max_pool1d` / `adaptive_max_pool2d` to an output of `size`.
pub fn adaptive_max_pool_plan<const D: usize>(
    op: &'static str,
    input: &[usize],
    size: [usize; D],
) -> Result<PoolPlan<PoolWindows>> {
    let lifted = adaptive_lift::<D>(op, input, size)?;
    let [_, _, h, w] = lifted.input;
    let [oh, ow] = two(size, 1);
    let axis = |input: usize, out: usize| -> Result<AxisWindows> {
        let mut windows = Vec::new();
        windows.try_reserve_exact(out).map_err(|_| Error::Alloc { op, elements: out, dtype: "(usize, usize)" })?;
        windows.extend((0..out).map(|o| adaptive_window(o, out, input)).map(|(s, e)| (s, e - s)));
        Ok(AxisWindows { input, step: 1, windows })
    };
    let map = PoolWindows { rows: axis(h, oh)?, cols: axis(w, ow)? };
    Ok(PoolPlan { input: Shape::from(lifted.input), map, output: lifted.output([oh, ow]) })
}

/// `values` as one per spatial dimension (a single value repeats).
fn per_dim<T: Copy>(values: &[T], dims: usize) -> Option<Vec<T>> {
    match values.len() {
        1 => Some(vec![values[0]; dims]),
        n if n == dims => Some(values.to_vec()),
        _ => None,
    }
}

/// One dimension of nearest interpolation, PyTorch's legacy rule, in `f32` as PyTorch
/// computes it.
fn nearest_axis(op: &'static str, input: usize, out: usize, scale: Option<f64>) -> Result<AxisTaps> {
    let mut taps = AxisTaps::with_capacity(op, input, out, out)?;
    let ratio = match scale {
        Some(s) if s > 0.0 => (1.0 / s) as f32,
        _ => input as f32 / out as f32,
    };
    for o in 0..out {
        let src = if out == input {
            o
        } else if out == 2 * input {
            o >> 1
        } else {
            ((o as f32 * ratio).floor() as usize).min(input - 1)
        };
        taps.push([(src, 1.0)]);
    }
    Ok(taps)
}

/// Arithmetic in the element type, for source positions computed as PyTorch does.
trait Real: Copy + PartialOrd + std::ops::Add<Output = Self> + std::ops::Sub<Output = Self> {
    fn of(v: f64) -> Self;
    fn of_usize(v: usize) -> Self;
    fn times(self, o: Self) -> Self;
    fn over(self, o: Self) -> Self;
    fn floor_index(self) -> i64;
    fn get(self) -> f64;
}

macro_rules! real {
    ($t:ty) => {
        impl Real for $t {
            fn of(v: f64) -> Self {
                v as $t
            }
            fn of_usize(v: usize) -> Self {
                v as $t
            }
            fn times(self, o: Self) -> Self {
                self * o
            }
            fn over(self, o: Self) -> Self {
                self / o
            }
            fn floor_index(self) -> i64 {
                self.floor() as i64
            }
            fn get(self) -> f64 {
                self as f64
            }
        }
    };
}
real!(f32);
real!(f64);

/// One dimension of linear interpolation: PyTorch's source index (`align_corners` maps the
/// end pixels' centres onto each other; otherwise half-pixel centres, clamped at 0) and
/// its two neighbours, in the precision of the element type `R`.
fn linear_axis<R: Real>(
    op: &'static str,
    input: usize,
    out: usize,
    align_corners: bool,
    scale: Option<f64>,
) -> Result<AxisTaps> {
    let mut taps = AxisTaps::with_capacity(op, input, out, 2 * out)?;
    let ratio = if align_corners {
        if out > 1 { R::of_usize(input - 1).over(R::of_usize(out - 1)) } else { R::of(0.0) }
    } else {
        match scale {
            Some(s) if s > 0.0 => R::of(1.0 / s),
            _ => R::of_usize(input).over(R::of_usize(out)),
        }
    };
    for o in 0..out {
        let real = if align_corners {
            ratio.times(R::of_usize(o))
        } else {
            let r = ratio.times(R::of_usize(o) + R::of(0.5)) - R::of(0.5);
            if r < R::of(0.0) { R::of(0.0) } else { r }
        };
        let i0 = real.floor_index().min(input as i64 - 1).max(0);
        let mut lambda = real - R::of(i0 as f64);
        if lambda < R::of(0.0) {
            lambda = R::of(0.0);
        }
        if lambda > R::of(1.0) {
            lambda = R::of(1.0);
        }
        let i1 = if i0 < input as i64 - 1 { i0 + 1 } else { i0 };
        let l0 = R::of(1.0) - lambda;
        taps.push([(i0 as usize, l0.get()), (i1 as usize, lambda.get())]);
    }
    Ok(taps)
}

/// Resolves `interpolate` for an input of shape `input` (`[N, C, L]` or `[N, C, H, W]`) and
/// dtype `dtype` (linear weights are computed in its precision, as PyTorch does).
pub fn interpolate_plan(input: &[usize], args: &InterpolateArgs, dtype: DType) -> Result<PoolPlan<Resample>> {
    let op = "interpolate";
    let rank = input.len();
    if !(3..=4).contains(&rank) {
        return Err(Error::shape(
            op,
            format!("expected a 3D (N, C, L) or 4D (N, C, H, W) input, but got shape {input:?}"),
        ));
    }
    let dims = rank - 2;
    let mode = args.mode;
    if mode == InterpolateMode::Nearest && args.align_corners.is_some() {
        return Err(Error::invalid(
            op,
            "align_corners option can only be set with the interpolating modes: linear | bilinear | bicubic | trilinear",
        ));
    }
    match (mode, rank) {
        (InterpolateMode::Linear, 4) | (InterpolateMode::Bilinear, 3) => {
            let need = if mode == InterpolateMode::Linear { 3 } else { 4 };
            return Err(Error::shape(op, format!("Got {rank}D input, but {} mode needs {need}D input", mode.name())));
        }
        _ => {}
    }
    let spatial = &input[2..];
    let (size, scales): (Vec<usize>, Option<Vec<f64>>) = match (&args.size, &args.scale_factor) {
        (Some(_), Some(_)) => return Err(Error::invalid(op, "only one of size or scale_factor should be defined")),
        (None, None) => return Err(Error::invalid(op, "either size or scale_factor should be defined")),
        (Some(s), None) => {
            let s = per_dim(s, dims).ok_or_else(|| {
                Error::shape(
                    op,
                    format!(
                        "Input and output must have the same number of spatial dimensions, but got input with spatial dimensions of {spatial:?} and output size of {s:?}"
                    ),
                )
            })?;
            (s, None)
        }
        (None, Some(f)) => {
            let f = per_dim(f, dims).ok_or_else(|| {
                Error::shape(
                    op,
                    format!(
                        "Input and scale_factor must have the same number of spatial dimensions, but got input with spatial dimensions of {spatial:?} and scale_factor of {f:?}"
                    ),
                )
            })?;
            if f.iter().any(|v| !v.is_finite() || *v < 0.0) {
                return Err(Error::invalid(op, format!("scale factors must be finite and non-negative, got {f:?}")));
            }
            let size = spatial.iter().zip(&f).map(|(&i, &s)| (i as f64 * s).floor() as usize).collect();
            let keep = !args.recompute_scale_factor.unwrap_or(false);
            (size, keep.then_some(f))
        }
    };
    let too_big = spatial.iter().chain(&size).any(|&v| v >= 1 << 32);
    if spatial.contains(&0) || size.contains(&0) || too_big {
        let names = if dims == 1 { vec!["W"] } else { vec!["H", "W"] };
        let show = |v: &[usize]| names.iter().zip(v).map(|(n, v)| format!("{n}: {v}")).collect::<Vec<_>>().join(", ");
        return Err(Error::shape(
            op,
            format!(
                "Input and output sizes should be greater than 0, but got input ({}) output ({})",
                show(spatial),
                show(&size)
            ),
        ));
    }
    // Before the per-axis sample maps, which are as long as the output's sides.
    let sides = if dims == 1 { [1, size[0]] } else { [size[0], size[1]] };
    let output = Shape::from(input[..2].iter().chain(&size).copied().collect::<Vec<_>>());
    reserve_output(op, &output, sides, dtype)?;
    let align = args.align_corners.unwrap_or(false);
    let axis = |d: usize| {
        let (i, o) = (spatial[d], size[d]);
        let s = scales.as_ref().map(|f| f[d]);
        match (mode, dtype) {
            (InterpolateMode::Nearest, _) => nearest_axis(op, i, o, s),
            // The 16-bit floats are interpolated in f32, with f32's weights.
            (_, DType::F32 | DType::F16 | DType::BF16) => linear_axis::<f32>(op, i, o, align, s),
            _ => linear_axis::<f64>(op, i, o, align, s),
        }
    };
    let (n, c) = (input[0], input[1]);
    let (map, in4) = if dims == 1 {
        let mut rows = AxisTaps::new(1);
        rows.push([(0, 1.0)]);
        (Resample { rows, cols: axis(0)? }, [n, c, 1, spatial[0]])
    } else {
        (Resample { rows: axis(0)?, cols: axis(1)? }, [n, c, spatial[0], spatial[1]])
    };
    let mut output = vec![n, c];
    output.extend(&size);
    Ok(PoolPlan { input: Shape::from(in4), map, output: Shape::from(output) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_sizes_follow_pytorch() {
        let p = max_pool_plan("max_pool2d", &[1, 1, 5, 5], &MaxPoolArgs::<2>::new(2).ceil_mode(true)).unwrap();
        assert_eq!(p.output.dims(), &[1, 1, 3, 3]);
        let a = MaxPoolArgs::<2>::new(3).stride(2).padding(1).ceil_mode(true);
        assert_eq!(max_pool_plan("max_pool2d", &[1, 5, 5], &a).unwrap().output.dims(), &[1, 3, 3]);
        // The last ceil window would start in the right padding: dropped.
        let a = MaxPoolArgs::<1>::new(2).stride(2).padding(1).ceil_mode(true);
        assert_eq!(max_pool_plan("max_pool1d", &[1, 1, 4], &a).unwrap().output.dims(), &[1, 1, 3]);
        let p = max_pool_plan("max_pool2d", &[1, 1, 9, 9], &MaxPoolArgs::<2>::new(2).dilation(3).padding(1)).unwrap();
        assert_eq!(p.output.dims(), &[1, 1, 4, 4]);
        assert_eq!(p.map.rows.windows[0], (2, 1));
        let p = adaptive_max_pool_plan("adaptive_max_pool1d", &[1, 1, 5], [3]).unwrap();
        assert_eq!(p.map.cols.windows, vec![(0, 2), (1, 3), (3, 2)]);
    }

    #[test]
    fn bad_arguments_are_errors() {
        let err = |r: Result<PoolPlan<PoolWindows>>| r.unwrap_err().to_string();
        assert!(
            err(max_pool_plan("max_pool2d", &[1, 1, 4, 4], &MaxPoolArgs::<2>::new(3).padding(2)))
                .contains("at most half")
        );
        assert!(err(max_pool_plan("max_pool2d", &[1, 1, 4, 4], &MaxPoolArgs::<2>::new(5))).contains("too small"));
        assert!(err(max_pool_plan("max_pool2d", &[4, 4], &MaxPoolArgs::<2>::new(2))).contains("[4, 4]"));
        assert!(err(max_pool_plan("max_pool2d", &[1, 0, 4, 4], &MaxPoolArgs::<2>::new(2))).contains("[1, 0, 4, 4]"));
        assert!(max_pool_plan("max_pool2d", &[0, 1, 4, 4], &MaxPoolArgs::<2>::new(2)).is_ok());
        let up = InterpolateArgs::size([2]).align_corners(true);
        assert!(interpolate_plan(&[1, 1, 4], &up, DType::F32).unwrap_err().to_string().contains("align_corners"));
        assert!(interpolate_plan(&[1, 1, 4], &InterpolateArgs::default(), DType::F32).is_err());
    }
}
