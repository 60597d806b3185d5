//! The layers, one file per concern.

mod activation;
mod container;
mod dropout;
mod embedding;
mod flatten;
mod identity;
mod linear;
mod norm;

pub use activation::{GELU, GeluApproximation, LeakyReLU, LogSoftmax, ReLU, SiLU, Sigmoid, Softmax, Tanh};
pub use container::{Children, Sequential};
pub use dropout::{Dropout, dropout};
pub use embedding::{Embedding, EmbeddingOptions, embedding};
pub use flatten::Flatten;
pub use identity::Identity;
pub use linear::{Linear, LinearOptions};
pub use norm::{LayerNorm, LayerNormOptions, layer_norm};
