//! PyTorch checkpoints (`torch.save` files, `.pt`/`.pth`) read and written.
//!
//! [`load_pt`] reads a module's `state_dict()` saved by `torch.save(model.state_dict(), path)`
//! into a [`StateDict`] that `ember_nn::Module::load_state_dict` takes; [`save_pt`] writes
//! one that PyTorch's `model.load_state_dict(torch.load(path))` takes. [`load_pt_value`] and
//! [`save_pt_value`] read and write any checkpoint made of plain data ([`PtValue`]: numbers,
//! strings, lists, tuples, dicts, tensors), such as an optimizer's `state_dict()` or a
//! training checkpoint dict.
//!
//! Only the zip format (PyTorch 1.6 and later) is read, and only what
//! `torch.load(weights_only=True)` accepts: a checkpoint never runs code, and one that
//! pickles anything else (a whole `nn.Module`, a custom class) is an error naming what it
//! calls. Tensors may be views of shared storages with any strides; they arrive contiguous,
//! integers as `i64` and booleans as `u8` (float16 and bfloat16 are refused: convert with
//! `.float()` before saving). Every error names the file.
//!
//! ```
//! use ember_io::{StateDict, load_pt, save_pt};
//! use ember_tensor::Tensor;
//! let path = std::env::temp_dir().join(format!("ember-io-doc-pt-{}.pt", std::process::id()));
//! let mut sd = StateDict::new();
//! sd.insert("fc.weight", Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2])?);
//! save_pt(&path, &sd)?;
//! let back = load_pt(&path)?;
//! assert_eq!(back.get("fc.weight").unwrap().to_vec::<f32>()?, vec![1.0, 2.0, 3.0, 4.0]);
//! # std::fs::remove_file(&path).ok();
//! # Ok::<(), ember_tensor::Error>(())
//! ```

mod archive;
mod pickle;
mod storage;
mod unpickle;
mod value;

pub use value::PtValue;

use crate::load_options::LoadOptions;
use crate::state_dict::StateDict;
use ember_tensor::{Error, Result};
use std::path::Path;

/// Reads the checkpoint at `path` as plain data.
pub fn load_pt_value(path: impl AsRef<Path>) -> Result<PtValue> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    archive::read(&bytes).map_err(|msg| Error::format(path, msg))
}

/// Writes `value` to `path` as a `torch.save` checkpoint that `torch.load` reads (with
/// `weights_only=True`). The file is replaced only once the new one is complete, as
/// [`save_safetensors`](crate::save_safetensors) replaces it.
pub fn save_pt_value(path: impl AsRef<Path>, value: &PtValue) -> Result<()> {
    save(path.as_ref(), value, false)
}

/// Reads a module's state dict saved by `torch.save(model.state_dict(), path)`: a dict
/// from parameter and buffer names to tensors. A checkpoint whose top level holds other
/// things (an epoch number, an optimizer's state) is an error naming the first such entry:
/// read it with [`load_pt_value`] and take the state dict out of it with
/// [`state_dict_from_pt`].
pub fn load_pt(path: impl AsRef<Path>) -> Result<StateDict> {
    let path = path.as_ref();
    state_dict_from_pt(&load_pt_value(path)?).map_err(|msg| Error::format(path, msg))
}

/// Reads a module's state dict as [`load_pt`] does, as `options` ask: with
/// `LoadOptions::default().dtype(DType::F32)`, a checkpoint saved by
/// `torch.save(model.bfloat16().state_dict(), path)` arrives in `f32` (see
/// [`LoadOptions`]).
pub fn load_pt_with(path: impl AsRef<Path>, options: &LoadOptions) -> Result<StateDict> {
    options.load("load_pt_with", || load_pt(path))
}

/// Writes `state` to `path` as `torch.save(model.state_dict(), path)` would (an
/// `OrderedDict` of tensors), so that PyTorch's `model.load_state_dict(torch.load(path))`
/// takes it.
pub fn save_pt(path: impl AsRef<Path>, state: &StateDict) -> Result<()> {
    save(path.as_ref(), &state_dict_to_pt(state), true)
}

/// The state dict a dict of tensors holds, or what else it holds.
pub fn state_dict_from_pt(value: &PtValue) -> std::result::Result<StateDict, String> {
    let entries =
        value.as_dict().ok_or_else(|| format!("the checkpoint holds a {}, not a state dict", value.type_name()))?;
    let mut state = StateDict::new();
    for (k, v) in entries {
        let name = k.as_str().ok_or_else(|| format!("a state dict key is a {}, not a str", k.type_name()))?;
        let t = v.as_tensor().ok_or_else(|| {
            format!(
                "entry `{name}` is a {}, not a tensor: this checkpoint holds more than a state dict (read it with \
                 load_pt_value and take the state dict out)",
                v.type_name()
            )
        })?;
        state.insert(name, t.clone());
    }
    Ok(state)
}

/// `state` as a dict of tensors, in its own order.
pub fn state_dict_to_pt(state: &StateDict) -> PtValue {
    PtValue::Dict(state.iter().map(|(k, t)| (PtValue::from(k), PtValue::Tensor(t.clone()))).collect())
}

fn save(path: &Path, value: &PtValue, ordered: bool) -> Result<()> {
    let bytes = archive::write(value, ordered).map_err(|msg| Error::format(path, msg))?;
    crate::atomic_file::write(path, &bytes)
}
