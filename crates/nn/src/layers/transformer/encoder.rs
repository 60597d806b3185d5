//! [`TransformerEncoderLayer`] and the stack of them, [`TransformerEncoder`].

use super::options::{EncoderMasks, TransformerLayerOptions};
use super::parts::{self, AttentionMasks, FeedForward, Residual};
use crate::Module;
use crate::layers::{LayerNorm, MultiheadAttention};
use crate::module::TrainingFlag;
use ember_autograd::Var;
use ember_tensor::Result;
use std::fmt;

/// Self-attention and a feed-forward block, each with a residual connection and a layer
/// norm; PyTorch's `nn.TransformerEncoderLayer`, with its arguments (through
/// [`TransformerLayerOptions`]), computation and `state_dict` names (`self_attn.*`,
/// `linear1.*`, `linear2.*`, `norm1.*`, `norm2.*`).
///
/// Post-norm (the default): `x = norm1(x + sa(x)); x = norm2(x + ff(x))`. Pre-norm
/// (`norm_first`): `x = x + sa(norm1(x)); x = x + ff(norm2(x))`. Dropout follows the
/// attention, the activation and the feed-forward block, in training only.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::{EncoderMasks, Module, TransformerEncoderLayer, TransformerLayerOptions};
/// use ember_tensor::Tensor;
/// let opts = TransformerLayerOptions { dim_feedforward: 32, batch_first: true, ..Default::default() };
/// let layer = TransformerEncoderLayer::with_options(16, 4, opts)?;
/// let x = Var::new(Tensor::randn([2, 7, 16])?);
/// assert_eq!(layer.forward(&x)?.shape().dims(), &[2, 7, 16]);
/// let pad = Tensor::from_vec([0u8, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0].to_vec(), [2, 7])?;
/// let masks = EncoderMasks { src_key_padding_mask: Some(&pad), ..Default::default() };
/// assert_eq!(layer.forward_with(&x, &masks)?.shape().dims(), &[2, 7, 16]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Module)]
pub struct TransformerEncoderLayer {
    self_attn: MultiheadAttention,
    #[module(flatten)]
    ff: FeedForward,
    norm1: LayerNorm,
    norm2: LayerNorm,
    #[module(skip)]
    residual: Residual,
    training: TrainingFlag,
}

impl TransformerEncoderLayer {
    /// The sublayers, in PyTorch's construction (and drawing) order: attention, linear1,
    /// linear2, norms.
    fn build(d_model: usize, nhead: usize, o: &TransformerLayerOptions) -> Result<Self> {
        Ok(TransformerEncoderLayer {
            self_attn: parts::attention(d_model, nhead, o, "TransformerEncoderLayer.self_attn")?,
            ff: FeedForward::new(d_model, o, ["TransformerEncoderLayer.linear1", "TransformerEncoderLayer.linear2"])?,
            norm1: parts::norm(d_model, o, "TransformerEncoderLayer.norm1")?,
            norm2: parts::norm(d_model, o, "TransformerEncoderLayer.norm2")?,
            residual: Residual::new(o),
            training: TrainingFlag::new(),
        })
    }

    /// A copy with its own parameters holding the same values, in the same mode.
    pub fn deep_copy(&self) -> Result<Self> {
        Ok(TransformerEncoderLayer {
            self_attn: self.self_attn.deep_copy()?,
            ff: self.ff.deep_copy()?,
            norm1: parts::copy_norm(&self.norm1)?,
            norm2: parts::copy_norm(&self.norm2)?,
            residual: self.residual,
            training: self.training.clone(),
        })
    }

    /// The self-attention sublayer.
    pub fn self_attn(&self) -> &MultiheadAttention {
        &self.self_attn
    }

    /// The feed-forward block's first linear layer, `d_model -> dim_feedforward`.
    pub fn linear1(&self) -> &crate::Linear {
        &self.ff.linear1
    }

    /// The feed-forward block's second linear layer, `dim_feedforward -> d_model`.
    pub fn linear2(&self) -> &crate::Linear {
        &self.ff.linear2
    }

    /// The norm of the attention block.
    pub fn norm1(&self) -> &LayerNorm {
        &self.norm1
    }

    /// The norm of the feed-forward block.
    pub fn norm2(&self) -> &LayerNorm {
        &self.norm2
    }

