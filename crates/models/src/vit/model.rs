//! [`ViTModel`] and [`ViTForImageClassification`] with transformers' module names, so that
//! `state_dict` keys are the checkpoint's.

use super::config::ViTConfig;
use crate::bert::HiddenAct;
use crate::bert::model::multi_head_attention;
use ember_autograd::Var;
use ember_nn::{
    Conv2d, Conv2dOptions, Dropout, LayerNorm, LayerNormOptions, Linear, LinearOptions, Module, TrainingFlag,
};
use ember_tensor::{DType, Error, Result, Tensor};

fn layer_norm(config: &ViTConfig) -> Result<LayerNorm> {
    LayerNorm::with_options(
        &[config.hidden_size],
        LayerNormOptions { eps: config.layer_norm_eps, ..Default::default() },
    )
}

/// `projection`: the patch embedding, a convolution with kernel and stride `patch_size`.
#[derive(Module)]
pub struct ViTPatchEmbeddings {
    projection: Conv2d,
}

impl ViTPatchEmbeddings {
    /// `[batch, channels, H, W]` to `[batch, patches, hidden]`.
    fn forward(&self, pixels: &Var) -> Result<Var> {
        self.projection.forward(pixels)?.flatten(2, -1)?.transpose(1, 2)
    }
}

/// The `[CLS]` token, the patch embeddings and the learned position embeddings.
#[derive(Module)]
pub struct ViTEmbeddings {
    cls_token: Var,
    position_embeddings: Var,
    patch_embeddings: ViTPatchEmbeddings,
    dropout: Dropout,
    #[module(skip)]
    config: ViTConfig,
}

impl ViTEmbeddings {
    fn new(config: &ViTConfig) -> Result<Self> {
        let h = config.hidden_size;
        let p = config.patch_size;
        Ok(ViTEmbeddings {
            cls_token: Var::param(Tensor::normal([1, 1, h], 0.0, 0.02, DType::F32)?),
            position_embeddings: Var::param(Tensor::normal([1, config.num_patches() + 1, h], 0.0, 0.02, DType::F32)?),
            patch_embeddings: ViTPatchEmbeddings {
                projection: Conv2d::with_options(config.num_channels, h, p, Conv2dOptions::default().stride(p))?,
            },
            dropout: Dropout::new(config.hidden_dropout_prob)?,
            config: config.clone(),
        })
    }

    fn forward(&self, pixels: &Var) -> Result<Var> {
        let dims = pixels.shape().dims().to_vec();
        let c = &self.config;
        if dims.len() != 4 || dims[1] != c.num_channels || dims[2] != c.image_size || dims[3] != c.image_size {
            return Err(Error::shape(
                "ViTModel",
                format!(
                    "pixel_values must be [batch, {}, {}, {}], got {:?} (other sizes would need interpolated position embeddings, which are not supported)",
                    c.num_channels, c.image_size, c.image_size, dims
                ),
            ));
        }
        let patches = self.patch_embeddings.forward(pixels)?;
        let cls = self.cls_token.expand([dims[0], 1, c.hidden_size])?;
        let x = Var::cat(&[&cls, &patches], 1)?.add(&self.position_embeddings)?;
        self.dropout.forward(&x)
    }
}

/// `query`, `key`, `value` (`attention.attention`).
#[derive(Module)]
pub struct ViTSelfAttention {
    query: Linear,
    key: Linear,
    value: Linear,
    training: TrainingFlag,
    #[module(skip)]
    heads: usize,
    #[module(skip)]
    dropout_p: f64,
}

impl ViTSelfAttention {
    fn forward(&self, x: &Var) -> Result<Var> {
        multi_head_attention(
            [&self.query, &self.key, &self.value],
            x,
            None,
            self.heads,
            self.dropout_p,
            self.training.get(),
        )
    }
}

/// A projection followed by dropout (`attention.output`, `output`); the residual is added by
/// the layer.
#[derive(Module)]
pub struct ViTDense {
    dense: Linear,
    dropout: Dropout,
}

