//! Checkpoint key names and layouts: transformers' GPT-2 state dicts to ember's and back,
//! and [`Gpt2LmHeadModel`]'s `from_pretrained` / `save_pretrained`.
//!
//! ember's names are transformers' `GPT2LMHeadModel` names; what differs is that the
//! checkpoint's `Conv1D` weights are `[in, out]` while [`Linear`](ember_nn::Linear)'s are
//! `[out, in]`, that a `GPT2Model` checkpoint lacks the `transformer.` prefix, that older
//! checkpoints carry the attention's causal-mask buffers, and that a tied checkpoint may
//! or may not repeat the token embedding as `lm_head.weight`.

use super::config::Gpt2Config;
use super::model::Gpt2LmHeadModel;
use crate::checkpoint;
use ember_io::{LoadOptions, StateDict};
use ember_nn::Module;
use ember_tensor::{Error, Result, Tensor};
use std::path::Path;

/// The suffixes of the weights transformers stores as `Conv1D` (`[in, out]`).
const CONV1D_WEIGHTS: [&str; 4] =
    [".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"];

/// The prefix of the transformer's keys in a `GPT2LMHeadModel` checkpoint.
const PREFIX: &str = "transformer.";

/// Whether `key` is a causal-mask buffer older checkpoints saved with the attention.
fn is_mask_buffer(key: &str) -> bool {
    key.ends_with(".attn.bias") || key.ends_with(".attn.masked_bias")
}

/// A checkpoint's state dict (`GPT2LMHeadModel` or `GPT2Model` names, `Conv1D` weights)
/// in ember's names and layouts; `source` (the file or directory) is named in errors.
pub fn from_hf_state(state: StateDict, config: &Gpt2Config, source: &Path) -> Result<StateDict> {
    let prefixed = state.keys().any(|k| k.starts_with(PREFIX));
    let mut out = StateDict::new();
    for (key, tensor) in state.iter() {
        if is_mask_buffer(key) || (config.tie_word_embeddings && key == "lm_head.weight") {
            continue;
        }
        let name = if prefixed || key.starts_with("lm_head.") { key.to_string() } else { format!("{PREFIX}{key}") };
        let tensor = if CONV1D_WEIGHTS.iter().any(|s| name.ends_with(s)) {
            transpose(tensor, key, source)?
        } else {
            tensor.clone()
        };
        out.insert(name, tensor);
    }
    Ok(out)
}

/// ember's state dict in a `GPT2LMHeadModel` checkpoint's names and layouts (the tied
/// head is not written, as transformers does not write it).
pub fn to_hf_state(state: &StateDict) -> Result<StateDict> {
    let mut out = StateDict::new();
    for (key, tensor) in state.iter() {
        let tensor = if CONV1D_WEIGHTS.iter().any(|s| key.ends_with(s)) {
            transpose(tensor, key, Path::new("<state dict>"))?
        } else {
            tensor.clone()
        };
        out.insert(key, tensor);
    }
    Ok(out)
}

/// A 2-D weight transposed (and made contiguous, so that it is saved and multiplied as
/// laid out); anything else is an error naming the key and the source.
fn transpose(tensor: &Tensor, key: &str, source: &Path) -> Result<Tensor> {
    let dims = tensor.shape().dims();
    if dims.len() != 2 {
        return Err(Error::format(source, format!("{key} is a Conv1D weight and must be 2-D [in, out], got {dims:?}")));
    }
    Ok(tensor.t()?.contiguous())
}

impl Gpt2LmHeadModel {
    /// Loads a transformers GPT-2 checkpoint directory: `config.json` and the weights
    /// (`model.safetensors`, sharded safetensors, or `pytorch_model.bin`), from
    /// `GPT2LMHeadModel` or `GPT2Model`, in the checkpoint's dtype. The model is in
    /// evaluation mode, as transformers' `from_pretrained` leaves it.
    ///
    /// Errors name the file and the keys: a missing or malformed file, a missing shard, a
    /// truncated file, missing or unexpected keys, and mis-shaped tensors.
    pub fn from_pretrained(dir: &Path) -> Result<Gpt2LmHeadModel> {
        Self::from_pretrained_with(dir, &LoadOptions::default())
    }

    /// [`from_pretrained`](Self::from_pretrained) with `options` (convert a bf16 checkpoint
    /// to f32 with `LoadOptions::default().dtype(DType::F32)`, say).
    pub fn from_pretrained_with(dir: &Path, options: &LoadOptions) -> Result<Gpt2LmHeadModel> {
        let config: Gpt2Config = checkpoint::read_config(dir)?;
        let state = from_hf_state(checkpoint::load_weights(dir, options)?, &config, dir)?;
        let embedding = format!("{PREFIX}wte.weight");
        let dtype = state
            .get(&embedding)
            .map(|t| t.dtype())
            .ok_or_else(|| Error::format(dir, format!("the checkpoint has no {embedding} (nor wte.weight)")))?;
        let model = Gpt2LmHeadModel::with_layer_init(config, dtype)?;
        checkpoint::load_strict(&model, &state, dir)?;
        model.eval();
        Ok(model)
    }

    /// Writes the model as a transformers `GPT2LMHeadModel` checkpoint directory
    /// (`config.json`, `model.safetensors`) that `from_pretrained` here and in transformers
    /// load.
    pub fn save_pretrained(&self, dir: &Path) -> Result<()> {
        checkpoint::save_pretrained(dir, self.config(), &to_hf_state(&self.state_dict())?)
    }
}