    /// The layer applied to `src` (`[seq, batch, d_model]`, batch first with `batch_first`,
    /// or unbatched `[seq, d_model]`) with `masks`: PyTorch's `forward(src, src_mask,
    /// src_key_padding_mask, is_causal)`.
    pub fn forward_with(&self, src: &Var, masks: &EncoderMasks<'_>) -> Result<Var> {
        let (residual, training) = (self.residual, self.training.get());
        let sa = |x: &Var| {
            let masks = AttentionMasks {
                attn_mask: masks.src_mask,
                key_padding_mask: masks.src_key_padding_mask,
                is_causal: masks.is_causal,
            };
            parts::attend(&self.self_attn, x, x, masks)
        };
        let x = residual.apply(src, &self.norm1, training, sa)?;
        residual.apply(&x, &self.norm2, training, |x| self.ff.forward(x))
    }

    /// The layer without masks.
    fn forward(&self, x: &Var) -> Result<Var> {
        self.forward_with(x, &EncoderMasks::default())
    }
}

impl fmt::Debug for TransformerEncoderLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "TransformerEncoderLayer(\n  (self_attn): {:?}\n  (linear1): {:?}\n  (dropout): Dropout(p={})\n  \
             (linear2): {:?}\n  (norm1): {:?}\n  (norm2): {:?}\n  (dropout1): Dropout(p={})\n  (dropout2): Dropout(p={})\n)",
            self.self_attn,
            self.ff.linear1,
            self.residual.dropout(),
            self.ff.linear2,
            self.norm1,
            self.norm2,
            self.residual.dropout(),
            self.residual.dropout()
        )
    }
}

parts::layer_constructors!(TransformerEncoderLayer);

/// `num_layers` copies of an encoder layer applied in turn, then an optional final norm;
/// PyTorch's `nn.TransformerEncoder` (`state_dict` names `layers.{i}.*` and `norm.*`).
///
/// As PyTorch's `_get_clones` deep-copies the given layer, every layer starts from the same
/// values and owns its parameters.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::{LayerNorm, Module, TransformerEncoder, TransformerEncoderLayer, TransformerLayerOptions};
/// use ember_tensor::Tensor;
/// let opts = TransformerLayerOptions { dim_feedforward: 32, ..Default::default() };
/// let encoder = TransformerEncoder::new(TransformerEncoderLayer::with_options(16, 2, opts)?, 2, Some(LayerNorm::new(&[16])?))?;
/// assert_eq!(encoder.forward(&Var::new(Tensor::randn([5, 3, 16])?))?.shape().dims(), &[5, 3, 16]);
/// let names: Vec<String> = encoder.named_parameters().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names[0], "layers.0.self_attn.in_proj_weight");
/// assert_eq!(names.last().map(String::as_str), Some("norm.bias"));
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Module)]
pub struct TransformerEncoder {
    layers: Vec<TransformerEncoderLayer>,
    norm: Option<LayerNorm>,
    training: TrainingFlag,
}

impl TransformerEncoder {
    /// A stack of `num_layers` copies of `encoder_layer`, then `norm` if given.
    pub fn new(
        encoder_layer: TransformerEncoderLayer,
        num_layers: usize,
        norm: Option<LayerNorm>,
    ) -> Result<TransformerEncoder> {
        let layers =
            parts::copies("TransformerEncoder", &encoder_layer, num_layers, TransformerEncoderLayer::deep_copy)?;
        Ok(TransformerEncoder { layers, norm, training: TrainingFlag::new() })
    }

    /// The layers, in order.
    pub fn layers(&self) -> &[TransformerEncoderLayer] {
        &self.layers
    }

    /// The final norm, if any.
    pub fn norm(&self) -> Option<&LayerNorm> {
        self.norm.as_ref()
    }

    /// Every layer with the same `masks`, then the norm; PyTorch's `forward(src, mask,
    /// src_key_padding_mask, is_causal)`.
    pub fn forward_with(&self, src: &Var, masks: &EncoderMasks<'_>) -> Result<Var> {
        let x = self.layers.iter().try_fold(src.clone(), |x, layer| layer.forward_with(&x, masks))?;
        parts::final_norm(self.norm.as_ref(), x)
    }

    /// The stack without masks.
    fn forward(&self, x: &Var) -> Result<Var> {
        self.forward_with(x, &EncoderMasks::default())
    }
}

impl fmt::Debug for TransformerEncoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TransformerEncoder(layers={}x {:?}, norm={:?})", self.layers.len(), self.layers[0], self.norm)
    }
}
