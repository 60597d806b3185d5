//! The LLaMA-family decoder: [`LlamaForCausalLM`] and its parts, with the parameter names
//! of transformers' `LlamaForCausalLM` (Mistral's and Qwen2's are the same).

use super::config::LlamaConfig;
use crate::generation::{CausalLm, DecoderInput, KvCache, decoder_mask, keep_last, position_ids};
use ember_autograd::Var;
use ember_nn::functional::{SdpaArgs, apply_rotary, grouped_query_attention};
use ember_nn::{
    Embedding, EmbeddingOptions, Linear, LinearOptions, Module, Parts, RMSNorm, RMSNormOptions, RotaryEmbedding, SwiGlu,
};
use ember_tensor::{DType, Error, Result, Tensor};
use std::path::Path;

/// What every layer of one forward step shares: the rotary tables of the new positions and
/// the attention mask (or the causal flag).
struct Step {
    cos: Tensor,
    sin: Tensor,
    mask: Option<Tensor>,
    causal: bool,
}

/// The self-attention of a decoder layer: q/k/v/o projections, rotary embeddings on q and
/// k, grouped-query attention (`num_key_value_heads` may be fewer than the query heads).
#[derive(Module)]
pub struct LlamaAttention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    #[module(skip)]
    heads: usize,
    #[module(skip)]
    kv_heads: usize,
    #[module(skip)]
    head_dim: usize,
    #[module(skip)]
    rope: RotaryEmbedding,
}

impl LlamaAttention {
    fn new(config: &LlamaConfig, rope: &RotaryEmbedding, dtype: DType) -> Result<LlamaAttention> {
        let (h, kv, d, hidden) =
            (config.num_attention_heads, config.num_key_value_heads, config.head_dim, config.hidden_size);
        let qkv = LinearOptions { bias: config.qkv_bias(), dtype };
        Ok(LlamaAttention {
            q_proj: Linear::with_options(hidden, h * d, qkv)?,
            k_proj: Linear::with_options(hidden, kv * d, qkv)?,
            v_proj: Linear::with_options(hidden, kv * d, qkv)?,
            o_proj: Linear::with_options(h * d, hidden, LinearOptions { bias: config.o_bias(), dtype })?,
            heads: h,
            kv_heads: kv,
            head_dim: d,
            rope: rope.clone(),
        })
    }

    /// Causal self-attention of `x` (`[batch, seq, hidden]`) at positions `0..seq`.
    fn forward(&self, x: &Var) -> Result<Var> {
        let step = plain_step(&self.rope, x)?;
        self.attend(x, &step, None)
    }

    /// Attention of the new positions `x` over themselves and, with a cache, the cached
    /// positions of layer `layer` (whose keys and values it extends).
    fn attend(&self, x: &Var, step: &Step, cache: Option<(&mut KvCache, usize)>) -> Result<Var> {
        let dims = x.shape().dims().to_vec();
        let (b, n) = (dims[0], dims[1]);
        let heads = |proj: &Linear, count: usize| -> Result<Var> {
            proj.forward(x)?.reshape([b, n, count, self.head_dim])?.transpose(1, 2)
        };
        let q = apply_rotary(&heads(&self.q_proj, self.heads)?, &step.cos, &step.sin)?;
        let k = apply_rotary(&heads(&self.k_proj, self.kv_heads)?, &step.cos, &step.sin)?;
        let v = heads(&self.v_proj, self.kv_heads)?;
        let (k, v) = match cache {
            // Cached keys and values are constants: generation does not differentiate
            // through earlier steps.
            Some((cache, layer)) => {
                let (k, v) = cache.append(layer, &k.value().contiguous(), &v.value().contiguous())?;
                (Var::new(k), Var::new(v))
            }
            None => (k, v),
        };
        let mut args = SdpaArgs::default();
        if let Some(m) = &step.mask {
            args = args.mask(m.clone());
        } else if step.causal {
            args = args.causal();
        }
        let out = grouped_query_attention(&q, &k, &v, &args)?;
        self.o_proj.forward(&out.transpose(1, 2)?.reshape([b, n, self.heads * self.head_dim])?)
    }
}

