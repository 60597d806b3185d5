//! The Vision Transformer in Hugging Face's layout (`ViTModel`,
//! `ViTForImageClassification`), loaded from checkpoint directories.
//!
//! Hugging Face's layout rather than torchvision's `vit_b_16`: its checkpoints carry a
//! `config.json` (so the model's shape needs no guessing), `save_pretrained` writes them,
//! and the hub's fine-tuned ViTs use it.
//!
//! - [`config`]: [`ViTConfig`], the `config.json` with transformers' defaults.
//! - [`model`]: [`ViTModel`] (patch embedding, `[CLS]` and positions, pre-norm layers,
//!   final layer norm, optional pooler), [`ViTForImageClassification`], [`ViTOutput`].
//! - `load`: `from_pretrained` / `from_pretrained_with` / `save_pretrained`.

pub mod config;
mod load;
pub mod model;

pub use config::ViTConfig;
pub use model::{ViTForImageClassification, ViTModel, ViTOutput};
