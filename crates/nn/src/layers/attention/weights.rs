//! The attention of every head at once: `softmax(q k^T / sqrt(d) + mask)`, dropout on those
//! probabilities in training, times `v`. Without the probabilities asked for, it is
//! [`scaled_dot_product_attention`] (the blocked kernel, which never holds the whole score
//! tensor); with them, a composition of `Var` operations that keeps them.

use crate::layers::{SdpaArgs, dropout, scaled_dot_product_attention};
use ember_autograd::Var;
use ember_tensor::{Result, Tensor};

/// What [`attend`] computed: the attended values and, when asked for, the probabilities.
pub(super) struct Attended {
    /// `[batch, heads, target, head_dim]`.
    pub output: Var,
    /// `[batch, heads, target, source]`, after dropout.
    pub probs: Option<Var>,
}

/// Attention of `q` (`[batch, heads, target, d]`) over `k` and `v` (`[batch, heads,
/// source, d]`) with an additive `mask` that broadcasts to `[batch, heads, target,
/// source]`, dropping probabilities with `dropout_p` (already 0 outside training).
/// `_is_causal` says the mask is the causal one; the mask itself is applied either way, as
/// it may also hold padding.
pub(super) fn attend(
    q: &Var,
    k: &Var,
    v: &Var,
    mask: Option<&Tensor>,
    dropout_p: f64,
    _is_causal: bool,
    need_weights: bool,
) -> Result<Attended> {
    if !need_weights {
        let mut args = SdpaArgs::default().dropout(dropout_p);
        if let Some(m) = mask {
            args = args.mask(m.clone());
        }
        let output = scaled_dot_product_attention(q, k, v, &args)?;
        return Ok(Attended { output, probs: None });
    }
    let d = q.shape()[q.rank() - 1];
    // PyTorch scales the queries before the product rather than the scores after it.
    let scale = if d == 0 { 1.0 } else { (1.0 / d as f64).sqrt() };
    let mut scores = q.mul_scalar(scale).matmul(&k.transpose(-1, -2)?)?;
    if let Some(m) = mask {
        scores = scores.add(&Var::new(m.clone()))?;
    }
    let probs = dropout(&scores.softmax(-1)?, dropout_p, dropout_p > 0.0)?;
    let output = probs.matmul(v)?;
    Ok(Attended { output, probs: need_weights.then_some(probs) })
}
