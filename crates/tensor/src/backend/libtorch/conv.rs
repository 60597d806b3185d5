//! Matrix products and the sliding-window kernels on LibTorch: `matmul`, `conv2d`, the
//! transposed convolution (which is also a convolution's input gradient), the weight
//! gradient (ATen's `convolution_backward`), `unfold` (`im2col`) and `fold` (`col2im`).

use super::storage::{TORCH_DEVICE, dims, i, torch_err};
use crate::backend::View;
use crate::backend::validate::conv::{Role, check_views};
use crate::error::Result;
use crate::ops::conv::{ConvGeometry, SlidingWindow};
use tch::Tensor;

/// The batched matrix product of operands whose batch dimensions are already broadcast.
pub(crate) fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    a.f_matmul(b).map_err(torch_err("matmul"))
}

/// The checks of a convolution (`transposed`: of its adjoint) on its operands.
pub(crate) fn check(
    op: &'static str,
    geom: &ConvGeometry,
    input: View<'_>,
    weight: View<'_>,
    bias: Option<View<'_>>,
    transposed: bool,
) -> Result<()> {
    let (from, to, channels) = if transposed {
        (Role::Output, Role::Input, geom.in_channels)
    } else {
        (Role::Input, Role::Output, geom.out_channels)
    };
    let mut views = vec![(input.0, input.1, from), (weight.0, weight.1, Role::Weight)];
    if let Some((s, l)) = bias {
        views.push((s, l, Role::Bias(channels)));
    }
    check_views(op, geom, &views, to).map(|_| ())
}

/// The checks of a convolution's weight gradient.
pub(crate) fn check_weight_grad(geom: &ConvGeometry, input: View<'_>, grad: View<'_>) -> Result<()> {
    let views = [(input.0, input.1, Role::Input), (grad.0, grad.1, Role::Output)];
    check_views("conv2d_weight_grad", geom, &views, Role::Weight).map(|_| ())
}

fn window_args(w: &SlidingWindow) -> [Vec<i64>; 3] {
    [dims(&w.stride), dims(&w.padding), dims(&w.dilation)]
}

/// The padding after the input along each dimension that the window's output extent
/// implies: ember's windows may pad less or more after than before (`padding="same"`
/// with an even kernel), which ATen's symmetric `padding` cannot say.
fn trailing(w: &SlidingWindow) -> [i64; 2] {
    std::array::from_fn(|d| {
        let reach = (w.output[d] as i64 - 1) * w.stride[d] as i64 + w.dilation[d] as i64 * (w.kernel[d] as i64 - 1) + 1;
        reach - w.input[d] as i64 - w.padding[d] as i64
    })
}

/// Whether ATen's symmetric padding describes the window (else the input is padded, or
/// the adjoint's result cropped, explicitly).
fn symmetric(w: &SlidingWindow) -> bool {
    let t = trailing(w);
    (0..2).all(|d| t[d] == w.padding[d] as i64)
}

/// The input with the window's padding applied explicitly (`[left, right, top, bottom]`).
fn pad_input(x: &Tensor, w: &SlidingWindow) -> std::result::Result<Tensor, tch::TchError> {
    let t = trailing(w);
    x.f_constant_pad_nd([w.padding[1] as i64, t[1], w.padding[0] as i64, t[0]])
}

/// The input-extent result of an adjoint computed without padding (`full`, covering the
/// padded input from its first position): the window's padding cropped away, and zeros
/// where the windows never reach.
fn crop_output(full: &Tensor, w: &SlidingWindow) -> std::result::Result<Tensor, tch::TchError> {
    let s = full.size();
    let n = s.len();
    let (eh, ew) = (s[n - 2], s[n - 1]);
    let (ph, pw) = (w.padding[0] as i64, w.padding[1] as i64);
    let (ih, iw) = (w.input[0] as i64, w.input[1] as i64);
    full.f_constant_pad_nd([-pw, pw + iw - ew, -ph, ph + ih - eh])
}

/// The window without padding, for the explicitly padded forms.
fn unpadded(w: &SlidingWindow) -> SlidingWindow {
    let t = trailing(w);
    let mut u = *w;
    for d in 0..2 {
        u.input[d] = (w.input[d] as i64 + w.padding[d] as i64 + t[d]).max(0) as usize;
        u.padding[d] = 0;
    }
    u
}

/// ATen's `conv2d`.
pub(crate) fn conv2d(x: &Tensor, w: &Tensor, b: Option<&Tensor>, geom: &ConvGeometry) -> Result<Tensor> {
    let e = torch_err("conv2d");
    let win = &geom.window;
    if !symmetric(win) {
        let x = pad_input(x, win).map_err(&e)?;
        let geom = ConvGeometry { window: unpadded(win), ..*geom };
        return conv2d(&x, w, b, &geom);
    }
    let [stride, padding, dilation] = window_args(win);
    x.f_conv2d(w, b, stride, padding, dilation, i(geom.groups)).map_err(e)
}

