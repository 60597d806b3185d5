//! [`BertModel`]: BERT's embeddings, encoder and pooler, with transformers' module names
//! (so that `state_dict` keys are the checkpoint's), and its input and output types.

use super::activation::HiddenAct;
use super::config::BertConfig;
use ember_autograd::Var;
use ember_nn::functional::{SdpaArgs, scaled_dot_product_attention};
use ember_nn::{Dropout, Embedding, LayerNorm, LayerNormOptions, Linear, Module, TrainingFlag};
use ember_tensor::{DType, Error, Result, Tensor};

/// What [`BertModel::forward_with`] reads: token ids `[batch, seq]` (`i64`), and optionally
/// the attention mask (`[batch, seq]`, non-zero where the token is real, zero on padding)
/// and the token types (`[batch, seq]`, `i64`; all 0 when absent), as transformers' keyword
/// arguments.
#[derive(Clone, Debug)]
pub struct BertInput {
    /// Token ids, `[batch, seq]`, `i64`.
    pub input_ids: Tensor,
    /// Non-zero for tokens to attend to, zero for padding; `None` attends to every token.
    pub attention_mask: Option<Tensor>,
    /// Segment ids; `None` is segment 0 everywhere.
    pub token_type_ids: Option<Tensor>,
}

impl BertInput {
    /// Ids without a mask or token types.
    pub fn new(input_ids: Tensor) -> BertInput {
        BertInput { input_ids, attention_mask: None, token_type_ids: None }
    }
    /// With the padding mask (1 = real token, 0 = padding).
    pub fn attention_mask(mut self, mask: Tensor) -> BertInput {
        self.attention_mask = Some(mask);
        self
    }
    /// With the token types (segment ids).
    pub fn token_type_ids(mut self, types: Tensor) -> BertInput {
        self.token_type_ids = Some(types);
        self
    }
}

/// What [`BertModel::forward_with`] returns.
#[derive(Clone, Debug)]
pub struct BertOutput {
    /// The last layer's hidden states, `[batch, seq, hidden]`.
    pub last_hidden_state: Var,
    /// `tanh(dense(first token))`, `[batch, hidden]`, when the model has a pooler.
    pub pooler_output: Option<Var>,
}

/// A layer norm with the config's epsilon.
pub(crate) fn layer_norm(config: &BertConfig) -> Result<LayerNorm> {
    LayerNorm::with_options(
        &[config.hidden_size],
        LayerNormOptions { eps: config.layer_norm_eps, ..Default::default() },
    )
}

/// Word, position and token-type embeddings, summed, normalised and dropped out.
#[derive(Module)]
pub struct BertEmbeddings {
    word_embeddings: Embedding,
    position_embeddings: Embedding,
    token_type_embeddings: Embedding,
    #[module(rename = "LayerNorm")]
    layer_norm: LayerNorm,
    dropout: Dropout,
}

impl BertEmbeddings {
    fn new(config: &BertConfig) -> Result<Self> {
        Ok(BertEmbeddings {
            word_embeddings: Embedding::new(config.vocab_size, config.hidden_size)?,
            position_embeddings: Embedding::new(config.max_position_embeddings, config.hidden_size)?,
            token_type_embeddings: Embedding::new(config.type_vocab_size, config.hidden_size)?,
            layer_norm: layer_norm(config)?,
            dropout: Dropout::new(config.hidden_dropout_prob)?,
        })
    }

    /// The word embedding, which the MLM decoder shares.
    pub fn word_embeddings(&self) -> &Embedding {
        &self.word_embeddings
    }

    fn forward(&self, input_ids: &Var) -> Result<Var> {
        self.embed(input_ids, None)
    }

    /// Embeds `[batch, seq]` ids at positions `0..seq` with the given token types.
    fn embed(&self, input_ids: &Var, token_type_ids: Option<&Tensor>) -> Result<Var> {
        let seq = input_ids.shape().dims()[1];
        let positions = Var::new(Tensor::arange(0i64, seq as i64)?);
        let x = self.word_embeddings.forward(input_ids)?.add(&self.position_embeddings.forward(&positions)?)?;
        let x = match token_type_ids {
            Some(t) => x.add(&self.token_type_embeddings.forward(&Var::new(t.clone()))?)?,
            // Segment 0 everywhere: one row, broadcast, instead of a lookup per token.
            None => x.add(&self.token_type_embeddings.weight().select(0, 0)?)?,
        };
        self.dropout.forward(&self.layer_norm.forward(&x)?)
    }
}

