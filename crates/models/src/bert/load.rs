//! Loading BERT checkpoints (transformers' layout) and saving them back.
//!
//! ember's module names are transformers' own, so the mapping is about prefixes and the
//! keys one model holds and another does not: the encoder's keys sit under `bert.` in a
//! checkpoint of a head model and at the top in one of `BertModel`; the MLM decoder's
//! weight (and its bias alias) is tied and not loaded; old checkpoints name the layer
//! norms' parameters `gamma` and `beta`.

use super::config::BertConfig;
use super::heads::{BertForMaskedLM, BertForSequenceClassification};
use super::model::BertModel;
use crate::checkpoint::{load_strict, load_weights, read_valid_config, save_pretrained, weights_dtype};
use ember_io::{LoadOptions, StateDict};
use ember_nn::Module;
use ember_tensor::{DType, Result};
use std::path::Path;

/// The prefix of the encoder's keys in a head model's checkpoint.
const PREFIX: &str = "bert.";

/// `LayerNorm.gamma` / `LayerNorm.beta` (TensorFlow-converted checkpoints) as `weight` /
/// `bias`.
fn modern_name(key: &str) -> String {
    if let Some(stem) = key.strip_suffix("LayerNorm.gamma") {
        format!("{stem}LayerNorm.weight")
    } else if let Some(stem) = key.strip_suffix("LayerNorm.beta") {
        format!("{stem}LayerNorm.bias")
    } else {
        key.to_string()
    }
}

/// The encoder's keys without the `bert.` prefix, the heads' keys (`cls.*`,
/// `classifier.*`) dropped; any other key is kept, for strict loading to name.
fn encoder_state(state: StateDict) -> StateDict {
    let mut out = StateDict::new();
    for (key, t) in state.iter() {
        let key = modern_name(key);
        if key.starts_with("cls.") || key.starts_with("classifier.") {
            continue;
        }
        let key = key.strip_prefix(PREFIX).unwrap_or(&key);
        out.insert(key, t.clone());
    }
    out
}

/// A head model's keys: `bert.` on the encoder's (added where a checkpoint lacks it),
/// `keep_head` deciding which of the other top-level keys stay.
fn head_state(state: StateDict, keep: impl Fn(&str) -> bool) -> StateDict {
    let mut out = StateDict::new();
    for (key, t) in state.iter() {
        let key = modern_name(key);
        let head = key.starts_with("cls.") || key.starts_with("classifier.");
        if head {
            if keep(&key) {
                out.insert(key, t.clone());
            }
            continue;
        }
        let key = if key.starts_with(PREFIX) { key } else { format!("{PREFIX}{key}") };
        if keep(&key) {
            out.insert(key, t.clone());
        }
    }
    out
}

/// Reads the config and the weights of `dir`.
fn read(dir: &Path, options: &LoadOptions) -> Result<(BertConfig, StateDict)> {
    let config: BertConfig = read_valid_config(dir, BertConfig::validate)?;
    Ok((config, load_weights(dir, options)?))
}

/// Casts `module` to the weights' floating dtype (a bf16 checkpoint loaded natively stays
/// bf16) and loads `state` strictly.
pub(crate) fn cast_and_load(module: &dyn Module, state: &StateDict, source: &Path) -> Result<()> {
    if let Some(dtype) = weights_dtype(state)
        && dtype != DType::F32
    {
        module.to_dtype(dtype)?;
    }
    load_strict(module, state, source)
}

impl BertModel {
    /// Loads the encoder of a BERT checkpoint directory (`config.json` and the weights, see
    /// [`load_weights`]): a `BertModel` checkpoint, or the encoder of a head model's (the
    /// heads' keys are skipped). The pooler is there when the checkpoint has one.
    ///
    /// ```no_run
    /// use ember_models::bert::{BertInput, BertModel};
    /// use ember_models::tokenizer::Tokenizer;
    /// use ember_tensor::Tensor;
    /// let dir = std::path::Path::new("bert-base-uncased");
    /// let bert = BertModel::from_pretrained(dir)?;
    /// let ids: Vec<i64> = Tokenizer::from_dir(dir)?.encode("Hello there", true)?.into_iter().map(i64::from).collect();
    /// let n = ids.len();
    /// let out = bert.forward_with(&BertInput::new(Tensor::from_vec(ids, [1, n])?))?;
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn from_pretrained(dir: &Path) -> Result<BertModel> {
        Self::from_pretrained_with(dir, &LoadOptions::default())
    }

