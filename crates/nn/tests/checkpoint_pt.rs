//! PyTorch checkpoints (`torch.save` files) both ways, against fixtures written by
//! `tools/parity/checkpoint.py`:
//! - `layers.pt`, PyTorch's `state_dict()` of every layer ember has, loads strictly into
//!   ember's layers with every value bit for bit;
//! - what ember writes back is byte for byte `ember_layers.pt`, the file the script checked
//!   PyTorch loads strictly with the same names, dtypes and values;
//! - `roundtrip.pt`, PyTorch's save of the model after loading ember's file, reads back
//!   into ember bit for bit (ember -> PyTorch -> ember);
//! - `values.pt` (strided and shared storages, integer and bool tensors, nested containers)
//!   reads as `values.json` says;
//! - damaged and hostile files are errors naming the file, never panics.
//!
//! `EMBER_WRITE_PT_FIXTURES=1` makes the byte-comparison test write `ember_layers.pt`
//! instead, for the script's `check` step.

use ember_nn::pt::{PtValue, load_pt_value, save_pt_value};
use ember_nn::{
    BatchNorm1d, BatchNorm2d, Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d, Embedding, GRU, GRUCell, GroupNorm,
    InstanceNorm2d, InstanceNormOptions, LSTM, LSTMCell, LayerNorm, Linear, Module, MultiheadAttention, RMSNorm, RNN,
    RNNCell, RnnOptions, StateDict, TransformerDecoderLayer, TransformerEncoderLayer, TransformerLayerOptions, load_pt,
    save_pt,
};
use ember_tensor::{DType, Result, Tensor};
use std::io::Write;
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/parity/fixtures/checkpoint")).join(name)
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("ember-checkpoint-pt-{}-{name}", std::process::id()))
}

/// One instance of every layer with parameters or buffers, named as the script names them.
fn zoo() -> Result<Vec<(&'static str, Box<dyn Module>)>> {
    let tl = TransformerLayerOptions { dim_feedforward: 16, dropout: 0.0, batch_first: true, ..Default::default() };
    let lstm = RnnOptions { num_layers: 2, bidirectional: true, proj_size: 2, ..Default::default() };
    let inorm = InstanceNormOptions { affine: true, track_running_stats: true, ..Default::default() };
    Ok(vec![
        ("linear", Box::new(Linear::new(4, 3)?)),
        ("conv1d", Box::new(Conv1d::new(2, 3, 3)?)),
        ("conv2d", Box::new(Conv2d::new(2, 4, 3)?)),
        ("conv_t1d", Box::new(ConvTranspose1d::new(3, 2, 3)?)),
        ("conv_t2d", Box::new(ConvTranspose2d::new(3, 2, 3)?)),
        ("bn1d", Box::new(BatchNorm1d::new(3)?)),
        ("bn2d", Box::new(BatchNorm2d::new(4)?)),
        ("gn", Box::new(GroupNorm::new(2, 4)?)),
        ("inorm", Box::new(InstanceNorm2d::with_options(3, inorm)?)),
        ("ln", Box::new(LayerNorm::new(&[4])?)),
        ("rms", Box::new(RMSNorm::new(&[4])?)),
        ("emb", Box::new(Embedding::new(5, 3)?)),
        ("rnn", Box::new(RNN::new(3, 4)?)),
        ("lstm", Box::new(LSTM::with_options(3, 4, lstm)?)),
        ("gru", Box::new(GRU::new(3, 4)?)),
        ("rnn_cell", Box::new(RNNCell::new(3, 4)?)),
        ("lstm_cell", Box::new(LSTMCell::new(3, 4)?)),
        ("gru_cell", Box::new(GRUCell::new(3, 4)?)),
        ("mha", Box::new(MultiheadAttention::new(8, 2)?)),
        ("enc", Box::new(TransformerEncoderLayer::with_options(8, 2, tl)?)),
        ("dec", Box::new(TransformerDecoderLayer::with_options(8, 2, tl)?)),
    ])
}

/// The zoo's state dict under `<layer>.` prefixes, in zoo order.
fn zoo_state(zoo: &[(&str, Box<dyn Module>)]) -> StateDict {
    let mut all = StateDict::new();
    for (name, layer) in zoo {
        for (k, t) in layer.state_dict().iter() {
            all.insert(format!("{name}.{k}"), t.clone());
        }
    }
    all
}

