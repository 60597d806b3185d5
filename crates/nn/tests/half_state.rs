//! 16-bit state dicts and modules: PyTorch's bf16 checkpoint loads into an f32 model with
//! conversion (as PyTorch's `load_state_dict` copies), matching PyTorch's own load bit for
//! bit, and `Module::to_dtype` converts a model as `model.to(torch.bfloat16)` does.
//! Fixtures by `tools/parity/half_formats.py`.

use ember_autograd::Var;
use ember_nn::{BatchNorm1d, Linear, Module, Sequential, load_pt};
use ember_tensor::{DType, Result, Tensor, bf16};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/parity/fixtures/half").join(name)
}

/// What PyTorch recorded for one state dict: name to (dtype name, bits).
fn recorded(key: &str) -> Vec<(String, String, Vec<u64>)> {
    let text = std::fs::read_to_string(fixture("values.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    v[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let bits = e["bits"].as_array().unwrap().iter().map(|b| b.as_i64().unwrap() as u64).collect();
            (e["name"].as_str().unwrap().to_string(), e["dtype"].as_str().unwrap().to_string(), bits)
        })
        .collect()
}

/// A tensor's values as `values.json` writes them: bit patterns for floats.
fn bits(t: &Tensor) -> Result<Vec<u64>> {
    Ok(match t.dtype() {
        DType::BF16 => t.to_vec::<bf16>()?.iter().map(|v| u64::from(v.to_bits())).collect(),
        DType::F32 => t.to_vec::<f32>()?.iter().map(|v| u64::from(v.to_bits())).collect(),
        DType::I64 => t.to_vec::<i64>()?.into_iter().map(|v| v as u64).collect(),
        other => panic!("no {other} in these fixtures"),
    })
}

/// PyTorch's `nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))`, in f32.
fn model() -> Result<Sequential> {
    Ok(Sequential::new().add(Linear::new(3, 2)?).add(BatchNorm1d::new(2)?))
}

fn assert_state_is(m: &Sequential, key: &str) -> Result<()> {
    let sd = m.state_dict();
    let want = recorded(key);
    assert_eq!(sd.keys().collect::<Vec<_>>(), want.iter().map(|(n, _, _)| n.as_str()).collect::<Vec<_>>());
    for (name, dtype, b) in &want {
        let t = sd.get(name).unwrap();
        assert_eq!(&t.dtype().to_string(), dtype, "{key}: {name}");
        assert_eq!(&bits(t)?, b, "{key}: {name}");
    }
    Ok(())
}

#[test]
fn bf16_checkpoint_loads_into_an_f32_model_as_pytorch_loads_it() -> Result<()> {
    let m = model()?;
    let before: Vec<Var> = m.parameters();
    m.load_state_dict(&load_pt(fixture("model_bf16.pt"))?)?;
    // Converted into the module's dtypes (f32 parameters and running statistics, the
    // i64 counter), bit for bit PyTorch's `load_state_dict` of the same file.
    assert_state_is(&m, "model_f32_loaded")?;
    // In place: the same parameter handles.
    assert!(before.iter().zip(m.parameters()).all(|(a, b)| a.id() == b.id()));
    Ok(())
}

#[test]
fn to_dtype_converts_parameters_gradients_and_float_buffers() -> Result<()> {
    let m = model()?;
    m.load_state_dict(&load_pt(fixture("model_bf16.pt"))?)?;
    // Evaluation mode: batch norm's running statistics stay as loaded.
    m.eval();
    let x = Var::new(Tensor::from_vec(vec![0.5f32, -1.0, 2.0, 1.5, 0.25, -0.75], [2, 3])?);
    m.forward(&x)?.square().sum_all().backward()?;
    let params = m.parameters();
    m.to_dtype(DType::BF16)?;
    // PyTorch's `model.bfloat16().state_dict()`, bit for bit (the f32 values came from
    // bf16, so rounding back is exact); the counter stays i64.
    assert_state_is(&m, "model_bf16")?;
    assert!(params.iter().zip(m.parameters()).all(|(a, b)| a.id() == b.id()));
    assert!(params.iter().all(|p| p.grad().is_some_and(|g| g.dtype() == DType::BF16)));
    // The converted model runs in bf16 and trains: gradients come back in bf16.
    m.zero_grad();
    let y = m.forward(&x.to_dtype(DType::BF16))?;
    assert_eq!(y.dtype(), DType::BF16);
    y.square().sum_all().backward()?;
    assert!(m.parameters().iter().all(|p| p.grad().is_some_and(|g| g.dtype() == DType::BF16)));
    // Back to f32 is exact; an integer dtype is refused and changes nothing.
    m.to_dtype(DType::F32)?;
    assert_state_is(&m, "model_f32_loaded")?;
    let err = m.to_dtype(DType::I64).unwrap_err().to_string();
    assert!(err.contains("to_dtype") && err.contains("i64"), "{err}");
    assert!(m.parameters().iter().all(|p| p.dtype() == DType::F32));
    Ok(())
}