    /// [`from_pretrained`](BertModel::from_pretrained) with `options` (`dtype` converts a
    /// bf16 or f16 checkpoint; without it the model takes the checkpoint's dtype).
    pub fn from_pretrained_with(dir: &Path, options: &LoadOptions) -> Result<BertModel> {
        let (config, state) = read(dir, options)?;
        let state = encoder_state(state);
        let model = BertModel::new(&config, state.contains_key("pooler.dense.weight"))?;
        cast_and_load(&model, &state, dir)?;
        model.eval();
        Ok(model)
    }

    /// Writes `config.json` and `model.safetensors` of transformers' `BertModel` to `dir`.
    pub fn save_pretrained(&self, dir: &Path) -> Result<()> {
        save_pretrained(dir, self.config(), &self.state_dict())
    }
}

impl BertForMaskedLM {
    /// Loads a `BertForMaskedLM` checkpoint (or `BertForPreTraining`'s, whose pooler and
    /// next-sentence head are skipped); the decoder's weight is tied to the word embedding
    /// and not read.
    pub fn from_pretrained(dir: &Path) -> Result<BertForMaskedLM> {
        Self::from_pretrained_with(dir, &LoadOptions::default())
    }

    /// [`from_pretrained`](BertForMaskedLM::from_pretrained) with `options`.
    pub fn from_pretrained_with(dir: &Path, options: &LoadOptions) -> Result<BertForMaskedLM> {
        let (config, state) = read(dir, options)?;
        if !config.tie_word_embeddings {
            return Err(ember_tensor::Error::format(
                dir.join(crate::checkpoint::CONFIG_FILE),
                "BertForMaskedLM: tie_word_embeddings false (an untied decoder) is not supported",
            ));
        }
        let state = head_state(state, |k| {
            !(k.starts_with("bert.pooler.")
                || k.starts_with("cls.seq_relationship.")
                || k == "cls.predictions.decoder.weight"
                || k == "cls.predictions.decoder.bias")
        });
        let model = BertForMaskedLM::new(&config)?;
        cast_and_load(&model, &state, dir)?;
        model.eval();
        Ok(model)
    }

    /// Writes `config.json` and `model.safetensors` of transformers' `BertForMaskedLM` (the
    /// tied decoder weight omitted, as transformers saves it).
    pub fn save_pretrained(&self, dir: &Path) -> Result<()> {
        save_pretrained(dir, self.bert().config(), &self.state_dict())
    }
}

impl BertForSequenceClassification {
    /// Loads a `BertForSequenceClassification` checkpoint (pooler and `classifier`
    /// required). To fine-tune from an encoder-only checkpoint, use
    /// [`BertModel::from_pretrained`] and [`from_bert`](BertForSequenceClassification::from_bert).
    pub fn from_pretrained(dir: &Path) -> Result<BertForSequenceClassification> {
        Self::from_pretrained_with(dir, &LoadOptions::default())
    }

    /// [`from_pretrained`](BertForSequenceClassification::from_pretrained) with `options`.
    pub fn from_pretrained_with(dir: &Path, options: &LoadOptions) -> Result<BertForSequenceClassification> {
        let (config, state) = read(dir, options)?;
        let state = head_state(state, |k| !k.starts_with("cls."));
        let model = BertForSequenceClassification::new(&config)?;
        cast_and_load(&model, &state, dir)?;
        model.eval();
        Ok(model)
    }

    /// Writes `config.json` and `model.safetensors` of transformers'
    /// `BertForSequenceClassification`.
    pub fn save_pretrained(&self, dir: &Path) -> Result<()> {
        let mut config = self.bert().config().clone();
        config.num_labels = Some(self.classifier().out_features());
        if config.id2label.as_ref().is_some_and(|m| m.len() != self.classifier().out_features()) {
            config.id2label = None;
        }
        save_pretrained(dir, &config, &self.state_dict())
    }
}
