//! Recurrent layers, PyTorch's `nn.RNN`, `nn.LSTM`, `nn.GRU` and their cells.
//!
//! - `options.rs`: [`RnnOptions`], [`CellOptions`], [`Nonlinearity`];
//! - `step.rs`: one time step of each recurrence, shared by cells and layers;
//! - `cell.rs`: [`RNNCell`], [`LSTMCell`], [`GRUCell`];
//! - `layer.rs`: the multi-layer, bidirectional driver and [`RNN`], [`LSTM`], [`GRU`];
//! - `build.rs`: how the core of a cell or a layer is built, fresh or from given
//!   parameters; `recurrent_module.rs`: what the cells and layers share around their core
//!   (constructors, sizes, `Module`, `Debug`);
//! - `fused.rs`: the LSTM recurrence over a whole sequence as one recorded operation;
//! - `lengths.rs`: padded batches of sequences of different lengths.

mod build;
mod cell;
mod fused;
mod layer;
mod lengths;
mod options;
mod recurrent_module;
mod step;

pub use cell::{GRUCell, LSTMCell, LstmState, RNNCell};
pub use layer::{GRU, LSTM, LstmOutput, RNN, RnnOutput};
pub use options::{CellOptions, Nonlinearity, RnnOptions};
