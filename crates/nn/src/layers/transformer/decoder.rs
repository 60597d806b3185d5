//! [`TransformerDecoderLayer`] and the stack of them, [`TransformerDecoder`].

use super::options::{DecoderMasks, TransformerLayerOptions};
use super::parts::{self, AttentionMasks, FeedForward, Residual};
use crate::Module;
use crate::layers::{LayerNorm, MultiheadAttention};
use crate::module::TrainingFlag;
use ember_autograd::Var;
use ember_tensor::{Error, Result};
use std::fmt;

const LAYER: &str = "TransformerDecoderLayer";

/// Self-attention over the target, attention over the encoder's output (the memory) and a
/// feed-forward block, each with a residual connection and a layer norm; PyTorch's
/// `nn.TransformerDecoderLayer`, with its `state_dict` names (`self_attn.*`,
/// `multihead_attn.*`, `linear1.*`, `linear2.*`, `norm1.*`, `norm2.*`, `norm3.*`).
///
/// Post-norm (the default): `x = norm1(x + sa(x)); x = norm2(x + mha(x, memory)); x =
/// norm3(x + ff(x))`; pre-norm (`norm_first`) normalises each block's input instead.
///
/// A decoder needs the memory, so it runs through
/// [`forward_with`](TransformerDecoderLayer::forward_with); `Module::forward` of one input
/// is an error.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::{generate_square_subsequent_mask, DecoderMasks, TransformerDecoderLayer, TransformerLayerOptions};
/// use ember_tensor::{DType, Tensor};
/// let opts = TransformerLayerOptions { dim_feedforward: 32, ..Default::default() };
/// let layer = TransformerDecoderLayer::with_options(16, 2, opts)?;
/// let tgt = Var::new(Tensor::randn([4, 3, 16])?);
/// let memory = Var::new(Tensor::randn([6, 3, 16])?);
/// let causal = generate_square_subsequent_mask(4, DType::F32)?;
/// let masks = DecoderMasks { tgt_mask: Some(&causal), tgt_is_causal: true, ..Default::default() };
/// assert_eq!(layer.forward_with(&tgt, &memory, &masks)?.shape().dims(), &[4, 3, 16]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Module)]
pub struct TransformerDecoderLayer {
    self_attn: MultiheadAttention,
    multihead_attn: MultiheadAttention,
    #[module(flatten)]
    ff: FeedForward,
    norm1: LayerNorm,
    norm2: LayerNorm,
    norm3: LayerNorm,
    training: TrainingFlag,
    #[module(skip)]
    residual: Residual,
}

impl TransformerDecoderLayer {
    /// The layer applied to `tgt` (`[tgt, batch, d_model]`, batch first with `batch_first`,
    /// or unbatched) attending to `memory` (`[memory, batch, d_model]`) with `masks`:
    /// PyTorch's `forward(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
    /// memory_key_padding_mask, tgt_is_causal, memory_is_causal)`.
    pub fn forward_with(&self, tgt: &Var, memory: &Var, masks: &DecoderMasks<'_>) -> Result<Var> {
        let (residual, training) = (self.residual, self.training.get());
        let self_masks = AttentionMasks {
            attn_mask: masks.tgt_mask,
            key_padding_mask: masks.tgt_key_padding_mask,
            is_causal: masks.tgt_is_causal,
        };
        let memory_masks = AttentionMasks {
            attn_mask: masks.memory_mask,
            key_padding_mask: masks.memory_key_padding_mask,
            is_causal: masks.memory_is_causal,
        };
        let x = residual.apply(tgt, &self.norm1, training, |x| parts::attend(&self.self_attn, x, x, self_masks))?;
        let mha = |x: &Var| parts::attend(&self.multihead_attn, x, memory, memory_masks);
        let x = residual.apply(&x, &self.norm2, training, mha)?;
        residual.apply(&x, &self.norm3, training, |x| self.ff.forward(x))
    }

    /// An error: a decoder layer needs the memory too (see
    /// [`forward_with`](TransformerDecoderLayer::forward_with)).
    fn forward(&self, _x: &Var) -> Result<Var> {
        Err(Error::invalid(LAYER, "needs the target and the memory: call forward_with(tgt, memory, masks)"))
    }

    /// The self-attention sublayer.
    pub fn self_attn(&self) -> &MultiheadAttention {
        &self.self_attn
    }

    /// The attention over the memory.
    pub fn multihead_attn(&self) -> &MultiheadAttention {
        &self.multihead_attn
    }

