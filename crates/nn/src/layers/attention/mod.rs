//! Multi-head attention, PyTorch's `nn.MultiheadAttention`.
//!
//! - `options.rs`: [`MultiheadAttentionOptions`] (construction), [`MultiheadAttentionArgs`]
//!   (one call's masks and flags) and [`MultiheadAttentionOutput`];
//! - `mask.rs`: boolean and float masks turned into one additive mask, with PyTorch's checks,
//!   and [`generate_square_subsequent_mask`];
//! - `weights.rs`: the attention itself, `softmax(q k^T / sqrt(d) + mask) v`, composed from
//!   `Var` operations;
//! - `multihead.rs`: the layer: projections, heads, masks and the output projection.

mod mask;
mod multihead;
mod options;
mod weights;

pub use mask::generate_square_subsequent_mask;
pub use multihead::MultiheadAttention;
pub use options::{MultiheadAttentionArgs, MultiheadAttentionOptions, MultiheadAttentionOutput};