impl ViTDense {
    fn forward(&self, x: &Var) -> Result<Var> {
        self.dropout.forward(&self.dense.forward(x)?)
    }
}

/// Self-attention and its output projection (`attention.attention`, `attention.output`).
#[derive(Module)]
pub struct ViTAttention {
    attention: ViTSelfAttention,
    output: ViTDense,
}

impl ViTAttention {
    fn forward(&self, x: &Var) -> Result<Var> {
        self.output.forward(&self.attention.forward(x)?)
    }
}

/// `intermediate.dense` and the activation.
#[derive(Module)]
pub struct ViTIntermediate {
    dense: Linear,
    #[module(skip)]
    act: HiddenAct,
}

impl ViTIntermediate {
    fn forward(&self, x: &Var) -> Result<Var> {
        Ok(self.act.apply(&self.dense.forward(x)?))
    }
}

/// A pre-norm encoder layer: `x + attention(layernorm_before(x))`, then
/// `x + output(intermediate(layernorm_after(x)))`.
#[derive(Module)]
pub struct ViTLayer {
    attention: ViTAttention,
    intermediate: ViTIntermediate,
    output: ViTDense,
    layernorm_before: LayerNorm,
    layernorm_after: LayerNorm,
}

impl ViTLayer {
    fn new(config: &ViTConfig) -> Result<Self> {
        let h = config.hidden_size;
        let qkv = || Linear::with_options(h, h, LinearOptions { bias: config.qkv_bias, ..Default::default() });
        let dense = |i, o| -> Result<ViTDense> {
            Ok(ViTDense { dense: Linear::new(i, o)?, dropout: Dropout::new(config.hidden_dropout_prob)? })
        };
        Ok(ViTLayer {
            attention: ViTAttention {
                attention: ViTSelfAttention {
                    query: qkv()?,
                    key: qkv()?,
                    value: qkv()?,
                    training: TrainingFlag::new(),
                    heads: config.num_attention_heads,
                    dropout_p: config.attention_probs_dropout_prob,
                },
                output: dense(h, h)?,
            },
            intermediate: ViTIntermediate {
                dense: Linear::new(h, config.intermediate_size)?,
                act: config.activation()?,
            },
            output: dense(config.intermediate_size, h)?,
            layernorm_before: layer_norm(config)?,
            layernorm_after: layer_norm(config)?,
        })
    }

    fn forward(&self, x: &Var) -> Result<Var> {
        let x = x.add(&self.attention.forward(&self.layernorm_before.forward(x)?)?)?;
        x.add(&self.output.forward(&self.intermediate.forward(&self.layernorm_after.forward(&x)?)?)?)
    }
}

/// The stack of layers (`encoder.layer.N`).
#[derive(Module)]
pub struct ViTEncoder {
    layer: Vec<ViTLayer>,
}

impl ViTEncoder {
    fn forward(&self, x: &Var) -> Result<Var> {
        let mut x = x.clone();
        for layer in &self.layer {
            x = layer.forward(&x)?;
        }
        Ok(x)
    }
}

/// `tanh(dense(x[:, 0]))`.
#[derive(Module)]
pub struct ViTPooler {
    dense: Linear,
}

impl ViTPooler {
    fn forward(&self, x: &Var) -> Result<Var> {
        Ok(self.dense.forward(&x.select(1, 0)?)?.tanh())
    }
}

/// What [`ViTModel::forward_with`] returns.
#[derive(Clone, Debug)]
pub struct ViTOutput {
    /// The final layer-normed states `[batch, 1 + patches, hidden]`, the `[CLS]` token
    /// first.
    pub last_hidden_state: Var,
    /// `tanh(dense([CLS]))`, `[batch, hidden]`, when the model has a pooler.
    pub pooler_output: Option<Var>,
}