/// Loads `state` (names `<layer>.<key>`) into the zoo's layers, strictly.
fn load_zoo(zoo: &[(&str, Box<dyn Module>)], state: &StateDict) -> Result<()> {
    for (name, layer) in zoo {
        let prefix = format!("{name}.");
        let mut own = StateDict::new();
        for (k, t) in state.iter() {
            if let Some(rest) = k.strip_prefix(&prefix) {
                own.insert(rest, t.clone());
            }
        }
        layer.load_state_dict(&own)?;
    }
    Ok(())
}

/// `a` and `b` hold the same names in the same order, with equal dtypes, shapes and bits.
fn assert_same(a: &StateDict, b: &StateDict, what: &str) {
    let names_a: Vec<&str> = a.keys().collect();
    let names_b: Vec<&str> = b.keys().collect();
    assert_eq!(names_a, names_b, "{what}: names or order differ");
    for (k, x) in a.iter() {
        let y = b.get(k).unwrap();
        assert_eq!((x.dtype(), x.shape()), (y.dtype(), y.shape()), "{what}: {k}");
        let bits = |t: &Tensor| t.to_vec_f64().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(x), bits(y), "{what}: values of {k}");
    }
}

#[test]
fn pytorch_state_dicts_load_into_every_layer_bit_for_bit() -> Result<()> {
    let theirs = load_pt(fixture("layers.pt"))?;
    let zoo = zoo()?;
    load_zoo(&zoo, &theirs)?;
    // Every key was taken by some layer, and each holds PyTorch's values and dtypes.
    assert_same(&zoo_state(&zoo), &theirs, "layers.pt");
    assert_eq!(theirs.get("bn2d.num_batches_tracked").unwrap().dtype(), DType::I64);
    Ok(())
}

#[test]
fn ember_writes_the_file_pytorch_was_checked_to_load() -> Result<()> {
    let zoo = zoo()?;
    load_zoo(&zoo, &load_pt(fixture("layers.pt"))?)?;
    let ours = zoo_state(&zoo);
    if std::env::var_os("EMBER_WRITE_PT_FIXTURES").is_some() {
        return save_pt(fixture("ember_layers.pt"), &ours);
    }
    let path = temp("ember_layers.pt");
    save_pt(&path, &ours)?;
    let written = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).ok();
    let checked = std::fs::read(fixture("ember_layers.pt")).unwrap();
    assert!(
        written == checked,
        "save_pt no longer writes the bytes PyTorch was checked to load; rerun tools/parity/checkpoint.py's steps"
    );
    Ok(())
}

#[test]
fn state_dicts_round_trip_through_pytorch_bit_for_bit() -> Result<()> {
    let back = load_pt(fixture("roundtrip.pt"))?;
    let zoo = zoo()?;
    load_zoo(&zoo, &load_pt(fixture("layers.pt"))?)?;
    assert_same(&back, &zoo_state(&zoo), "roundtrip.pt");
    Ok(())
}

/// The JSON description of a value that `values.json` holds, made from a `PtValue`.
fn describe(v: &PtValue) -> serde_json::Value {
    use serde_json::json;
    match v {
        PtValue::Tensor(t) => json!({"shape": t.shape().to_vec(), "values": t.to_vec_f64().unwrap()}),
        PtValue::Dict(entries) => {
            json!({"dict": entries.iter().map(|(k, x)| json!([describe(k), describe(x)])).collect::<Vec<_>>()})
        }
        PtValue::List(items) => json!({"list": items.iter().map(describe).collect::<Vec<_>>()}),
        PtValue::Tuple(items) => json!({"tuple": items.iter().map(describe).collect::<Vec<_>>()}),
        PtValue::None => json!({"NoneType": null}),
        PtValue::Bool(b) => json!({"bool": b}),
        PtValue::Int(i) => json!({"int": i}),
        PtValue::Float(f) => json!({"float": f}),
        PtValue::Str(s) => json!({"str": s}),
    }
}

#[test]
fn plain_data_views_and_integer_tensors_read_as_pytorch_wrote_them() -> Result<()> {
    let value = load_pt_value(fixture("values.pt"))?;
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("values.json")).unwrap()).unwrap();
    assert_eq!(describe(&value), expected);
    assert_eq!(value.get("int32").unwrap().as_tensor().unwrap().dtype(), DType::I64);
    assert_eq!(value.get("bool").unwrap().as_tensor().unwrap().dtype(), DType::U8);
    // What ember writes reads back the same (views arrive contiguous; ints stay i64).
    let path = temp("values.pt");
    save_pt_value(&path, &value)?;
    let again = load_pt_value(&path)?;
    std::fs::remove_file(&path).ok();
    assert_eq!(describe(&again), expected);
    Ok(())
}

