//! [`ResNet`] and its blocks, [`BasicBlock`] and [`Bottleneck`], with torchvision's module
//! names, so that `state_dict` keys are a torchvision checkpoint's.

use super::config::{BlockKind, ResNetConfig};
use super::fold::{self, FoldCache, residual_relu};
use ember_autograd::Var;
use ember_nn::functional::MaxPoolArgs;
use ember_nn::{AdaptiveAvgPool2d, BatchNorm2d, Conv2d, Conv2dOptions, Linear, MaxPool2d, Module};
use ember_tensor::{Error, Result};

/// A bias-free convolution, as every convolution of a ResNet is.
fn conv(cin: usize, cout: usize, kernel: usize, stride: usize, padding: usize) -> Result<Conv2d> {
    Conv2d::with_options(cin, cout, kernel, Conv2dOptions::default().bias(false).stride(stride).padding(padding))
}

/// torchvision's `downsample`: a strided 1x1 convolution and batch norm on the shortcut,
/// where the block changes the shape (`downsample.0`, `downsample.1`, as torchvision's
/// `Sequential`).
#[derive(Module)]
pub struct Downsample {
    #[module(rename = "0")]
    conv: Conv2d,
    #[module(rename = "1")]
    bn: BatchNorm2d,
    #[module(skip)]
    fold: FoldCache,
}

impl Downsample {
    /// The shortcut from `cin` to `cout` channels strided by `stride`, or `None` where the
    /// block keeps the shape.
    fn new(cin: usize, cout: usize, stride: usize) -> Result<Option<Downsample>> {
        if stride == 1 && cin == cout {
            return Ok(None);
        }
        Ok(Some(Downsample {
            conv: conv(cin, cout, 1, stride, 0)?,
            bn: BatchNorm2d::new(cout)?,
            fold: FoldCache::default(),
        }))
    }

    fn forward(&self, x: &Var) -> Result<Var> {
        self.fold.forward(&self.conv, &self.bn, x, false)
    }
}

/// The shortcut: the input, or its downsampling.
fn shortcut(downsample: &Option<Downsample>, x: &Var) -> Result<Var> {
    match downsample {
        Some(d) => d.forward(x),
        None => Ok(x.clone()),
    }
}

/// torchvision's `BasicBlock`: `relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))`, the
/// first convolution strided.
#[derive(Module)]
pub struct BasicBlock {
    conv1: Conv2d,
    bn1: BatchNorm2d,
    conv2: Conv2d,
    bn2: BatchNorm2d,
    downsample: Option<Downsample>,
    #[module(skip)]
    folds: [FoldCache; 2],
}

impl BasicBlock {
    /// A block from `inplanes` channels to `planes`, strided by `stride`.
    pub fn new(inplanes: usize, planes: usize, stride: usize) -> Result<BasicBlock> {
        Ok(BasicBlock {
            conv1: conv(inplanes, planes, 3, stride, 1)?,
            bn1: BatchNorm2d::new(planes)?,
            conv2: conv(planes, planes, 3, 1, 1)?,
            bn2: BatchNorm2d::new(planes)?,
            downsample: Downsample::new(inplanes, planes, stride)?,
            folds: Default::default(),
        })
    }

    fn forward(&self, x: &Var) -> Result<Var> {
        let y = self.folds[0].forward(&self.conv1, &self.bn1, x, true)?;
        let y = self.folds[1].forward(&self.conv2, &self.bn2, &y, false)?;
        residual_relu(y, &shortcut(&self.downsample, x)?, fold::applies(&self.conv2, &self.bn2))
    }
}

/// torchvision's `Bottleneck` (ResNet "v1.5": the 3x3 convolution is the strided one):
/// 1x1 to `planes`, 3x3, 1x1 to `4 * planes`, plus the shortcut.
#[derive(Module)]
pub struct Bottleneck {
    conv1: Conv2d,
    bn1: BatchNorm2d,
    conv2: Conv2d,
    bn2: BatchNorm2d,
    conv3: Conv2d,
    bn3: BatchNorm2d,
    downsample: Option<Downsample>,
    #[module(skip)]
    folds: [FoldCache; 3],
}

impl Bottleneck {
    /// A block from `inplanes` channels to `4 * planes`, strided by `stride`.
    pub fn new(inplanes: usize, planes: usize, stride: usize) -> Result<Bottleneck> {
        let out = planes * BlockKind::Bottleneck.expansion();
        Ok(Bottleneck {
            conv1: conv(inplanes, planes, 1, 1, 0)?,
            bn1: BatchNorm2d::new(planes)?,
            conv2: conv(planes, planes, 3, stride, 1)?,
            bn2: BatchNorm2d::new(planes)?,
            conv3: conv(planes, out, 1, 1, 0)?,
            bn3: BatchNorm2d::new(out)?,
            downsample: Downsample::new(inplanes, out, stride)?,
            folds: Default::default(),
        })
    }

    fn forward(&self, x: &Var) -> Result<Var> {
        let y = self.folds[0].forward(&self.conv1, &self.bn1, x, true)?;
        let y = self.folds[1].forward(&self.conv2, &self.bn2, &y, true)?;
        let y = self.folds[2].forward(&self.conv3, &self.bn3, &y, false)?;
        residual_relu(y, &shortcut(&self.downsample, x)?, fold::applies(&self.conv3, &self.bn3))
    }
}

