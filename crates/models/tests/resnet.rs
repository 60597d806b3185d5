//! torchvision-layout ResNets against PyTorch: ResNet-18 (BasicBlock) and ResNet-50
//! (Bottleneck) layouts at base width 4, from `torch.save` state dicts, eval-mode logits
//! with non-trivial running statistics; a bf16 checkpoint converted and native; errors
//! naming the file and the key; a save / load round trip; the gradient of a block.
//! Fixtures: `tools/parity/model_fixtures/resnet.py`.

mod encoders_common;

use ember_autograd::{Var, gradcheck, no_grad};
use ember_io::{LoadOptions, load_pt, save_pt};
use ember_models::resnet::{BasicBlock, BlockKind, Bottleneck, ResNet, ResNetConfig};
use ember_nn::Module;
use ember_tensor::{DType, Tensor};
use encoders_common::*;

fn input() -> (Var, ember_io::StateDict) {
    let want = expected(&fixture("resnet"));
    (Var::new(want.get("input").unwrap().clone()), want)
}

#[test]
fn resnet18_layout_logits_match_pytorch() {
    let (x, want) = input();
    let model = ResNet::from_pretrained(&fixture("resnet/resnet18_w4.pth")).unwrap();
    assert_eq!(*model.config(), ResNetConfig::resnet18(7).with_width(4));
    assert!(!model.is_training());
    let logits = model.forward(&x).unwrap();
    assert_close("resnet18 logits", &logits.value(), want.get("resnet18_w4.logits").unwrap(), 1e-4);
}

#[test]
fn resnet50_layout_logits_match_pytorch() {
    let (x, want) = input();
    let path = fixture("resnet/resnet50_w4.pth");
    let model = ResNet::from_pretrained(&path).unwrap();
    assert_eq!(model.config().block, BlockKind::Bottleneck);
    assert_eq!(model.config().layers, [3, 4, 6, 3]);
    let logits = model.forward(&x).unwrap();
    assert_close("resnet50 logits", &logits.value(), want.get("resnet50_w4.logits").unwrap(), 1e-4);
    // The named configuration loads the same file.
    let named =
        ResNet::from_pretrained_config(&path, &ResNetConfig::resnet50(5).with_width(4), &LoadOptions::default());
    assert!(named.is_ok());
}

#[test]
fn a_bf16_checkpoint_loads_converted_and_native() {
    let (x, want) = input();
    let path = fixture("resnet/resnet18_w4_bf16.pth");
    let converted = ResNet::from_pretrained_with(&path, &LoadOptions::default().dtype(DType::F32)).unwrap();
    let logits = converted.forward(&x).unwrap();
    assert_close("bf16->f32 logits", &logits.value(), want.get("resnet18_w4_bf16.logits").unwrap(), 1e-4);

    let native = ResNet::from_pretrained(&path).unwrap();
    assert!(native.parameters().iter().all(|p| p.dtype() == DType::BF16));
    let logits = native.forward(&x.to_dtype(DType::BF16)).unwrap();
    assert_eq!(logits.dtype(), DType::BF16);
    let scale = want.get("resnet18_w4_bf16.logits").unwrap().abs().max_all().unwrap().to_vec_f64().unwrap()[0];
    assert_close(
        "native bf16 logits",
        &logits.value().to_dtype(DType::F32),
        want.get("resnet18_w4_bf16.logits").unwrap(),
        0.05 * scale.max(1.0),
    );
}

#[test]
fn a_misnamed_or_misshapen_key_is_named_with_the_file() {
    let dir = scratch("resnet-keys");
    let state = load_pt(fixture("resnet/resnet18_w4.pth")).unwrap();

    let path = dir.join("misnamed.pth");
    save_pt(&path, &renamed(&state, "layer3.1.bn2.running_var", "layer3.1.bn2.running_variance")).unwrap();
    let err = ResNet::from_pretrained(&path).err().unwrap().to_string();
    assert!(err.contains("layer3.1.bn2.running_var") && err.contains("running_variance"), "{err}");
    assert!(err.contains("misnamed.pth"), "{err}");

    let mut bad = state.clone();
    bad.insert("layer2.0.conv2.weight", Tensor::zeros([8, 8, 1, 1], DType::F32).unwrap());
    let path = dir.join("shape.pth");
    save_pt(&path, &bad).unwrap();
    let err = ResNet::from_pretrained(&path).err().unwrap().to_string();
    assert!(err.contains("layer2.0.conv2.weight") && err.contains("shape.pth"), "{err}");

    // A file of another depth under a named configuration.
    let err = ResNet::from_pretrained_config(
        &fixture("resnet/resnet18_w4.pth"),
        &ResNetConfig::resnet34(7).with_width(4),
        &LoadOptions::default(),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("layer2.2.conv1.weight") && err.contains("resnet18_w4.pth"), "{err}");

    let path = dir.join("truncated.pth");
    let bytes = std::fs::read(fixture("resnet/resnet18_w4.pth")).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let err = ResNet::from_pretrained(&path).err().unwrap().to_string();
    assert!(err.contains("truncated.pth"), "{err}");

    let mut no_fc = state.clone();
    no_fc.remove("fc.weight");
    let path = dir.join("nofc.pth");
    save_pt(&path, &no_fc).unwrap();
    let err = ResNet::from_pretrained(&path).err().unwrap().to_string();
    assert!(err.contains("fc.weight") && err.contains("nofc.pth"), "{err}");
}

