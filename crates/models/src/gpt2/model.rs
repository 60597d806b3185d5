//! [`Gpt2Model`] (the transformer: embeddings, blocks, final norm) and
//! [`Gpt2LmHeadModel`] (it plus the language-modelling head), and the latter's
//! [`CausalLm`] implementation for generation.

use super::attention::Visibility;
use super::block::Gpt2Block;
use super::config::Gpt2Config;
use crate::generation::{CausalLm, DecoderInput, KvCache, decoder_mask, keep_last};
use ember_autograd::{Var, no_grad};
use ember_nn::functional::dropout;
use ember_nn::{
    Embedding, EmbeddingOptions, LayerNorm, LayerNormOptions, Linear, LinearOptions, Module, Parts, TrainingFlag,
};
use ember_tensor::{DType, Error, Result, Tensor};

/// The GPT-2 transformer (transformers' `GPT2Model`): token and position embeddings,
/// `n_layer` blocks, a final layer norm. Its `Module::forward` maps token ids
/// `[batch, positions]` (`i64`) to the last hidden state `[batch, positions, n_embd]`.
#[derive(Module)]
pub struct Gpt2Model {
    wte: Embedding,
    wpe: Embedding,
    h: Vec<Gpt2Block>,
    ln_f: LayerNorm,
    #[module(skip)]
    embd_pdrop: f64,
    training: TrainingFlag,
}

impl Gpt2Model {
    /// A randomly initialised transformer of `config` with parameters of `dtype`.
    pub fn new(config: &Gpt2Config, dtype: DType) -> Result<Gpt2Model> {
        check_config(config)?;
        let table = |n| Embedding::with_options(n, config.n_embd, EmbeddingOptions { padding_idx: None, dtype });
        Ok(Gpt2Model {
            wte: table(config.vocab_size)?,
            wpe: table(config.n_positions)?,
            h: (0..config.n_layer).map(|i| Gpt2Block::new(config, i, dtype)).collect::<Result<_>>()?,
            ln_f: LayerNorm::with_options(
                &[config.n_embd],
                LayerNormOptions { eps: config.layer_norm_epsilon, dtype, ..Default::default() },
            )?,
            embd_pdrop: config.embd_pdrop,
            training: TrainingFlag::new(),
        })
    }

    /// The token embedding `[vocab_size, n_embd]` (also the tied output projection).
    pub fn wte(&self) -> &Embedding {
        &self.wte
    }

    fn forward(&self, x: &Var) -> Result<Var> {
        let dims = x.shape().dims().to_vec();
        if dims.len() != 2 {
            return Err(Error::shape("Gpt2Model", format!("input_ids must be [batch, positions], got {dims:?}")));
        }
        let positions = arange_positions(dims[0], dims[1])?;
        self.hidden(&x.value(), &positions, &Visibility::Causal, None)
    }

    /// The last hidden state of token ids `input_ids` at `position_ids` (both
    /// `[batch, new]`, `i64`, on any device), attending as `visibility` says, through
    /// `cache` when given.
    pub(crate) fn hidden(
        &self,
        input_ids: &Tensor,
        position_ids: &Tensor,
        visibility: &Visibility,
        mut cache: Option<&mut KvCache>,
    ) -> Result<Var> {
        let device = self.wte.weight().device();
        let tokens = self.wte.forward(&Var::new(input_ids.to_device(device)?))?;
        let positions = self.wpe.forward(&Var::new(position_ids.to_device(device)?))?;
        let mut x = dropout(&tokens.add(&positions)?, self.embd_pdrop, self.training.get())?;
        for (layer, block) in self.h.iter().enumerate() {
            x = block.step(&x, visibility, cache.as_deref_mut().map(|c| (c, layer)))?;
        }
        self.ln_f.forward(&x)
    }
}

/// `0..positions` in each of `batch` rows, `[batch, positions]` of `i64`.
fn arange_positions(batch: usize, positions: usize) -> Result<Tensor> {
    let row: Vec<i64> = (0..positions as i64).collect();
    Tensor::from_vec(row.repeat(batch), [batch, positions])
}

