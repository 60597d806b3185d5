//! PyTorch parity of a small ResNet-style network: convolutions, batch norm, ReLU, residual
//! additions, max and adaptive average pooling and a linear head, loaded from the
//! safetensors `state_dict` PyTorch saved. One training-mode step must give PyTorch's
//! logits, loss, every parameter's and the input's gradient and the updated running
//! statistics; evaluation mode (with those statistics) its logits, loss and gradients.
//!
//! The fixtures are written by `tools/parity/resnet.py` (float64): the state in
//! `tools/parity/fixtures/resnet_state.safetensors`, the inputs and PyTorch's results in
//! `resnet_expected.safetensors`.

use ember_autograd::Var;
use ember_nn::{
    AdaptiveAvgPool2d, BatchNorm2d, BatchNormOptions, Conv2d, Conv2dOptions, CrossEntropyOptions, Flatten, Linear,
    LinearOptions, MaxPool2d, Module, ModuleExt, ReLU, StateDict, cross_entropy, load_safetensors,
};
use ember_tensor::{DType, Result, Tensor};
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/parity/fixtures").join(name)
}

/// The parameters of named children, under `child.name`.
fn prefixed_parameters(kids: &[(&str, &dyn Module)]) -> Vec<(String, Var)> {
    kids.iter().flat_map(|(k, m)| m.named_parameters().into_iter().map(move |(n, p)| (format!("{k}.{n}"), p))).collect()
}

/// The buffers of named children, under `child.name`.
fn prefixed_buffers(kids: &[(&str, &dyn Module)]) -> Vec<(String, Tensor)> {
    kids.iter().flat_map(|(k, m)| m.named_buffers().into_iter().map(move |(n, b)| (format!("{k}.{n}"), b))).collect()
}

fn conv(cin: usize, cout: usize, k: usize, stride: usize, pad: usize) -> Result<Conv2d> {
    let o = Conv2dOptions { bias: false, dtype: DType::F64, ..Default::default() }.stride(stride).padding(pad);
    Conv2d::with_options(cin, cout, k, o)
}

fn bn(c: usize) -> Result<BatchNorm2d> {
    BatchNorm2d::with_options(c, BatchNormOptions { dtype: DType::F64, ..Default::default() })
}

/// PyTorch's `BasicBlock`: conv-BN-ReLU-conv-BN plus the (downsampled) input, then ReLU.
struct Block {
    conv1: Conv2d,
    bn1: BatchNorm2d,
    conv2: Conv2d,
    bn2: BatchNorm2d,
    /// `downsample.0` (1x1 conv) and `downsample.1` (BN) where the shape changes.
    downsample: Option<(Conv2d, BatchNorm2d)>,
}

impl Block {
    fn new(cin: usize, cout: usize, stride: usize) -> Result<Block> {
        let downsample =
            if stride != 1 || cin != cout { Some((conv(cin, cout, 1, stride, 0)?, bn(cout)?)) } else { None };
        Ok(Block {
            conv1: conv(cin, cout, 3, stride, 1)?,
            bn1: bn(cout)?,
            conv2: conv(cout, cout, 3, 1, 1)?,
            bn2: bn(cout)?,
            downsample,
        })
    }

    fn kids(&self) -> Vec<(&str, &dyn Module)> {
        let mut k: Vec<(&str, &dyn Module)> =
            vec![("conv1", &self.conv1), ("bn1", &self.bn1), ("conv2", &self.conv2), ("bn2", &self.bn2)];
        if let Some((c, b)) = &self.downsample {
            k.push(("downsample.0", c));
            k.push(("downsample.1", b));
        }
        k
    }
}

impl Module for Block {
    fn forward(&self, x: &Var) -> Result<Var> {
        let identity = match &self.downsample {
            Some((c, b)) => b.forward(&c.forward(x)?)?,
            None => x.clone(),
        };
        let y = ReLU.forward(&self.bn1.forward(&self.conv1.forward(x)?)?)?;
        let y = self.bn2.forward(&self.conv2.forward(&y)?)?;
        ReLU.forward(&y.add(&identity)?)
    }
    fn named_parameters(&self) -> Vec<(String, Var)> {
        prefixed_parameters(&self.kids())
    }
    fn named_buffers(&self) -> Vec<(String, Tensor)> {
        prefixed_buffers(&self.kids())
    }
    fn set_training(&self, on: bool) {
        self.kids().iter().for_each(|(_, m)| m.set_training(on));
    }
    fn is_training(&self) -> bool {
        self.bn1.is_training()
    }
}

/// The network of `tools/parity/resnet.py`, with PyTorch's `state_dict` names.
struct Net {
    conv1: Conv2d,
    bn1: BatchNorm2d,
    layer1: Block,
    layer2: Block,
    fc: Linear,
}

impl Net {
    fn new() -> Result<Net> {
        Ok(Net {
            conv1: conv(3, 8, 3, 1, 1)?,
            bn1: bn(8)?,
            layer1: Block::new(8, 8, 1)?,
            layer2: Block::new(8, 16, 2)?,
            fc: Linear::with_options(16, 10, LinearOptions { dtype: DType::F64, ..Default::default() })?,
        })
    }

