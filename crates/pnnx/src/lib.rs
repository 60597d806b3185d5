//! PNNX models for ember: the `.param` + `.bin` pair that PyTorch's PNNX tool
//! (`pnnx.export(model, "m.pt", inputs)`) writes, loaded onto ember's layers for inference
//! and fine-tuning.
//!
//! PNNX keeps PyTorch's own vocabulary (`nn.Conv2d`, `F.relu`, `torch.flatten`,
//! `pnnx.Expression` for arithmetic), so each operator maps onto the ember layer or op of
//! the same name, holding the weights from the `.bin` archive. The supported operators are
//! listed in `docs/interop.md`; anything else, an unsupported parameter value, a weight of
//! the wrong shape or a damaged file is an error naming the operator and its line, never
//! a panic.
//!
//! ```no_run
//! use ember_autograd::Var;
//! use ember_tensor::Tensor;
//! let model = ember_pnnx::load("model.pnnx.param", "model.pnnx.bin")?;
//! let out = model.infer(&[Tensor::zeros([1, 1, 28, 28], ember_tensor::DType::F32)?])?;
//! # Ok::<(), ember_tensor::Error>(())
//! ```

mod expr;
mod model;
mod ops;
mod param;
mod weights;

pub use model::PnnxModel;
pub use param::Operator;

use ember_tensor::{Error, Result};
use std::path::Path;

/// Loads the PNNX model `param` (text) with its weights `bin` (zip archive).
pub fn load(param: impl AsRef<Path>, bin: impl AsRef<Path>) -> Result<PnnxModel> {
    let (param, bin) = (param.as_ref(), bin.as_ref());
    let text = std::fs::read_to_string(param).map_err(|e| Error::io(param, e))?;
    let bytes = std::fs::read(bin).map_err(|e| Error::io(bin, e))?;
    let ops = param::parse(&text).map_err(|m| Error::format(param, m))?;
    let mut weights = weights::Weights::open(&bytes).map_err(|m| Error::format(bin, m))?;
    PnnxModel::build(ops, &mut weights).map_err(|e| Error::format(param, e.to_string()))
}

/// Parses a `.param` file's text into its operators, for inspecting a model before loading.
pub fn parse_param(text: &str) -> Result<Vec<Operator>> {
    param::parse(text).map_err(|m| Error::invalid("pnnx", m))
}