/// Multi-head self-attention's projections (`query`, `key`, `value`), on ember's fused
/// attention kernel.
#[derive(Module)]
pub struct BertSelfAttention {
    query: Linear,
    key: Linear,
    value: Linear,
    training: TrainingFlag,
    #[module(skip)]
    heads: usize,
    #[module(skip)]
    dropout_p: f64,
}

impl BertSelfAttention {
    fn new(config: &BertConfig) -> Result<Self> {
        let h = config.hidden_size;
        Ok(BertSelfAttention {
            query: Linear::new(h, h)?,
            key: Linear::new(h, h)?,
            value: Linear::new(h, h)?,
            training: TrainingFlag::new(),
            heads: config.num_attention_heads,
            dropout_p: config.attention_probs_dropout_prob,
        })
    }

    fn forward(&self, x: &Var) -> Result<Var> {
        self.attend(x, None)
    }

    /// `[batch, seq, hidden]` to the heads' outputs, merged back to `[batch, seq, hidden]`;
    /// `mask` is a bool mask broadcastable to `[batch, heads, seq, seq]`.
    fn attend(&self, x: &Var, mask: Option<&Var>) -> Result<Var> {
        multi_head_attention(
            [&self.query, &self.key, &self.value],
            x,
            mask,
            self.heads,
            self.dropout_p,
            self.training.get(),
        )
    }
}

/// `q`, `k`, `v` projections of `x` split into `heads`, attended with `mask`, merged back.
/// Shared with ViT, whose attention is the same computation under other names.
pub(crate) fn multi_head_attention(
    [q, k, v]: [&Linear; 3],
    x: &Var,
    mask: Option<&Var>,
    heads: usize,
    dropout_p: f64,
    training: bool,
) -> Result<Var> {
    let dims = x.shape().dims().to_vec();
    let (b, s, h) = (dims[0], dims[1], dims[2]);
    let split = |l: &Linear| l.forward(x)?.reshape([b, s, heads, h / heads])?.transpose(1, 2);
    let mut args = SdpaArgs::default().dropout(if training { dropout_p } else { 0.0 });
    args.attn_mask = mask.cloned();
    let out = scaled_dot_product_attention(&split(q)?, &split(k)?, &split(v)?, &args)?;
    out.transpose(1, 2)?.reshape([b, s, h])
}

/// The attention's output projection, dropout, residual and layer norm.
#[derive(Module)]
pub struct BertSelfOutput {
    dense: Linear,
    #[module(rename = "LayerNorm")]
    layer_norm: LayerNorm,
    dropout: Dropout,
}

impl BertSelfOutput {
    fn new(config: &BertConfig, input: usize) -> Result<Self> {
        Ok(BertSelfOutput {
            dense: Linear::new(input, config.hidden_size)?,
            layer_norm: layer_norm(config)?,
            dropout: Dropout::new(config.hidden_dropout_prob)?,
        })
    }

    fn forward(&self, x: &Var) -> Result<Var> {
        self.dropout.forward(&self.dense.forward(x)?)
    }

    /// `LayerNorm(dropout(dense(x)) + residual)`.
    fn add_norm(&self, x: &Var, residual: &Var) -> Result<Var> {
        self.layer_norm.forward(&self.forward(x)?.add(residual)?)
    }
}

/// Self-attention with its output block (`attention.self`, `attention.output`).
#[derive(Module)]
pub struct BertAttention {
    #[module(rename = "self")]
    self_attention: BertSelfAttention,
    output: BertSelfOutput,
}

impl BertAttention {
    fn forward(&self, x: &Var) -> Result<Var> {
        self.forward_masked(x, None)
    }

    fn forward_masked(&self, x: &Var, mask: Option<&Var>) -> Result<Var> {
        self.output.add_norm(&self.self_attention.attend(x, mask)?, x)
    }
}

/// The feed-forward block's first projection and activation (`intermediate.dense`).
#[derive(Module)]
pub struct BertIntermediate {
    dense: Linear,
    #[module(skip)]
    act: HiddenAct,
}

