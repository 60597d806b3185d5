//! `scaled_dot_product_attention`, PyTorch's `F.scaled_dot_product_attention`: the
//! argument type and the function, which picks the memory-efficient kernel or, with
//! dropout, the plain composition.

use super::dropout::dropout;
use ember_autograd::autocast::{self, policy};
use ember_autograd::{IntoVar, Var};
use ember_tensor::ops::attention::OP;
use ember_tensor::{Attention, Error, Result, check_attention};

/// The optional arguments of [`scaled_dot_product_attention`], PyTorch's keyword
/// arguments; `SdpaArgs::default()` is PyTorch's defaults (no mask, no dropout, not causal,
/// scale `1 / sqrt(E)`), and the builder methods set one each:
///
/// ```
/// use ember_nn::functional::SdpaArgs;
/// let args = SdpaArgs::default().causal().scale(0.5);
/// assert!(args.is_causal && args.attn_mask.is_none());
/// ```
#[derive(Clone, Debug, Default)]
pub struct SdpaArgs {
    /// A mask broadcastable to the scores `[.., L, S]`: bool (`u8`, non-zero = the key takes
    /// part) or of the query's float dtype (added to the scores, and differentiable).
    pub attn_mask: Option<Var>,
    /// Dropout probability on the attention weights. As in PyTorch's function it applies
    /// whenever it is positive: pass 0 in evaluation.
    pub dropout_p: f64,
    /// Query `i` attends only to keys `j <= i` (the top-left aligned lower triangle of an
    /// `[L, S]` matrix of ones). An error together with `attn_mask`.
    pub is_causal: bool,
    /// The factor on `q @ k^T`; `None` is `1 / sqrt(E)`.
    pub scale: Option<f64>,
}

impl SdpaArgs {
    /// With the causal mask.
    pub fn causal(mut self) -> Self {
        self.is_causal = true;
        self
    }
    /// With `mask` (a `Var`, or a `Tensor` taken as a constant): bool (`u8`) or float.
    pub fn mask(mut self, mask: impl IntoVar) -> Self {
        self.attn_mask = Some(mask.into_var());
        self
    }
    /// With dropout probability `p` on the attention weights.
    pub fn dropout(mut self, p: f64) -> Self {
        self.dropout_p = p;
        self
    }
    /// With the factor `scale` on `q @ k^T`.
    pub fn scale(mut self, scale: f64) -> Self {
        self.scale = Some(scale);
        self
    }
}

/// Scaled dot-product attention with PyTorch's semantics:
/// `softmax(q @ k^T * scale + mask) @ v` for a query `[.., L, E]`, keys `[.., S, E]` and
/// values `[.., S, Ev]`, giving `[.., L, Ev]`; the leading dimensions broadcast.
///
/// A bool mask excludes the keys where it is false, a float mask is added to the scores,
/// and `is_causal` lets query `i` see keys `0..=i` only. A query row that can see no key at
/// all gives 0 (and passes no gradient), as PyTorch's CPU implementation does.
///
/// Without dropout this is one recorded operation on a kernel that never holds the
/// `[.., L, S]` scores beyond a block, forward and backward ([`Var::attention`]); with
/// dropout, or a float mask that requires a gradient, it is the plain composition
/// ([`Var::attention_weights`], dropout, matmul). Gradients of every order exist either
/// way.
///
/// Errors name `scaled_dot_product_attention` and the shapes: operands of rank < 2, `E` or
/// `S` that disagree, batch dimensions that do not broadcast, a mask that does not
/// broadcast to `[.., L, S]`, `is_causal` together with a mask, or a dropout probability
/// outside `[0, 1]`.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::functional::{scaled_dot_product_attention, SdpaArgs};
/// use ember_tensor::Tensor;
/// let q = Var::param(Tensor::randn([2, 4, 5, 8])?); // [batch, heads, L, E]
/// let k = Var::param(Tensor::randn([2, 4, 7, 8])?);
/// let v = Var::param(Tensor::randn([2, 4, 7, 3])?);
/// let out = scaled_dot_product_attention(&q, &k, &v, &SdpaArgs::default().causal())?;
/// assert_eq!(out.shape().dims(), &[2, 4, 5, 3]);
/// out.sum_all().backward()?;
/// assert_eq!(k.grad().unwrap().shape().dims(), &[2, 4, 7, 8]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn scaled_dot_product_attention(query: &Var, key: &Var, value: &Var, args: &SdpaArgs) -> Result<Var> {
    if let Some(r) =
        autocast::run_cast(&policy::ATTENTION, [Some(query), Some(key), Some(value), args.attn_mask.as_ref()], |c| {
            let args = SdpaArgs { attn_mask: c.get(3).cloned(), ..args.clone() };
            scaled_dot_product_attention(c.or(0, query), c.or(1, key), c.or(2, value), &args)
        })
    {
        return r;
    }
    let p = args.dropout_p;
    if !(0.0..=1.0).contains(&p) {
        return Err(Error::invalid(OP, format!("dropout_p must be in [0, 1], got {p}")));
    }
    let mask = args.attn_mask.as_ref();
    if args.is_causal && mask.is_some() {
        return Err(Error::invalid(OP, "is_causal and attn_mask cannot be given together"));
    }
    let e = query.shape().dims().last().copied().unwrap_or(0);
    let spec = Attention { scale: args.scale.unwrap_or_else(|| Attention::default_scale(e)), causal: args.is_causal };
    if p > 0.0 {
        // The weights' own check does not see the values: check them all before any work.
        let mask_shape = mask.map(|m| (m.shape(), m.dtype()));
        check_attention(
            (&query.shape(), query.dtype()),
            (&key.shape(), key.dtype()),
            (&value.shape(), value.dtype()),
            mask_shape.as_ref().map(|(s, d)| (s, *d)),
        )?;
        let weights = query.attention_weights(key, mask, &spec)?;
        return dropout(&weights, p, true)?.matmul(value);
    }
    query.attention(key, value, mask, &spec)
}
