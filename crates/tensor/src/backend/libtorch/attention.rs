//! Scaled dot-product attention on LibTorch: ATen's CPU flash-attention kernel
//! (`_scaled_dot_product_flash_attention_for_cpu`), which returns the output and each
//! row's log-sum-exp as ember's kernel does, and its backward. ember's batch dimensions
//! are flattened into ATen's batch with one head; a `u8` mask becomes the additive mask
//! ATen's SDPA makes of a boolean one (0 where a key takes part, `-inf` elsewhere).

use super::storage::{TORCH_DEVICE, torch_err};
use crate::backend::{View, validate};
use crate::error::Result;
use crate::ops::attention::{Attention, OP, check_views};
use tch::{Kind, Tensor};

/// The checks of the operands (shapes, dtypes, the mask's).
pub(crate) fn check(qkv: [View<'_>; 3], mask: Option<View<'_>>) -> Result<()> {
    let ls = [
        validate::view(OP, qkv[0].0, qkv[0].1)?,
        validate::view(OP, qkv[1].0, qkv[1].1)?,
        validate::view(OP, qkv[2].0, qkv[2].1)?,
    ];
    let lm = mask.map(|(s, l)| validate::view(OP, s, l)).transpose()?;
    let views = [(qkv[0].0.dtype(), &*ls[0]), (qkv[1].0.dtype(), &*ls[1]), (qkv[2].0.dtype(), &*ls[2])];
    check_views(views, mask.zip(lm.as_deref()).map(|((s, _), l)| (s.dtype(), l)), None).map(|_| ())
}

/// Whether the values are as wide as the queries and keys, which ATen's kernel needs.
pub(crate) fn same_width(qkv: [View<'_>; 3]) -> bool {
    let last = |v: View<'_>| v.1.shape().dims().last().copied();
    last(qkv[0]) == last(qkv[2])
}

/// `[batch.., r, c]` as a contiguous `[B, 1, r, c]`: ATen's CPU kernel reads its operands
/// as rows of contiguous elements, and gives wrong results on other strides.
fn heads(t: &Tensor) -> std::result::Result<Tensor, tch::TchError> {
    let s = t.size();
    let n = s.len();
    let batch: i64 = s[..n - 2].iter().product();
    t.f_contiguous()?.f_reshape([batch, 1, s[n - 2], s[n - 1]])?.f_contiguous()
}

/// The additive mask ATen's kernel takes, in the query's dtype (`[B, 1, L, S]`), with the
/// causal triangle folded in: ATen's CPU kernel's own causal skipping does not give
/// ember's (and PyTorch's `scaled_dot_product_attention`'s) results here, so the kernel is
/// always called without `is_causal`.
fn additive(
    mask: Option<&Tensor>,
    causal: bool,
    [l, s]: [i64; 2],
    kind: Kind,
) -> std::result::Result<Option<Tensor>, tch::TchError> {
    let m = match mask {
        Some(m) if m.kind() == Kind::Uint8 => {
            let m = heads(m)?;
            let zero = m.f_zeros_like()?.f_to_dtype(kind, false, false)?;
            let minus_inf = zero.f_full_like(f64::NEG_INFINITY)?;
            Some(zero.f_where_self(&m.f_ne(0)?, &minus_inf)?)
        }
        Some(m) => Some(heads(m)?),
        None => None,
    };
    if !causal {
        return Ok(m);
    }
    let keep = Tensor::f_ones([l, s], (Kind::Bool, TORCH_DEVICE))?.f_tril(0)?;
    let tri = Tensor::f_zeros([l, s], (kind, TORCH_DEVICE))?;
    let tri = tri.f_where_self(&keep, &tri.f_full_like(f64::NEG_INFINITY)?)?;
    match m {
        Some(m) => m.f_add(&tri).map(Some),
        None => tri.f_reshape([1, 1, l, s]).map(Some),
    }
}

/// The rows `[B, 1, L]` whose every key is masked out.
fn dead_rows(mask: &Tensor) -> std::result::Result<Tensor, tch::TchError> {
    mask.f_eq(f64::NEG_INFINITY)?.f_all_dims([-1i64].as_slice(), false)
}

/// The output `[batch.., L, Ev]` and the log-sum-exp `[batch.., L]` (`f32` for 16-bit
/// inputs, as ATen keeps it).
pub(crate) fn forward([q, k, v]: [&Tensor; 3], mask: Option<&Tensor>, spec: &Attention) -> Result<[Tensor; 2]> {
    let e = torch_err(OP);
    let qs = q.size();
    let n = qs.len();
    let go = || -> std::result::Result<[Tensor; 2], tch::TchError> {
        let m = additive(mask, spec.causal, [qs[n - 2], k.size()[k.dim() - 2]], q.kind())?;
        let (mut out, mut lse) = Tensor::f_internal_scaled_dot_product_flash_attention_for_cpu(
            &heads(q)?,
            &heads(k)?,
            &heads(v)?,
            0.0,
            false,
            m.as_ref(),
            spec.scale,
        )?;
        if let Some(m) = &m {
            // A row with no key to attend to: output 0 and log-sum-exp -inf, as ember's
            // kernel gives them.
            let hq = heads(q)?.size();
            let dead = dead_rows(&m.f_expand([hq[0], 1, hq[2], k.size()[k.dim() - 2]], false)?)?;
            lse = lse.f_masked_fill(&dead, f64::NEG_INFINITY)?;
            out = out.f_masked_fill(&dead.f_unsqueeze(-1)?, 0.0)?;
        }
        let mut out_shape = qs[..n - 1].to_vec();
        out_shape.push(v.size()[v.dim() - 1]);
        Ok([out.f_reshape(out_shape.as_slice())?, lse.f_reshape(&qs[..n - 1])?])
    };
    go().map_err(e)
}

/// The gradients with respect to `q`, `k` and `v` from the forward's output and
/// log-sum-exp and the incoming gradient.
pub(crate) fn backward(
    [q, k, v]: [&Tensor; 3],
    mask: Option<&Tensor>,
    [o, lse, g]: [&Tensor; 3],
    spec: &Attention,
) -> Result<[Tensor; 3]> {
    let e = torch_err(OP);
    let go = || -> std::result::Result<[Tensor; 3], tch::TchError> {
        let m = additive(mask, spec.causal, [q.size()[q.dim() - 2], k.size()[k.dim() - 2]], q.kind())?;
        let ls = lse.size();
        let batch: i64 = ls[..ls.len() - 1].iter().product();
        // A dead row's -inf would make its probabilities NaN (-inf minus -inf): with 0
        // they are 0, and the row passes no gradient, as in ember's kernel.
        let lse4 = lse.f_reshape([batch, 1, ls[ls.len() - 1]])?;
        let lse4 = lse4.f_masked_fill(&lse4.f_eq(f64::NEG_INFINITY)?, 0.0)?;
        let (dq, dk, dv) = Tensor::f_internal_scaled_dot_product_flash_attention_for_cpu_backward(
            &heads(g)?,
            &heads(q)?,
            &heads(k)?,
            &heads(v)?,
            &heads(o)?,
            &lse4,
            0.0,
            false,
            m.as_ref(),
            spec.scale,
        )?;
        Ok([dq.f_reshape(q.size())?, dk.f_reshape(k.size())?, dv.f_reshape(v.size())?])
    };
    go().map_err(e)
}