impl BertIntermediate {
    fn forward(&self, x: &Var) -> Result<Var> {
        Ok(self.act.apply(&self.dense.forward(x)?))
    }
}

/// One encoder layer: attention, then the feed-forward block (`intermediate`, `output`),
/// each with a residual connection and a post-norm.
#[derive(Module)]
pub struct BertLayer {
    attention: BertAttention,
    intermediate: BertIntermediate,
    output: BertSelfOutput,
}

impl BertLayer {
    fn new(config: &BertConfig) -> Result<Self> {
        Ok(BertLayer {
            attention: BertAttention {
                self_attention: BertSelfAttention::new(config)?,
                output: BertSelfOutput::new(config, config.hidden_size)?,
            },
            intermediate: BertIntermediate {
                dense: Linear::new(config.hidden_size, config.intermediate_size)?,
                act: config.activation()?,
            },
            output: BertSelfOutput::new(config, config.intermediate_size)?,
        })
    }

    fn forward(&self, x: &Var) -> Result<Var> {
        self.forward_masked(x, None)
    }

    /// The layer with a bool key mask broadcastable to `[batch, heads, seq, seq]`.
    pub fn forward_masked(&self, x: &Var, mask: Option<&Var>) -> Result<Var> {
        let x = self.attention.forward_masked(x, mask)?;
        self.output.add_norm(&self.intermediate.forward(&x)?, &x)
    }
}

/// The stack of encoder layers (`encoder.layer.N`).
#[derive(Module)]
pub struct BertEncoder {
    layer: Vec<BertLayer>,
}

impl BertEncoder {
    fn forward(&self, x: &Var) -> Result<Var> {
        self.forward_masked(x, None)
    }

    fn forward_masked(&self, x: &Var, mask: Option<&Var>) -> Result<Var> {
        let mut x = x.clone();
        for layer in &self.layer {
            x = layer.forward_masked(&x, mask)?;
        }
        Ok(x)
    }

    /// The layers.
    pub fn layers(&self) -> &[BertLayer] {
        &self.layer
    }
}

/// `tanh(dense(x[:, 0]))`: the first token's state, for sentence-level heads.
#[derive(Module)]
pub struct BertPooler {
    dense: Linear,
}

impl BertPooler {
    pub(crate) fn new(hidden: usize) -> Result<Self> {
        Ok(BertPooler { dense: Linear::new(hidden, hidden)? })
    }

    fn forward(&self, hidden_states: &Var) -> Result<Var> {
        Ok(self.dense.forward(&hidden_states.select(1, 0)?)?.tanh())
    }
}

/// BERT's encoder, transformers' `BertModel`: embeddings, `num_hidden_layers` post-norm
/// layers, and optionally the pooler. Its `state_dict` keys are the checkpoint's
/// (`embeddings.word_embeddings.weight`, `encoder.layer.0.attention.self.query.weight`,
/// `pooler.dense.weight`, ...).
///
/// ```
/// use ember_models::bert::{BertConfig, BertInput, BertModel};
/// use ember_nn::Module;
/// use ember_tensor::Tensor;
/// let config = BertConfig {
///     vocab_size: 50, hidden_size: 12, num_hidden_layers: 2, num_attention_heads: 3,
///     intermediate_size: 20, max_position_embeddings: 16, ..Default::default()
/// };
/// let bert = BertModel::new(&config, true)?;
/// bert.eval();
/// let ids = Tensor::from_vec(vec![2i64, 7, 9, 3, 2, 8, 3, 0], [2, 4])?;
/// let mask = Tensor::from_vec(vec![1i64, 1, 1, 1, 1, 1, 1, 0], [2, 4])?;
/// let out = bert.forward_with(&BertInput::new(ids).attention_mask(mask))?;
/// assert_eq!(out.last_hidden_state.shape().dims(), &[2, 4, 12]);
/// assert_eq!(out.pooler_output.unwrap().shape().dims(), &[2, 12]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Module)]
pub struct BertModel {
    embeddings: BertEmbeddings,
    encoder: BertEncoder,
    pooler: Option<BertPooler>,
    #[module(skip)]
    config: BertConfig,
}

