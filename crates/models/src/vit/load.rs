//! Loading Hugging Face ViT checkpoints and saving them back. ember's module names are
//! transformers' own: the encoder's keys sit under `vit.` in a classifier's checkpoint and
//! at the top in a `ViTModel`'s.

use super::config::ViTConfig;
use super::model::{ViTForImageClassification, ViTModel};
use crate::bert::cast_and_load;
use crate::checkpoint::{load_weights, read_valid_config, save_pretrained};
use ember_io::{LoadOptions, StateDict};
use ember_nn::Module;
use ember_tensor::Result;
use std::path::Path;

const PREFIX: &str = "vit.";

fn read(dir: &Path, options: &LoadOptions) -> Result<(ViTConfig, StateDict)> {
    let config: ViTConfig = read_valid_config(dir, ViTConfig::validate)?;
    Ok((config, load_weights(dir, options)?))
}

impl ViTModel {
    /// Loads the encoder of a ViT checkpoint directory: a `ViTModel`'s, or the `vit.` part
    /// of a classifier's (its `classifier` is skipped). The pooler is there when the
    /// checkpoint has one. In evaluation mode.
    pub fn from_pretrained(dir: &Path) -> Result<ViTModel> {
        Self::from_pretrained_with(dir, &LoadOptions::default())
    }

    /// [`from_pretrained`](ViTModel::from_pretrained) with `options`.
    pub fn from_pretrained_with(dir: &Path, options: &LoadOptions) -> Result<ViTModel> {
        let (config, state) = read(dir, options)?;
        let mut encoder = StateDict::new();
        for (key, t) in state.iter() {
            if !key.starts_with("classifier.") {
                encoder.insert(key.strip_prefix(PREFIX).unwrap_or(key), t.clone());
            }
        }
        let model = ViTModel::new(&config, encoder.contains_key("pooler.dense.weight"))?;
        cast_and_load(&model, &encoder, dir)?;
        model.eval();
        Ok(model)
    }

    /// Writes `config.json` and `model.safetensors` of transformers' `ViTModel`.
    pub fn save_pretrained(&self, dir: &Path) -> Result<()> {
        save_pretrained(dir, self.config(), &self.state_dict())
    }
}

impl ViTForImageClassification {
    /// Loads a `ViTForImageClassification` checkpoint directory, in evaluation mode.
    pub fn from_pretrained(dir: &Path) -> Result<ViTForImageClassification> {
        Self::from_pretrained_with(dir, &LoadOptions::default())
    }

    /// [`from_pretrained`](ViTForImageClassification::from_pretrained) with `options`.
    pub fn from_pretrained_with(dir: &Path, options: &LoadOptions) -> Result<ViTForImageClassification> {
        let (config, state) = read(dir, options)?;
        let model = ViTForImageClassification::new(&config)?;
        cast_and_load(&model, &state, dir)?;
        model.eval();
        Ok(model)
    }

    /// Writes `config.json` and `model.safetensors` of transformers'
    /// `ViTForImageClassification`.
    pub fn save_pretrained(&self, dir: &Path) -> Result<()> {
        let mut config = self.vit().config().clone();
        let n = self.classifier().out_features();
        config.num_labels = Some(n);
        if config.id2label.as_ref().is_some_and(|m| m.len() != n) {
            config.id2label = None;
        }
        save_pretrained(dir, &config, &self.state_dict())
    }
}