    fn kids(&self) -> Vec<(&str, &dyn Module)> {
        vec![
            ("conv1", &self.conv1),
            ("bn1", &self.bn1),
            ("layer1", &self.layer1),
            ("layer2", &self.layer2),
            ("fc", &self.fc),
        ]
    }
}

impl Module for Net {
    fn forward(&self, x: &Var) -> Result<Var> {
        let x = MaxPool2d::new(2).forward(&ReLU.forward(&self.bn1.forward(&self.conv1.forward(x)?)?)?)?;
        let x = self.layer2.forward(&self.layer1.forward(&x)?)?;
        let pooled = Flatten::new().forward(&AdaptiveAvgPool2d::new(1).forward(&x)?)?;
        self.fc.forward(&pooled)
    }
    fn named_parameters(&self) -> Vec<(String, Var)> {
        prefixed_parameters(&self.kids())
    }
    fn named_buffers(&self) -> Vec<(String, Tensor)> {
        prefixed_buffers(&self.kids())
    }
    fn set_training(&self, on: bool) {
        self.kids().iter().for_each(|(_, m)| m.set_training(on));
    }
    fn is_training(&self) -> bool {
        self.bn1.is_training()
    }
}

/// Checks `actual` against `expected[key]` within `1e-10 + 1e-9 |expected|`; returns the
/// mismatch, if any, as a message.
fn mismatch(expected: &StateDict, key: &str, actual: &Tensor) -> Option<String> {
    let Some(want) = expected.get(key) else { return Some(format!("{key}: not in the fixture")) };
    if want.shape() != actual.shape() {
        return Some(format!("{key}: shape {} but PyTorch's is {}", actual.shape(), want.shape()));
    }
    let (a, w) = match (actual.to_dtype(DType::F64).to_vec::<f64>(), want.to_dtype(DType::F64).to_vec::<f64>()) {
        (Ok(a), Ok(w)) => (a, w),
        (Err(e), _) | (_, Err(e)) => return Some(format!("{key}: {e}")),
    };
    let worst = a.iter().zip(&w).map(|(x, y)| (x - y).abs() - 1e-9 * y.abs()).fold(f64::MIN, f64::max);
    (worst > 1e-10).then(|| format!("{key}: off by {worst:e} beyond the tolerance"))
}

/// One forward and backward in the current mode on `{phase}.input`; checks logits, loss and
/// gradients against `{phase}.*`.
fn step(net: &Net, expected: &StateDict, phase: &str, failures: &mut Vec<String>) -> Result<()> {
    let get = |k: &str| expected.get(&format!("{phase}.{k}")).cloned();
    let (Some(input), Some(target)) = (get("input"), get("target")) else {
        failures.push(format!("{phase}: the fixture has no input or target"));
        return Ok(());
    };
    let x = Var::param(input);
    net.zero_grad();
    let logits = net.forward(&x)?;
    let loss = cross_entropy(&logits, &target, CrossEntropyOptions::default())?;
    loss.backward()?;
    failures.extend(mismatch(expected, &format!("{phase}.logits"), &logits.value()));
    failures.extend(mismatch(expected, &format!("{phase}.loss"), &loss.value()));
    let grad = |v: &Var| v.grad().unwrap_or_else(|| Tensor::zeros(v.shape().clone(), DType::F64).expect("zeros"));
    failures.extend(mismatch(expected, &format!("{phase}.grad.input"), &grad(&x)));
    for (name, p) in net.named_parameters() {
        failures.extend(mismatch(expected, &format!("{phase}.grad.{name}"), &grad(&p)));
    }
    Ok(())
}

#[test]
fn small_resnet_matches_pytorch_in_train_and_eval_mode() -> Result<()> {
    let net = Net::new()?;
    net.load(fixture("resnet_state.safetensors"))?;
    let expected = load_safetensors(fixture("resnet_expected.safetensors"))?;
    let mut failures = Vec::new();

    net.train();
    step(&net, &expected, "train", &mut failures)?;
    let buffers = net.named_buffers();
    assert_eq!(buffers.len(), 6 * 3, "buffers: {:?}", buffers.iter().map(|(n, _)| n).collect::<Vec<_>>());
    for (name, b) in &buffers {
        failures.extend(mismatch(&expected, &format!("train.state.{name}"), b));
    }

    net.eval();
    step(&net, &expected, "eval", &mut failures)?;
    // Evaluation leaves the running statistics alone.
    for (name, b) in &net.named_buffers() {
        failures.extend(mismatch(&expected, &format!("train.state.{name}"), b));
    }
    assert!(failures.is_empty(), "{} mismatches with PyTorch:\n{}", failures.len(), failures.join("\n"));
    // Every fixture tensor was compared (or fed in): 2 x (logits, loss, input gradient, 20
    // parameter gradients) + 18 statistics + 2 x (input, target).
    assert_eq!(expected.len(), 2 * (3 + net.named_parameters().len()) + buffers.len() + 4);
    assert_eq!(net.named_parameters().len(), 20);
    Ok(())
}
