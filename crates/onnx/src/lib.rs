//! `ember-onnx`: ONNX import and export for ember.
//!
//! - [`load`] / [`load_bytes`] read an ONNX model (opsets 13 to 20, see
//!   [`import::OPSETS`]) into a [`GraphModel`]: a [`Module`](ember_nn::Module) whose
//!   weights are parameters, so an imported model runs inference *and* fine-tunes. What
//!   PyTorch's two exporters (TorchScript-based and dynamo) write for ember's layers
//!   imports, recurrent layers and attention included, and so does what they write for
//!   transformers' GPT-2, LLaMA, BERT and ViT and torchvision's ResNet.
//! - [`export()`] traces a [`Module`](ember_nn::Module) (or [`export_fn_bytes`] any
//!   function of `Var`s) and writes ONNX (opset 17) with the parameters as initializers;
//!   `ember-models`' architectures export whole.
//! - [`ir`] is the graph IR that the ONNX reader (and any other front-end) targets.
//!
//! Errors are [`ember_tensor::Error`]s naming the file, the node (name and operator) and
//! the reason: unknown operators, unsupported attributes, missing external data, malformed
//! protobuf, inconsistent sizes. None of them panics. [`tables`] renders the supported
//! operators (the tables of `docs/interop.md` in the repository).
//!
//! ```no_run
//! use ember_autograd::Var;
//! use ember_nn::Module;
//! use ember_tensor::Tensor;
//! let model = ember_onnx::load("model.onnx")?;
//! let y = model.forward(&Var::new(Tensor::randn([1, 784])?))?;
//! # Ok::<(), ember_tensor::Error>(())
//! ```

#![warn(missing_docs)]

pub mod export;
pub mod import;
pub mod ir;
mod ops;
pub mod proto;
pub mod tables;

pub use export::{ExportOptions, export, export_bytes, export_fn_bytes};
pub use import::{load, load_bytes, read_graph};
pub use ir::GraphModel;
