//! Writes the seed corpora with ember's own writers, so that the seeds are exactly what
//! ember produces, plus hand-made invalid files that once were or could be trouble.

use crate::target::{Target, gzip};
use ember_io::StateDict;
use ember_optim::OptimizerState;
use ember_tensor::{DType, Result, Tensor};
use std::collections::BTreeMap;
use std::path::Path;

/// Writes every target's seeds under `root`, replacing files of the same names.
pub fn write_all(root: &Path) -> Result<()> {
    let io = |p: &Path, e| ember_tensor::Error::io(p, e);
    for t in Target::ALL {
        let dir = root.join(t.name());
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
    }
    let st = root.join(Target::Safetensors.name());
    ember_io::save_safetensors(st.join("mixed.safetensors"), &mixed_state()?)?;
    ember_io::save_safetensors(st.join("empty.safetensors"), &StateDict::new())?;
    let meta = BTreeMap::from([("note".to_string(), "seed".to_string())]);
    ember_io::save_safetensors_with_metadata(st.join("metadata.safetensors"), &small_state()?, &meta)?;
    ember_io::save_safetensors(st.join("half.safetensors"), &half_state()?)?;

    let opt = root.join(Target::Optimizer.name());
    adam_state()?.save(opt.join("adam.safetensors"))?;
    OptimizerState { optimizer: "Sgd".into(), scalars: BTreeMap::from([("lr".into(), 0.1)]), tensors: BTreeMap::new() }
        .save(opt.join("sgd-empty.safetensors"))?;

    let write = |dir: &Path, name: &str, bytes: &[u8]| {
        let path = dir.join(name);
        std::fs::write(&path, bytes).map_err(|e| io(&path, e))
    };
    let idx = root.join(Target::Idx.name());
    let gz = root.join(Target::IdxGz.name());
    let files = [
        ("images-2x4x5", idx_images(2, 4, 5)),
        ("images-0x28x28", idx_images(0, 28, 28)),
        ("labels-5", idx_labels(&[0, 1, 9, 3, 255])),
        // A header declaring 2^32-1 images: must be refused before allocating them.
        ("bad-huge-dims", idx_header(0x0803, &[u32::MAX, u32::MAX, u32::MAX])),
        ("bad-cut-header", vec![0, 0, 8, 3, 0, 0]),
        // Zero images of 2^32-1 x 2^32-1 pixels: no data, so the size checks passed it, and
        // the tensor's constructor refused it with an error that did not name the file.
        ("bad-zero-images-huge-side", idx_header(0x0803, &[0, u32::MAX, u32::MAX])),
    ];
    for (name, bytes) in &files {
        write(&idx, name, bytes)?;
        write(&gz, &format!("{name}.gz"), &gzip(bytes))?;
    }
    let mnist = root.join(Target::Mnist.name());
    write(&mnist, "three.images", &idx_images(3, 28, 28))?;
    write(&mnist, "three.labels", &idx_labels(&[7, 0, 9]))?;

    let pt = root.join(Target::TorchPt.name());
    ember_io::save_pt(pt.join("ember-state.pt"), &mixed_state()?)?;
    let mut adam = adam_state()?;
    adam.scalars.extend([("weight_decay".to_string(), 0.0), ("amsgrad".to_string(), 0.0)]);
    ember_io::pt::save_pt_value(pt.join("ember-optimizer.pt"), &adam.to_pt()?)?;
    // PyTorch's own files (strided and shared storages, int and bool tensors, nested
    // containers; an optimizer state), from the parity fixtures.
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/parity/fixtures");
    let copy = |from: &Path, to: &Path| std::fs::copy(from, to).map(drop).map_err(|e| io(from, e));
    copy(&fixtures.join("checkpoint/values.pt"), &pt.join("torch-values.pt"))?;
    copy(&fixtures.join("checkpoint/sgd.pt"), &pt.join("torch-sgd.pt"))?;
    // float16 and bfloat16 storages, one of them viewed with strides and an offset.
    copy(&fixtures.join("half/state.pt"), &pt.join("torch-half.pt"))?;
    let onnx = root.join(Target::Onnx.name());
    copy(&fixtures.join("onnx_cnn.onnx"), &onnx.join("torch-cnn.onnx"))?;
    // FLOAT16 initializers and graph inputs and outputs.
    copy(&fixtures.join("half/ember_mlp_f16.onnx"), &onnx.join("ember-mlp-f16.onnx"))?;
    let pnnx = root.join(Target::Pnnx.name());
    copy(&fixtures.join("pnnx/cnn.pnnx.param"), &pnnx.join("torch-cnn.param"))?;
    copy(&fixtures.join("pnnx/cnn.pnnx.bin"), &pnnx.join("torch-cnn.bin"))?;
    // transformers' own config.json files, one per architecture and layout.
    let configs = root.join(Target::ModelConfig.name());
    for (from, to) in [
        ("gpt2/tied", "gpt2-tied.json"),
        ("gpt2/untied-sharded", "gpt2-untied.json"),
        ("llama/llama_gqa4_llama3/checkpoint", "llama-gqa-llama3.json"),
        ("llama/qwen2/checkpoint", "qwen2.json"),
        ("llama/mistral_window/checkpoint", "mistral.json"),
        ("bert/cls", "bert-cls.json"),
        ("vit/base", "vit-base.json"),
    ] {
        copy(&fixtures.join("models").join(from).join("config.json"), &configs.join(to))?;
    }
    Ok(())
}

