//! [`LlamaConfig`]: the `config.json` of LLaMA, Mistral and Qwen2 checkpoints, with the
//! defaults transformers uses for absent fields.

use ember_nn::RopeScaling;
use ember_tensor::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The configuration of a LLaMA-family decoder (`model_type` `llama`, `mistral` or
/// `qwen2`), as its `config.json` states it. Absent fields take transformers' defaults for
/// the `model_type` (a Qwen2 config without `vocab_size` has 151936, a LLaMA one 32000).
///
/// Both spellings of the rotary settings are read: `rope_theta` + `rope_scaling` (most
/// published checkpoints) and transformers 5's `rope_parameters`. The config is written back
/// in the first spelling, which every transformers version reads.
///
/// ```
/// use ember_models::llama::LlamaConfig;
/// let config: LlamaConfig = serde_json::from_str(
///     r#"{"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
///         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}"#,
/// ).unwrap();
/// assert_eq!(config.vocab_size, 151936);
/// assert_eq!(config.head_dim, 16);
/// assert!(config.qkv_bias());
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawConfig")]
pub struct LlamaConfig {
    /// `llama`, `mistral` or `qwen2`.
    pub model_type: String,
    /// The number of tokens.
    pub vocab_size: usize,
    /// The width of the residual stream.
    pub hidden_size: usize,
    /// The width of the feed-forward block.
    pub intermediate_size: usize,
    /// The number of decoder layers.
    pub num_hidden_layers: usize,
    /// The number of query heads.
    pub num_attention_heads: usize,
    /// The number of key/value heads (fewer than the query heads: grouped-query attention).
    pub num_key_value_heads: usize,
    /// The size of each head (`hidden_size / num_attention_heads` unless stated).
    pub head_dim: usize,
    /// The epsilon of the RMS norms.
    pub rms_norm_eps: f64,
    /// The base of the rotary frequencies.
    pub rope_theta: f64,
    /// The rotary scaling, if any (`linear`, `dynamic`, `llama3`).
    pub rope_scaling: Option<RopeScalingConfig>,
    /// The longest sequence the model was configured for.
    pub max_position_embeddings: usize,
    /// Whether the attention projections have biases (LLaMA and Mistral: all four, when
    /// set; Qwen2: always on q, k and v and never on o, whatever this says).
    pub attention_bias: bool,
    /// Whether the feed-forward projections have biases.
    pub mlp_bias: bool,
    /// Whether the output layer reuses the token embedding.
    pub tie_word_embeddings: bool,
    /// The activation of the feed-forward block; only `silu` is supported.
    pub hidden_act: String,
    /// Mistral's sliding attention window: a position sees the `sliding_window` positions up
    /// to itself. `None` is full causal attention.
    pub sliding_window: Option<usize>,
}

/// The `rope_scaling` entry of a config (also the scaling part of `rope_parameters`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RopeScalingConfig {
    /// `linear`, `dynamic`, `llama3` (`default` means none); older configs call it `type`.
    #[serde(alias = "type")]
    pub rope_type: String,
    /// The scaling factor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub factor: Option<f64>,
    /// `llama3`: wavelengths longer than `original / low_freq_factor` are scaled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub low_freq_factor: Option<f64>,
    /// `llama3`: wavelengths shorter than `original / high_freq_factor` are kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub high_freq_factor: Option<f64>,
    /// The context the model was trained on (`llama3`, `dynamic`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_max_position_embeddings: Option<usize>,
}

impl LlamaConfig {
    /// Whether q, k and v have biases.
    pub fn qkv_bias(&self) -> bool {
        self.attention_bias || self.model_type == "qwen2"
    }

    /// Whether o_proj has a bias.
    pub fn o_bias(&self) -> bool {
        self.attention_bias && self.model_type != "qwen2"
    }

    /// The rotary scaling as ember-nn's [`RopeScaling`]; errors on a type ember does not
    /// implement (`yarn`, `longrope`, ...) or a missing factor, naming `source`.
    pub fn rope_scaling(&self, source: &Path) -> Result<Option<RopeScaling>> {
        let Some(s) = &self.rope_scaling else { return Ok(None) };
        let need = |name: &str, v: Option<f64>| {
            v.ok_or_else(|| Error::format(source, format!("rope_scaling of type {} needs {name}", s.rope_type)))
        };
        let original = || s.original_max_position_embeddings.unwrap_or(self.max_position_embeddings);
        Ok(match s.rope_type.as_str() {
            "default" => None,
            "linear" => Some(RopeScaling::Linear { factor: need("factor", s.factor)? }),
            "dynamic" => Some(RopeScaling::Dynamic {
                factor: need("factor", s.factor)?,
                original_max_position_embeddings: original(),
            }),
            "llama3" => Some(RopeScaling::Llama3 {
                factor: need("factor", s.factor)?,
                low_freq_factor: need("low_freq_factor", s.low_freq_factor)?,
                high_freq_factor: need("high_freq_factor", s.high_freq_factor)?,
                original_max_position_embeddings: s.original_max_position_embeddings.ok_or_else(|| {
                    Error::format(source, "rope_scaling of type llama3 needs original_max_position_embeddings")
                })?,
            }),
            other => {
                return Err(Error::format(
                    source,
                    format!("rope_scaling type {other:?} is not supported (supported: linear, dynamic, llama3)"),
                ));
            }
        })
    }

