//! ember runs PyTorch's ONNX exports (tools/parity/onnx.py) and matches PyTorch's outputs,
//! and an imported model fine-tunes.

use ember_autograd::Var;
use ember_io::load_safetensors;
use ember_nn::Module;
use ember_optim::{Optimizer, Sgd};
use ember_tensor::{Result, Tensor};
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/parity/fixtures").join(name)
}

fn io(name: &str) -> Result<(Tensor, Tensor)> {
    let sd = load_safetensors(fixture("onnx_io.safetensors"))?;
    let get = |k: String| {
        sd.get(&k).cloned().ok_or_else(|| ember_tensor::Error::invalid("test", format!("fixture lacks {k}")))
    };
    Ok((get(format!("{name}.input"))?, get(format!("{name}.expected"))?))
}

fn max_diff(a: &Tensor, b: &Tensor) -> Result<f32> {
    assert_eq!(a.shape(), b.shape());
    let (a, b) = (a.to_vec::<f32>()?, b.to_vec::<f32>()?);
    Ok(a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max))
}

fn check(name: &str) -> Result<()> {
    let model = ember_onnx::load(fixture(&format!("onnx_{name}.onnx")))?;
    let (x, expected) = io(name)?;
    let y = model.forward(&Var::new(x))?;
    let d = max_diff(&y.value(), &expected)?;
    assert!(d <= 1e-5, "{name}: max abs difference {d}");
    Ok(())
}

#[test]
fn mlp_matches_pytorch() -> Result<()> {
    check("mlp")
}

#[test]
fn cnn_with_batch_norm_matches_pytorch() -> Result<()> {
    check("cnn")
}

#[test]
fn transformer_encoder_matches_pytorch() -> Result<()> {
    check("transformer")
}

#[test]
fn imported_parameters_keep_pytorch_names() -> Result<()> {
    let model = ember_onnx::load(fixture("onnx_cnn.onnx"))?;
    let names: Vec<String> = model.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert!(names.iter().any(|n| n == "head.weight"), "{names:?}");
    let buffers: Vec<String> = model.named_buffers().into_iter().map(|(n, _)| n).collect();
    assert!(buffers.iter().any(|n| n.ends_with("running_mean")), "{buffers:?}");
    assert!(model.parameters().iter().all(Var::requires_grad));
    Ok(())
}

#[test]
fn one_sgd_step_changes_outputs_and_spares_frozen_parameters() -> Result<()> {
    let model = ember_onnx::load(fixture("onnx_mlp.onnx"))?;
    let (x, _) = io("mlp")?;
    let x = Var::new(x);
    let params = model.named_parameters();
    let (frozen_name, frozen) = params.iter().find(|(n, _)| n.starts_with("0.")).cloned().expect("first layer");
    frozen.freeze()?;
    let before_frozen = frozen.value().to_vec::<f32>()?;
    let before = model.forward(&x)?.value();
    let mut opt = Sgd::with_params(model.parameters()).lr(0.1).build()?;
    let loss = model.forward(&x)?.square().mean_all();
    opt.zero_grad();
    loss.backward()?;
    opt.step()?;
    let after = model.forward(&x)?.value();
    assert!(max_diff(&before, &after)? > 1e-4, "the step changed nothing");
    assert_eq!(frozen.value().to_vec::<f32>()?, before_frozen, "{frozen_name} is frozen but changed");
    Ok(())
}
