//! Attention masks: PyTorch's shape checks, boolean masks turned into additive ones, the
//! key padding mask merged into the attention mask, and the causal mask helper.

use ember_tensor::{DType, Error, Result, Tensor};

const OP: &str = "MultiheadAttention";

/// The causal mask of a sequence of `sz` steps, `[sz, sz]`: `0` on and below the diagonal,
/// `-inf` above it, so that step `i` attends to steps `0..=i` only; PyTorch's
/// `nn.Transformer.generate_square_subsequent_mask`.
///
/// ```
/// use ember_nn::generate_square_subsequent_mask;
/// use ember_tensor::DType;
/// let m = generate_square_subsequent_mask(3, DType::F32)?.to_vec::<f32>()?;
/// let inf = f32::INFINITY;
/// assert_eq!(m, [0.0, -inf, -inf, 0.0, 0.0, -inf, 0.0, 0.0, 0.0]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn generate_square_subsequent_mask(sz: usize, dtype: DType) -> Result<Tensor> {
    if !dtype.is_float() {
        return Err(Error::dtype("generate_square_subsequent_mask", format!("the mask must be float, got {dtype}")));
    }
    let above = Tensor::ones([sz, sz], DType::U8)?.triu(1)?;
    Tensor::zeros([sz, sz], dtype)?.masked_fill(&above, f64::NEG_INFINITY)
}

/// The sizes a call's masks must fit: `batch` sequences (1 for unbatched inputs), `heads`,
/// `target` queries and `source` keys (before any appended `bias_k` or zero key).
#[derive(Clone, Copy, Debug)]
pub(super) struct MaskShape {
    pub batch: usize,
    pub heads: usize,
    pub target: usize,
    pub source: usize,
    pub unbatched: bool,
}

/// `mask` as an additive mask of `dtype`: a boolean (`u8`) mask's true entries become
/// `-inf`, a float mask is added as it is.
fn additive(mask: &Tensor, what: &str, dtype: DType) -> Result<Tensor> {
    match mask.dtype() {
        DType::U8 => {
            Tensor::full_on(mask.shape().clone(), 0, dtype, mask.device())?.masked_fill(mask, f64::NEG_INFINITY)
        }
        d if d.is_float() => Ok(mask.to_dtype(dtype)),
        d => Err(Error::dtype(OP, format!("the {what} must be bool (u8) or float, got {d}"))),
    }
}

/// The attention mask and key padding mask merged into one additive mask of `dtype` that
/// broadcasts to `[batch, heads, target, source + extra]` (`extra` keys appended by
/// `add_bias_kv` and `add_zero_attn`, which every query may attend to), or `None` without
/// masks.
pub(super) fn combined(
    attn_mask: Option<&Tensor>,
    key_padding_mask: Option<&Tensor>,
    s: MaskShape,
    extra: usize,
    dtype: DType,
) -> Result<Option<Tensor>> {
    let MaskShape { batch, heads, target, source, unbatched } = s;
    let attn = match attn_mask {
        None => None,
        Some(m) => {
            let dims = m.shape().dims();
            let m = if dims.len() == 2 {
                if dims != [target, source] {
                    return Err(Error::shape(
                        OP,
                        format!("the 2-D attn_mask must be [target, source] = {:?}, got {dims:?}", [target, source]),
                    ));
                }
                additive(m, "attn_mask", dtype)?
            } else if dims.len() == 3 {
                if dims != [batch * heads, target, source] {
                    let name = if unbatched { "[heads, target, source]" } else { "[batch * heads, target, source]" };
                    return Err(Error::shape(
                        OP,
                        format!(
                            "the 3-D attn_mask must be {name} = {:?}, got {dims:?}",
                            [batch * heads, target, source]
                        ),
                    ));
                }
                additive(m, "attn_mask", dtype)?.reshape([batch, heads, target, source])?
            } else {
                return Err(Error::shape(OP, format!("the attn_mask must be 2-D or 3-D, got shape {dims:?}")));
            };
            Some(m)
        }
    };
    let padding = match key_padding_mask {
        None => None,
        Some(m) => {
            let dims = m.shape().dims();
            let want: &[usize] = if unbatched { &[source] } else { &[batch, source] };
            if dims != want {
                let name = if unbatched { "[source]" } else { "[batch, source]" };
                return Err(Error::shape(OP, format!("the key_padding_mask must be {name} = {want:?}, got {dims:?}")));
            }
            Some(additive(m, "key_padding_mask", dtype)?.reshape([batch, 1, 1, source])?)
        }
    };
    let mask = match (attn, padding) {
        (None, None) => return Ok(None),
        (Some(a), None) => a,
        (None, Some(p)) => p,
        (Some(a), Some(p)) => a.add(&p)?,
    };
    Ok(Some(if extra > 0 { mask.pad(&[(0, extra)], 0.0)? } else { mask }))
}
