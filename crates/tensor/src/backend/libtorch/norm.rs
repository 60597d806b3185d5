//! Per-channel normalisation on LibTorch: ATen's batch norm in training mode over the
//! input read as `[outer, C, inner]` (which is what `channel_norm` computes), the channel
//! statistics from `var_mean`, and the backward through LibTorch's autograd (tch binds no
//! `native_batch_norm_backward`; autograd runs exactly that kernel).

use super::conv::gradients;
use super::storage::{TORCH_DEVICE, torch_err};
use crate::backend::View;
use crate::backend::validate::norm as norm_check;
use crate::error::Result;
use crate::ops::norm::OP;
use tch::Tensor;

/// The checks of the forward.
pub(crate) fn check(x: View<'_>, weight: Option<View<'_>>, bias: Option<View<'_>>) -> Result<()> {
    let named = [("weight", weight), ("bias", bias)];
    let per_channel: Vec<_> = named.iter().filter_map(|&(n, v)| v.map(|(s, l)| (n, s, l))).collect();
    norm_check::check(x, None, &per_channel).map(|_| ())
}

/// The checks of the backward.
pub(crate) fn check_backward(
    x: View<'_>,
    grad: View<'_>,
    mean: View<'_>,
    var: View<'_>,
    weight: Option<View<'_>>,
) -> Result<()> {
    let mut per_channel = vec![("mean", mean.0, mean.1), ("variance", var.0, var.1)];
    per_channel.extend(weight.map(|(s, l)| ("weight", s, l)));
    norm_check::check(x, Some(grad), &per_channel).map(|_| ())
}

fn batch_norm(x: &Tensor, w: Option<&Tensor>, b: Option<&Tensor>, eps: f64) -> Result<Tensor> {
    let (y, _, _) =
        x.f_native_batch_norm(w, b, None::<&Tensor>, None::<&Tensor>, true, 0.0, eps).map_err(torch_err(OP))?;
    Ok(y)
}

/// The output, each channel's mean and biased variance.
pub(crate) fn forward(x: &Tensor, w: Option<&Tensor>, b: Option<&Tensor>, eps: f64) -> Result<[Tensor; 3]> {
    let e = torch_err(OP);
    let y = batch_norm(x, w, b, eps)?;
    let (var, mean) = x.f_var_mean_correction([0i64, 2].as_slice(), 0, false).map_err(e)?;
    Ok([y, mean, var])
}

/// The input's gradient, `sum g` and `sum g * xhat` per channel.
pub(crate) fn backward(
    x: &Tensor,
    g: &Tensor,
    _mean: &Tensor,
    _var: &Tensor,
    w: Option<&Tensor>,
    eps: f64,
) -> Result<[Tensor; 3]> {
    let e = torch_err(OP);
    let c = x.size()[1];
    let ones;
    let w = match w {
        Some(w) => w,
        None => {
            ones = Tensor::f_ones([c], (x.kind(), TORCH_DEVICE)).map_err(&e)?;
            &ones
        }
    };
    let zeros = Tensor::f_zeros([c], (x.kind(), TORCH_DEVICE)).map_err(&e)?;
    let [dx, dw, db] =
        gradients(OP, [x, w, &zeros], |[x, w, b]| batch_norm(x, Some(w), Some(b), eps)?.f_mul(g).map_err(&e))?;
    Ok([dx, db, dw])
}
