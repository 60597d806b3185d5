//! [`ResNetConfig`]: the shape of a torchvision ResNet, from its name or read off a state
//! dict (torchvision's checkpoints carry no configuration).

use ember_io::StateDict;
use ember_tensor::{Error, Result};
use std::path::Path;

/// The residual block of a ResNet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockKind {
    /// Two 3x3 convolutions (ResNet-18, -34); expansion 1.
    Basic,
    /// 1x1, 3x3 (strided, as torchvision's "v1.5"), 1x1 with 4x the channels (ResNet-50,
    /// -101, -152).
    Bottleneck,
}

impl BlockKind {
    /// The ratio of a block's output channels to its width.
    pub fn expansion(self) -> usize {
        match self {
            BlockKind::Basic => 1,
            BlockKind::Bottleneck => 4,
        }
    }
}

/// The configuration of torchvision's `ResNet`: the block, the number of blocks of each of
/// the four stages, the classes, and the stem's width (64 in torchvision; the stages have
/// 1, 2, 4 and 8 times it, times the block's expansion).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResNetConfig {
    /// BasicBlock or Bottleneck.
    pub block: BlockKind,
    /// Blocks per stage (`layer1` .. `layer4`).
    pub layers: [usize; 4],
    /// Outputs of `fc`.
    pub num_classes: usize,
    /// Channels of the stem (`conv1`); torchvision's models have 64.
    pub width: usize,
    /// Channels of the input image.
    pub in_channels: usize,
}

impl ResNetConfig {
    fn named(block: BlockKind, layers: [usize; 4], num_classes: usize) -> Self {
        ResNetConfig { block, layers, num_classes, width: 64, in_channels: 3 }
    }

    /// torchvision's `resnet18`.
    pub fn resnet18(num_classes: usize) -> Self {
        Self::named(BlockKind::Basic, [2, 2, 2, 2], num_classes)
    }

    /// torchvision's `resnet34`.
    pub fn resnet34(num_classes: usize) -> Self {
        Self::named(BlockKind::Basic, [3, 4, 6, 3], num_classes)
    }

    /// torchvision's `resnet50`.
    pub fn resnet50(num_classes: usize) -> Self {
        Self::named(BlockKind::Bottleneck, [3, 4, 6, 3], num_classes)
    }

    /// torchvision's `resnet101`.
    pub fn resnet101(num_classes: usize) -> Self {
        Self::named(BlockKind::Bottleneck, [3, 4, 23, 3], num_classes)
    }

    /// torchvision's `resnet152`.
    pub fn resnet152(num_classes: usize) -> Self {
        Self::named(BlockKind::Bottleneck, [3, 8, 36, 3], num_classes)
    }

    /// With the stem's width `width` instead of 64 (narrow models for tests and small
    /// data).
    pub fn with_width(mut self, width: usize) -> Self {
        self.width = width;
        self
    }

    /// The width of `fc`'s input: `8 * width * expansion`.
    pub fn features(&self) -> usize {
        8 * self.width * self.block.expansion()
    }

    /// Reads the configuration off a torchvision state dict: the block from
    /// `layer1.0.conv3` (Bottleneck) or its absence, the blocks per stage from the
    /// `layerN.M.` keys, the width and input channels from `conv1.weight`, the classes from
    /// `fc.weight`. Errors name `source` and the key that is missing or malformed.
    pub fn infer(state: &StateDict, source: &Path) -> Result<ResNetConfig> {
        let dims = |key: &str| -> Result<Vec<usize>> {
            state
                .get(key)
                .map(|t| t.shape().dims().to_vec())
                .ok_or_else(|| Error::format(source, format!("not a torchvision ResNet state dict: missing key {key}")))
        };
        let conv1 = dims("conv1.weight")?;
        let fc = dims("fc.weight")?;
        if conv1.len() != 4 || fc.len() != 2 {
            return Err(Error::format(
                source,
                format!("conv1.weight has shape {conv1:?} and fc.weight {fc:?}; expected 4 and 2 dimensions"),
            ));
        }
        let block = if state.contains_key("layer1.0.conv3.weight") { BlockKind::Bottleneck } else { BlockKind::Basic };
        let mut layers = [0; 4];
        for (stage, count) in layers.iter_mut().enumerate() {
            let prefix = format!("layer{}.", stage + 1);
            *count = state
                .keys()
                .filter_map(|k| k.strip_prefix(&prefix)?.split('.').next()?.parse::<usize>().ok())
                .max()
                .map_or(0, |m| m + 1);
            if *count == 0 {
                return Err(Error::format(source, format!("not a torchvision ResNet state dict: no keys {prefix}*")));
            }
        }
        Ok(ResNetConfig { block, layers, num_classes: fc[0], width: conv1[0], in_channels: conv1[1] })
    }
}
