//! What [`MultiheadAttention`](super::MultiheadAttention) is built with and what one call
//! takes and gives.

use ember_autograd::Var;
use ember_tensor::{DType, Tensor};

/// How to build a [`MultiheadAttention`](super::MultiheadAttention) beyond its sizes;
/// PyTorch's keyword arguments with PyTorch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MultiheadAttentionOptions {
    /// Dropout on the attention probabilities, in training only (default `0.0`).
    pub dropout: f64,
    /// Whether the input and output projections have biases (default `true`).
    pub bias: bool,
    /// Whether a learned key and value (`bias_k`, `bias_v`) are appended to the source
    /// sequence (default `false`).
    pub add_bias_kv: bool,
    /// Whether a zero key and value are appended to the source sequence after the
    /// projections (default `false`).
    pub add_zero_attn: bool,
    /// The keys' feature size (default: `embed_dim`). Where it or `vdim` differs from
    /// `embed_dim` the layer has separate `q_proj_weight`, `k_proj_weight` and
    /// `v_proj_weight` instead of the packed `in_proj_weight`.
    pub kdim: Option<usize>,
    /// The values' feature size (default: `embed_dim`).
    pub vdim: Option<usize>,
    /// Whether inputs and outputs are `[batch, seq, feature]` (default `false`:
    /// `[seq, batch, feature]`).
    pub batch_first: bool,
    /// The parameters' dtype (default `f32`); inputs must have it too.
    pub dtype: DType,
}

impl Default for MultiheadAttentionOptions {
    fn default() -> Self {
        MultiheadAttentionOptions {
            dropout: 0.0,
            bias: true,
            add_bias_kv: false,
            add_zero_attn: false,
            kdim: None,
            vdim: None,
            batch_first: false,
            dtype: DType::F32,
        }
    }
}

/// One call's masks and flags: the arguments of PyTorch's `MultiheadAttention.forward`
/// after `query`, `key` and `value`, with its defaults (`need_weights` and
/// `average_attn_weights` on).
///
/// Masks are boolean (`u8`, where **non-zero means "may not attend"**, PyTorch's
/// `MultiheadAttention` convention, the opposite of `scaled_dot_product_attention`'s) or
/// float (added to the scores; `-inf` forbids). Both kinds may be mixed.
#[derive(Clone, Copy, Debug)]
pub struct MultiheadAttentionArgs<'a> {
    /// `[batch, source]` (`[source]` for unbatched inputs): which keys each sequence
    /// ignores, typically padding.
    pub key_padding_mask: Option<&'a Tensor>,
    /// Whether to return the attention probabilities (default `true`).
    pub need_weights: bool,
    /// `[target, source]`, shared by every sequence and head, or `[batch * heads, target,
    /// source]` (`[heads, target, source]` unbatched), one per sequence and head.
    pub attn_mask: Option<&'a Tensor>,
    /// Whether the returned weights are averaged over the heads, `[batch, target, source]`,
    /// or given per head, `[batch, heads, target, source]` (default `true`).
    pub average_attn_weights: bool,
    /// A hint that `attn_mask` is the causal mask (default `false`). As in PyTorch it needs
    /// the mask itself too, which is what is applied.
    pub is_causal: bool,
}

impl Default for MultiheadAttentionArgs<'_> {
    fn default() -> Self {
        MultiheadAttentionArgs {
            key_padding_mask: None,
            need_weights: true,
            attn_mask: None,
            average_attn_weights: true,
            is_causal: false,
        }
    }
}

/// What a [`MultiheadAttention`](super::MultiheadAttention) call returns: PyTorch's
/// `(attn_output, attn_output_weights)`.
#[derive(Clone, Debug)]
pub struct MultiheadAttentionOutput {
    /// The attended values after the output projection, shaped like the query.
    pub output: Var,
    /// The attention probabilities (after dropout, as PyTorch returns them) when
    /// `need_weights` was set: `[batch, target, source]` averaged over heads, or `[batch,
    /// heads, target, source]`; without the batch dimension for unbatched inputs.
    pub weights: Option<Var>,
}