/// Refuses sizes the network cannot be built with.
fn check_config(config: &Gpt2Config) -> Result<()> {
    if config.n_head == 0 || !config.n_embd.is_multiple_of(config.n_head) {
        return Err(Error::invalid(
            "Gpt2Config",
            format!("n_embd {} must be a multiple of n_head {}", config.n_embd, config.n_head),
        ));
    }
    Ok(())
}

/// GPT-2 with its language-modelling head (transformers' `GPT2LMHeadModel`): the
/// [`Gpt2Model`] under `transformer.`, and `lm_head`, which is the token embedding itself
/// when `tie_word_embeddings` (the usual case; then the state dict has no `lm_head` key).
///
/// [`forward`](Gpt2LmHeadModel::forward) gives logits for training (gradients reach every
/// parameter); [`CausalLm`] runs it step by step with a [`KvCache`] for
/// [`generate`](crate::generation::generate).
///
/// ```
/// use ember_models::gpt2::{Gpt2Config, Gpt2LmHeadModel};
/// use ember_tensor::{DType, Tensor};
/// let config = Gpt2Config { vocab_size: 50, n_positions: 16, n_embd: 12, n_layer: 2, n_head: 3, ..Default::default() };
/// let model = Gpt2LmHeadModel::new(config, DType::F32)?;
/// let ids = Tensor::from_vec(vec![1i64, 2, 3, 4, 5, 6], [2, 3])?;
/// let logits = model.forward(&ids, None)?;
/// assert_eq!(logits.shape().dims(), &[2, 3, 50]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub struct Gpt2LmHeadModel {
    transformer: Gpt2Model,
    lm_head: Option<Linear>,
    config: Gpt2Config,
}

impl Gpt2LmHeadModel {
    /// A randomly initialised model of `config` with parameters of `dtype`, initialised as
    /// transformers initialises `GPT2LMHeadModel(config)`: weights and embeddings from
    /// `N(0, initializer_range)`, the residual projections (`c_proj`) from
    /// `N(0, initializer_range / sqrt(2 n_layer))`, biases 0, layer norms 1 and 0. The
    /// draws come from ember's global generator.
    pub fn new(config: Gpt2Config, dtype: DType) -> Result<Gpt2LmHeadModel> {
        let model = Self::with_layer_init(config, dtype)?;
        model.init_weights()?;
        Ok(model)
    }

    /// The model with its layers' own initialisation only, for a checkpoint to overwrite:
    /// `from_pretrained` skips [`init_weights`](Self::init_weights)' second pass over every
    /// parameter (a normal draw per weight).
    pub(crate) fn with_layer_init(config: Gpt2Config, dtype: DType) -> Result<Gpt2LmHeadModel> {
        let transformer = Gpt2Model::new(&config, dtype)?;
        let lm_head = if config.tie_word_embeddings {
            None
        } else {
            Some(Linear::with_options(config.n_embd, config.vocab_size, LinearOptions { bias: false, dtype })?)
        };
        Ok(Gpt2LmHeadModel { transformer, lm_head, config })
    }

    /// transformers' `GPT2PreTrainedModel._init_weights` over every parameter.
    fn init_weights(&self) -> Result<()> {
        let std = self.config.initializer_range;
        let residual_std = std / (2.0 * self.config.n_layer.max(1) as f64).sqrt();
        no_grad(|| {
            for (name, p) in self.named_parameters() {
                let t = p.value();
                if name.ends_with(".bias") && !name.contains(".ln_") && !name.contains("ln_f") {
                    t.fill_(0.0)?;
                } else if t.shape().dims().len() == 2 {
                    let s = if name.ends_with("c_proj.weight") { residual_std } else { std };
                    t.copy_(&Tensor::normal(t.shape().dims(), 0.0, s, t.dtype())?)?;
                }
            }
            Ok(())
        })
    }

