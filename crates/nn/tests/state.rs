//! state_dict / load_state_dict and the safetensors files: round trips, strictness, and
//! errors that name the file and the problem.

mod common;

use common::{TempFile, idx, t32, t64, values};
use ember_autograd::Var;
use ember_nn::{
    Dropout, Linear, LinearOptions, Module, ModuleExt, ReLU, Sequential, StateDict, load_safetensors, save_safetensors,
};
use ember_tensor::{DType, Error, Tensor};

fn mlp() -> Sequential {
    Sequential::new()
        .add(Linear::new(4, 6).unwrap())
        .add(ReLU)
        .add(Dropout::new(0.2).unwrap())
        .add(Linear::new(6, 3).unwrap())
}

fn snapshot(m: &dyn Module) -> Vec<Vec<f64>> {
    m.parameters().iter().map(values).collect()
}

/// An error's message, checked to name `path`.
#[track_caller]
fn message_naming(e: Error, path: &TempFile) -> String {
    let msg = e.to_string();
    assert!(msg.contains(&path.0.display().to_string()), "{msg:?} does not name the file");
    msg
}

#[test]
fn state_dict_names_and_shares_the_parameters() {
    let model = mlp();
    let sd = model.state_dict();
    assert_eq!(sd.keys().collect::<Vec<_>>(), ["0.weight", "0.bias", "3.weight", "3.bias"]);
    assert_eq!(sd.get("3.weight").unwrap().shape(), &[3, 6]);
    assert_eq!(sd.numel(), 4 * 6 + 6 + 6 * 3 + 3);
    // Like PyTorch's, the tensors share storage with the parameters.
    let w = &model.parameters()[0];
    w.value().fill_(0.5).unwrap();
    assert!(sd.get("0.weight").unwrap().to_vec::<f32>().unwrap().iter().all(|&v| v == 0.5));
}

#[test]
fn load_state_dict_copies_into_the_existing_parameters() {
    let source = mlp();
    let target = mlp();
    let held: Vec<Var> = target.parameters();
    assert_ne!(snapshot(&source), snapshot(&target));
    target.load_state_dict(&source.state_dict()).unwrap();
    assert_eq!(snapshot(&source), snapshot(&target));
    // The same Vars, now holding the new values: an optimizer holding them keeps working.
    for (before, after) in held.iter().zip(target.parameters()) {
        assert!(before.same_node(&after));
        assert!(after.is_leaf() && after.requires_grad() && after.grad().is_none());
    }
    // Copies, not aliases: changing the source later leaves the target alone.
    source.parameters()[0].value().fill_(7.0).unwrap();
    assert_ne!(snapshot(&source)[0], snapshot(&target)[0]);
    // And the loaded parameters train.
    let x = Var::new(Tensor::randn([2, 4]).unwrap());
    target.forward(&x).unwrap().sum_all().backward().unwrap();
    assert!(held.iter().all(|p| p.grad().is_some()));
}

#[test]
fn load_state_dict_is_strict_and_all_or_nothing() {
    let model = mlp();
    let before = snapshot(&model);
    let good = mlp().state_dict();

    let mut missing = good.clone();
    missing.remove("3.bias");
    let e = model.load_state_dict(&missing).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }) && e.to_string().contains("missing keys [\"3.bias\"]"), "{e}");

    let mut extra = good.clone();
    extra.insert("4.weight", Tensor::zeros([1], DType::F32).unwrap());
    let e = model.load_state_dict(&extra).unwrap_err();
    assert!(e.to_string().contains("unexpected keys [\"4.weight\"]"), "{e}");

    let mut resized = good.clone();
    resized.insert("0.weight", Tensor::zeros([6, 5], DType::F32).unwrap());
    let e = model.load_state_dict(&resized).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e}");
    assert!(e.to_string().contains("0.weight") && e.to_string().contains("[6, 4]") && e.to_string().contains("[6, 5]"));

    // Several problems are reported together.
    let mut both = resized.clone();
    both.remove("3.bias");
    let msg = model.load_state_dict(&both).unwrap_err().to_string();
    assert!(msg.contains("missing keys") && msg.contains("size mismatch for 0.weight"), "{msg}");

    // Nothing was copied by the failed loads, not even the entries that fit.
    assert_eq!(snapshot(&model), before);

    // Another dtype is converted, like PyTorch's `param.copy_`, and the parameter keeps its own.
    let mut retyped = good.clone();
    retyped.insert("3.bias", Tensor::from_vec(vec![0.5f64, 1.5, -2.0], [3]).unwrap());
    model.load_state_dict(&retyped).unwrap();
    let bias = model.state_dict().get("3.bias").unwrap().clone();
    assert_eq!(bias.dtype(), DType::F32);
    assert_eq!(bias.to_vec::<f32>().unwrap(), vec![0.5, 1.5, -2.0]);
}

