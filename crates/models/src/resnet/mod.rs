//! torchvision's ResNets (18, 34, 50, 101, 152, and narrower ones of the same layout),
//! loaded from torchvision's `.pth` state dicts.
//!
//! - [`config`]: [`ResNetConfig`] (block, depth, width, classes), named or read off a
//!   state dict; [`BlockKind`].
//! - [`model`]: [`ResNet`], [`BasicBlock`], [`Bottleneck`], [`Downsample`], named as
//!   torchvision's modules (`conv1`, `bn1`, `layer1.0.conv1`, `layer2.0.downsample.0`,
//!   `fc`).
//! - `fold`: inference with each batch norm folded into its convolution.
//! - `load`: [`ResNet::from_pretrained`], [`ResNet::from_pretrained_with`],
//!   [`ResNet::save_pretrained`].

pub mod config;
mod fold;
mod load;
pub mod model;

pub use config::{BlockKind, ResNetConfig};
pub use model::{BasicBlock, Bottleneck, Downsample, ResNet};
