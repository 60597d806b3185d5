//! Reading and writing [`StateDict`]s as safetensors files, the format of PyTorch's
//! `safetensors.torch.save_file` / `load_file`.
//!
//! A safetensors file is an 8-byte little-endian header length, a JSON header mapping each
//! name to `{dtype, shape, data_offsets}`, then the raw little-endian data. ember reads and
//! writes `F32`, `F64`, `I64` and `U8`, and reads `BOOL` as `u8` (ember's mask dtype).
//! Anything wrong with a file (missing, not safetensors, a bad header, an unsupported dtype,
//! truncated data) is an error naming the file and the problem.

use crate::le::{le_bytes, le_values};
use crate::state_dict::StateDict;
use ember_tensor::{DType, Error, Result, Tensor};
use safetensors::tensor::{SafeTensorError, TensorInfo};
use safetensors::{Dtype, SafeTensors, View};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// Writes `state` to `path` as a safetensors file, replacing any file there only once the
/// new one is complete on disk: it is written beside `path` and renamed over it, so a
/// failure (a full disk, a killed process) never leaves a truncated checkpoint in place of
/// a good one. Errors name the path.
///
/// ```
/// use ember_io::{load_safetensors, save_safetensors, StateDict};
/// use ember_tensor::Tensor;
/// let path = std::env::temp_dir().join(format!("ember-io-doc-st-{}.safetensors", std::process::id()));
/// let mut sd = StateDict::new();
/// sd.insert("w", Tensor::from_vec(vec![1.0f32, 2.0], [2])?);
/// save_safetensors(&path, &sd)?;
/// let back = load_safetensors(&path)?;
/// assert_eq!(back.get("w").unwrap().to_vec::<f32>()?, vec![1.0, 2.0]);
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn save_safetensors(path: impl AsRef<Path>, state: &StateDict) -> Result<()> {
    save_safetensors_with_metadata(path, state, &BTreeMap::new())
}

/// Writes `state` to `path` as a safetensors file whose header also carries `metadata`
/// (the format's free-form string map, `__metadata__`), for what is not a tensor: the
/// hyperparameters of an optimizer, say. The key `format` is set to `pt` unless given. The
/// file is replaced as [`save_safetensors`] replaces it.
pub fn save_safetensors_with_metadata(
    path: impl AsRef<Path>,
    state: &StateDict,
    metadata: &BTreeMap<String, String>,
) -> Result<()> {
    let path = path.as_ref();
    let raws = state.iter().map(|(name, t)| Ok((name.to_string(), RawTensor::of(t)?))).collect::<Result<Vec<_>>>()?;
    // The same marker as Hugging Face's PyTorch writers, so that their loaders accept the file.
    let mut header = HashMap::from([("format".to_string(), "pt".to_string())]);
    header.extend(metadata.iter().map(|(k, v)| (k.clone(), v.clone())));
    let bytes = safetensors::serialize(raws, Some(header))
        .map_err(|e| Error::format(path, format!("cannot encode the state dict: {e}")))?;
    crate::atomic_file::write(path, &bytes)
}

/// Reads the safetensors file at `path`. Entries come in the file's data order (for files
/// written by ember or PyTorch: by dtype, then by name).
pub fn load_safetensors(path: impl AsRef<Path>) -> Result<StateDict> {
    load_safetensors_with_metadata(path).map(|(state, _)| state)
}

/// Reads the safetensors file at `path` with its header's string metadata (empty if it
/// has none).
pub fn load_safetensors_with_metadata(path: impl AsRef<Path>) -> Result<(StateDict, BTreeMap<String, String>)> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    decode(&bytes).map_err(|msg| Error::format(path, msg))
}

/// The tensors and the metadata in `bytes`, or what is wrong with them.
fn decode(bytes: &[u8]) -> std::result::Result<(StateDict, BTreeMap<String, String>), String> {
    precheck(bytes)?;
    let (header_len, metadata) = SafeTensors::read_metadata(bytes).map_err(describe)?;
    let data = bytes.get(8 + header_len..).unwrap_or(&[]);
    let mut state = StateDict::new();
    for name in metadata.offset_keys() {
        let info = metadata.info(&name).ok_or_else(|| format!("bad header: no entry for tensor `{name}`"))?;
        let t = to_tensor(&name, info, data)?;
        state.insert(name, t);
    }
    let strings = metadata.metadata().iter().flatten().map(|(k, v)| (k.clone(), v.clone())).collect();
    Ok((state, strings))
}