#[test]
fn model_files_round_trip() {
    let path = TempFile::new("model.safetensors");
    let a = mlp();
    a.save(&path.0).unwrap();
    let b = mlp();
    b.load(&path.0).unwrap();
    assert_eq!(snapshot(&a), snapshot(&b));
    a.eval();
    b.eval();
    let x = Var::new(Tensor::randn([3, 4]).unwrap());
    assert_eq!(values(&a.forward(&x).unwrap()), values(&b.forward(&x).unwrap()));

    // The file holds exactly the state dict.
    let sd = load_safetensors(&path.0).unwrap();
    let mut keys: Vec<&str> = sd.keys().collect();
    keys.sort();
    assert_eq!(keys, ["0.bias", "0.weight", "3.bias", "3.weight"]);
    for (name, t) in a.state_dict().iter() {
        let loaded = sd.get(name).unwrap();
        assert_eq!((loaded.shape(), loaded.dtype()), (t.shape(), t.dtype()));
        assert_eq!(loaded.to_vec::<f32>().unwrap(), t.to_vec::<f32>().unwrap());
    }

    // Through a trait object too.
    let boxed: Box<dyn Module> = Box::new(mlp());
    boxed.load(&path.0).unwrap();
    assert_eq!(snapshot(&boxed), snapshot(&a));

    // A file for another architecture is refused, naming the file and the keys.
    let other = Sequential::new().add(Linear::new(4, 6).unwrap());
    let msg = message_naming(other.load(&path.0).unwrap_err(), &path);
    assert!(msg.contains("unexpected keys"), "{msg}");
}

