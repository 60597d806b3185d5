//! `ember-models`: the architectures people fine-tune, loaded from published checkpoints.
//!
//! # What is where
//!
//! - [`checkpoint`]: checkpoint directories in the Hugging Face layout (`config.json`,
//!   `model.safetensors` or sharded safetensors with `model.safetensors.index.json`, or
//!   `pytorch_model.bin`) and torchvision's single-file state dicts; strict loading that
//!   names missing, unexpected and mis-shaped keys and the file; writing a directory back.
//! - [`tokenizer`]: [`Tokenizer`](tokenizer::Tokenizer), a `tokenizer.json` through the
//!   `tokenizers` crate.
//! - [`llama`]: LLaMA, Mistral and Qwen2 decoders ([`llama::LlamaForCausalLM`]).
//! - [`generation`]: what a decoder implements for generation ([`generation::CausalLm`]),
//!   its [`generation::KvCache`], the masks and position ids of a step, and the decoding
//!   loop [`generation::generate`].
//! - [`gpt2`]: GPT-2 ([`gpt2::Gpt2LmHeadModel`]) from transformers' checkpoints.
//! - [`bert`]: BERT encoders with masked-LM and sequence-classification heads.
//! - [`resnet`]: torchvision's ResNet-18/34/50/101/152 layout.
//! - [`vit`]: Hugging Face's `ViTModel` / `ViTForImageClassification` layout.
//!
//! Nothing is fetched from the network: download a checkpoint with your usual tools and
//! point ember at its directory. The facade re-exports this crate as `ember::models` with
//! its `models` feature, so that the quick start does not compile it or `tokenizers`.

#![warn(missing_docs)]

pub mod bert;
pub mod checkpoint;
pub mod generation;
pub mod gpt2;
pub mod llama;
pub mod resnet;
pub mod tokenizer;
pub mod vit;