/// The output padding that makes ATen's transposed convolution produce the convolution's
/// input extent (several input extents share one output extent when the stride is not 1).
fn output_padding(w: &SlidingWindow) -> Vec<i64> {
    (0..2)
        .map(|d| {
            let reach = (w.output[d] as i64 - 1) * w.stride[d] as i64 - 2 * w.padding[d] as i64
                + w.dilation[d] as i64 * (w.kernel[d] as i64 - 1)
                + 1;
            w.input[d] as i64 - reach
        })
        .collect()
}

/// ATen's `conv_transpose2d`, mapping the convolution's output shape to its input shape.
pub(crate) fn conv_transpose2d(y: &Tensor, w: &Tensor, b: Option<&Tensor>, geom: &ConvGeometry) -> Result<Tensor> {
    let e = torch_err("conv_transpose2d");
    let win = &geom.window;
    let [stride, padding, dilation] = window_args(win);
    let extra = output_padding(win);
    let fits =
        symmetric(win) && extra.iter().zip(&stride).zip(&dilation).all(|((&o, &s), &d)| o >= 0 && (o < s || o < d));
    if !fits {
        let full = y
            .f_conv_transpose2d(w, None::<&Tensor>, stride, [0i64, 0], [0i64, 0], i(geom.groups), dilation)
            .and_then(|t| crop_output(&t, win))
            .map_err(&e)?;
        return match b {
            Some(b) => full.f_add(&b.f_reshape([1, -1, 1, 1]).map_err(&e)?).map_err(e),
            None => Ok(full),
        };
    }
    y.f_conv_transpose2d(w, b, stride, padding, extra, i(geom.groups), dilation).map_err(e)
}

/// The weight gradient of `conv2d`: ATen's convolution backward, reached through
/// LibTorch's autograd (tch binds no `convolution_backward`) as the gradient of
/// `sum(conv2d(x, w) * g)` with respect to `w`, which is exactly that backward applied to `g`.
pub(crate) fn weight_grad(x: &Tensor, g: &Tensor, geom: &ConvGeometry) -> Result<Tensor> {
    let e = torch_err("conv2d_weight_grad");
    let shape = dims(geom.weight_shape().dims());
    let w = Tensor::f_zeros(shape.as_slice(), (x.kind(), TORCH_DEVICE)).and_then(|w| w.f_detach()).map_err(&e)?;
    let [dw] = gradients("conv2d_weight_grad", [&w], |[w]| conv2d(x, w, None, geom)?.f_mul(g).map_err(&e))?;
    Ok(dw)
}

/// The gradients of the 0-d sum of `f(inputs)` with respect to `inputs` (fresh leaves,
/// which this marks as requiring gradients), through LibTorch's autograd: for the
/// backward kernels tch does not bind.
pub(crate) fn gradients<const N: usize>(
    op: &'static str,
    inputs: [&Tensor; N],
    f: impl FnOnce([&Tensor; N]) -> Result<Tensor>,
) -> Result<[Tensor; N]> {
    let e = torch_err(op);
    tch::with_grad(|| {
        let mut leaves = Vec::with_capacity(N);
        for t in inputs {
            leaves.push(t.f_detach().and_then(|mut l| l.f_requires_grad_(true)).map_err(&e)?);
        }
        let refs: [&Tensor; N] = std::array::from_fn(|k| &leaves[k]);
        let total = f(refs)?.f_sum(None::<tch::Kind>).map_err(&e)?;
        let grads = Tensor::f_run_backward(&[total], &leaves, false, false).map_err(&e)?;
        let mut it = grads.into_iter();
        Ok(std::array::from_fn(|_| it.next().unwrap_or_else(Tensor::new)))
    })
}

/// ATen's `im2col`: `[N, C * kh * kw, oh * ow]`.
pub(crate) fn unfold(x: &Tensor, w: &SlidingWindow) -> Result<Tensor> {
    let e = torch_err("unfold");
    if !symmetric(w) {
        return unfold(&pad_input(x, w).map_err(&e)?, &unpadded(w));
    }
    x.f_im2col(dims(&w.kernel), dims(&w.dilation), dims(&w.padding), dims(&w.stride)).map_err(e)
}

/// ATen's `col2im`: `[N, C, h, w]`.
pub(crate) fn fold(x: &Tensor, w: &SlidingWindow) -> Result<Tensor> {
    let e = torch_err("fold");
    if !symmetric(w) {
        let u = unpadded(w);
        let full =
            x.f_col2im(dims(&u.input), dims(&u.kernel), dims(&u.dilation), [0i64, 0], dims(&u.stride)).map_err(&e)?;
        return crop_output(&full, w).map_err(e);
    }
    x.f_col2im(dims(&w.input), dims(&w.kernel), dims(&w.dilation), dims(&w.padding), dims(&w.stride)).map_err(e)
}
