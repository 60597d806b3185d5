//! LLaMA-family decoders: LLaMA (1, 2, 3), Mistral and Qwen2 checkpoints in transformers'
//! `LlamaForCausalLM` layout.
//!
//! - [`LlamaConfig`] (`config.rs`): `config.json`, with transformers' defaults per
//!   `model_type` and both spellings of the rotary settings.
//! - [`LlamaForCausalLM`] (`model.rs`): the decoder from ember-nn's layers (RMS norms,
//!   rotary embeddings, grouped-query attention, SwiGLU), with a plain causal
//!   [`forward`](LlamaForCausalLM::forward) for training and
//!   [`CausalLm`](crate::generation::CausalLm) for generation with a KV cache.
//! - `load.rs`: [`LlamaForCausalLM::from_pretrained`] and
//!   [`save_pretrained`](LlamaForCausalLM::save_pretrained), and the key mapping
//!   ([`checkpoint_to_ember`], [`ember_to_checkpoint`]).

mod config;
mod load;
mod model;

pub use config::{LlamaConfig, RopeScalingConfig};
pub use load::{checkpoint_to_ember, ember_to_checkpoint};
pub use model::{LlamaAttention, LlamaDecoderLayer, LlamaForCausalLM, LlamaModel};