/// One decoder layer: pre-norm attention and pre-norm SwiGLU, each added to the residual.
#[derive(Module)]
pub struct LlamaDecoderLayer {
    self_attn: LlamaAttention,
    mlp: SwiGlu,
    input_layernorm: RMSNorm,
    post_attention_layernorm: RMSNorm,
}

impl LlamaDecoderLayer {
    fn new(config: &LlamaConfig, rope: &RotaryEmbedding, dtype: DType) -> Result<LlamaDecoderLayer> {
        Ok(LlamaDecoderLayer {
            self_attn: LlamaAttention::new(config, rope, dtype)?,
            mlp: SwiGlu::with_options(
                config.hidden_size,
                config.intermediate_size,
                LinearOptions { bias: config.mlp_bias, dtype },
            )?,
            input_layernorm: rms_norm(config, dtype)?,
            post_attention_layernorm: rms_norm(config, dtype)?,
        })
    }

    /// The layer over `x` (`[batch, seq, hidden]`) at positions `0..seq`, causally.
    fn forward(&self, x: &Var) -> Result<Var> {
        let step = plain_step(&self.self_attn.rope, x)?;
        self.step(x, &step, None)
    }

    fn step(&self, x: &Var, step: &Step, cache: Option<(&mut KvCache, usize)>) -> Result<Var> {
        let h = x.add(&self.self_attn.attend(&self.input_layernorm.forward(x)?, step, cache)?)?;
        h.add(&self.mlp.forward(&self.post_attention_layernorm.forward(&h)?)?)
    }
}

fn rms_norm(config: &LlamaConfig, dtype: DType) -> Result<RMSNorm> {
    RMSNorm::with_options(
        &[config.hidden_size],
        RMSNormOptions { eps: Some(config.rms_norm_eps), elementwise_affine: true, dtype },
    )
}

/// The rotary tables of positions `0..seq` for `x` (`[batch, seq, ..]`), causal, unmasked.
fn plain_step(rope: &RotaryEmbedding, x: &Var) -> Result<Step> {
    let dims = x.shape().dims().to_vec();
    if dims.len() != 3 {
        return Err(Error::shape("LlamaDecoderLayer", format!("x must be [batch, seq, hidden], got {dims:?}")));
    }
    let positions = position_ids(None, dims[0], 0, dims[1])?.to_device(x.device())?;
    let (cos, sin) = rope.cos_sin(&positions, x.dtype())?;
    Ok(Step { cos, sin, mask: None, causal: dims[1] > 1 })
}

/// The decoder stack: token embedding, the layers, the final norm (transformers'
/// `LlamaModel`, named `model` inside [`LlamaForCausalLM`]).
#[derive(Module)]
pub struct LlamaModel {
    embed_tokens: Embedding,
    layers: Vec<LlamaDecoderLayer>,
    norm: RMSNorm,
    #[module(skip)]
    rope: RotaryEmbedding,
    #[module(skip)]
    sliding_window: Option<usize>,
}

impl LlamaModel {
    fn new(config: &LlamaConfig, rope: RotaryEmbedding, dtype: DType) -> Result<LlamaModel> {
        Ok(LlamaModel {
            embed_tokens: Embedding::with_options(
                config.vocab_size,
                config.hidden_size,
                EmbeddingOptions { padding_idx: None, dtype },
            )?,
            layers: (0..config.num_hidden_layers)
                .map(|_| LlamaDecoderLayer::new(config, &rope, dtype))
                .collect::<Result<_>>()?,
            norm: rms_norm(config, dtype)?,
            rope,
            sliding_window: config.sliding_window,
        })
    }

    /// The final hidden states of the token ids `input_ids` (a `Var` of `i64`,
    /// `[batch, seq]`) at positions `0..seq`, causally.
    fn forward(&self, input_ids: &Var) -> Result<Var> {
        let dims = input_ids.shape().dims().to_vec();
        if dims.len() != 2 {
            return Err(Error::shape("LlamaModel", format!("input_ids must be [batch, seq], got {dims:?}")));
        }
        let ids = input_ids.value();
        let positions = position_ids(None, dims[0], 0, dims[1])?;
        self.hidden(&DecoderInput { input_ids: &ids, position_ids: &positions, attention_mask: None }, None)
    }

