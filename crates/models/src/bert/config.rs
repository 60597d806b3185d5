//! [`BertConfig`]: the fields of a BERT checkpoint's `config.json`.

use super::activation::HiddenAct;
use ember_tensor::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A BERT checkpoint's `config.json`, with the defaults transformers' `BertConfig` uses for
/// absent fields (those of `bert-base-uncased`). Fields ember does not read are kept in
/// [`extra`](BertConfig::extra), so that saving writes them back.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct BertConfig {
    /// Rows of the word embedding (and columns of the MLM logits).
    #[serde(default = "defaults::vocab_size")]
    pub vocab_size: usize,
    /// Width of every hidden state.
    #[serde(default = "defaults::hidden_size")]
    pub hidden_size: usize,
    /// Encoder layers.
    #[serde(default = "defaults::num_hidden_layers")]
    pub num_hidden_layers: usize,
    /// Attention heads per layer; must divide `hidden_size`.
    #[serde(default = "defaults::num_attention_heads")]
    pub num_attention_heads: usize,
    /// Width of the feed-forward block.
    #[serde(default = "defaults::intermediate_size")]
    pub intermediate_size: usize,
    /// The feed-forward activation: `gelu` (erf), `gelu_new` / `gelu_pytorch_tanh` (tanh
    /// approximation), `relu`, `silu` / `swish` or `tanh`.
    #[serde(default = "defaults::hidden_act")]
    pub hidden_act: String,
    /// Dropout after the embeddings, the attention output and the feed-forward output.
    #[serde(default = "defaults::dropout")]
    pub hidden_dropout_prob: f64,
    /// Dropout on the attention weights.
    #[serde(default = "defaults::dropout")]
    pub attention_probs_dropout_prob: f64,
    /// Rows of the position embedding: the longest sequence.
    #[serde(default = "defaults::max_position_embeddings")]
    pub max_position_embeddings: usize,
    /// Rows of the token-type (segment) embedding.
    #[serde(default = "defaults::type_vocab_size")]
    pub type_vocab_size: usize,
    /// The epsilon of every layer norm.
    #[serde(default = "defaults::layer_norm_eps")]
    pub layer_norm_eps: f64,
    /// The padding token's id.
    #[serde(default)]
    pub pad_token_id: Option<usize>,
    /// Only `absolute` (learned position embeddings) is supported.
    #[serde(default = "defaults::position_embedding_type")]
    pub position_embedding_type: String,
    /// Dropout before the classifier; `None` uses `hidden_dropout_prob`.
    #[serde(default)]
    pub classifier_dropout: Option<f64>,
    /// Whether the MLM decoder shares the word embedding (only `true` is supported).
    #[serde(default = "defaults::tie_word_embeddings")]
    pub tie_word_embeddings: bool,
    /// Class names by index, whose count is the classifier's width.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id2label: Option<BTreeMap<String, String>>,
    /// The classifier's width when `id2label` is absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_labels: Option<usize>,
    /// Every other field of the file, written back unchanged by `save_pretrained`.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Default for BertConfig {
    fn default() -> Self {
        BertConfig {
            vocab_size: defaults::vocab_size(),
            hidden_size: defaults::hidden_size(),
            num_hidden_layers: defaults::num_hidden_layers(),
            num_attention_heads: defaults::num_attention_heads(),
            intermediate_size: defaults::intermediate_size(),
            hidden_act: defaults::hidden_act(),
            hidden_dropout_prob: defaults::dropout(),
            attention_probs_dropout_prob: defaults::dropout(),
            max_position_embeddings: defaults::max_position_embeddings(),
            type_vocab_size: defaults::type_vocab_size(),
            layer_norm_eps: defaults::layer_norm_eps(),
            pad_token_id: Some(0),
            position_embedding_type: defaults::position_embedding_type(),
            classifier_dropout: None,
            tie_word_embeddings: true,
            id2label: None,
            num_labels: None,
            extra: serde_json::Map::new(),
        }
    }
}

impl BertConfig {
    /// The classifier's width: `id2label`'s size, else `num_labels`, else 2 (transformers'
    /// default).
    pub fn num_labels(&self) -> usize {
        self.id2label.as_ref().map(|m| m.len()).or(self.num_labels).unwrap_or(2)
    }

    /// Each head's width, `hidden_size / num_attention_heads`.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads.max(1)
    }

    /// The feed-forward activation `hidden_act` names.
    pub fn activation(&self) -> Result<HiddenAct> {
        HiddenAct::parse(&self.hidden_act, "BertConfig")
    }

    /// Checks what the model cannot be built from: heads that do not divide the width, an
    /// unknown activation or position-embedding type, an untied MLM decoder.
    pub fn validate(&self) -> Result<()> {
        if self.num_attention_heads == 0 || !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(Error::invalid(
                "BertConfig",
                format!(
                    "hidden_size {} is not a multiple of num_attention_heads {}",
                    self.hidden_size, self.num_attention_heads
                ),
            ));
        }
        self.activation()?;
        if self.position_embedding_type != "absolute" {
            return Err(Error::invalid(
                "BertConfig",
                format!(
                    "position_embedding_type {:?} is not supported (only \"absolute\")",
                    self.position_embedding_type
                ),
            ));
        }
        Ok(())
    }
}

/// transformers' defaults for absent fields.
mod defaults {
    pub fn vocab_size() -> usize {
        30522
    }
    pub fn hidden_size() -> usize {
        768
    }
    pub fn num_hidden_layers() -> usize {
        12
    }
    pub fn num_attention_heads() -> usize {
        12
    }
    pub fn intermediate_size() -> usize {
        3072
    }
    pub fn hidden_act() -> String {
        "gelu".into()
    }
    pub fn dropout() -> f64 {
        0.1
    }
    pub fn max_position_embeddings() -> usize {
        512
    }
    pub fn type_vocab_size() -> usize {
        2
    }
    pub fn layer_norm_eps() -> f64 {
        1e-12
    }
    pub fn position_embedding_type() -> String {
        "absolute".into()
    }
    pub fn tie_word_embeddings() -> bool {
        true
    }
}