#[test]
fn every_dtype_and_layout_round_trips() {
    let path = TempFile::new("dtypes.safetensors");
    let mut sd = StateDict::new();
    sd.insert("f32", t32(&[1.5, -2.25, 3.0e-8, f32::MAX], &[2, 2]));
    sd.insert("f64", t64(&[std::f64::consts::PI, -0.0, 1e300], &[3]));
    sd.insert("i64", idx(&[i64::MIN, -1, 0, i64::MAX], &[4, 1]));
    sd.insert("u8", Tensor::from_vec(vec![0u8, 1, 255], [3]).unwrap());
    sd.insert("scalar", Tensor::scalar(4.0f32));
    sd.insert("empty", Tensor::zeros([0, 3], DType::F32).unwrap());
    // A transposed view is written in its logical order.
    sd.insert("view", t64(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).t().unwrap());
    save_safetensors(&path.0, &sd).unwrap();
    let back = load_safetensors(&path.0).unwrap();
    assert_eq!(back.len(), sd.len());
    for (name, t) in sd.iter() {
        let l = back.get(name).unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!((l.shape(), l.dtype()), (t.shape(), t.dtype()), "{name}");
        assert_eq!(l.to_vec_f64().unwrap(), t.to_vec_f64().unwrap(), "{name}");
    }
    assert_eq!(back.get("view").unwrap().to_vec::<f64>().unwrap(), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
}

#[test]
fn linear_in_f64_saves_and_loads() {
    let path = TempFile::new("f64.safetensors");
    let opts = LinearOptions { bias: false, dtype: DType::F64 };
    let a = Linear::with_options(3, 2, opts).unwrap();
    a.save(&path.0).unwrap();
    let b = Linear::with_options(3, 2, opts).unwrap();
    b.load(&path.0).unwrap();
    assert_eq!(values(a.weight()), values(b.weight()));
    // An f32 layer converts the f64 values, as PyTorch's load_state_dict (`param.copy_`)
    // does; its parameters stay f32.
    let c = Linear::with_options(3, 2, LinearOptions { bias: false, dtype: DType::F32 }).unwrap();
    c.load(&path.0).unwrap();
    assert_eq!(c.weight().dtype(), DType::F32);
    let want: Vec<f32> = a.weight().value().to_vec::<f64>().unwrap().iter().map(|&v| v as f32).collect();
    assert_eq!(c.weight().value().to_vec::<f32>().unwrap(), want);
}

/// A safetensors file with `header` and `data` after the length field.
fn raw_file(name: &str, header: &str, data: &[u8]) -> TempFile {
    let path = TempFile::new(name);
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(data);
    std::fs::write(&path.0, bytes).unwrap();
    path
}

#[test]
fn unreadable_files_are_errors_naming_file_and_problem() {
    let missing = TempFile::new("does-not-exist.safetensors");
    let e = load_safetensors(&missing.0).unwrap_err();
    assert!(matches!(e, Error::Io { .. }));
    message_naming(e, &missing);

    let empty = raw_file("short.safetensors", "", &[]);
    std::fs::write(&empty.0, b"abc").unwrap();
    let msg = message_naming(load_safetensors(&empty.0).unwrap_err(), &empty);
    assert!(msg.contains("not a safetensors file"), "{msg}");

    let garbage = raw_file("garbage.safetensors", "this is not json", &[]);
    let msg = message_naming(load_safetensors(&garbage.0).unwrap_err(), &garbage);
    assert!(msg.contains("bad header"), "{msg}");

    let long = TempFile::new("long-header.safetensors");
    std::fs::write(&long.0, [255u8, 255, 255, 255, 0, 0, 0, 0, b'{', b'}']).unwrap();
    let msg = message_naming(load_safetensors(&long.0).unwrap_err(), &long);
    assert!(msg.contains("length field"), "{msg}");

    let unknown = raw_file("unknown.safetensors", r#"{"x":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}}"#, &[0]);
    let msg = message_naming(load_safetensors(&unknown.0).unwrap_err(), &unknown);
    assert!(msg.contains("bad header") && msg.contains("Q7"), "{msg}");

    // A dtype the format knows but ember does not hold (F16 and BF16 are read now).
    let int32 = raw_file("int32.safetensors", r#"{"h":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}}"#, &[0; 8]);
    let msg = message_naming(load_safetensors(&int32.0).unwrap_err(), &int32);
    assert!(msg.contains("tensor `h` has dtype I32"), "{msg}");

    let offsets = raw_file("offsets.safetensors", r#"{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}"#, &[0; 4]);
    let msg = message_naming(load_safetensors(&offsets.0).unwrap_err(), &offsets);
    assert!(msg.contains("bad header: tensor `x` of shape [2] needs 8 bytes"), "{msg}");
}

#[test]
fn truncated_files_are_reported_as_truncated() {
    let path = TempFile::new("truncated.safetensors");
    let mut sd = StateDict::new();
    sd.insert("w", Tensor::zeros([4, 4], DType::F32).unwrap());
    save_safetensors(&path.0, &sd).unwrap();
    let bytes = std::fs::read(&path.0).unwrap();
    std::fs::write(&path.0, &bytes[..bytes.len() - 10]).unwrap();
    let msg = message_naming(load_safetensors(&path.0).unwrap_err(), &path);
    assert!(
        msg.contains("truncated data: the header describes 64 bytes of tensor data, but the file holds 54"),
        "{msg}"
    );
    // Cut inside the header.
    std::fs::write(&path.0, &bytes[..20]).unwrap();
    let msg = message_naming(load_safetensors(&path.0).unwrap_err(), &path);
    assert!(msg.contains("truncated"), "{msg}");
    // Extra bytes after the data are refused too.
    let mut padded = bytes.clone();
    padded.extend_from_slice(&[0; 8]);
    std::fs::write(&path.0, &padded).unwrap();
    let msg = message_naming(load_safetensors(&path.0).unwrap_err(), &path);
    assert!(msg.contains("padded"), "{msg}");
}

#[test]
fn writing_to_an_impossible_path_is_an_io_error() {
    let dir = TempFile::new("no-such-dir");
    let path = dir.0.join("model.safetensors");
    let e = save_safetensors(&path, &StateDict::new()).unwrap_err();
    assert!(matches!(e, Error::Io { .. }) && e.to_string().contains("no-such-dir"), "{e}");
}

#[test]
fn state_dict_keeps_insertion_order() {
    let mut sd = StateDict::new();
    assert!(sd.is_empty());
    sd.insert("b", Tensor::scalar(1.0f32));
    sd.insert("a", Tensor::scalar(2.0f32));
    sd.insert("c", Tensor::scalar(3.0f32));
    let old = sd.insert("b", Tensor::scalar(9.0f32)).unwrap();
    assert_eq!(old.item().unwrap(), 1.0);
    assert_eq!(sd.keys().collect::<Vec<_>>(), ["b", "a", "c"]);
    assert_eq!(sd.get("b").unwrap().item().unwrap(), 9.0);
    assert_eq!(sd.remove("a").unwrap().item().unwrap(), 2.0);
    assert!(sd.remove("a").is_none());
    assert_eq!(sd.keys().collect::<Vec<_>>(), ["b", "c"]);
    assert_eq!(sd.get("c").unwrap().item().unwrap(), 3.0);
    assert!(sd.contains_key("c") && !sd.contains_key("a"));
    assert_eq!(format!("{sd:?}"), r#"{"b": f32[], "c": f32[]}"#);
    let prefixed = sd.with_prefix("7");
    assert_eq!(prefixed.into_iter().map(|(n, _)| n).collect::<Vec<_>>(), ["7.b", "7.c"]);
}
