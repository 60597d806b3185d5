//! The default bodies of the sliding-window kernels: `unfold` as a `gather` from the input
//! with one zero appended to each channel (padding reads the zero), `fold` as the matching
//! `scatter_add`, and the convolutions as `unfold` / `fold` around batched matrix products
//! (one per image and group). The index of every column entry is computed on the host and
//! uploaded; the column matrices are full intermediates of `C * kh * kw * oh * ow` elements
//! per image.

use crate::backend::kernels::Kernels;
use crate::backend::validate::conv::{Role, check_views, check_window_view};
use crate::backend::{BinaryOp, ReduceOp, View};
use crate::layout::{Layout, Strides};
use crate::ops::conv::{ConvGeometry, SlidingWindow};
use crate::shape::Shape;
use crate::storage::{Buffer, CpuStorage, Storage};
use crate::{Result, Scalar};
use smallvec::smallvec;

/// For every entry `(tap, position)` of one channel's column matrix (row-major, taps are
/// rows), the offset of the input element it reads in the channel's `h * w` plane, or
/// `h * w` (the appended zero) where it reads padding.
fn column_sources(op: &'static str, window: &SlidingWindow) -> Result<Buffer<i64>> {
    let [h, w] = window.input;
    let [oh, ow] = window.output;
    let [kh, kw] = window.kernel;
    let zero = (h * w) as i64;
    let (l, taps) = (oh * ow, kh * kw);
    Buffer::from_fn(op, taps * l, |p| {
        let (tap, pos) = (p / l, p % l);
        let (i, j) = (tap / kw, tap % kw);
        let (y, x) = (pos / ow, pos % ow);
        // `SlidingWindow::check` keeps these sums far inside `i64`.
        let iy = (y * window.stride[0] + i * window.dilation[0]) as i64 - window.padding[0] as i64;
        let ix = (x * window.stride[1] + j * window.dilation[1]) as i64 - window.padding[1] as i64;
        if (0..h as i64).contains(&iy) && (0..w as i64).contains(&ix) { iy * w as i64 + ix } else { zero }
    })
}

/// The uploaded [`column_sources`] repeated (stride 0) for `rows` channels.
fn column_index<B: Kernels + ?Sized>(
    b: &B,
    op: &'static str,
    window: &SlidingWindow,
    rows: usize,
) -> Result<(Storage, Layout)> {
    let index = b.upload(CpuStorage::from(column_sources(op, window)?))?;
    let per_channel = window.taps() * window.positions();
    let layout = Layout::new(Shape::from([rows, per_channel]), smallvec![0, 1], 0)?;
    Ok((index, layout))
}

/// `unfold` of a checked `[n, c, h, w]` view: `[n, c * kh * kw, oh * ow]`.
fn unfold_checked<B: Kernels + ?Sized>(
    b: &B,
    op: &'static str,
    (s, l): View<'_>,
    window: &SlidingWindow,
    (n, c): (usize, usize),
) -> Result<Storage> {
    let [h, w] = window.input;
    let rows = n * c;
    let plane = b.cast((s, l), s.dtype())?;
    let zeros = b.full(rows, Scalar::Int(0), s.dtype())?;
    let planes = Layout::contiguous(Shape::from([rows, h * w]));
    let zero_column = Layout::contiguous(Shape::from([rows, 1]));
    let padded = b.cat(&[(&plane, &planes), (&zeros, &zero_column)], 1)?;
    let (index, index_layout) = column_index(b, op, window, rows)?;
    let padded_layout = Layout::contiguous(Shape::from([rows, h * w + 1]));
    b.gather((&padded, &padded_layout), 1, (&index, &index_layout))
}

