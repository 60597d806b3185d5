//! [`ViTConfig`]: the fields of a Hugging Face ViT checkpoint's `config.json`.

use crate::bert::HiddenAct;
use ember_tensor::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A ViT checkpoint's `config.json`, with the defaults transformers' `ViTConfig` uses for
/// absent fields (those of `google/vit-base-patch16-224`). Fields ember does not read are
/// kept in [`extra`](ViTConfig::extra) and written back by `save_pretrained`.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct ViTConfig {
    /// Width of every token's state.
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
    /// The feed-forward activation (as BERT's `hidden_act`).
    #[serde(default = "defaults::hidden_act")]
    pub hidden_act: String,
    /// Dropout after the embeddings, the attention output and the feed-forward output.
    #[serde(default)]
    pub hidden_dropout_prob: f64,
    /// Dropout on the attention weights.
    #[serde(default)]
    pub attention_probs_dropout_prob: f64,
    /// The epsilon of every layer norm.
    #[serde(default = "defaults::layer_norm_eps")]
    pub layer_norm_eps: f64,
    /// The (square) input size in pixels; position embeddings are for this size only.
    #[serde(default = "defaults::image_size")]
    pub image_size: usize,
    /// The (square) patch size; must divide `image_size`.
    #[serde(default = "defaults::patch_size")]
    pub patch_size: usize,
    /// Channels of the input.
    #[serde(default = "defaults::num_channels")]
    pub num_channels: usize,
    /// Whether the query, key and value projections have biases.
    #[serde(default = "defaults::qkv_bias")]
    pub qkv_bias: bool,
    /// Class names by index, whose count is the classifier's width.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id2label: Option<BTreeMap<String, String>>,
    /// The classifier's width when `id2label` is absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_labels: Option<usize>,
    /// Every other field of the file, written back unchanged.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Default for ViTConfig {
    fn default() -> Self {
        ViTConfig {
            hidden_size: defaults::hidden_size(),
            num_hidden_layers: defaults::num_hidden_layers(),
            num_attention_heads: defaults::num_attention_heads(),
            intermediate_size: defaults::intermediate_size(),
            hidden_act: defaults::hidden_act(),
            hidden_dropout_prob: 0.0,
            attention_probs_dropout_prob: 0.0,
            layer_norm_eps: defaults::layer_norm_eps(),
            image_size: defaults::image_size(),
            patch_size: defaults::patch_size(),
            num_channels: defaults::num_channels(),
            qkv_bias: true,
            id2label: None,
            num_labels: None,
            extra: serde_json::Map::new(),
        }
    }
}

impl ViTConfig {
    /// The classifier's width: `id2label`'s size, else `num_labels`, else 2.
    pub fn num_labels(&self) -> usize {
        self.id2label.as_ref().map(|m| m.len()).or(self.num_labels).unwrap_or(2)
    }

    /// Patches per image, `(image_size / patch_size)^2`.
    pub fn num_patches(&self) -> usize {
        let side = self.image_size / self.patch_size.max(1);
        side * side
    }

    /// The feed-forward activation.
    pub fn activation(&self) -> Result<HiddenAct> {
        HiddenAct::parse(&self.hidden_act, "ViTConfig")
    }

    /// Checks what the model cannot be built from: heads that do not divide the width, a
    /// patch size that does not divide the image, an unknown activation, a pooler other
    /// than transformers' default.
    pub fn validate(&self) -> Result<()> {
        if self.num_attention_heads == 0 || !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(Error::invalid(
                "ViTConfig",
                format!(
                    "hidden_size {} is not a multiple of num_attention_heads {}",
                    self.hidden_size, self.num_attention_heads
                ),
            ));
        }
        if self.patch_size == 0 || !self.image_size.is_multiple_of(self.patch_size) {
            return Err(Error::invalid(
                "ViTConfig",
                format!("image_size {} is not a multiple of patch_size {}", self.image_size, self.patch_size),
            ));
        }
        // transformers' pooler options; ember's pooler is their default (tanh, full width).
        let act = self.extra.get("pooler_act").and_then(|v| v.as_str()).unwrap_or("tanh");
        let width = self.extra.get("pooler_output_size").and_then(|v| v.as_u64());
        if act != "tanh" || width.is_some_and(|w| w as usize != self.hidden_size) {
            return Err(Error::invalid(
                "ViTConfig",
                format!("pooler_act {act:?} / pooler_output_size {width:?} are not supported (tanh, hidden_size)"),
            ));
        }
        self.activation().map(|_| ())
    }
}

/// transformers' defaults for absent fields.
mod defaults {
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
    pub fn layer_norm_eps() -> f64 {
        1e-12
    }
    pub fn image_size() -> usize {
        224
    }
    pub fn patch_size() -> usize {
        16
    }
    pub fn num_channels() -> usize {
        3
    }
    pub fn qkv_bias() -> bool {
        true
    }
}