    /// Checks what the model cannot run: an unknown `model_type`, an activation other than
    /// SiLU, head counts that do not divide, and Qwen2's per-layer sliding window; errors
    /// name `source`.
    pub fn validate(&self, source: &Path) -> Result<()> {
        let bad = |msg: String| Err(Error::format(source, msg));
        if !["llama", "mistral", "qwen2"].contains(&self.model_type.as_str()) {
            return bad(format!(
                "model_type {:?} is not a LLaMA-family model (llama, mistral, qwen2)",
                self.model_type
            ));
        }
        if self.hidden_act != "silu" {
            return bad(format!("hidden_act {:?} is not supported (only silu)", self.hidden_act));
        }
        let (h, kv) = (self.num_attention_heads, self.num_key_value_heads);
        if h == 0 || kv == 0 || !h.is_multiple_of(kv) || self.head_dim == 0 || !self.head_dim.is_multiple_of(2) {
            return bad(format!(
                "{h} attention heads over {kv} key/value heads of size {} do not form groups of even-sized heads",
                self.head_dim
            ));
        }
        if self.sliding_window == Some(0) {
            return bad("sliding_window must be positive".into());
        }
        self.rope_scaling(source).map(|_| ())
    }
}

/// `config.json` as written, every field optional; resolved into [`LlamaConfig`] with the
/// `model_type`'s defaults.
#[derive(Deserialize)]
struct RawConfig {
    model_type: Option<String>,
    vocab_size: Option<usize>,
    hidden_size: Option<usize>,
    intermediate_size: Option<usize>,
    num_hidden_layers: Option<usize>,
    num_attention_heads: Option<usize>,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    rms_norm_eps: Option<f64>,
    rope_theta: Option<f64>,
    rope_scaling: Option<RopeScalingConfig>,
    rope_parameters: Option<RopeParameters>,
    max_position_embeddings: Option<usize>,
    attention_bias: Option<bool>,
    mlp_bias: Option<bool>,
    tie_word_embeddings: Option<bool>,
    hidden_act: Option<String>,
    sliding_window: Option<usize>,
    use_sliding_window: Option<bool>,
}

/// transformers 5's `rope_parameters`: the theta beside the scaling's fields.
#[derive(Deserialize)]
struct RopeParameters {
    rope_theta: Option<f64>,
    #[serde(flatten)]
    scaling: Option<RopeScalingConfig>,
}

/// transformers' defaults of one `model_type`.
struct Defaults {
    vocab_size: usize,
    intermediate_size: usize,
    max_position_embeddings: usize,
}

impl TryFrom<RawConfig> for LlamaConfig {
    type Error = String;

    fn try_from(raw: RawConfig) -> std::result::Result<Self, String> {
        let model_type = raw.model_type.unwrap_or_else(|| "llama".into());
        let d = match model_type.as_str() {
            "mistral" => Defaults { vocab_size: 32000, intermediate_size: 14336, max_position_embeddings: 4096 * 32 },
            "qwen2" => Defaults { vocab_size: 151936, intermediate_size: 22016, max_position_embeddings: 32768 },
            _ => Defaults { vocab_size: 32000, intermediate_size: 11008, max_position_embeddings: 2048 },
        };
        let hidden_size = raw.hidden_size.unwrap_or(4096);
        let num_attention_heads = raw.num_attention_heads.unwrap_or(32);
        if num_attention_heads == 0 {
            return Err("num_attention_heads must be positive".into());
        }
        let kv_default = if model_type == "mistral" { 8 } else { num_attention_heads };
        let (theta_v5, scaling_v5) = match raw.rope_parameters {
            Some(p) => (p.rope_theta, p.scaling.filter(|s| s.rope_type != "default")),
            None => (None, None),
        };
        let sliding_window = if model_type == "qwen2" {
            // Qwen2 slides only with use_sliding_window, and then only in some layers.
            if raw.use_sliding_window == Some(true) {
                return Err("Qwen2's use_sliding_window is not supported".into());
            }
            None
        } else {
            // An absent window is taken as none, like an explicit null (which is what
            // Mistral's published configs from v0.2 on state); transformers' default 4096
            // only matters for a Mistral config that omits the field.
            raw.sliding_window
        };
        Ok(LlamaConfig {
            vocab_size: raw.vocab_size.unwrap_or(d.vocab_size),
            hidden_size,
            intermediate_size: raw.intermediate_size.unwrap_or(d.intermediate_size),
            num_hidden_layers: raw.num_hidden_layers.unwrap_or(32),
            num_attention_heads,
            num_key_value_heads: raw.num_key_value_heads.unwrap_or(kv_default),
            head_dim: raw.head_dim.unwrap_or(hidden_size / num_attention_heads),
            rms_norm_eps: raw.rms_norm_eps.unwrap_or(1e-6),
            rope_theta: raw.rope_theta.or(theta_v5).unwrap_or(10000.0),
            rope_scaling: raw.rope_scaling.filter(|s| s.rope_type != "default").or(scaling_v5),
            max_position_embeddings: raw.max_position_embeddings.unwrap_or(d.max_position_embeddings),
            attention_bias: raw.attention_bias.unwrap_or(false),
            mlp_bias: raw.mlp_bias.unwrap_or(false),
            tie_word_embeddings: raw.tie_word_embeddings.unwrap_or(false),
            hidden_act: raw.hidden_act.unwrap_or_else(|| "silu".into()),
            sliding_window,
            model_type,
        })
    }
}