    /// The final hidden states `[batch, new, hidden]` of one step, through the cache when
    /// there is one.
    fn hidden(&self, input: &DecoderInput<'_>, mut cache: Option<&mut KvCache>) -> Result<Var> {
        const OP: &str = "LlamaForCausalLM";
        let dims = input.input_ids.shape().dims().to_vec();
        if dims.len() != 2 || input.input_ids.dtype() != DType::I64 {
            return Err(Error::shape(
                OP,
                format!("input_ids must be i64 [batch, seq], got {:?} {}", dims, input.input_ids.dtype()),
            ));
        }
        if input.position_ids.shape().dims() != dims.as_slice() {
            return Err(Error::shape(
                OP,
                format!("position_ids {:?} must match input_ids {dims:?}", input.position_ids.shape().dims()),
            ));
        }
        let (b, n) = (dims[0], dims[1]);
        let past = cache.as_ref().map_or(0, |c| c.seq_len());
        if let Some(c) = &cache
            && c.num_layers() != self.layers.len()
        {
            return Err(Error::invalid(
                OP,
                format!("a cache of {} layers for a model of {}", c.num_layers(), self.layers.len()),
            ));
        }
        let weight = self.embed_tokens.weight();
        let (dtype, device) = (weight.dtype(), weight.device());
        let x = self.embed_tokens.forward(&Var::new(input.input_ids.to_device(device)?))?;
        let (cos, sin) = self.rope.cos_sin(&input.position_ids.to_device(device)?, dtype)?;
        let mask = match self.sliding_window.filter(|&w| past + n > w) {
            Some(w) => Some(sliding_mask(input.attention_mask, b, past, n, w)?),
            None => decoder_mask(input.attention_mask, b, past, n)?,
        };
        let mask = mask.map(|m| m.to_device(device)).transpose()?;
        let causal = mask.is_none() && past == 0 && n > 1;
        let step = Step { cos, sin, mask, causal };
        let mut x = x;
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.step(&x, &step, cache.as_deref_mut().map(|c| (c, i)))?;
        }
        self.norm.forward(&x)
    }
}

/// The causal mask of `decoder_mask` restricted to a window: query `past + i` sees key `j`
/// only when `j > past + i - window`.
fn sliding_mask(padding: Option<&Tensor>, batch: usize, past: usize, new: usize, window: usize) -> Result<Tensor> {
    let total = past + new;
    let full = match decoder_mask(padding, batch, past, new)? {
        Some(m) => m.to_vec::<u8>()?,
        None => {
            let mut m = vec![0u8; batch * new * total];
            for (r, row) in m.chunks_mut(total).enumerate() {
                row[..past + r % new + 1].fill(1);
            }
            m
        }
    };
    let mut out = full;
    for (r, row) in out.chunks_mut(total).enumerate() {
        let query = past + r % new;
        let first = (query + 1).saturating_sub(window);
        row[..first].fill(0);
    }
    Tensor::from_vec(out, [batch, 1, new, total])
}

/// A LLaMA, Mistral or Qwen2 decoder with its language-model head: transformers'
/// `LlamaForCausalLM` (`MistralForCausalLM`, `Qwen2ForCausalLM`), with the same parameter
/// names (`model.embed_tokens.weight`, `model.layers.0.self_attn.q_proj.weight`, ...,
/// `lm_head.weight` unless the head is tied to the embedding).
///
/// [`forward`](Self::forward) is the plain causal forward of training;
/// [`CausalLm::forward_cached`] the step of generation, with a [`KvCache`], left padding
/// and position ids.
///
/// ```
/// use ember_autograd::Var;
/// use ember_models::llama::{LlamaConfig, LlamaForCausalLM};
/// use ember_tensor::Tensor;
/// let config: LlamaConfig = serde_json::from_str(
///     r#"{"vocab_size": 50, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
///         "num_attention_heads": 4, "num_key_value_heads": 2}"#,
/// ).unwrap();
/// let model = LlamaForCausalLM::new(&config)?;
/// let ids = Tensor::from_vec(vec![1i64, 5, 7], [1, 3])?;
/// let logits = model.forward(&ids, None)?;
/// assert_eq!(logits.shape().dims(), &[1, 3, 50]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub struct LlamaForCausalLM {
    model: LlamaModel,
    lm_head: Option<Linear>,
    config: LlamaConfig,
}

