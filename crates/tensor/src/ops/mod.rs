//! The elementwise ops and reductions, each defined once, as one row of its family's table.
//!
//! A table is a callback macro ([`unary`], [`binary`], [`compare`], [`reduce`]):
//! `unary_table!(m)` calls the macro `m` with every row, and each layer that needs the ops
//! expands the table with a macro of its own that keeps the sections it needs:
//!
//! | section | expanded in | into |
//! |---|---|---|
//! | head (variant, params, method) | `ops/<family>.rs` | the op enum (`UnaryOp`, ...), `name()`, `NAMES`, ... |
//! | `float`, `int`, `cpu` | `backend/cpu/{unary,binary,reduce}.rs` | the CPU dispatch |
//! | `cuda` | `backend/cuda/kernel_source.rs`, `backend/cuda/elementwise.rs` | the kernels' op codes and `switch` source, the kernel parameters |
//! | `tensor` | `tensor/{unary,elementwise}.rs` | the `Tensor` methods |
//! | `grad` | ember-autograd's `ops/{unary,binary,compare}.rs` | the `Var` ops (forward, `Saves`, backward, export) and methods |
//!
//! The tables are `#[macro_export]`ed (hidden from the docs) so that ember-autograd can
//! expand them; sections are passed as token trees, so a section is only type-checked
//! where it is expanded (the `grad` sections in ember-autograd).
//!
//! # Unary rows
//!
//! ```text
//! /// variant doc
//! Variant or Variant(param: Type, ...) or Variant { /// doc
//!                                                   field: Type, ... } => method,
//!     float [GRAIN FUNCTION],
//!     int [FUNCTION] or int [],
//!     cuda [float "EXPR", int "EXPR"; params |k| [P0, P1]] or cuda [],
//!     tensor ["method doc"] or tensor [],
//!     grad [/// Var method doc
//!           saves SAVES, returns Result, export(attr = VALUE), |ctx, g| GRADIENT] or grad [];
//! ```
//!
//! - `method` is the name of the op (`name()`, `NAMES`) and of its `Tensor` and `Var`
//!   methods. A parameter type is a single token (`f64`, `Scalar`).
//! - `float [GRAIN FUNCTION]`: the CPU function on floats, `T: FloatElement`. `GRAIN` is
//!   `cheap` (a few instructions per element) or `costly` (transcendentals); the CPU backend
//!   maps it to its parallel chunk size. A `FUNCTION` is `let a = ...; |x| expr` (any number
//!   of `let`s, which may use the parameters and run once per call, outside the loop) or,
//!   where one closure is not enough, `using |k, g| expr` with `k` the loop and `g` the
//!   grain, so that `expr` may call `k.run(g, closure)` on one of several branches (an `int`
//!   one returns `Result`). Call `exp`, `ln` and `tanh` as `FloatElement::exp(x)`: those are
//!   the vectorisable `f32` versions. `Element` and `FloatElement` are in scope; other
//!   helpers are named by path (`$crate::ops::unary::clamp_elem`).
//! - `int [FUNCTION]`: the CPU function on integers, `T: Element`, wrapping arithmetic.
//!   `int []` makes the op float-only: the tensor layer converts integer tensors to `f32`
//!   first, and the backends refuse them.
//! - `cuda [...]`: CUDA C++ expressions of `x` (the element, of type `T`), `p0` and `p1`
//!   (the parameters, in `T`), `one` and `zero`, with the helpers of `kernels.cu` (`wadd`,
//!   `max_nan`, ...). `float` is required; `int` is there exactly when the CPU has an `int`
//!   function. `params |k| [P0, P1]` computes the two kernel parameters on the host, with
//!   `k.float(f64)`, `k.exact(Scalar)` (converted like `Scalar::to_element`),
//!   `k.saturating(Scalar)`, `k.zero()` and `k.dtype()`, and may use `?`; without it both
//!   are zero. Each expression becomes one `case CODE: return EXPR;` of the generated
//!   `switch`, whose code is the row's position; a code without a case stops the kernel.
//!   An empty `cuda []` still builds, and the test `every_unary_op_has_a_cuda_kernel`
//!   fails.
//! - `tensor ["doc"]` generates `pub fn method(&self, params...) -> Tensor`; `tensor []`
//!   when the method needs more and is written by hand.
//! - `grad [...]` generates the `Var` op: a struct named like the variant with the
//!   parameters as fields, its `forward` (`x.method(params...)`), `saves()` (`SAVES` is
//!   `NONE`, `INPUTS`, `OUTPUT` or `{ inputs: .., output: .. }`), `backward` (`GRADIENT`,
//!   an `Option<Var>` written with `Var` ops, where the parameters are bound by name) and
//!   `export` (only with `export()`, or `export(attr = VALUE)` for one float attribute;
//!   without it the op has no export description), plus the method
//!   `Var::method(&self, params...) -> Var` (a `Scalar` parameter is taken as
//!   `impl Into<Scalar>`; `returns Result` when the forward can fail). `grad []` when the
//!   `Var` op is written by hand.
//!
//! # Binary, comparison and reduction rows
//!
//! ```text
//! /// variant doc
//! Variant => method,
//!     cpu [GRAIN |x, y| expr],
//!     cuda [float "EXPR", int "EXPR"],
//!     tensor ["method doc"],
//!     grad [/// Var method doc
//!           saves SAVES, |ctx, g| [GRADIENT_A, GRADIENT_B]];
//!
//! /// variant doc
//! Variant => method, scalar_method, "operator", cpu [|x, y| bool expr], cuda ["EXPR"];
//!
//! /// variant doc
//! Variant => method, value, cpu [Combine], cuda [combine "EXPR", identity "EXPR"(, widen)];
//! Variant => method, arg, cpu [max or min], cuda [prefer "EXPR"];
//! ```
//!
//! A binary `cpu` function runs on every dtype (`T: Element`); its `GRADIENT`s are
//! `Result<Var>` for the operands before broadcasting is summed out. A comparison's CUDA
//! expression compares `x` and `y`. A `value` reduction names its CPU `Combine` and its
//! CUDA `combine` of `a` and `b` (accumulator type `A`) and identity; `widen` accumulates
//! `f32` in `f64` on the GPU. An `arg` reduction says which extreme it finds and, in CUDA,
//! when `a` is preferred to `b`.
//!
//! # Where the ops run
//!
//! The CPU dispatch functions match the op once and hand its per-element closure to the
//! backend's loop (contiguous fast path, strided runs, multiversioned AVX-512/AVX2 inner
//! loops). Every op arm passes its own closure, so every op still gets its own
//! monomorphised, inlined loop; nothing is called through a pointer per element. The
//! dispatch functions are always inlined: each caller's closure and dtype are known there,
//! and a call into a many-armed function costs a measurable share of an operation on a
//! small tensor.

// The tables are `#[macro_export]`ed: the expanders in this crate reach them as
// `crate::unary_table!` and so on.
pub(crate) mod binary;
pub(crate) mod compare;
pub(crate) mod reduce;
pub(crate) mod unary;

pub use binary::BinaryOp;
pub use compare::CmpOp;
pub use reduce::ReduceOp;
pub use unary::UnaryOp;
