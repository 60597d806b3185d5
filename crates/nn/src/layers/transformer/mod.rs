//! Transformer layers, PyTorch's `nn.TransformerEncoderLayer`, `nn.TransformerEncoder`,
//! `nn.TransformerDecoderLayer` and `nn.TransformerDecoder`.
//!
//! - `options.rs`: [`TransformerLayerOptions`], [`TransformerActivation`] and the masks of a
//!   call, [`EncoderMasks`] and [`DecoderMasks`];
//! - `parts.rs`: what the layers and stacks share: their constructors, the feed-forward
//!   block, a block's residual connection, attention calls and copies of layers;
//! - `encoder.rs`: [`TransformerEncoderLayer`] and the stack [`TransformerEncoder`];
//! - `decoder.rs`: [`TransformerDecoderLayer`] and the stack [`TransformerDecoder`].

mod decoder;
mod encoder;
mod options;
mod parts;

pub use decoder::{TransformerDecoder, TransformerDecoderLayer};
pub use encoder::{TransformerEncoder, TransformerEncoderLayer};
pub use options::{DecoderMasks, EncoderMasks, TransformerActivation, TransformerLayerOptions};
