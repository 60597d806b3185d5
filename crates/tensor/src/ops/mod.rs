//! What the ops are, above the `Backend` trait and below the `Tensor` API: the op kinds a
//! backend computes and the descriptors its heavy kernels take.
//!
//! # Elementwise ops and reductions
//!
//! Each elementwise op, comparison and reduction is one row of its family's table, a
//! callback macro in `ops/unary.rs`, `binary.rs`, `compare.rs` and `reduce.rs`
//! (`unary_table!(m)` calls the macro `m` with every row). Each layer that needs the ops
//! expands the table with a macro of its own that keeps the sections it needs:
//!
//! | section | expanded in | into |
//! |---|---|---|
//! | head (variant, params, method) | `ops/<family>.rs` | the op enum ([`UnaryOp`], [`BinaryOp`], [`CmpOp`], [`ReduceOp`]), `name()`, `NAMES`, ... |
//! | `float`, `int`, `cpu` | `backend/cpu/{unary,binary,reduce}.rs` | the CPU dispatch |
//! | `cuda` | `backend/cuda/kernel_source.rs`, `backend/cuda/elementwise.rs` | the kernels' op codes and `switch` source, the kernel parameters |
//! | `tensor` | `tensor/{unary,elementwise}.rs` | the `Tensor` methods |
//! | `grad` | ember-autograd's `ops/{unary,binary,compare}.rs` | the `Var` ops (forward, `Saves`, backward, export) and methods |
//!
//! The tables are `#[macro_export]`ed (hidden from the docs) so that ember-autograd can
//! expand them; sections are passed as token trees, so a section is only type-checked
//! where it is expanded (the `grad` sections in ember-autograd). Each family's file gives
//! its row format.
//!
//! The CPU dispatch functions match the op once and hand its per-element closure to the
//! backend's loop (contiguous fast path, strided runs, multiversioned AVX-512/AVX2 inner
//! loops). Every op arm passes its own closure, so every op still gets its own
//! monomorphised, inlined loop; nothing is called through a pointer per element. The
//! dispatch functions are always inlined: each caller's closure and dtype are known there,
//! and a call into a many-armed function costs a measurable share of an operation on a
//! small tensor.
//!
//! # Descriptors of the heavy ops
//!
//! One module per family: the arguments users pass (PyTorch's, with its defaults and
//! output-size rules and errors), resolved into the plans and geometries the `Backend`
//! methods take: [`conv`] (`ConvArgs`, `ConvGeometry`, `SlidingWindow`), [`pool`]
//! (`MaxPoolArgs`, `PoolWindows`, `Resample`), [`norm`], [`layer_norm`], [`attention`], [`lstm`],
//! [`loss`] (`ClassLoss`) and [`optim`] (`SgdStep`, `AdamStep`, `RmsPropStep`). The
//! crate root re-exports the argument types (`ember_tensor::ConvArgs`).

// The tables are `#[macro_export]`ed: the expanders in this crate reach them as
// `crate::unary_table!` and so on.
pub(crate) mod binary;
pub(crate) mod compare;
pub(crate) mod reduce;
pub(crate) mod unary;

pub mod attention;
pub mod conv;
pub mod layer_norm;
pub mod loss;
pub mod lstm;
pub mod norm;
pub mod optim;
pub mod pool;

pub use binary::BinaryOp;
pub use compare::CmpOp;
pub use reduce::ReduceOp;
pub use unary::UnaryOp;
