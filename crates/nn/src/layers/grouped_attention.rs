//! [`grouped_query_attention`]: attention where groups of query heads share one key/value
//! head (GQA, and MQA with a single key/value head), without repeating the keys and values.

use super::sdpa::{SdpaArgs, scaled_dot_product_attention};
use ember_autograd::Var;
use ember_tensor::{Error, Result};

const OP: &str = "grouped_query_attention";

/// Scaled dot-product attention of `query` (`[batch, heads, L, E]`) over `key` and `value`
/// with fewer heads (`[batch, kv_heads, S, E]` and `[batch, kv_heads, S, Ev]`), `heads` a
/// multiple of `kv_heads`: query head `h` attends with key/value head `h / (heads /
/// kv_heads)`, as PyTorch's `scaled_dot_product_attention(.., enable_gqa=True)` and
/// transformers' `repeat_kv` do. Gives `[batch, heads, L, Ev]`.
///
/// The query is viewed as `[batch, kv_heads, group, L, E]` and the keys and values as
/// `[batch, kv_heads, 1, S, E]`, so that attention broadcasts over the group instead of
/// materialising `heads / kv_heads` copies of the keys and values (which, with a KV cache,
/// would copy the whole cache per step). With equal head counts this is
/// [`scaled_dot_product_attention`] itself.
///
/// `args.attn_mask` may be `[.., 1 or heads, L, S]` (rank 4 or less, broadcasting as in
/// [`scaled_dot_product_attention`]).
///
/// Errors: operands that are not rank 4, batch sizes or head sizes that disagree, a head
/// count that is not a multiple of the key/value heads, and
/// [`scaled_dot_product_attention`]'s own errors.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::functional::{grouped_query_attention, SdpaArgs};
/// use ember_tensor::Tensor;
/// let q = Var::new(Tensor::randn([2, 6, 5, 8])?); // 6 query heads
/// let k = Var::new(Tensor::randn([2, 2, 5, 8])?); // 2 key/value heads: groups of 3
/// let v = Var::new(Tensor::randn([2, 2, 5, 8])?);
/// let out = grouped_query_attention(&q, &k, &v, &SdpaArgs::default().causal())?;
/// assert_eq!(out.shape().dims(), &[2, 6, 5, 8]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn grouped_query_attention(query: &Var, key: &Var, value: &Var, args: &SdpaArgs) -> Result<Var> {
    let (q, k, v) = (query.shape().dims().to_vec(), key.shape().dims().to_vec(), value.shape().dims().to_vec());
    if q.len() != 4 || k.len() != 4 || v.len() != 4 {
        return Err(Error::shape(
            OP,
            format!("query {q:?}, key {k:?} and value {v:?} must be [batch, heads, seq, head_dim]"),
        ));
    }
    let (batch, heads, l, e) = (q[0], q[1], q[2], q[3]);
    let kv_heads = k[1];
    if k[0] != batch || v[0] != batch || v[1] != kv_heads || v[2] != k[2] || k[3] != e {
        return Err(Error::shape(
            OP,
            format!("key {k:?} and value {v:?} do not fit query {q:?} (batch, kv heads, positions or head size)"),
        ));
    }
    if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
        return Err(Error::shape(OP, format!("{heads} query heads cannot be grouped over {kv_heads} key/value heads")));
    }
    if kv_heads == heads {
        return scaled_dot_product_attention(query, key, value, args);
    }
    let group = heads / kv_heads;
    let mask = match &args.attn_mask {
        None => None,
        Some(m) => Some(group_mask(m, heads, kv_heads, group)?),
    };
    let grouped = SdpaArgs { attn_mask: mask, ..args.clone() };
    let out = scaled_dot_product_attention(
        &query.reshape([batch, kv_heads, group, l, e])?,
        &key.unsqueeze(2)?,
        &value.unsqueeze(2)?,
        &grouped,
    )?;
    out.reshape([batch, heads, l, v[3]])
}

/// A mask over `[.., heads or 1, L, S]` as one over `[.., kv_heads, group, L, S]`.
fn group_mask(mask: &Var, heads: usize, kv_heads: usize, group: usize) -> Result<Var> {
    let dims = mask.shape().dims().to_vec();
    if dims.len() > 4 {
        return Err(Error::shape(OP, format!("the mask must have rank 4 or less, got {dims:?}")));
    }
    if dims.len() < 3 {
        // [L, S] or [S]: broadcasts as it is.
        return Ok(mask.clone());
    }
    let h = dims[dims.len() - 3];
    let (lead, tail) = dims.split_at(dims.len() - 3);
    if h == 1 {
        return mask.unsqueeze(-3);
    }
    if h != heads {
        return Err(Error::shape(OP, format!("the mask {dims:?} must have 1 or {heads} heads in dimension -3")));
    }
    let mut shape = lead.to_vec();
    shape.extend([kv_heads, group, tail[1], tail[2]]);
    mask.reshape(shape)
}
