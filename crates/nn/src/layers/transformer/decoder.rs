//! [`TransformerDecoderLayer`] and the stack of them, [`TransformerDecoder`].

use super::options::{DecoderMasks, TransformerLayerOptions};
use super::parts::{self, FeedForward};
use crate::layers::param_alloc::within;
use crate::layers::{LayerNorm, MultiheadAttention, MultiheadAttentionArgs, dropout};
use crate::module::{Module, TrainingFlag};
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
pub struct TransformerDecoderLayer {
    self_attn: MultiheadAttention,
    multihead_attn: MultiheadAttention,
    ff: FeedForward,
    norm1: LayerNorm,
    norm2: LayerNorm,
    norm3: LayerNorm,
    dropout: f64,
    norm_first: bool,
    training: TrainingFlag,
}

impl TransformerDecoderLayer {
    /// A layer over `d_model` features with `nhead` heads and PyTorch's defaults.
    pub fn new(d_model: usize, nhead: usize) -> Result<TransformerDecoderLayer> {
        Self::with_options(d_model, nhead, TransformerLayerOptions::default())
    }

    /// A layer with the given options.
    pub fn with_options(
        d_model: usize,
        nhead: usize,
        options: TransformerLayerOptions,
    ) -> Result<TransformerDecoderLayer> {
        parts::check(LAYER, d_model, nhead, &options)?;
        let self_attn =
            parts::attention(d_model, nhead, &options).map_err(within("TransformerDecoderLayer.self_attn"))?;
        let multihead_attn =
            parts::attention(d_model, nhead, &options).map_err(within("TransformerDecoderLayer.multihead_attn"))?;
        let ff = FeedForward::new(
            d_model,
            &options,
            ["TransformerDecoderLayer.linear1", "TransformerDecoderLayer.linear2"],
        )?;
        Ok(TransformerDecoderLayer {
            self_attn,
            multihead_attn,
            ff,
            norm1: parts::norm(d_model, &options).map_err(within("TransformerDecoderLayer.norm1"))?,
            norm2: parts::norm(d_model, &options).map_err(within("TransformerDecoderLayer.norm2"))?,
            norm3: parts::norm(d_model, &options).map_err(within("TransformerDecoderLayer.norm3"))?,
            dropout: options.dropout,
            norm_first: options.norm_first,
            training: TrainingFlag::new(),
        })
    }

    /// A copy with its own parameters holding the same values, in the same mode.
    pub fn deep_copy(&self) -> Result<TransformerDecoderLayer> {
        let training = TrainingFlag::new();
        training.set(self.training.get());
        Ok(TransformerDecoderLayer {
            self_attn: self.self_attn.deep_copy()?,
            multihead_attn: self.multihead_attn.deep_copy()?,
            ff: self.ff.deep_copy()?,
            norm1: parts::copy_norm(&self.norm1)?,
            norm2: parts::copy_norm(&self.norm2)?,
            norm3: parts::copy_norm(&self.norm3)?,
            dropout: self.dropout,
            norm_first: self.norm_first,
            training,
        })
    }

    /// The self-attention sublayer.
    pub fn self_attn(&self) -> &MultiheadAttention {
        &self.self_attn
    }

    /// The attention over the memory.
    pub fn multihead_attn(&self) -> &MultiheadAttention {
        &self.multihead_attn
    }

    /// The layer applied to `tgt` (`[tgt, batch, d_model]`, batch first with `batch_first`,
    /// or unbatched) attending to `memory` (`[memory, batch, d_model]`) with `masks`:
    /// PyTorch's `forward(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
    /// memory_key_padding_mask, tgt_is_causal, memory_is_causal)`.
    pub fn forward_with(&self, tgt: &Var, memory: &Var, masks: &DecoderMasks<'_>) -> Result<Var> {
        let training = self.training.get();
        let p = self.dropout;
        let sa = |x: &Var| -> Result<Var> {
            let args = MultiheadAttentionArgs {
                key_padding_mask: masks.tgt_key_padding_mask,
                need_weights: false,
                attn_mask: masks.tgt_mask,
                average_attn_weights: true,
                is_causal: masks.tgt_is_causal,
            };
            dropout(&self.self_attn.forward_with(x, x, x, &args)?.output, p, training)
        };
        let mha = |x: &Var| -> Result<Var> {
            let args = MultiheadAttentionArgs {
                key_padding_mask: masks.memory_key_padding_mask,
                need_weights: false,
                attn_mask: masks.memory_mask,
                average_attn_weights: true,
                is_causal: masks.memory_is_causal,
            };
            dropout(&self.multihead_attn.forward_with(x, memory, memory, &args)?.output, p, training)
        };
        let ff = |x: &Var| dropout(&self.ff.forward(x, p, training)?, p, training);
        if self.norm_first {
            let x = tgt.add(&sa(&self.norm1.forward(tgt)?)?)?;
            let x = x.add(&mha(&self.norm2.forward(&x)?)?)?;
            x.add(&ff(&self.norm3.forward(&x)?)?)
        } else {
            let x = self.norm1.forward(&tgt.add(&sa(tgt)?)?)?;
            let x = self.norm2.forward(&x.add(&mha(&x)?)?)?;
            self.norm3.forward(&x.add(&ff(&x)?)?)
        }
    }