impl BertModel {
    /// A randomly initialised model of `config`, with the pooler when `add_pooling_layer`.
    pub fn new(config: &BertConfig, add_pooling_layer: bool) -> Result<BertModel> {
        config.validate()?;
        let layer = (0..config.num_hidden_layers).map(|_| BertLayer::new(config)).collect::<Result<Vec<_>>>()?;
        let pooler = if add_pooling_layer { Some(BertPooler::new(config.hidden_size)?) } else { None };
        Ok(BertModel {
            embeddings: BertEmbeddings::new(config)?,
            encoder: BertEncoder { layer },
            pooler,
            config: config.clone(),
        })
    }

    /// The configuration the model was built from.
    pub fn config(&self) -> &BertConfig {
        &self.config
    }

    /// The embeddings.
    pub fn embeddings(&self) -> &BertEmbeddings {
        &self.embeddings
    }

    /// The encoder layers.
    pub fn encoder(&self) -> &BertEncoder {
        &self.encoder
    }

    /// Whether the model has a pooler (a checkpoint of `BertForMaskedLM` has none).
    pub fn has_pooler(&self) -> bool {
        self.pooler.is_some()
    }

    /// The model with a freshly initialised pooler if it had none.
    pub(crate) fn with_pooler(mut self) -> Result<BertModel> {
        if self.pooler.is_none() {
            let pooler = BertPooler::new(self.config.hidden_size)?;
            if self.dtype() != DType::F32 {
                pooler.to_dtype(self.dtype())?;
            }
            self.pooler = Some(pooler);
        }
        Ok(self)
    }

    /// The dtype of the model's parameters.
    pub fn dtype(&self) -> DType {
        self.embeddings.word_embeddings.weight().dtype()
    }

    /// The last hidden states of `input_ids` (`[batch, seq]`) without a mask, as
    /// `Module::forward`.
    fn forward(&self, input_ids: &Var) -> Result<Var> {
        Ok(self.forward_with(&BertInput::new(input_ids.value()))?.last_hidden_state)
    }

    /// The hidden states and the pooled output of `input`.
    ///
    /// Errors name `BertModel` and the shapes: ids that are not `[batch, seq]`, a sequence
    /// longer than `max_position_embeddings`, a mask or token types of another shape.
    pub fn forward_with(&self, input: &BertInput) -> Result<BertOutput> {
        let dims = input.input_ids.shape().dims().to_vec();
        if dims.len() != 2 {
            return Err(Error::shape("BertModel", format!("input_ids must be [batch, seq], got {:?}", dims)));
        }
        let (batch, seq) = (dims[0], dims[1]);
        if seq > self.config.max_position_embeddings {
            return Err(Error::shape(
                "BertModel",
                format!(
                    "sequence of {seq} tokens exceeds max_position_embeddings {}",
                    self.config.max_position_embeddings
                ),
            ));
        }
        for (name, t) in [("attention_mask", &input.attention_mask), ("token_type_ids", &input.token_type_ids)] {
            if let Some(t) = t
                && t.shape().dims() != dims.as_slice()
            {
                return Err(Error::shape(
                    "BertModel",
                    format!("{name} has shape {:?}, input_ids {:?}", t.shape().dims(), dims),
                ));
            }
        }
        let x = self.embeddings.embed(&Var::new(input.input_ids.clone()), input.token_type_ids.as_ref())?;
        let mask = key_mask(input.attention_mask.as_ref(), batch, seq)?;
        let hidden = self.encoder.forward_masked(&x, mask.as_ref())?;
        let pooler_output = self.pooler.as_ref().map(|p| p.forward(&hidden)).transpose()?;
        Ok(BertOutput { last_hidden_state: hidden, pooler_output })
    }
}

/// The padding mask `[batch, seq]` as a bool key mask `[batch, 1, 1, seq]`; `None` when
/// every token is real, so that the kernel runs unmasked.
fn key_mask(mask: Option<&Tensor>, batch: usize, seq: usize) -> Result<Option<Var>> {
    let Some(mask) = mask else { return Ok(None) };
    let keep = mask.ne_scalar(0);
    if keep.to_dtype(DType::F64).sum_all().item()? == (batch * seq) as f64 {
        return Ok(None);
    }
    Ok(Some(Var::new(keep.reshape([batch, 1, 1, seq])?)))
}
