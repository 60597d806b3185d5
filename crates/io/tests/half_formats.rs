//! f16 and bf16 tensors in both formats: PyTorch's files (`tools/parity/half_formats.py`)
//! load bit for bit, ember's own round-trip bit for bit, and [`LoadOptions`] converts a
//! checkpoint's floating tensors on request. With `EMBER_WRITE_HALF_FIXTURES=1` the test
//! also writes ember's files for the script's `check`, which loads them in PyTorch.

use ember_io::pt::{PtValue, load_pt_value, save_pt_value};
use ember_io::{
    LoadOptions, StateDict, load_pt, load_pt_with, load_safetensors, load_safetensors_with, save_pt, save_safetensors,
};
use ember_tensor::{DType, Result, Tensor, bf16, f16};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/parity/fixtures/half")
}

/// A path in the temporary directory, unique to this process and `name`.
fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("ember-io-half-{}-{name}", std::process::id()))
}

fn values() -> Value {
    let text = std::fs::read_to_string(fixtures().join("values.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// What `values.json` says a tensor holds: name, dtype, shape and bit patterns.
struct Expected {
    name: String,
    dtype: DType,
    shape: Vec<usize>,
    bits: Vec<i128>,
}

fn expected(list: &Value) -> Vec<Expected> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|e| Expected {
            name: e["name"].as_str().unwrap().to_string(),
            dtype: match e["dtype"].as_str().unwrap() {
                "f16" => DType::F16,
                "bf16" => DType::BF16,
                "f32" => DType::F32,
                // ember holds PyTorch's int64 as i64 and its bool as u8.
                "i64" => DType::I64,
                "bool" => DType::U8,
                other => panic!("dtype {other}"),
            },
            shape: e["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect(),
            bits: e["bits"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b.as_i64().map(i128::from).or_else(|| b.as_u64().map(i128::from)).unwrap())
                .collect(),
        })
        .collect()
}

/// A tensor's values as `values.json` writes them: bit patterns for floats.
fn bits(t: &Tensor) -> Result<Vec<i128>> {
    Ok(match t.dtype() {
        DType::F16 => t.to_vec::<f16>()?.iter().map(|v| i128::from(v.to_bits())).collect(),
        DType::BF16 => t.to_vec::<bf16>()?.iter().map(|v| i128::from(v.to_bits())).collect(),
        DType::F32 => t.to_vec::<f32>()?.iter().map(|v| i128::from(v.to_bits())).collect(),
        DType::F64 => t.to_vec::<f64>()?.iter().map(|v| i128::from(v.to_bits())).collect(),
        DType::I64 => t.to_vec::<i64>()?.into_iter().map(i128::from).collect(),
        DType::U8 => t.to_vec::<u8>()?.into_iter().map(i128::from).collect(),
    })
}

fn assert_holds(state: &StateDict, want: &[Expected], what: &str) -> Result<()> {
    for e in want {
        let t = state.get(&e.name).unwrap_or_else(|| panic!("{what}: no `{}`", e.name));
        assert_eq!((t.dtype(), t.shape().to_vec()), (e.dtype, e.shape.clone()), "{what}: {}", e.name);
        assert_eq!(bits(t)?, e.bits, "{what}: {}", e.name);
    }
    Ok(())
}

#[test]
fn pytorch_checkpoint_of_16_bit_tensors_loads_bit_for_bit() -> Result<()> {
    let want = expected(&values()["state"]);
    let state = load_pt(fixtures().join("state.pt"))?;
    assert_eq!(state.keys().collect::<Vec<_>>(), want.iter().map(|e| e.name.as_str()).collect::<Vec<_>>());
    // NaN, the infinities, -0.0, subnormals and f16's largest value, and two strided views
    // of one shared float16 storage.
    assert_holds(&state, &want, "state.pt")?;
    Ok(())
}

#[test]
fn pytorch_safetensors_of_16_bit_tensors_load_bit_for_bit() -> Result<()> {
    let values = values();
    let names: Vec<&str> = values["safetensors"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    let want: Vec<Expected> =
        expected(&values["state"]).into_iter().filter(|e| names.contains(&e.name.as_str())).collect();
    let state = load_safetensors(fixtures().join("state.safetensors"))?;
    assert_eq!(state.len(), want.len());
    assert_holds(&state, &want, "state.safetensors")?;
    Ok(())
}

#[test]
fn ember_writes_16_bit_tensors_that_read_back_bit_for_bit() -> Result<()> {
    let torch = load_pt(fixtures().join("state.pt"))?;
    let want = expected(&values()["state"]);
    let (pt, st) = (temp("state.pt"), temp("state.safetensors"));
    save_pt(&pt, &torch)?;
    assert_holds(&load_pt(&pt)?, &want, "ember's .pt")?;
    save_safetensors(&st, &torch)?;
    assert_holds(&load_safetensors(&st)?, &want, "ember's .safetensors")?;
    // Inside plain data too (an optimizer's state in bf16, say).
    let value = PtValue::Dict(vec![(PtValue::from("m"), PtValue::Tensor(torch.get("bf16.matrix").unwrap().clone()))]);
    save_pt_value(&pt, &value)?;
    let back = load_pt_value(&pt)?;
    assert_eq!(bits(back.get("m").and_then(PtValue::as_tensor).unwrap())?, bits(torch.get("bf16.matrix").unwrap())?);
    if std::env::var_os("EMBER_WRITE_HALF_FIXTURES").is_some() {
        save_pt(fixtures().join("ember_state.pt"), &torch)?;
        save_safetensors(fixtures().join("ember_state.safetensors"), &torch)?;
    }
    for p in [pt, st] {
        std::fs::remove_file(p).ok();
    }
    Ok(())
}

#[test]
fn load_options_convert_every_floating_tensor_and_keep_the_others() -> Result<()> {
    let plain = load_pt(fixtures().join("state.pt"))?;
    let wide = load_pt_with(fixtures().join("state.pt"), &LoadOptions::default().dtype(DType::F32))?;
    assert_eq!(wide.keys().collect::<Vec<_>>(), plain.keys().collect::<Vec<_>>());
    for (name, t) in plain.iter() {
        let w = wide.get(name).unwrap();
        if t.dtype().is_float() {
            assert_eq!(w.dtype(), DType::F32, "{name}");
            // Widening is exact: f32 holds every f16 and bf16 value, subnormals included
            // (the conversion moves bits and does no arithmetic), and NaN stays NaN.
            let exact: Vec<f32> = match t.dtype() {
                DType::F16 => t.to_vec::<f16>()?.iter().map(|v| v.to_f32()).collect(),
                DType::BF16 => t.to_vec::<bf16>()?.iter().map(|v| v.to_f32()).collect(),
                _ => t.to_vec::<f32>()?,
            };
            for (e, g) in exact.iter().zip(w.to_vec::<f32>()?) {
                assert!(g.to_bits() == e.to_bits() || (g.is_nan() && e.is_nan()), "{name}: {e} became {g}");
            }
        } else {
            assert_eq!((w.dtype(), bits(w)?), (t.dtype(), bits(t)?), "{name}");
        }
    }
    // Narrowing rounds to nearest even, as Tensor::to_dtype; safetensors takes the same options.
    let narrow =
        load_safetensors_with(fixtures().join("state.safetensors"), &LoadOptions { dtype: Some(DType::BF16) })?;
    let f32s = plain.get("f32").unwrap();
    assert_eq!(narrow.get("f32").unwrap().to_vec::<bf16>()?, f32s.to_dtype(DType::BF16).to_vec::<bf16>()?);
    assert_eq!(narrow.get("half.special").unwrap().dtype(), DType::BF16);
    assert_eq!(narrow.get("steps").unwrap().dtype(), DType::I64);
    // Default options keep the file's dtypes.
    let same = load_safetensors_with(fixtures().join("state.safetensors"), &LoadOptions::default())?;
    assert_eq!(same.get("half.special").unwrap().dtype(), DType::F16);
    // An integer dtype is refused before the file is read (this one does not exist).
    let err = load_pt_with(temp("absent.pt"), &LoadOptions::default().dtype(DType::I64)).unwrap_err().to_string();
    assert!(err.contains("load_pt_with") && err.contains("i64"), "{err}");
    Ok(())
}