    fn norms(&self) -> Vec<(&str, &dyn Module)> {
        vec![("norm1", &self.norm1), ("norm2", &self.norm2), ("norm3", &self.norm3)]
    }
}

impl Module for TransformerDecoderLayer {
    /// An error: a decoder layer needs the memory too (see
    /// [`forward_with`](TransformerDecoderLayer::forward_with)).
    fn forward(&self, _x: &Var) -> Result<Var> {
        Err(Error::invalid(LAYER, "needs the target and the memory: call forward_with(tgt, memory, masks)"))
    }

    fn named_parameters(&self) -> Vec<(String, Var)> {
        let mut params = parts::prefixed(&[("self_attn", &self.self_attn), ("multihead_attn", &self.multihead_attn)]);
        params.extend(self.ff.named_parameters());
        params.extend(parts::prefixed(&self.norms()));
        params
    }

    fn set_training(&self, on: bool) {
        self.training.set(on);
        self.self_attn.set_training(on);
        self.multihead_attn.set_training(on);
        self.norms().iter().for_each(|(_, m)| m.set_training(on));
    }

    fn is_training(&self) -> bool {
        self.training.get()
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
            self.dropout,
            self.ff.linear2,
            self.norm1,
            self.norm2,
            self.norm3
        )
    }
}

/// `num_layers` copies of a decoder layer applied in turn, then an optional final norm;
/// PyTorch's `nn.TransformerDecoder` (`state_dict` names `layers.{i}.*` and `norm.*`). Every
/// layer starts from the given layer's values and owns its parameters.
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
        if num_layers == 0 {
            return Err(Error::invalid("TransformerDecoder", "num_layers must be positive, got 0"));
        }
        parts::reserve_copies("TransformerDecoder", &decoder_layer, num_layers)?;
        let layers = (0..num_layers).map(|_| decoder_layer.deep_copy()).collect::<Result<Vec<_>>>()?;
        Ok(TransformerDecoder { layers, norm, training: TrainingFlag::new() })
    }

    /// The layers, in order.
    pub fn layers(&self) -> &[TransformerDecoderLayer] {
        &self.layers
    }

    /// Every layer with the same `memory` and `masks`, then the norm; PyTorch's
    /// `forward(tgt, memory, ...)`.
    pub fn forward_with(&self, tgt: &Var, memory: &Var, masks: &DecoderMasks<'_>) -> Result<Var> {
        let mut x = tgt.clone();
        for layer in &self.layers {
            x = layer.forward_with(&x, memory, masks)?;
        }
        match &self.norm {
            Some(n) => n.forward(&x),
            None => Ok(x),
        }
    }
}

impl Module for TransformerDecoder {
    /// An error: a decoder needs the memory too (see
    /// [`forward_with`](TransformerDecoder::forward_with)).
    fn forward(&self, _x: &Var) -> Result<Var> {
        Err(Error::invalid(
            "TransformerDecoder",
            "needs the target and the memory: call forward_with(tgt, memory, masks)",
        ))
    }

    fn named_parameters(&self) -> Vec<(String, Var)> {
        parts::stack_parameters(&self.layers, self.norm.as_ref())
    }

    fn set_training(&self, on: bool) {
        self.training.set(on);
        parts::set_stack_training(&self.layers, self.norm.as_ref(), on);
    }

    fn is_training(&self) -> bool {
        self.training.get()
    }
}

impl fmt::Debug for TransformerDecoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TransformerDecoder(layers={}x {:?}, norm={:?})", self.layers.len(), self.layers[0], self.norm)
    }
}
