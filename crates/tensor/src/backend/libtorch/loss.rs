//! The classification losses on LibTorch: ATen's `cross_entropy` (logits) and `nll_loss`
//! (log-probabilities, `nll_loss_nd` for any rank) with label smoothing, an ignored class and the three reductions;
//! the gradient through LibTorch's autograd, which runs ATen's backward kernels.

use super::conv::gradients;
use super::storage::torch_err;
use crate::error::Result;
use crate::ops::loss::{ClassLoss, ClassScores, LossReduction};
use tch::{Reduction, Tensor};

/// The value ATen reads as "no ignored class": no target can equal it, since every
/// target that is not ignored lies in `0..C`.
const NONE_IGNORED: i64 = i64::MIN;

fn loss(x: &Tensor, t: &Tensor, spec: &ClassLoss) -> Result<Tensor> {
    let e = torch_err(spec.name());
    let reduction = match spec.reduction {
        LossReduction::None => Reduction::None,
        LossReduction::Sum => Reduction::Sum,
        LossReduction::Mean => Reduction::Mean,
    };
    let ignore = spec.ignore_index.unwrap_or(NONE_IGNORED);
    match spec.scores {
        ClassScores::Logits => x.f_cross_entropy_loss(t, None::<&Tensor>, reduction, ignore, spec.label_smoothing),
        ClassScores::LogProbs if spec.label_smoothing == 0.0 => x.f_nll_loss_nd(t, None::<&Tensor>, reduction, ignore),
        // ATen smooths only logits; for log-probabilities the smoothed loss is
        // `(1 - e) * nll + e * (-mean_c s[c])`, the uniform part over the counted rows.
        ClassScores::LogProbs => {
            let ls = spec.label_smoothing;
            let nll = x.f_nll_loss_nd(t, None::<&Tensor>, Reduction::None, ignore).map_err(&e)?;
            let cdim = ClassLoss::class_dim(x.dim()) as i64;
            let uniform = x.f_mean_dim([cdim].as_slice(), false, None::<tch::Kind>).map_err(&e)?.f_neg().map_err(&e)?;
            let keep = t.f_ne(ignore).map_err(&e)?;
            let uniform = uniform.f_where_self(&keep, &uniform.f_zeros_like().map_err(&e)?).map_err(&e)?;
            let row = nll.f_mul_scalar(1.0 - ls).and_then(|a| a.f_add(&uniform.f_mul_scalar(ls)?)).map_err(&e)?;
            let kind = x.kind();
            match spec.reduction {
                LossReduction::None => Ok(row),
                LossReduction::Sum => row.f_sum(kind),
                LossReduction::Mean => {
                    let n = keep.f_sum(kind).map_err(&e)?;
                    row.f_sum(kind).and_then(|s| s.f_div(&n))
                }
            }
        }
    }
    .map_err(e)
}

/// The loss of `scores` for the `i64` class indices `target`.
pub(crate) fn forward(x: &Tensor, t: &Tensor, spec: &ClassLoss) -> Result<Tensor> {
    loss(x, t, spec)
}

/// The gradient of the loss with respect to the scores, for the incoming gradient `g`.
pub(crate) fn backward(x: &Tensor, t: &Tensor, g: &Tensor, spec: &ClassLoss) -> Result<Tensor> {
    let e = torch_err(spec.name());
    let [dx] = gradients(spec.name(), [x], |[x]| loss(x, t, spec)?.f_mul(g).map_err(&e))?;
    Ok(dx)
}