/// `fold` of a checked `[n, c * kh * kw, oh * ow]` view: `[n, c, h, w]`.
fn fold_checked<B: Kernels + ?Sized>(
    b: &B,
    op: &'static str,
    (s, l): View<'_>,
    window: &SlidingWindow,
    (n, c): (usize, usize),
) -> Result<Storage> {
    let [h, w] = window.input;
    let rows = n * c;
    let columns = b.cast((s, l), s.dtype())?;
    let columns_layout = Layout::contiguous(Shape::from([rows, window.taps() * window.positions()]));
    let sums = b.full(rows * (h * w + 1), Scalar::Int(0), s.dtype())?;
    let sums_layout = Layout::contiguous(Shape::from([rows, h * w + 1]));
    let (index, index_layout) = column_index(b, op, window, rows)?;
    let sums = b.scatter_add((&sums, &sums_layout), 1, (&index, &index_layout), (&columns, &columns_layout))?;
    // Everything but the appended column, which collected the padding's contributions.
    let planes = Layout::new(Shape::from([rows, h * w]), smallvec![h * w + 1, 1], 0)?;
    b.cast((&sums, &planes), s.dtype())
}

/// `unfold` ([`Backend::unfold`](crate::backend::Backend::unfold)) through `gather`.
pub(crate) fn unfold<B: Kernels + ?Sized>(b: &B, (s, l): View<'_>, window: &SlidingWindow) -> Result<Storage> {
    let (n, c, l) = check_window_view("unfold", window, s, l, false)?;
    unfold_checked(b, "unfold", (s, &l), window, (n, c))
}

/// `fold` ([`Backend::fold`](crate::backend::Backend::fold)) through `scatter_add`.
pub(crate) fn fold<B: Kernels + ?Sized>(b: &B, (s, l): View<'_>, window: &SlidingWindow) -> Result<Storage> {
    let (n, c, l) = check_window_view("fold", window, s, l, true)?;
    fold_checked(b, "fold", (s, &l), window, (n, c))
}

/// The weight `[O, C / g, kh, kw]` as `[g, O / g, C / g * kh * kw]` matrices: a view when
/// its strides allow one, else a contiguous copy.
fn weight_matrices<B: Kernels + ?Sized>(
    b: &B,
    (s, l): View<'_>,
    geom: &ConvGeometry,
) -> Result<(Option<Storage>, Layout)> {
    let g = geom.groups;
    let shape = Shape::from([g, geom.out_channels / g, geom.in_channels / g * geom.window.taps()]);
    match l.reshaped(&shape) {
        Some(view) => Ok((None, view)),
        None => Ok((Some(b.cast((s, l), s.dtype())?), Layout::contiguous(shape))),
    }
}

/// `layout` (rank 3) with a leading dimension of `n` repeating it (stride 0).
fn repeated(layout: &Layout, n: usize) -> Result<Layout> {
    let mut dims = vec![n];
    dims.extend_from_slice(layout.shape());
    let mut strides: Strides = smallvec![0];
    strides.extend_from_slice(layout.strides());
    Layout::new(Shape::from(dims), strides, layout.offset())
}

/// `layout` with its last two dimensions swapped.
fn swapped_last(layout: &Layout) -> Result<Layout> {
    let r = layout.rank();
    let mut dims = layout.shape().to_vec();
    let mut strides = Strides::from_slice(layout.strides());
    dims.swap(r - 2, r - 1);
    strides.swap(r - 2, r - 1);
    Layout::new(Shape::from(dims), strides, layout.offset())
}

/// `result + bias`, the bias (`[channels]`) broadcast over `[n, channels, positions]`.
fn add_bias<B: Kernels + ?Sized>(
    b: &B,
    result: Storage,
    (bs, bl): View<'_>,
    (n, channels, positions): (usize, usize, usize),
) -> Result<Storage> {
    let shape = Shape::from([n, channels, positions]);
    let bias = Layout::new(shape.clone(), smallvec![0, bl.strides()[0], 0], bl.offset())?;
    b.binary(BinaryOp::Add, (&result, &Layout::contiguous(shape)), (bs, &bias))
}

