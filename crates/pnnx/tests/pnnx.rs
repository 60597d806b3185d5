//! PNNX models converted by PyTorch's PNNX tool (`tools/parity/pnnx_models.py`): an MLP, a
//! CNN with BatchNorm and pooling, and a Transformer encoder give PyTorch's outputs; the
//! loaded model fine-tunes like any module; damaged files are errors naming the file and
//! the operator.

use ember_autograd::Var;
use ember_io::pt::{PtValue, load_pt_value};
use ember_nn::Module;
use ember_tensor::{Result, Tensor};
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/parity/fixtures/pnnx")).join(name)
}

fn model(name: &str) -> Result<ember_pnnx::PnnxModel> {
    ember_pnnx::load(fixture(&format!("{name}.pnnx.param")), fixture(&format!("{name}.pnnx.bin")))
}

/// PyTorch's input and output for `name`.
fn io(name: &str) -> Result<(Tensor, Tensor)> {
    let all = load_pt_value(fixture("io.pt"))?;
    let get = |k: &str| all.get(name).and_then(|m| m.get(k)).and_then(PtValue::as_tensor).cloned().unwrap();
    Ok((get("input"), get("output")))
}

fn matches_pytorch(name: &str) -> Result<()> {
    let m = model(name)?;
    let (x, expected) = io(name)?;
    let out = m.infer(&[x])?;
    assert_eq!(out[0].shape(), expected.shape(), "{name}");
    let (a, b) = (out[0].to_vec::<f32>()?, expected.to_vec::<f32>()?);
    for (i, (u, v)) in a.iter().zip(&b).enumerate() {
        assert!((u - v).abs() <= 1e-5 * (1.0 + v.abs()), "{name}[{i}]: ember {u}, PyTorch {v}");
    }
    Ok(())
}

#[test]
fn an_mlp_gives_pytorchs_outputs() -> Result<()> {
    matches_pytorch("mlp")
}

#[test]
fn a_cnn_with_batch_norm_and_pooling_gives_pytorchs_outputs() -> Result<()> {
    matches_pytorch("cnn")
}

#[test]
fn a_transformer_encoder_gives_pytorchs_outputs() -> Result<()> {
    matches_pytorch("encoder")
}

#[test]
fn a_loaded_model_fine_tunes_with_frozen_layers_left_alone() -> Result<()> {
    let m = model("cnn")?;
    let names: Vec<String> = m.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        ["conv1.weight", "conv1.bias", "bn.weight", "bn.bias", "conv2.weight", "conv2.bias", "fc.weight", "fc.bias"]
    );
    assert!(m.named_buffers().iter().any(|(n, _)| n == "bn.running_mean"));
    for (n, p) in m.named_parameters() {
        if n.starts_with("conv1.") {
            p.requires_grad_(false)?;
        }
    }
    let (x, _) = io("cnn")?;
    let before = m.infer(std::slice::from_ref(&x))?[0].to_vec::<f32>()?;
    let loss = m.forward(&Var::new(x.clone()))?.sum_all();
    loss.backward()?;
    for (n, p) in m.named_parameters() {
        assert_eq!(p.grad().is_some(), !n.starts_with("conv1."), "{n}");
        if let Some(g) = p.grad() {
            // One plain gradient step on the trainable parameters.
            ember_autograd::no_grad(|| p.value().sub_(&g.mul_scalar(0.1)))?;
        }
    }
    let after = m.infer(&[x])?[0].to_vec::<f32>()?;
    assert_ne!(before, after, "the step changed the outputs");
    Ok(())
}

/// The error loading `param` text with the MLP's weights gives.
fn param_error(param: &str) -> String {
    let path = std::env::temp_dir().join(format!("ember-pnnx-{}-{}.param", std::process::id(), param.len()));
    std::fs::write(&path, param).unwrap();
    let err = ember_pnnx::load(&path, fixture("mlp.pnnx.bin")).err().expect("an error").to_string();
    std::fs::remove_file(&path).ok();
    err
}

#[test]
fn damaged_files_are_errors_naming_the_file_and_operator() {
    let good = std::fs::read_to_string(fixture("mlp.pnnx.param")).unwrap();
    let err = param_error(&good.replacen("7767517", "1234", 1));
    assert!(err.contains("magic"), "{err}");
    let err = param_error(&good.replacen("nn.ReLU", "nn.Hardswish", 1));
    assert!(err.contains("nn.Hardswish") && err.contains("not supported") && err.contains("line"), "{err}");
    let err = param_error(&good.replacen(
        "out_features=16 @bias=(16)f32 @weight=(16,784)f32",
        "out_features=16 @bias=(16)f32 @weight=(16,783)f32",
        1,
    ));
    assert!(err.contains("weight"), "{err}");
    let err = param_error(&good.replacen("in_features=784", "in_features=785", 1));
    assert!(err.contains("shape") || err.contains("785"), "{err}");
    // A blob read before it is written.
    let lines: Vec<&str> = good.lines().collect();
    let mut swapped = lines.clone();
    swapped.swap(3, 4);
    let err = param_error(&(swapped.join("\n") + "\n"));
    assert!(err.contains("no earlier operator writes"), "{err}");
    let err = param_error(&good.replacen("7 6", "9 6", 1));
    assert!(err.contains("declares 9 operators"), "{err}");
    // Weights: truncated or not a zip.
    let bin = std::fs::read(fixture("mlp.pnnx.bin")).unwrap();
    for cut in [0, 100, bin.len() / 2] {
        let path = std::env::temp_dir().join(format!("ember-pnnx-{}-cut{cut}.bin", std::process::id()));
        std::fs::write(&path, &bin[..cut]).unwrap();
        let err = ember_pnnx::load(fixture("mlp.pnnx.param"), &path).err().expect("an error").to_string();
        std::fs::remove_file(&path).ok();
        assert!(err.contains("ember-pnnx-"), "the error names the weight file: {err}");
    }
}