fn mixed_state() -> Result<StateDict> {
    let mut sd = StateDict::new();
    sd.insert("layer.weight", Tensor::from_vec(vec![0.5f32, -1.0, 2.0, 0.0, 1.5, -0.25], [2, 3])?);
    sd.insert("layer.bias", Tensor::from_vec(vec![1.0f64, 2.0, 3.0], [3])?);
    sd.insert("steps", Tensor::from_vec(vec![7i64], [])?);
    sd.insert("mask", Tensor::from_vec(vec![1u8, 0, 1, 1], [2, 2])?);
    sd.insert("none", Tensor::from_vec(Vec::<f32>::new(), [0, 4])?);
    Ok(sd)
}

/// f16 and bf16 tensors, with the values that are easy to mishandle (subnormals,
/// infinities, NaN, -0.0).
fn half_state() -> Result<StateDict> {
    let special = [1.5f32, -0.0, f32::INFINITY, f32::NAN, 6e-8, 65504.0];
    let mut sd = StateDict::new();
    sd.insert("h", Tensor::from_vec(special.to_vec(), [2, 3])?.to_dtype(DType::F16));
    sd.insert("b", Tensor::from_vec(special.to_vec(), [6])?.to_dtype(DType::BF16));
    sd.insert("b.empty", Tensor::from_vec(Vec::<f32>::new(), [0, 2])?.to_dtype(DType::BF16));
    Ok(sd)
}

fn small_state() -> Result<StateDict> {
    let mut sd = StateDict::new();
    sd.insert("w", Tensor::from_vec(vec![1.0f32, 2.0], [2])?);
    Ok(sd)
}

fn adam_state() -> Result<OptimizerState> {
    let scalars = [("lr", 1e-3), ("beta1", 0.9), ("beta2", 0.999), ("eps", 1e-8), ("num_params", 1.0)];
    let mut scalars: BTreeMap<String, f64> = scalars.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    scalars.insert("state.0.step".into(), 3.0);
    let mut tensors = BTreeMap::new();
    tensors.insert("state.0.exp_avg".to_string(), Tensor::from_vec(vec![0.1f32, -0.2, 0.3], [3])?);
    tensors.insert("state.0.exp_avg_sq".to_string(), Tensor::from_vec(vec![0.01f32, 0.04, 0.09], [3])?);
    Ok(OptimizerState { optimizer: "Adam".into(), scalars, tensors })
}

/// An IDX header with `magic` and `dims` (no data).
fn idx_header(magic: u32, dims: &[u32]) -> Vec<u8> {
    let mut out = magic.to_be_bytes().to_vec();
    for d in dims {
        out.extend(d.to_be_bytes());
    }
    out
}

/// An IDX image file of `n` images of `rows x cols`.
fn idx_images(n: u32, rows: u32, cols: u32) -> Vec<u8> {
    let mut out = idx_header(0x0803, &[n, rows, cols]);
    out.extend((0..n * rows * cols).map(|i| (i % 251) as u8));
    out
}

/// An IDX label file.
fn idx_labels(labels: &[u8]) -> Vec<u8> {
    let mut out = idx_header(0x0801, &[labels.len() as u32]);
    out.extend_from_slice(labels);
    out
}