impl LlamaForCausalLM {
    /// A randomly initialised model of `config` in `f32` (ember's default initialisations).
    ///
    /// Errors: what [`LlamaConfig::validate`] rejects.
    pub fn new(config: &LlamaConfig) -> Result<LlamaForCausalLM> {
        Self::with_dtype(config, DType::F32)
    }

    /// A randomly initialised model of `config` with parameters of `dtype`.
    pub fn with_dtype(config: &LlamaConfig, dtype: DType) -> Result<LlamaForCausalLM> {
        let source = Path::new("config");
        config.validate(source)?;
        let rope = RotaryEmbedding::new(config.head_dim, config.rope_theta, config.rope_scaling(source)?)?;
        let model = LlamaModel::new(config, rope, dtype)?;
        let lm_head = if config.tie_word_embeddings {
            None
        } else {
            Some(Linear::with_options(config.hidden_size, config.vocab_size, LinearOptions { bias: false, dtype })?)
        };
        Ok(LlamaForCausalLM { model, lm_head, config: config.clone() })
    }

    /// The configuration.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// The logits `[batch, seq, vocab]` of `input_ids` (`i64` `[batch, seq]`), causally,
    /// with an optional Hugging Face `attention_mask` (`[batch, seq]`, 0 = padding; the
    /// positions then skip the padding, as transformers' generation counts them).
    /// Differentiable in every parameter.
    pub fn forward(&self, input_ids: &Tensor, attention_mask: Option<&Tensor>) -> Result<Var> {
        self.logits(&self.hidden_states(input_ids, attention_mask)?)
    }

    /// The final hidden states `[batch, seq, hidden]` (after the last norm) of `input_ids`,
    /// as [`forward`](Self::forward) computes them before the head.
    pub fn hidden_states(&self, input_ids: &Tensor, attention_mask: Option<&Tensor>) -> Result<Var> {
        let dims = input_ids.shape().dims();
        if dims.len() != 2 {
            return Err(Error::shape("LlamaForCausalLM", format!("input_ids must be [batch, seq], got {dims:?}")));
        }
        let positions = position_ids(attention_mask, dims[0], 0, dims[1])?;
        self.model.hidden(&DecoderInput { input_ids, position_ids: &positions, attention_mask }, None)
    }

    /// The logits of final hidden states: the head, or the embedding when tied.
    fn logits(&self, hidden: &Var) -> Result<Var> {
        match &self.lm_head {
            Some(head) => head.forward(hidden),
            None => hidden.linear(self.model.embed_tokens.weight(), None),
        }
    }
}

/// By hand rather than derived: the inherent `forward` takes token ids and a mask.
impl Module for LlamaForCausalLM {
    /// The logits of `input_ids` (a `Var` of `i64` `[batch, seq]`), causally, unpadded.
    fn forward(&self, input_ids: &Var) -> Result<Var> {
        self.logits(&self.model.forward(input_ids)?)
    }

    fn children(&self) -> Parts<'_> {
        let parts = Parts::new().module("model", &self.model);
        match &self.lm_head {
            Some(head) => parts.module("lm_head", head),
            None => parts,
        }
    }
}

impl CausalLm for LlamaForCausalLM {
    fn forward_cached(&self, input: &DecoderInput<'_>, cache: &mut KvCache) -> Result<Var> {
        self.logits(&self.model.hidden(input, Some(cache))?)
    }

    fn forward_cached_keep(&self, input: &DecoderInput<'_>, cache: &mut KvCache, logits_to_keep: usize) -> Result<Var> {
        self.logits(&keep_last(&self.model.hidden(input, Some(cache))?, logits_to_keep)?)
    }

    fn new_cache(&self) -> KvCache {
        KvCache::new(self.model.layers.len())
    }

    fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }

    fn max_positions(&self) -> Option<usize> {
        Some(self.config.max_position_embeddings)
    }
}
