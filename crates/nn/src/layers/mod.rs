//! The layers, one file per concern.

mod activation;
mod container;
mod dropout;
mod flatten;
mod identity;
mod linear;

pub use activation::{GELU, GeluApproximation, LeakyReLU, LogSoftmax, ReLU, SiLU, Sigmoid, Softmax, Tanh};
pub use container::{Children, Sequential};
pub use dropout::{Dropout, dropout};
pub use flatten::Flatten;
pub use identity::Identity;
pub use linear::{Linear, LinearOptions};