    /// The sublayers, in PyTorch's construction (and drawing) order.
    fn build(d_model: usize, nhead: usize, o: &TransformerLayerOptions) -> Result<Self> {
        Ok(TransformerDecoderLayer {
            self_attn: parts::attention(d_model, nhead, o, "TransformerDecoderLayer.self_attn")?,
            multihead_attn: parts::attention(d_model, nhead, o, "TransformerDecoderLayer.multihead_attn")?,
            ff: FeedForward::new(d_model, o, ["TransformerDecoderLayer.linear1", "TransformerDecoderLayer.linear2"])?,
            norm1: parts::norm(d_model, o, "TransformerDecoderLayer.norm1")?,
            norm2: parts::norm(d_model, o, "TransformerDecoderLayer.norm2")?,
            norm3: parts::norm(d_model, o, "TransformerDecoderLayer.norm3")?,
            training: TrainingFlag::new(),
            residual: Residual::new(o),
        })
    }

    /// A copy with its own parameters holding the same values, in the same mode.
    pub fn deep_copy(&self) -> Result<Self> {
        Ok(TransformerDecoderLayer {
            self_attn: self.self_attn.deep_copy()?,
            multihead_attn: self.multihead_attn.deep_copy()?,
            ff: self.ff.deep_copy()?,
            norm1: parts::copy_norm(&self.norm1)?,
            norm2: parts::copy_norm(&self.norm2)?,
            norm3: parts::copy_norm(&self.norm3)?,
            training: self.training.clone(),
            residual: self.residual,
        })
    }
}

impl fmt::Debug for TransformerDecoderLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "TransformerDecoderLayer(\n  (self_attn): {:?}\n  (multihead_attn): {:?}\n  (linear1): {:?}\n  \
             (dropout): Dropout(p={})\n  (linear2): {:?}\n  (norm1): {:?}\n  (norm2): {:?}\n  (norm3): {:?}\n)",
            self.self_attn,
            self.multihead_attn,
            self.ff.linear1,
            self.residual.dropout(),
            self.ff.linear2,
            self.norm1,
            self.norm2,
            self.norm3
        )
    }
}

parts::layer_constructors!(TransformerDecoderLayer);

/// `num_layers` copies of a decoder layer applied in turn, then an optional final norm;
/// PyTorch's `nn.TransformerDecoder` (`state_dict` names `layers.{i}.*` and `norm.*`). Every
/// layer starts from the given layer's values and owns its parameters. It needs the memory,
/// so it runs through [`forward_with`](TransformerDecoder::forward_with); `Module::forward`
/// of one input is an error.
#[derive(Module)]
pub struct TransformerDecoder {
    layers: Vec<TransformerDecoderLayer>,
    norm: Option<LayerNorm>,
    training: TrainingFlag,
}

impl TransformerDecoder {
    /// A stack of `num_layers` copies of `decoder_layer`, then `norm` if given.
    pub fn new(
        decoder_layer: TransformerDecoderLayer,
        num_layers: usize,
        norm: Option<LayerNorm>,
    ) -> Result<TransformerDecoder> {
        let copy = TransformerDecoderLayer::deep_copy;
        Ok(TransformerDecoder {
            layers: parts::copies("TransformerDecoder", &decoder_layer, num_layers, copy)?,
            norm,
            training: TrainingFlag::new(),
        })
    }

    /// The layers, in order.
    pub fn layers(&self) -> &[TransformerDecoderLayer] {
        &self.layers
    }

    /// Every layer with the same `memory` and `masks`, then the norm; PyTorch's
    /// `forward(tgt, memory, ...)`.
    pub fn forward_with(&self, tgt: &Var, memory: &Var, masks: &DecoderMasks<'_>) -> Result<Var> {
        let x = self.layers.iter().try_fold(tgt.clone(), |x, layer| layer.forward_with(&x, memory, masks))?;
        parts::final_norm(self.norm.as_ref(), x)
    }

    /// An error: a decoder needs the memory too (see
    /// [`forward_with`](TransformerDecoder::forward_with)).
    fn forward(&self, _x: &Var) -> Result<Var> {
        Err(Error::invalid(
            "TransformerDecoder",
            "needs the target and the memory: call forward_with(tgt, memory, masks)",
        ))
    }
}

impl fmt::Debug for TransformerDecoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TransformerDecoder(layers={}x {:?}, norm={:?})", self.layers.len(), self.layers[0], self.norm)
    }
}
