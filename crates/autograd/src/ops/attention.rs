//! Scaled dot-product attention: the plain composition of `Var` operations (matmul, mask,
//! softmax, matmul), and one recorded operation on the backend's memory-efficient kernel
//! that falls back to the composition where the kernel does not apply. See
//! [`ember_tensor::backend::attention`] for what both compute.

use super::constant;
use crate::var::Var;
use ember_tensor::{Attention, AttentionShapes, DType, Result, Tensor, check_attention};

/// Checks the operands of an attention call (see [`check_attention`]).
fn check(q: &Var, k: &Var, v: &Var, mask: Option<&Var>) -> Result<AttentionShapes> {
    check_attention(
        (&q.shape(), q.dtype()),
        (&k.shape(), k.dtype()),
        (&v.shape(), v.dtype()),
        mask.map(|m| (m.shape(), m.dtype())).as_ref().map(|(s, d)| (s, *d)),
    )
}

/// The `u8` mask of the positions the causal triangle excludes (`j > i`), `[L, S]`.
fn causal_excluded(l: usize, s: usize) -> Result<Tensor> {
    Tensor::ones([l, s], DType::U8)?.triu(1)
}

impl Var {
    /// The attention weights `softmax(scale * q @ k^T + mask)` of this query (`[.., L, E]`)
    /// over `key` (`[.., S, E]`), `[.., L, S]`, as `Var` operations. `mask` is a bool
    /// (`u8`, non-zero = takes part) or float (added to the scores) tensor broadcastable to
    /// `[.., L, S]`; [`Attention::causal`] adds the causal triangle. Rows with no key to
    /// attend to are 0, as in PyTorch's CPU attention, and pass no gradient.
    ///
    /// This is the composition that [`Var::attention`] falls back to, and what
    /// `ember_nn::functional::scaled_dot_product_attention` uses with dropout.
    pub fn attention_weights(&self, key: &Var, mask: Option<&Var>, spec: &Attention) -> Result<Var> {
        let shapes = check(self, key, key, mask)?;
        let mut scores = self.matmul(&key.transpose(-2, -1)?)?.mul_scalar(spec.scale);
        let mut maybe_dead = false;
        if let Some(m) = mask {
            if m.dtype() == DType::U8 {
                scores = scores.masked_fill(constant(m.value().logical_not()), f64::NEG_INFINITY)?;
            } else {
                scores = scores.add(m)?;
            }
            maybe_dead = true;
        }
        if spec.causal {
            // Row i always sees key 0, so the triangle alone leaves no row empty.
            scores = scores.masked_fill(constant(causal_excluded(shapes.l, shapes.s)?), f64::NEG_INFINITY)?;
        }
        if maybe_dead && shapes.s > 0 {
            // A row of only -inf has no softmax (NaN); it is set to 0 and passes no gradient.
            let dead = scores.value().max(-1, true)?.eq_scalar(f64::NEG_INFINITY);
            if dead.sum_all().to_dtype(DType::F64).to_scalar::<f64>()? > 0.0 {
                let dead = constant(dead);
                return scores.masked_fill(dead.clone(), 0.0)?.softmax(-1)?.masked_fill(dead, 0.0);
            }
        }
        scores.softmax(-1)
    }

    /// Scaled dot-product attention as the plain composition
    /// `attention_weights(key, mask) @ value`, `[.., L, Ev]`: every intermediate, the
    /// `[.., L, S]` scores included, is kept for the backward. [`Var::attention`] computes
    /// the same with a kernel that keeps none of them.
    pub fn attention_composed(&self, key: &Var, value: &Var, mask: Option<&Var>, spec: &Attention) -> Result<Var> {
        check(self, key, value, mask)?;
        self.attention_weights(key, mask, spec)?.matmul(value)
    }
}

impl Var {
    /// Scaled dot-product attention of this query (`[.., L, E]`) over `key` (`[.., S, E]`)
    /// and `value` (`[.., S, Ev]`), `[.., L, Ev]` (see [`Var::attention_weights`] for the
    /// mask and [`ember_tensor::backend::attention`] for the semantics).
    pub fn attention(&self, key: &Var, value: &Var, mask: Option<&Var>, spec: &Attention) -> Result<Var> {
        self.attention_composed(key, value, mask, spec)
    }
}
