//! ember-io on its own, without ember-nn: both formats keep every dtype ember holds, names
//! and order, and their metadata, and a file that is not what it claims is an error naming
//! the file. (The layers' checkpoints against PyTorch's are `crates/nn/tests/state.rs` and
//! `checkpoint_pt.rs`.)

use ember_io::pt::{PtValue, load_pt_value, save_pt_value, state_dict_from_pt, state_dict_to_pt};
use ember_io::{
    StateDict, load_pt, load_safetensors, load_safetensors_with_metadata, save_pt, save_safetensors,
    save_safetensors_with_metadata,
};
use ember_tensor::{DType, Result, Tensor};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// A path in the temporary directory, unique to this process and `name`.
fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("ember-io-test-{}-{name}", std::process::id()))
}

/// One tensor of every dtype, one of them a transposed (non-contiguous) view.
fn every_dtype() -> Result<StateDict> {
    let mut sd = StateDict::new();
    sd.insert("w.f32", Tensor::from_vec(vec![1.5f32, -2.0, 0.0, 3.25, 4.0, -0.5], [2, 3])?.transpose(0, 1)?);
    sd.insert("w.f64", Tensor::from_vec(vec![f64::MIN_POSITIVE, -1e300, 0.1], [3])?);
    sd.insert("steps", Tensor::from_vec(vec![i64::MIN, -1, 0, i64::MAX], [2, 2])?);
    sd.insert("mask", Tensor::from_vec(vec![0u8, 1, 1], [3])?);
    sd.insert("scalar", Tensor::scalar(7.0));
    Ok(sd)
}

/// Same names in the same order, and the same dtypes, shapes and values.
fn assert_same(a: &StateDict, b: &StateDict) -> Result<()> {
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (name, x) in a.iter() {
        let y = b.get(name).unwrap();
        assert_eq!((x.dtype(), x.shape().to_vec()), (y.dtype(), y.shape().to_vec()), "{name}");
        assert_eq!(x.to_vec_f64()?, y.to_vec_f64()?, "{name}");
    }
    Ok(())
}

#[test]
fn safetensors_keep_every_dtype_and_the_metadata() -> Result<()> {
    let path = temp("all.safetensors");
    let sd = every_dtype()?;
    let metadata = BTreeMap::from([("epoch".to_string(), "3".to_string())]);
    save_safetensors_with_metadata(&path, &sd, &metadata)?;
    let (back, meta) = load_safetensors_with_metadata(&path)?;
    // The file lists tensors by dtype then name, as PyTorch's writer does.
    let mut by_name: Vec<_> = back.iter().map(|(k, t)| (k.to_string(), t.clone())).collect();
    by_name.sort_by_key(|(k, _)| sd.keys().position(|n| n == k));
    assert_same(&sd, &by_name.into_iter().collect())?;
    assert_eq!(meta.get("epoch").map(String::as_str), Some("3"));
    assert_eq!(meta.get("format").map(String::as_str), Some("pt"));
    save_safetensors(&path, &StateDict::new())?;
    assert!(load_safetensors(&path)?.is_empty());
    std::fs::remove_file(&path).ok();
    Ok(())
}

#[test]
fn torch_save_files_keep_every_dtype_order_and_plain_data() -> Result<()> {
    let path = temp("state.pt");
    let sd = every_dtype()?;
    save_pt(&path, &sd)?;
    assert_same(&sd, &load_pt(&path)?)?;

    let checkpoint = PtValue::Dict(vec![
        (PtValue::from("model"), state_dict_to_pt(&sd)),
        (PtValue::from("epoch"), PtValue::Int(12)),
        (PtValue::from("lr"), PtValue::Float(0.125)),
        (PtValue::from("betas"), PtValue::Tuple(vec![PtValue::Float(0.9), PtValue::Float(0.999)])),
        (PtValue::from("tags"), PtValue::List(vec![PtValue::from("a"), PtValue::None, PtValue::Bool(true)])),
    ]);
    save_pt_value(&path, &checkpoint)?;
    let back = load_pt_value(&path)?;
    let keys: Vec<_> = back.as_dict().unwrap().iter().map(|(k, _)| k.as_str().unwrap()).collect();
    assert_eq!(keys, ["model", "epoch", "lr", "betas", "tags"]);
    assert_same(&sd, &state_dict_from_pt(back.get("model").unwrap()).unwrap())?;
    assert_eq!(back.get("epoch").and_then(PtValue::as_f64), Some(12.0));
    assert_eq!(back.get("lr").and_then(PtValue::as_f64), Some(0.125));
    assert_eq!(back.get("betas").and_then(PtValue::as_items).map(<[PtValue]>::len), Some(2));
    let tags = back.get("tags").and_then(PtValue::as_items).unwrap();
    assert_eq!((tags[0].as_str(), tags[2].as_bool()), (Some("a"), Some(true)));
    // More than a state dict: `load_pt` names the first entry that is not a tensor.
    let err = load_pt(&path).unwrap_err().to_string();
    assert!(err.contains("state.pt") && err.contains("`model`"), "{err}");
    std::fs::remove_file(&path).ok();
    Ok(())
}

#[test]
fn files_that_are_not_what_they_claim_are_errors_naming_the_file() -> Result<()> {
    let path = temp("garbage.bin");
    std::fs::write(&path, b"definitely not a model").unwrap();
    for err in [load_safetensors(&path).unwrap_err(), load_pt_value(&path).unwrap_err()] {
        let msg = err.to_string();
        assert!(msg.contains("garbage.bin"), "{msg}");
    }
    // A safetensors file cut short is called truncated.
    let good = temp("cut.safetensors");
    let mut sd = StateDict::new();
    sd.insert("w", Tensor::zeros([64], DType::F64)?);
    save_safetensors(&good, &sd)?;
    let bytes = std::fs::read(&good).unwrap();
    std::fs::write(&good, &bytes[..bytes.len() - 8]).unwrap();
    let msg = load_safetensors(&good).unwrap_err().to_string();
    assert!(msg.contains("cut.safetensors") && msg.contains("truncated"), "{msg}");
    // A missing file names it too.
    let msg = load_pt(temp("missing.pt")).unwrap_err().to_string();
    assert!(msg.contains("missing.pt"), "{msg}");
    for p in [path, good] {
        std::fs::remove_file(p).ok();
    }
    Ok(())
}
