//! `ember-io`: the files models and checkpoints live in, on top of `ember-tensor` alone.
//!
//! # What is where
//!
//! - [`StateDict`] (`state_dict.rs`): named tensors in insertion order, PyTorch's
//!   `state_dict()` layout; the unit that is saved, loaded and compared.
//! - safetensors files (`safetensors_file.rs`): [`save_safetensors`] / [`load_safetensors`],
//!   and the `_with_metadata` forms that also carry the header's string map. These are the
//!   files of PyTorch's `safetensors.torch.save_file` / `load_file`.
//! - `torch.save` checkpoints ([`pt`]): [`load_pt`] / [`save_pt`] for a module's state
//!   dict, [`pt::load_pt_value`] / [`pt::save_pt_value`] for any checkpoint of plain data
//!   ([`pt::PtValue`]), such as an optimizer's `state_dict()`.
//! - Loading at another precision ([`LoadOptions`], `load_options.rs`):
//!   [`load_safetensors_with`] and [`load_pt_with`] convert every floating tensor to a
//!   chosen dtype (a bf16 checkpoint as f32), as [`StateDict::to_dtype`] does to any state
//!   dict. Both formats read and write `f16` and `bf16` tensors bit for bit.
//! - Atomic writes (`atomic_file.rs`): every save writes beside the target and renames over
//!   it, so a failed save never leaves a truncated file where a good one was.
//! - Little-endian element bytes (`le.rs`): the tensor data layout both formats share.
//!
//! Every error is an [`ember_tensor::Error`] that names the file, and for a bad entry the
//! tensor or record too. `ember-nn` re-exports all of this at its old paths
//! (`ember_nn::StateDict`, `ember_nn::save_safetensors`, `ember_nn::pt::...`), and adds
//! `Module::state_dict` / `load_state_dict` and `ModuleExt::save` / `load` on top;
//! `ember-optim` stores optimizer state through it without depending on `ember-nn`.
//!
//! # Example
//!
//! ```
//! use ember_io::pt::{PtValue, load_pt_value, save_pt_value};
//! use ember_io::{StateDict, load_safetensors, save_safetensors};
//! use ember_tensor::Tensor;
//!
//! let dir = std::env::temp_dir();
//! let mut weights = StateDict::new();
//! weights.insert("fc.weight", Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2])?);
//! weights.insert("fc.bias", Tensor::from_vec(vec![0.5f32, -0.5], [2])?);
//!
//! // A safetensors file, as `safetensors.torch.load_file` reads it.
//! let st = dir.join(format!("ember-io-doc-{}.safetensors", std::process::id()));
//! save_safetensors(&st, &weights)?;
//! let loaded = load_safetensors(&st)?;
//! let bias = loaded.get("fc.bias").map(|t| t.to_vec::<f32>()).transpose()?;
//! assert_eq!(bias, Some(vec![0.5, -0.5]));
//!
//! // A training checkpoint dict, as `torch.load(path, weights_only=True)` reads it.
//! let pt = dir.join(format!("ember-io-doc-{}.pt", std::process::id()));
//! let checkpoint = PtValue::Dict(vec![
//!     (PtValue::from("epoch"), PtValue::Int(3)),
//!     (PtValue::from("model"), ember_io::pt::state_dict_to_pt(&weights)),
//! ]);
//! save_pt_value(&pt, &checkpoint)?;
//! let back = load_pt_value(&pt)?;
//! assert_eq!(back.get("epoch").and_then(PtValue::as_f64), Some(3.0));
//!
//! // A missing file is an error that names it.
//! let missing = dir.join("ember-io-doc-no-such-file.safetensors");
//! assert!(load_safetensors(&missing).unwrap_err().to_string().contains("ember-io-doc-no-such-file"));
//! # std::fs::remove_file(&st).ok();
//! # std::fs::remove_file(&pt).ok();
//! # Ok::<(), ember_tensor::Error>(())
//! ```

#![warn(missing_docs)]

mod atomic_file;
mod le;
mod load_options;
pub mod pt;
mod safetensors_file;
mod state_dict;

pub use load_options::LoadOptions;
pub use pt::{load_pt, load_pt_with, save_pt};
pub use safetensors_file::{
    load_safetensors, load_safetensors_with, load_safetensors_with_metadata, save_safetensors,
    save_safetensors_with_metadata,
};
pub use state_dict::StateDict;