/// The convolution ([`Backend::conv2d`](crate::backend::Backend::conv2d)) as `unfold`, one product per image and group,
/// and a broadcast bias.
pub(crate) fn conv2d<B: Kernels + ?Sized>(
    b: &B,
    (sx, lx): View<'_>,
    (sw, lw): View<'_>,
    bias: Option<View<'_>>,
    geom: &ConvGeometry,
) -> Result<Storage> {
    let op = "conv2d";
    let mut views = vec![(sx, lx, Role::Input), (sw, lw, Role::Weight)];
    if let Some((sb, lb)) = bias {
        views.push((sb, lb, Role::Bias(geom.out_channels)));
    }
    let (n, layouts) = check_views(op, geom, &views, Role::Output)?;
    let (g, l) = (geom.groups, geom.window.positions());
    let columns = unfold_checked(b, op, (sx, &layouts[0]), &geom.window, (n, geom.in_channels))?;
    let columns_layout = Layout::contiguous(Shape::from([n, g, geom.in_channels / g * geom.window.taps(), l]));
    let (copy, weights) = weight_matrices(b, (sw, &layouts[1]), geom)?;
    let weight_storage = copy.as_ref().unwrap_or(sw);
    let product = b.matmul((weight_storage, &repeated(&weights, n)?), (&columns, &columns_layout))?;
    match bias {
        Some((sb, _)) => add_bias(b, product, (sb, &layouts[2]), (n, geom.out_channels, l)),
        None => Ok(product),
    }
}

/// The transposed convolution ([`Backend::conv_transpose2d`](crate::backend::Backend::conv_transpose2d)) as one product per image
/// and group with the transposed weight, `fold`, and a broadcast bias.
pub(crate) fn conv_transpose2d<B: Kernels + ?Sized>(
    b: &B,
    (sy, ly): View<'_>,
    (sw, lw): View<'_>,
    bias: Option<View<'_>>,
    geom: &ConvGeometry,
) -> Result<Storage> {
    let op = "conv_transpose2d";
    let mut views = vec![(sy, ly, Role::Output), (sw, lw, Role::Weight)];
    if let Some((sb, lb)) = bias {
        views.push((sb, lb, Role::Bias(geom.in_channels)));
    }
    let (n, layouts) = check_views(op, geom, &views, Role::Input)?;
    let (g, l) = (geom.groups, geom.window.positions());
    let [h, w] = geom.window.input;
    let grads = b.cast((sy, &layouts[0]), sy.dtype())?;
    let grads_layout = Layout::contiguous(Shape::from([n, g, geom.out_channels / g, l]));
    let (copy, weights) = weight_matrices(b, (sw, &layouts[1]), geom)?;
    let weight_storage = copy.as_ref().unwrap_or(sw);
    let transposed = swapped_last(&repeated(&weights, n)?)?;
    let columns = b.matmul((weight_storage, &transposed), (&grads, &grads_layout))?;
    let columns_layout = Layout::contiguous(Shape::from([n, geom.in_channels * geom.window.taps(), l]));
    let image = fold_checked(b, op, (&columns, &columns_layout), &geom.window, (n, geom.in_channels))?;
    match bias {
        Some((sb, _)) => add_bias(b, image, (sb, &layouts[2]), (n, geom.in_channels, h * w)),
        None => Ok(image),
    }
}

/// The weight gradient ([`Backend::conv2d_weight_grad`](crate::backend::Backend::conv2d_weight_grad)) as one product per image and
/// group of the output gradient with the transposed columns, summed over the images.
pub(crate) fn conv2d_weight_grad<B: Kernels + ?Sized>(
    b: &B,
    (sx, lx): View<'_>,
    (sy, ly): View<'_>,
    geom: &ConvGeometry,
) -> Result<Storage> {
    let op = "conv2d_weight_grad";
    let views = [(sx, lx, Role::Input), (sy, ly, Role::Output)];
    let (n, layouts) = check_views(op, geom, &views, Role::Weight)?;
    let (g, l) = (geom.groups, geom.window.positions());
    let per_group = geom.in_channels / g * geom.window.taps();
    if n == 0 {
        return b.full(geom.weight_shape().numel(), Scalar::Int(0), sx.dtype());
    }
    let columns = unfold_checked(b, op, (sx, &layouts[0]), &geom.window, (n, geom.in_channels))?;
    let columns_t = swapped_last(&Layout::contiguous(Shape::from([n, g, per_group, l])))?;
    let grads = b.cast((sy, &layouts[1]), sy.dtype())?;
    let grads_layout = Layout::contiguous(Shape::from([n, g, geom.out_channels / g, l]));
    let per_image = b.matmul((&grads, &grads_layout), (&columns, &columns_t))?;
    let layout = Layout::contiguous(Shape::from([n, g, geom.out_channels / g, per_group]));
    b.reduce(ReduceOp::Sum, (&per_image, &layout), &[0])
}
