//! [`LoadOptions`]: how the state-dict loaders of both formats hand over the tensors they
//! read.

use crate::state_dict::StateDict;
use ember_tensor::{DType, Error, Result};

/// How [`load_safetensors_with`](crate::load_safetensors_with) and
/// [`load_pt_with`](crate::load_pt_with) hand over a checkpoint's tensors. The default
/// (`LoadOptions::default()`) keeps every tensor as the file stores it, as
/// `load_safetensors` and `load_pt` do.
///
/// A bf16 checkpoint loaded as f32, as Hugging Face's `from_pretrained(torch_dtype=...)`
/// or `{k: v.float() for k, v in sd.items()}` does (integer tensors keep their dtype):
///
/// ```
/// use ember_io::{LoadOptions, StateDict, load_safetensors_with, save_safetensors};
/// use ember_tensor::{DType, Tensor, bf16};
/// let path = std::env::temp_dir().join(format!("ember-io-doc-opts-{}.safetensors", std::process::id()));
/// let mut sd = StateDict::new();
/// sd.insert("w", Tensor::from_vec(vec![bf16::from_f32(1.5), bf16::from_f32(-0.25)], [2])?);
/// sd.insert("steps", Tensor::from_vec(vec![7i64], [1])?);
/// save_safetensors(&path, &sd)?;
/// let wide = load_safetensors_with(&path, &LoadOptions::default().dtype(DType::F32))?;
/// assert_eq!(wide.get("w").map(|t| t.to_vec::<f32>()).transpose()?, Some(vec![1.5, -0.25]));
/// assert_eq!(wide.get("steps").map(|t| t.dtype()), Some(DType::I64));
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Converts every floating tensor (`f16`, `bf16`, `f32`, `f64`) to this floating dtype
    /// (see [`StateDict::to_dtype`]); `None` keeps the file's dtypes. A dtype that is not
    /// floating makes the load an error.
    pub dtype: Option<DType>,
}

impl LoadOptions {
    /// With every floating tensor converted to `dtype`.
    pub fn dtype(mut self, dtype: DType) -> Self {
        self.dtype = Some(dtype);
        self
    }

    /// The state dict `read` returns, as these options ask; a dtype that is not floating
    /// is refused before anything is read.
    pub(crate) fn load(&self, op: &'static str, read: impl FnOnce() -> Result<StateDict>) -> Result<StateDict> {
        match self.dtype {
            None => read(),
            Some(dtype) if !dtype.is_float() => Err(Error::dtype(
                op,
                format!("LoadOptions::dtype must be a floating dtype (f16, bf16, f32 or f64), not {dtype}"),
            )),
            Some(dtype) => read()?.to_dtype(dtype),
        }
    }
}