    /// The model's configuration.
    pub fn config(&self) -> &Gpt2Config {
        &self.config
    }

    /// The transformer under the head.
    pub fn transformer(&self) -> &Gpt2Model {
        &self.transformer
    }

    /// The logits `[batch, positions, vocab_size]` of token ids `input_ids`
    /// (`[batch, positions]`, `i64`), with the Hugging Face `attention_mask` (`[batch,
    /// positions]`, 1 = token, 0 = padding) when some rows are padded. Positions count
    /// from 0 in every row, as transformers' `GPT2LMHeadModel.forward` without
    /// `position_ids` does. Gradients reach every parameter.
    pub fn forward(&self, input_ids: &Tensor, attention_mask: Option<&Tensor>) -> Result<Var> {
        self.logits(&self.last_hidden_state(input_ids, attention_mask)?)
    }

    /// The transformer's last hidden state `[batch, positions, n_embd]` (after `ln_f`) of
    /// `input_ids`, as [`forward`](Self::forward) computes it before the head.
    pub fn last_hidden_state(&self, input_ids: &Tensor, attention_mask: Option<&Tensor>) -> Result<Var> {
        let dims = input_ids.shape().dims();
        if dims.len() != 2 {
            return Err(Error::shape("Gpt2LmHeadModel", format!("input_ids must be [batch, positions], got {dims:?}")));
        }
        let (batch, positions) = (dims[0], dims[1]);
        let visibility = match decoder_mask(attention_mask, batch, 0, positions)? {
            Some(mask) => Visibility::Mask(Var::new(mask.to_device(self.transformer.wte().weight().device())?)),
            None => Visibility::Causal,
        };
        self.transformer.hidden(input_ids, &arange_positions(batch, positions)?, &visibility, None)
    }

    /// The head: hidden states to logits.
    fn logits(&self, hidden: &Var) -> Result<Var> {
        match &self.lm_head {
            Some(head) => head.forward(hidden),
            None => hidden.linear(self.transformer.wte().weight(), None),
        }
    }
}

impl Module for Gpt2LmHeadModel {
    /// The logits of token ids `x` (`[batch, positions]`, `i64`), without padding.
    fn forward(&self, x: &Var) -> Result<Var> {
        Gpt2LmHeadModel::forward(self, &x.value(), None)
    }

    fn children(&self) -> Parts<'_> {
        let parts = Parts::new().module("transformer", &self.transformer);
        match &self.lm_head {
            Some(head) => parts.module("lm_head", head),
            None => parts,
        }
    }
}

impl CausalLm for Gpt2LmHeadModel {
    fn forward_cached(&self, input: &DecoderInput<'_>, cache: &mut KvCache) -> Result<Var> {
        self.forward_cached_keep(input, cache, 0)
    }

    fn forward_cached_keep(&self, input: &DecoderInput<'_>, cache: &mut KvCache, logits_to_keep: usize) -> Result<Var> {
        let dims = input.input_ids.shape().dims();
        if dims.len() != 2 {
            return Err(Error::shape("Gpt2LmHeadModel", format!("input_ids must be [batch, new], got {dims:?}")));
        }
        let (batch, new) = (dims[0], dims[1]);
        let past = cache.seq_len();
        let visibility = match decoder_mask(input.attention_mask, batch, past, new)? {
            Some(mask) => Visibility::Mask(Var::new(mask.to_device(self.transformer.wte().weight().device())?)),
            None if past == 0 && new > 1 => Visibility::Causal,
            None => Visibility::All,
        };
        let hidden = self.transformer.hidden(input.input_ids, input.position_ids, &visibility, Some(cache))?;
        self.logits(&keep_last(&hidden, logits_to_keep)?)
    }

    fn new_cache(&self) -> KvCache {
        KvCache::new(self.config.n_layer)
    }

    fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }

    fn max_positions(&self) -> Option<usize> {
        Some(self.config.n_positions)
    }
}