/// The Vision Transformer, transformers' `ViTModel`: patch embedding with a `[CLS]` token
/// and learned positions, pre-norm encoder layers on ember's fused attention, a final
/// layer norm, and optionally the pooler.
///
/// ```
/// use ember_autograd::Var;
/// use ember_models::vit::{ViTConfig, ViTModel};
/// use ember_tensor::Tensor;
/// let config = ViTConfig {
///     hidden_size: 12, num_hidden_layers: 1, num_attention_heads: 3, intermediate_size: 16,
///     image_size: 8, patch_size: 4, ..Default::default()
/// };
/// let vit = ViTModel::new(&config, false)?;
/// let out = vit.forward_with(&Var::new(Tensor::randn([2, 3, 8, 8])?))?;
/// assert_eq!(out.last_hidden_state.shape().dims(), &[2, 5, 12]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Module)]
pub struct ViTModel {
    embeddings: ViTEmbeddings,
    encoder: ViTEncoder,
    layernorm: LayerNorm,
    pooler: Option<ViTPooler>,
    #[module(skip)]
    config: ViTConfig,
}

impl ViTModel {
    /// A randomly initialised model of `config`, with the pooler when `add_pooling_layer`.
    pub fn new(config: &ViTConfig, add_pooling_layer: bool) -> Result<ViTModel> {
        config.validate()?;
        let layer = (0..config.num_hidden_layers).map(|_| ViTLayer::new(config)).collect::<Result<Vec<_>>>()?;
        let pooler = if add_pooling_layer {
            Some(ViTPooler { dense: Linear::new(config.hidden_size, config.hidden_size)? })
        } else {
            None
        };
        Ok(ViTModel {
            embeddings: ViTEmbeddings::new(config)?,
            encoder: ViTEncoder { layer },
            layernorm: layer_norm(config)?,
            pooler,
            config: config.clone(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ViTConfig {
        &self.config
    }

    /// The dtype of the parameters.
    pub fn dtype(&self) -> DType {
        self.embeddings.cls_token.dtype()
    }

    fn forward(&self, pixel_values: &Var) -> Result<Var> {
        Ok(self.forward_with(pixel_values)?.last_hidden_state)
    }

    /// The hidden states and pooled output of `pixel_values` (`[batch, channels, image_size,
    /// image_size]`).
    pub fn forward_with(&self, pixel_values: &Var) -> Result<ViTOutput> {
        let x = self.encoder.forward(&self.embeddings.forward(pixel_values)?)?;
        let last_hidden_state = self.layernorm.forward(&x)?;
        let pooler_output = self.pooler.as_ref().map(|p| p.forward(&last_hidden_state)).transpose()?;
        Ok(ViTOutput { last_hidden_state, pooler_output })
    }
}

/// ViT with a linear classifier on the `[CLS]` token's final state, transformers'
/// `ViTForImageClassification` (no pooler): logits `[batch, num_labels]`.
#[derive(Module)]
pub struct ViTForImageClassification {
    vit: ViTModel,
    classifier: Linear,
}

impl ViTForImageClassification {
    /// A randomly initialised model of `config`, `config.num_labels()` classes.
    pub fn new(config: &ViTConfig) -> Result<ViTForImageClassification> {
        Self::from_vit(ViTModel::new(config, false)?, config.num_labels())
    }

    /// A new classifier of `num_labels` classes on a (pretrained) `ViTModel`, for
    /// fine-tuning.
    pub fn from_vit(vit: ViTModel, num_labels: usize) -> Result<ViTForImageClassification> {
        let classifier = Linear::new(vit.config().hidden_size, num_labels)?;
        if vit.dtype() != DType::F32 {
            classifier.to_dtype(vit.dtype())?;
        }
        Ok(ViTForImageClassification { vit, classifier })
    }

    /// The encoder.
    pub fn vit(&self) -> &ViTModel {
        &self.vit
    }

    /// The classifier.
    pub fn classifier(&self) -> &Linear {
        &self.classifier
    }

    fn forward(&self, pixel_values: &Var) -> Result<Var> {
        let hidden = self.vit.forward_with(pixel_values)?.last_hidden_state;
        self.classifier.forward(&hidden.select(1, 0)?)
    }
}