/// Recognises truncated files and inconsistent entries before the safetensors crate
/// reports them as generic mismatches: the header must fit in the file, the data must be as
/// long as the header says, and each tensor's offsets must span its size.
fn precheck(bytes: &[u8]) -> std::result::Result<(), String> {
    let Some(len_bytes) = bytes.get(..8) else {
        return Err(format!(
            "not a safetensors file: {} bytes, fewer than the 8-byte header length that starts one",
            bytes.len()
        ));
    };
    let mut le = [0u8; 8];
    le.copy_from_slice(len_bytes);
    let header_len = u64::from_le_bytes(le);
    let after = (bytes.len() - 8) as u64;
    if header_len > after {
        return Err(format!(
            "bad header: its length field says {header_len} bytes, but only {after} bytes follow (truncated, or \
             not a safetensors file)"
        ));
    }
    let header = &bytes[8..8 + header_len as usize];
    // A header that does not parse here is left for the safetensors crate to describe.
    let Ok(serde_json::Value::Object(entries)) = serde_json::from_slice::<serde_json::Value>(header) else {
        return Ok(());
    };
    let described = entries
        .iter()
        .filter(|(k, _)| k.as_str() != "__metadata__")
        .filter_map(|(_, v)| v.get("data_offsets")?.get(1)?.as_u64())
        .max()
        .unwrap_or(0);
    let present = after - header_len;
    if described > present {
        return Err(format!(
            "truncated data: the header describes {described} bytes of tensor data, but the file holds {present}"
        ));
    }
    for (name, entry) in entries.iter().filter(|(k, _)| k.as_str() != "__metadata__") {
        check_entry_size(name, entry)?;
    }
    Ok(())
}

/// A tensor of a dtype ember reads must span exactly its size in bytes; the safetensors
/// crate checks this too but without naming the tensor.
fn check_entry_size(name: &str, entry: &serde_json::Value) -> std::result::Result<(), String> {
    let element = match entry.get("dtype").and_then(|d| d.as_str()) {
        Some("F64" | "I64") => 8,
        Some("F32") => 4,
        Some("U8" | "BOOL") => 1,
        _ => return Ok(()),
    };
    let shape: Option<Vec<u64>> =
        entry.get("shape").and_then(|s| s.as_array()).and_then(|dims| dims.iter().map(|d| d.as_u64()).collect());
    let offsets: Option<Vec<u64>> =
        entry.get("data_offsets").and_then(|o| o.as_array()).and_then(|o| o.iter().map(|v| v.as_u64()).collect());
    let (Some(shape), Some(offsets)) = (shape, offsets) else {
        return Ok(());
    };
    let bytes = shape.iter().try_fold(element, |acc: u64, &d| acc.checked_mul(d));
    if let ([start, end], Some(bytes)) = (offsets.as_slice(), bytes)
        && end.checked_sub(*start) != Some(bytes)
    {
        return Err(format!(
            "bad header: tensor `{name}` of shape {shape:?} needs {bytes} bytes, but its data offsets [{start}, {end}] \
             do not span that"
        ));
    }
    Ok(())
}

/// A readable account of a safetensors parse error.
fn describe(e: SafeTensorError) -> String {
    match e {
        SafeTensorError::HeaderTooLarge => "bad header: longer than the 100 MB safetensors allows".into(),
        SafeTensorError::HeaderTooSmall | SafeTensorError::InvalidHeaderLength => {
            "bad header: its length field does not fit the file".into()
        }
        SafeTensorError::InvalidHeader(e) => format!("bad header: not UTF-8 ({e})"),
        SafeTensorError::InvalidHeaderDeserialization(e) | SafeTensorError::JsonError(e) => {
            format!("bad header: {e}")
        }
        SafeTensorError::InvalidOffset(name) => format!("bad header: the data offsets of tensor `{name}` are invalid"),
        SafeTensorError::TensorInvalidInfo => {
            "bad header: a tensor's data offsets do not match its shape and dtype".into()
        }
        SafeTensorError::ValidationOverflow => "bad header: a tensor's size overflows".into(),
        SafeTensorError::MetadataIncompleteBuffer => {
            "bad data: the tensor data does not end where the file does (truncated or padded)".into()
        }
        other => format!("invalid safetensors file: {other}"),
    }
}

/// The tensor `name` described by `info` in the data section `data`.
fn to_tensor(name: &str, info: &TensorInfo, data: &[u8]) -> std::result::Result<Tensor, String> {
    let (start, end) = info.data_offsets;
    let bytes = data.get(start..end).ok_or_else(|| format!("truncated data: tensor `{name}` runs past the file"))?;
    let shape = info.shape.clone();
    let made = match info.dtype {
        Dtype::F32 => Tensor::from_vec(le_values(bytes, f32::from_le_bytes), shape),
        Dtype::F64 => Tensor::from_vec(le_values(bytes, f64::from_le_bytes), shape),
        Dtype::I64 => Tensor::from_vec(le_values(bytes, i64::from_le_bytes), shape),
        Dtype::U8 | Dtype::BOOL => Tensor::from_vec(bytes.to_vec(), shape),
        other => {
            return Err(format!(
                "tensor `{name}` has dtype {other:?}, which ember cannot hold (it reads F32, F64, I64, U8 and BOOL)"
            ));
        }
    };
    made.map_err(|e| format!("tensor `{name}`: {e}"))
}

/// A tensor as safetensors wants it: dtype, shape and little-endian bytes.
struct RawTensor {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl RawTensor {
    fn of(t: &Tensor) -> Result<RawTensor> {
        let dtype = match t.dtype() {
            DType::F32 => Dtype::F32,
            DType::F64 => Dtype::F64,
            DType::F16 => Dtype::F16,
            DType::BF16 => Dtype::BF16,
            DType::I64 => Dtype::I64,
            DType::U8 => Dtype::U8,
        };
        let data = le_bytes(t)?;
        Ok(RawTensor { dtype, shape: t.shape().to_vec(), data })
    }
}

impl View for RawTensor {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}
