//! Checkpoint keys to ember's and back, and [`LlamaForCausalLM::from_pretrained`].
//!
//! ember's parameter names are transformers' (`model.layers.0.self_attn.q_proj.weight`, ...)
//! and every weight keeps its layout (`nn.Linear`'s `[out, in]`), so the mapping only drops
//! what transformers may write beyond the parameters: the rotary `inv_freq` buffers of older
//! checkpoints, and `lm_head.weight` in a tied checkpoint (a copy of the embedding).

use super::config::LlamaConfig;
use super::model::LlamaForCausalLM;
use crate::checkpoint::{self, CONFIG_FILE, load_strict, load_weights};
use ember_io::{LoadOptions, StateDict};
use ember_nn::Module;
use ember_tensor::{DType, Error, Result};
use std::path::Path;

/// The key of the output layer, absent from ember's state when it is tied.
const LM_HEAD: &str = "lm_head.weight";
/// The key of the token embedding.
const EMBED: &str = "model.embed_tokens.weight";

/// A checkpoint's state in ember's key names: without the rotary buffers older checkpoints
/// store (`*.rotary_emb.inv_freq`, recomputed from the config) and, when the config ties the
/// head to the embedding, without `lm_head.weight`.
pub fn checkpoint_to_ember(state: StateDict, config: &LlamaConfig) -> StateDict {
    let mut out = StateDict::new();
    for (key, tensor) in state.iter() {
        let rotary_buffer = key.ends_with("rotary_emb.inv_freq");
        let tied_head = config.tie_word_embeddings && key == LM_HEAD;
        if !rotary_buffer && !tied_head {
            out.insert(key, tensor.clone());
        }
    }
    out
}

/// ember's state in the checkpoint's key names (the same names; a tied model has no
/// `lm_head.weight`, as transformers' `save_pretrained` writes it).
pub fn ember_to_checkpoint(state: StateDict) -> StateDict {
    state
}

impl LlamaForCausalLM {
    /// Loads a LLaMA, Mistral or Qwen2 checkpoint directory in the Hugging Face layout
    /// (`config.json` and `model.safetensors`, sharded safetensors with
    /// `model.safetensors.index.json`, or `pytorch_model.bin`), in the file's dtype.
    ///
    /// Errors (naming the file, and the keys where keys are the problem): a missing or
    /// malformed config, a configuration ember does not run (see
    /// [`LlamaConfig::validate`]), missing weights or shards, truncated files, and weights
    /// that are missing, unexpected or of the wrong shape.
    ///
    /// ```no_run
    /// use ember_models::llama::LlamaForCausalLM;
    /// let model = LlamaForCausalLM::from_pretrained("TinyLlama-1.1B".as_ref())?;
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn from_pretrained(dir: &Path) -> Result<LlamaForCausalLM> {
        Self::from_pretrained_with(dir, &LoadOptions::default())
    }

    /// [`from_pretrained`](Self::from_pretrained) with options: `LoadOptions::default().dtype(DType::F32)`
    /// converts a bf16 or f16 checkpoint on load; without a dtype the model takes the dtype
    /// of the checkpoint's embedding.
    pub fn from_pretrained_with(dir: &Path, options: &LoadOptions) -> Result<LlamaForCausalLM> {
        let config: LlamaConfig = checkpoint::read_config(dir)?;
        let config_path = dir.join(CONFIG_FILE);
        config.validate(&config_path)?;
        let state = checkpoint_to_ember(load_weights(dir, options)?, &config);
        let dtype = match state.get(EMBED) {
            Some(t) if t.dtype().is_float() => t.dtype(),
            Some(t) => return Err(Error::format(dir, format!("{EMBED} must be float, got {}", t.dtype()))),
            None => options.dtype.unwrap_or(DType::F32),
        };
        let model =
            LlamaForCausalLM::with_dtype(&config, dtype).map_err(|e| Error::format(&config_path, e.to_string()))?;
        load_strict(&model, &state, dir)?;
        Ok(model)
    }

    /// Writes the model as a checkpoint directory transformers loads with
    /// `AutoModelForCausalLM.from_pretrained`: `config.json` and `model.safetensors`.
    pub fn save_pretrained(&self, dir: &Path) -> Result<()> {
        checkpoint::save_pretrained(dir, self.config(), &ember_to_checkpoint(self.state_dict()))
    }
}