#[test]
fn save_pretrained_round_trips_and_replace_fc_gives_a_new_head() {
    let (x, want) = input();
    let mut model = ResNet::from_pretrained(&fixture("resnet/resnet18_w4.pth")).unwrap();
    let dir = scratch("resnet-save");
    for name in ["back.pth", "back.safetensors"] {
        model.save_pretrained(&dir.join(name)).unwrap();
        let back = ResNet::from_pretrained(&dir.join(name)).unwrap();
        assert_close(name, &back.forward(&x).unwrap().value(), want.get("resnet18_w4.logits").unwrap(), 1e-6);
    }
    let backbone = model.backbone_parameters().len();
    model.replace_fc(10).unwrap();
    assert_eq!(model.forward(&x).unwrap().shape().dims(), &[2, 10]);
    assert_eq!(model.backbone_parameters().len(), backbone);
    assert_eq!(model.parameters().len(), backbone + 2);
}

/// Inference (gradients off, evaluation mode) folds each batch norm into its convolution
/// and adds the residuals in place: the logits still match PyTorch's for both block kinds.
#[test]
fn folded_inference_logits_match_pytorch() {
    let (x, want) = input();
    for name in ["resnet18_w4", "resnet50_w4"] {
        let model = ResNet::from_pretrained(&fixture(&format!("resnet/{name}.pth"))).unwrap();
        let logits = no_grad(|| model.forward(&x)).unwrap();
        assert!(!logits.requires_grad());
        assert_close(name, &logits.value(), want.get(&format!("{name}.logits")).unwrap(), 1e-4);
        // A second forward reuses the folded weights and gives the same logits.
        let again = no_grad(|| model.forward(&x)).unwrap();
        assert_eq!(again.value().to_vec::<f32>().unwrap(), logits.value().to_vec::<f32>().unwrap());
    }
}

/// The folded weights follow the tensors they came from: after the running statistics and
/// a convolution's weight are written in place, or the whole state is replaced, inference
/// gives what the unfolded modules compute.
#[test]
fn folded_inference_follows_changed_weights() {
    let (x, _) = input();
    let model = ResNet::from_pretrained(&fixture("resnet/resnet50_w4.pth")).unwrap();
    let unfolded = |m: &ResNet| m.forward(&x).unwrap().value();
    let folded = |m: &ResNet| no_grad(|| m.forward(&x)).unwrap().value();
    assert_close("before", &folded(&model), &unfolded(&model), 1e-5);
    let state = model.state_dict();
    no_grad(|| {
        state.get("layer1.0.bn2.running_mean").unwrap().fill_(0.25).unwrap();
        state.get("layer2.0.downsample.1.running_var").unwrap().mul_scalar_(3.0).unwrap();
        state.get("conv1.weight").unwrap().mul_scalar_(0.5).unwrap();
        state.get("layer4.2.bn3.weight").unwrap().fill_(-1.0).unwrap();
    });
    let changed = unfolded(&model);
    assert_close("after in-place writes", &folded(&model), &changed, 1e-5);
    // Replacing the state with another model's (a fresh random one) is seen too.
    let other = ResNet::new(model.config()).unwrap();
    other.eval();
    model.load_state_dict(&other.state_dict()).unwrap();
    assert_close("after load_state_dict", &folded(&model), &unfolded(&other), 1e-5);
}

#[test]
fn blocks_pass_gradcheck() {
    ember_tensor::manual_seed(11);
    let basic = BasicBlock::new(2, 3, 2).unwrap();
    let bottleneck = Bottleneck::new(3, 1, 2).unwrap();
    for block in [&basic as &dyn Module, &bottleneck] {
        // Evaluation mode: batch norm with its running statistics, a fixed function.
        block.eval();
        block.to_dtype(DType::F64).unwrap();
        let x = Tensor::normal([1, block_in(block), 5, 5], 0.0, 1.0, DType::F64).unwrap();
        gradcheck(|v| block.forward(&v[0]), &[x], 1e-6, 1e-6, 1e-4).unwrap();
    }
}

fn block_in(block: &dyn Module) -> usize {
    block.named_parameters().into_iter().find(|(n, _)| n == "conv1.weight").unwrap().1.shape().dims()[1]
}
