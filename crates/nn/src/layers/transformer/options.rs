//! How transformer layers are built and what masks one call takes.

use ember_autograd::Var;
use ember_tensor::{DType, Tensor};

/// The feed-forward block's activation (PyTorch's `activation="relu"` or `"gelu"`; GELU is
/// the exact one, as PyTorch's string selects).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TransformerActivation {
    /// `max(x, 0)` (the default).
    #[default]
    ReLU,
    /// The exact Gaussian error linear unit.
    GELU,
}

impl TransformerActivation {
    pub(super) fn apply(self, x: &Var) -> Var {
        match self {
            TransformerActivation::ReLU => x.relu(),
            TransformerActivation::GELU => x.gelu(),
        }
    }
}

/// How to build a [`TransformerEncoderLayer`](super::TransformerEncoderLayer) or
/// [`TransformerDecoderLayer`](super::TransformerDecoderLayer) beyond `d_model` and
/// `nhead`; PyTorch's keyword arguments with PyTorch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TransformerLayerOptions {
    /// The feed-forward block's hidden size (default `2048`).
    pub dim_feedforward: usize,
    /// Dropout after attention, inside and after the feed-forward block and on the attention
    /// probabilities, in training only (default `0.1`).
    pub dropout: f64,
    /// The feed-forward activation (default ReLU).
    pub activation: TransformerActivation,
    /// The layer norms' epsilon (default `1e-5`).
    pub layer_norm_eps: f64,
    /// Whether inputs are `[batch, seq, feature]` (default `false`: `[seq, batch, feature]`).
    pub batch_first: bool,
    /// Whether each block normalises its input (pre-norm) instead of its residual sum
    /// (post-norm, the default).
    pub norm_first: bool,
    /// Whether the linear layers, the attention projections and the layer norms have biases
    /// (default `true`).
    pub bias: bool,
    /// The parameters' dtype (default `f32`).
    pub dtype: DType,
}

impl Default for TransformerLayerOptions {
    fn default() -> Self {
        TransformerLayerOptions {
            dim_feedforward: 2048,
            dropout: 0.1,
            activation: TransformerActivation::ReLU,
            layer_norm_eps: 1e-5,
            batch_first: false,
            norm_first: false,
            bias: true,
            dtype: DType::F32,
        }
    }
}

/// The masks of an encoder call (PyTorch's `src_mask`, `src_key_padding_mask`,
/// `is_causal`), with [`MultiheadAttentionArgs`](crate::MultiheadAttentionArgs)'s
/// conventions: boolean (`u8`) masks are true where attention is **not** allowed, float
/// masks are added to the scores.
#[derive(Clone, Copy, Debug, Default)]
pub struct EncoderMasks<'a> {
    /// `[seq, seq]` or `[batch * heads, seq, seq]`.
    pub src_mask: Option<&'a Tensor>,
    /// `[batch, seq]`: the padding positions of each sequence.
    pub src_key_padding_mask: Option<&'a Tensor>,
    /// A hint that `src_mask` is causal (the mask is still needed).
    pub is_causal: bool,
}

/// The masks of a decoder call (PyTorch's `tgt_mask`, `memory_mask`,
/// `tgt_key_padding_mask`, `memory_key_padding_mask`, `tgt_is_causal`, `memory_is_causal`),
/// with the conventions of [`EncoderMasks`].
#[derive(Clone, Copy, Debug, Default)]
pub struct DecoderMasks<'a> {
    /// The self-attention mask, `[tgt, tgt]` or `[batch * heads, tgt, tgt]`, typically
    /// [`generate_square_subsequent_mask`](crate::generate_square_subsequent_mask).
    pub tgt_mask: Option<&'a Tensor>,
    /// The cross-attention mask, `[tgt, memory]` or `[batch * heads, tgt, memory]`.
    pub memory_mask: Option<&'a Tensor>,
    /// `[batch, tgt]`: the padding positions of each target sequence.
    pub tgt_key_padding_mask: Option<&'a Tensor>,
    /// `[batch, memory]`: the padding positions of each memory sequence.
    pub memory_key_padding_mask: Option<&'a Tensor>,
    /// A hint that `tgt_mask` is causal.
    pub tgt_is_causal: bool,
    /// A hint that `memory_mask` is causal.
    pub memory_is_causal: bool,
}
