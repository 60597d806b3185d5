//! BERT (transformers' `BertModel`, `BertForMaskedLM`, `BertForSequenceClassification`),
//! loaded from Hugging Face checkpoint directories.
//!
//! - [`config`]: [`BertConfig`], the `config.json` with transformers' defaults.
//! - [`model`]: [`BertModel`] (embeddings, post-norm encoder layers on ember's fused
//!   attention, pooler), [`BertInput`] (ids, padding mask, token types), [`BertOutput`].
//! - [`heads`]: [`BertForMaskedLM`] (decoder tied to the word embedding) and
//!   [`BertForSequenceClassification`].
//! - `load`: `from_pretrained` / `from_pretrained_with` / `save_pretrained` of each model;
//!   checkpoints with or without the `bert.` prefix, `gamma` / `beta` layer-norm names.
//! - [`activation`]: [`HiddenAct`], the `hidden_act` names (shared with ViT).
//!
//! ```no_run
//! use ember_models::bert::{BertForSequenceClassification, BertInput, BertModel};
//! // Fine-tuning: a pretrained encoder, a new 3-class head.
//! let bert = BertModel::from_pretrained("bert-base-uncased".as_ref())?;
//! let model = BertForSequenceClassification::from_bert(bert, 3)?;
//! # Ok::<(), ember_tensor::Error>(())
//! ```

pub mod activation;
pub mod config;
pub mod heads;
mod load;
pub mod model;

pub use activation::HiddenAct;
pub use config::BertConfig;
pub use heads::{BertForMaskedLM, BertForSequenceClassification};
pub(crate) use load::cast_and_load;
pub use model::{BertInput, BertModel, BertOutput};
