//! How the core of a cell (`CellCore`) or of a layer (`RnnCore`) is built, written once for
//! both: fresh parameters drawn as PyTorch draws them ([`new`]), or given ones matched to
//! those the core needs ([`from_params`]). A cell's options are those of the one-layer,
//! one-direction layer it is a step of.

use super::options::{Mode, RnnOptions, check_options};
use crate::init;
use crate::layers::param_alloc::named;
use ember_autograd::Var;
use ember_tensor::{Error, Result};

/// What [`new`] and [`from_params`] need to know of a core.
pub(super) trait Core: Sized {
    /// Whether this is a cell's core: errors name `LSTMCell` (and `LSTMCell.weight_ih`)
    /// rather than `LSTM`.
    const CELL: bool;

    /// The names and shapes of the parameters, in state-dict order.
    fn specs(mode: Mode, input_size: usize, hidden_size: usize, options: &RnnOptions) -> Vec<(String, Vec<usize>)>;

    /// An error unless the parameters can be held in all, before any is listed or drawn:
    /// for layers, whose count grows with `num_layers`, an argument that costs nothing to
    /// pass. Nothing to check by default (each parameter's creation checks its own size).
    fn reserve(mode: Mode, input_size: usize, hidden_size: usize, options: &RnnOptions) -> Result<()> {
        let _ = (mode, input_size, hidden_size, options);
        Ok(())
    }

    /// The core over `vars`, given in the order of [`specs`](Core::specs).
    fn assemble(mode: Mode, input_size: usize, hidden_size: usize, options: RnnOptions, vars: Vec<Var>)
    -> Result<Self>;
}

/// The name of a core of kind `C` in errors.
fn name<C: Core>(mode: Mode) -> &'static str {
    if C::CELL { mode.cell_name() } else { mode.layer_name() }
}

/// A core with fresh parameters: PyTorch draws every one from `U(-1/sqrt(hidden),
/// 1/sqrt(hidden))`, in the order of the state dict.
pub(super) fn new<C: Core>(mode: Mode, input_size: usize, hidden_size: usize, options: RnnOptions) -> Result<C> {
    check_options(name::<C>(mode), mode, hidden_size, &options)?;
    C::reserve(mode, input_size, hidden_size, &options)?;
    let bound = 1.0 / (hidden_size as f64).sqrt();
    let draw = |(param, shape): (String, Vec<usize>)| {
        let value = init::uniform(&shape, bound, options.dtype).map_err(named(mode.param_op(C::CELL, &param)))?;
        Ok(Var::param(value))
    };
    let vars = C::specs(mode, input_size, hidden_size, &options).into_iter().map(draw).collect::<Result<Vec<_>>>()?;
    C::assemble(mode, input_size, hidden_size, options, vars)
}

/// A core over existing parameters `params`, named as in its state dict; an error naming
/// the cell or layer for an unexpected or missing name, a shape other than the one the
/// options imply, or a dtype other than theirs.
pub(super) fn from_params<C: Core>(
    mode: Mode,
    input_size: usize,
    hidden_size: usize,
    options: RnnOptions,
    params: Vec<(String, Var)>,
) -> Result<C> {
    let op = name::<C>(mode);
    check_options(op, mode, hidden_size, &options)?;
    let specs = C::specs(mode, input_size, hidden_size, &options);
    if let Some((extra, _)) = params.iter().find(|(n, _)| !specs.iter().any(|(s, _)| s == n)) {
        return Err(Error::invalid(op, format!("unexpected parameter {extra:?}")));
    }
    let mut vars = Vec::with_capacity(specs.len());
    for (spec, shape) in &specs {
        let Some((_, v)) = params.iter().find(|(n, _)| n == spec) else {
            return Err(Error::invalid(op, format!("missing parameter {spec:?}")));
        };
        if v.shape().dims() != shape.as_slice() {
            return Err(Error::shape(op, format!("{spec} must have shape {shape:?}, got {:?}", v.shape())));
        }
        if v.dtype() != options.dtype {
            return Err(Error::dtype(op, format!("{spec} is {} but the options say {}", v.dtype(), options.dtype)));
        }
        vars.push(v.clone());
    }
    C::assemble(mode, input_size, hidden_size, options, vars)
}