/// torchvision's ResNet: a 7x7 stride-2 stem with batch norm, ReLU and 3x3 stride-2 max
/// pooling, four stages of residual blocks (`layer1` .. `layer4`, the last three halving
/// the resolution), global average pooling and `fc`. Takes `[batch, 3, H, W]` images
/// (normalised as the checkpoint was trained: ImageNet's mean and std for torchvision's)
/// and gives logits `[batch, num_classes]`.
///
/// Inference (evaluation mode under `no_grad`) folds each batch norm into the convolution
/// before it and runs the ReLUs and residual adds in place; the folded weights (one more
/// copy of the convolutions' weights) are kept until a weight or running statistic changes.
///
/// ```
/// use ember_autograd::Var;
/// use ember_models::resnet::{ResNet, ResNetConfig};
/// use ember_nn::Module;
/// use ember_tensor::Tensor;
/// let model = ResNet::new(&ResNetConfig::resnet18(10).with_width(8))?;
/// model.eval();
/// let logits = model.forward(&Var::new(Tensor::randn([2, 3, 32, 32])?))?;
/// assert_eq!(logits.shape().dims(), &[2, 10]);
/// assert!(model.state_dict().contains_key("layer2.0.downsample.1.running_mean"));
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Module)]
pub struct ResNet {
    conv1: Conv2d,
    bn1: BatchNorm2d,
    layer1: Vec<Box<dyn Module>>,
    layer2: Vec<Box<dyn Module>>,
    layer3: Vec<Box<dyn Module>>,
    layer4: Vec<Box<dyn Module>>,
    fc: Linear,
    #[module(skip)]
    config: ResNetConfig,
    #[module(skip)]
    stem: FoldCache,
}

impl ResNet {
    /// A randomly initialised ResNet of `config` (ember's default initialisation, not
    /// torchvision's Kaiming-normal one).
    pub fn new(config: &ResNetConfig) -> Result<ResNet> {
        if config.width == 0 || config.num_classes == 0 || config.in_channels == 0 {
            return Err(Error::invalid(
                "ResNet",
                format!("width, num_classes and in_channels must be positive: {config:?}"),
            ));
        }
        let mut inplanes = config.width;
        let mut stage = |index: usize, stride: usize| -> Result<Vec<Box<dyn Module>>> {
            let planes = config.width << index;
            let mut blocks: Vec<Box<dyn Module>> = Vec::new();
            for b in 0..config.layers[index] {
                let s = if b == 0 { stride } else { 1 };
                blocks.push(match config.block {
                    BlockKind::Basic => Box::new(BasicBlock::new(inplanes, planes, s)?),
                    BlockKind::Bottleneck => Box::new(Bottleneck::new(inplanes, planes, s)?),
                });
                inplanes = planes * config.block.expansion();
            }
            Ok(blocks)
        };
        let (layer1, layer2, layer3, layer4) = (stage(0, 1)?, stage(1, 2)?, stage(2, 2)?, stage(3, 2)?);
        Ok(ResNet {
            conv1: conv(config.in_channels, config.width, 7, 2, 3)?,
            bn1: BatchNorm2d::new(config.width)?,
            layer1,
            layer2,
            layer3,
            layer4,
            fc: Linear::new(config.features(), config.num_classes)?,
            config: *config,
            stem: FoldCache::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ResNetConfig {
        &self.config
    }

    /// The classifier, `features -> num_classes`.
    pub fn fc(&self) -> &Linear {
        &self.fc
    }

    /// Replaces `fc` with a freshly initialised one of `num_classes` outputs (in the
    /// model's dtype), for fine-tuning on other classes.
    pub fn replace_fc(&mut self, num_classes: usize) -> Result<()> {
        let fc = Linear::new(self.config.features(), num_classes)?;
        let dtype = self.fc.weight().dtype();
        if dtype != fc.weight().dtype() {
            fc.to_dtype(dtype)?;
        }
        self.fc = fc;
        self.config.num_classes = num_classes;
        Ok(())
    }

    /// Everything but `fc`: the parameters a frozen-backbone fine-tuning leaves alone.
    pub fn backbone_parameters(&self) -> Vec<Var> {
        let fc: Vec<usize> = self.fc.parameters().iter().map(|p| p.id()).collect();
        self.parameters().into_iter().filter(|p| !fc.contains(&p.id())).collect()
    }

    /// The globally pooled features `[batch, features]`, `fc`'s input.
    pub fn features(&self, x: &Var) -> Result<Var> {
        let x = self.stem.forward(&self.conv1, &self.bn1, x, true)?;
        let mut x = MaxPool2d { args: MaxPoolArgs::new(3).stride(2).padding(1) }.forward(&x)?;
        for stage in [&self.layer1, &self.layer2, &self.layer3, &self.layer4] {
            for block in stage {
                x = block.forward(&x)?;
            }
        }
        AdaptiveAvgPool2d::new(1).forward(&x)?.flatten(1, -1)
    }

    fn forward(&self, x: &Var) -> Result<Var> {
        self.fc.forward(&self.features(x)?)
    }
}