#[test]
fn a_checkpoint_that_is_more_than_a_state_dict_is_named() -> Result<()> {
    let err = load_pt(fixture("values.pt")).unwrap_err().to_string();
    assert!(err.contains("values.pt") && err.contains("entry `nested` is a dict"), "{err}");
    Ok(())
}

/// A zip archive with the given records, stored.
fn archive(records: &[(&str, &[u8])]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, data) in records {
        zip.start_file(*name, options).unwrap();
        zip.write_all(data).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

/// The error `load_pt_value` gives for a file holding `bytes`.
fn error_for(name: &str, bytes: &[u8]) -> String {
    let path = temp(name);
    std::fs::write(&path, bytes).unwrap();
    let result = load_pt_value(&path);
    std::fs::remove_file(&path).ok();
    let err = result.expect_err("a bad file must be an error").to_string();
    assert!(err.contains(name), "the error names the file: {err}");
    err
}

/// A pickle that rebuilds one float tensor of `size` and `stride` from storage "0" of
/// `numel` elements.
fn tensor_pickle(numel: u32, size: u32, stride: u32) -> Vec<u8> {
    let mut p = vec![0x80, 2];
    p.extend(b"ctorch._utils\n_rebuild_tensor_v2\n(");
    p.extend(b"(X\x07\0\0\0storagectorch\nFloatStorage\nX\x01\0\0\x000X\x03\0\0\0cpuJ");
    p.extend(numel.to_le_bytes());
    p.extend(b"tQK\0J");
    p.extend(size.to_le_bytes());
    p.extend([0x85, b'J']);
    p.extend(stride.to_le_bytes());
    p.extend([0x85, 0x89, b')', b't', b'R', b'.']);
    p
}

#[test]
fn damaged_and_hostile_files_are_errors_that_name_the_file() {
    let good = std::fs::read(fixture("layers.pt")).unwrap();
    // Truncated anywhere, or not a zip at all.
    for cut in [0, 10, good.len() / 2, good.len() - 1] {
        let err = error_for("truncated.pt", &good[..cut]);
        assert!(!err.is_empty());
    }
    let err = error_for("legacy.pt", &[0x80, 0x02, b'}', b'.']);
    assert!(err.contains("legacy"), "{err}");
    // A pickle that would run code.
    let evil = archive(&[("a/data.pkl", b"\x80\x02cos\nsystem\nX\x02\0\0\0lsR.")]);
    let err = error_for("evil.pt", &evil);
    assert!(err.contains("os.system") && err.contains("does not run"), "{err}");
    // A storage that declares far more elements than the file holds: refused before reading.
    let huge = archive(&[("a/data.pkl", &tensor_pickle(u32::MAX / 2, 4, 1)), ("a/data/0", &[0u8; 16])]);
    let err = error_for("huge.pt", &huge);
    assert!(err.contains("storage `0`"), "{err}");
    // A storage record shorter than its declared size.
    let short = archive(&[("a/data.pkl", &tensor_pickle(4, 4, 1)), ("a/data/0", &[0u8; 12])]);
    let err = error_for("short.pt", &short);
    assert!(err.contains("holds 12 bytes") || err.contains("declares 12"), "{err}");
    // A view that reaches past its storage.
    let past = archive(&[("a/data.pkl", &tensor_pickle(4, 4, 2)), ("a/data/0", &[0u8; 16])]);
    let err = error_for("past.pt", &past);
    assert!(err.contains("reaches past"), "{err}");
    // A huge view of a tiny storage (stride 0): far larger than the file.
    let expanded = archive(&[("a/data.pkl", &tensor_pickle(1, 1 << 30, 0)), ("a/data/0", &[0u8; 4])]);
    let err = error_for("expanded.pt", &expanded);
    assert!(err.contains("far larger than the file"), "{err}");
    // A list appended to itself again and again: exponential if copied, refused by depth.
    let mut bomb = b"\x80\x02]q\x00".to_vec();
    for _ in 0..400 {
        bomb.extend(b"h\x00a");
    }
    bomb.push(b'.');
    let err = error_for("bomb.pt", &archive(&[("a/data.pkl", &bomb)]));
    assert!(err.contains("nested more than"), "{err}");
    // Every single-byte change of a valid small file is an error or a value, never a panic.
    let small = std::fs::read(fixture("adam.pt")).unwrap();
    let path = temp("flipped.pt");
    for i in (0..small.len()).step_by(7) {
        let mut bytes = small.clone();
        bytes[i] ^= 0x5a;
        std::fs::write(&path, &bytes).unwrap();
        let _ = load_pt_value(&path);
    }
    std::fs::remove_file(&path).ok();
}
