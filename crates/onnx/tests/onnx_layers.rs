//! Every layer through PyTorch's two ONNX exporters and back (fixtures by
//! `tools/parity/onnx_layers.py`): each `.onnx` file in `tools/parity/fixtures/onnx_layers`
//! imports and matches PyTorch's outputs (ONNX Runtime's for the handmade graphs) to 1e-5,
//! and every twin the script builds has its files or a recorded exporter failure.

use ember_autograd::Var;
use ember_io::load_safetensors;
use ember_tensor::{DType, Result, Tensor};
use std::collections::BTreeSet;
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/parity/fixtures/onnx_layers")
}

/// The twins `onnx_layers.py` builds, one per ember layer or exported pattern.
const LAYERS: &[&str] = &[
    "adaptive_avg_pool2d",
    "avg_pool1d",
    "avg_pool2d",
    "batch_norm1d",
    "batch_norm2d",
    "causal_scores",
    "conv1d",
    "conv2d",
    "conv2d_grouped",
    "conv_groupnorm_upsample",
    "conv_transpose1d",
    "conv_transpose2d",
    "cumsum_normalize",
    "dropout",
    "elementwise_misc",
    "embedding",
    "flatten",
    "gelu",
    "gelu_tanh",
    "group_norm",
    "gru",
    "gru_bidirectional_2layer",
    "instance_norm2d",
    "layer_norm",
    "leakyrelu",
    "linear",
    "linear_3d",
    "log_softmax",
    "lstm",
    "lstm_bidirectional_2layer",
    "lstm_seq_first",
    "max_pool1d",
    "max_pool2d",
    "multihead_attention",
    "multihead_attention_weights",
    "relu",
    "rms_norm",
    "rnn",
    "rnn_bidirectional_2layer",
    "rotary",
    "scatter",
    "sigmoid",
    "silu",
    "softmax",
    "tanh",
    "transformer_decoder_layer",
    "transformer_encoder_layer",
    "unflatten",
    "upsample_bilinear",
    "upsample_linear_1d",
    "upsample_nearest",
];

const EXPORTERS: &[&str] = &["ts17", "dynamo17", "dynamo"];

/// Graphs built with `onnx.helper` for what ONNX allows beyond PyTorch's use of an operator
/// (`<graph>.helper.onnx`, expected outputs from ONNX Runtime).
const HANDMADE: &[&str] = &[
    "cumsum_exclusive_reverse",
    "einsum_implicit_ellipsis",
    "gru_reset_before_linear",
    "lstm_lengths_reverse",
    "pad_axes_crop",
    "range_float_hardsigmoid",
    "rnn_relu_reverse_lengths",
    "scatter_gather_nd",
    "slice_negative_steps",
    "split_num_outputs_uneven",
    "trilu_lower_diagonal",
];

/// Every `(graph, exporter)` pair the fixtures may hold.
fn pairs() -> Vec<(&'static str, &'static str)> {
    let twins = LAYERS.iter().flat_map(|l| EXPORTERS.iter().map(move |e| (*l, *e)));
    twins.chain(HANDMADE.iter().map(|h| (*h, "helper"))).collect()
}

fn manifest() -> serde_json::Value {
    let text = std::fs::read_to_string(dir().join("manifest.json")).expect("manifest.json");
    serde_json::from_str(&text).expect("manifest.json is JSON")
}

fn max_diff(a: &Tensor, b: &Tensor) -> Result<f64> {
    let (a, b) = (a.to_dtype(DType::F64).to_vec::<f64>()?, b.to_dtype(DType::F64).to_vec::<f64>()?);
    Ok(a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max))
}

/// Runs `<layer>.<exporter>.onnx` on the stored inputs; the largest difference from
/// PyTorch's outputs.
fn run(layer: &str, exporter: &str) -> Result<f64> {
    let model = ember_onnx::load(dir().join(format!("{layer}.{exporter}.onnx")))?;
    let io = load_safetensors(dir().join(format!("{layer}.safetensors")))?;
    let inputs: Vec<Var> = (0..).map_while(|i| io.get(&format!("input.{i}")).cloned()).map(Var::new).collect();
    let outputs = model.run(&inputs.iter().collect::<Vec<_>>())?;
    let mut worst = 0.0f64;
    for (i, y) in outputs.iter().enumerate() {
        let want = io.get(&format!("output.{i}")).expect("expected output");
        assert_eq!(y.shape(), want.shape(), "{layer}.{exporter} output {i}");
        worst = worst.max(max_diff(&y.value(), want)?);
    }
    assert_eq!(io.keys().filter(|k| k.starts_with("output.")).count(), outputs.len(), "{layer}.{exporter}");
    Ok(worst)
}

#[test]
fn every_exported_layer_imports_and_matches_pytorch() {
    let mut failures = Vec::new();
    let mut ran = 0;
    for (layer, exporter) in pairs() {
        if !dir().join(format!("{layer}.{exporter}.onnx")).exists() {
            continue;
        }
        ran += 1;
        match run(layer, exporter) {
            Ok(d) if d <= 1e-5 => {}
            Ok(d) => failures.push(format!("{layer}.{exporter}: max abs difference {d:e}")),
            Err(e) => failures.push(format!("{layer}.{exporter}: {e}")),
        }
    }
    assert!(failures.is_empty(), "{} of {ran} fixtures fail:\n{}", failures.len(), failures.join("\n"));
    // The coverage test below checks which files must exist; this guards an empty directory.
    assert!(ran >= 150, "only {ran} fixtures ran");
}

#[test]
fn every_fixture_is_covered_and_every_twin_has_its_files() {
    let manifest = manifest();
    let mut on_disk = BTreeSet::new();
    for entry in std::fs::read_dir(dir()).expect("fixture directory") {
        let name = entry.expect("entry").file_name().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(".onnx") {
            on_disk.insert(stem.to_string());
        }
    }
    let mut expected = BTreeSet::new();
    for (layer, exporter) in pairs() {
        assert!(dir().join(format!("{layer}.safetensors")).exists(), "{layer}.safetensors is missing");
        let entry = manifest.get(layer).unwrap_or_else(|| panic!("manifest.json lacks {layer}"));
        let e = entry.get(exporter).unwrap_or_else(|| panic!("manifest.json lacks {layer}.{exporter}"));
        if e.get("ops").is_some() {
            expected.insert(format!("{layer}.{exporter}"));
        } else {
            assert!(e.get("export_error").is_some(), "{layer}.{exporter}: neither ops nor export_error");
        }
    }
    let uncovered: Vec<_> = on_disk.difference(&expected).collect();
    assert!(uncovered.is_empty(), "fixtures not covered by the test's LAYERS: {uncovered:?}");
    let missing: Vec<_> = expected.difference(&on_disk).collect();
    assert!(missing.is_empty(), "fixtures listed in manifest.json but missing: {missing:?}");
    let named: BTreeSet<String> = manifest.as_object().expect("object").keys().cloned().collect();
    let listed: BTreeSet<String> = LAYERS.iter().chain(HANDMADE).map(|s| s.to_string()).collect();
    assert_eq!(named, listed, "manifest.json and LAYERS + HANDMADE name different graphs");
}

// ember's own exports, checked in ONNX Runtime by `onnx_layers.py check-ember`.

mod ember_layers {
    use super::*;
    use ember_nn::functional::InterpolateMode;
    use ember_nn::{
        AdaptiveAvgPool2d, AvgPool1d, AvgPool2d, BatchNorm1d, BatchNorm2d, Conv1d, Conv1dOptions, Conv2d,
        Conv2dOptions, ConvTranspose1d, ConvTranspose1dOptions, ConvTranspose2d, ConvTranspose2dOptions, DecoderMasks,
        Dropout, Embedding, Flatten, GELU, GRU, GroupNorm, InstanceNorm2d, InstanceNormOptions, LSTM, LayerNorm,
        LeakyReLU, Linear, LogSoftmax, MaxPool1d, MaxPool2d, Module, MultiheadAttention, MultiheadAttentionOptions,
        RMSNorm, RNN, ReLU, RnnOptions, Sequential, SiLU, Sigmoid, Softmax, Tanh, TransformerActivation,
        TransformerDecoderLayer, TransformerEncoderLayer, TransformerLayerOptions, Unflatten, Upsample,
    };
    use ember_onnx::{ExportOptions, export_fn_bytes};

    /// A layer's forward, from its inputs to its outputs.
    pub type Forward = Box<dyn Fn(&[Var]) -> Result<Vec<Var>>>;

    /// A layer to export: its parameters, the function of its inputs, and the inputs.
    pub struct Case {
        pub name: &'static str,
        pub params: Vec<(String, Var)>,
        pub f: Forward,
        pub inputs: Vec<Var>,
    }

    fn randn(shape: &[usize]) -> Result<Var> {
        Ok(Var::new(Tensor::randn(shape)?))
    }

    fn module(name: &'static str, m: impl Module + 'static, shape: &[usize]) -> Result<Case> {
        m.eval();
        let params = m.named_parameters();
        Ok(Case { name, params, f: Box::new(move |x| Ok(vec![m.forward(&x[0])?])), inputs: vec![randn(shape)?] })
    }

    /// Every ember layer, small, in evaluation mode (fixed seed: the files are the same on
    /// every run).
    pub fn cases() -> Result<Vec<Case>> {
        ember_tensor::manual_seed(7);
        let rnn = RnnOptions::default().batch_first(true);
        let rnn2 = rnn.num_layers(2).bidirectional(true);
        let layer =
            TransformerLayerOptions { dim_feedforward: 16, dropout: 0.0, batch_first: true, ..Default::default() };
        let gelu_layer = TransformerLayerOptions { activation: TransformerActivation::GELU, ..layer };
        let mut out = vec![
            module("linear", Linear::new(6, 4)?, &[2, 6])?,
            module("conv1d", Conv1d::with_options(3, 4, 3, Conv1dOptions::default().padding(1))?, &[2, 3, 8])?,
            module(
                "conv2d",
                Conv2d::with_options(3, 4, 3, Conv2dOptions::default().stride(2).padding(1))?,
                &[2, 3, 8, 8],
            )?,
            module(
                "conv_transpose1d",
                ConvTranspose1d::with_options(3, 2, 3, ConvTranspose1dOptions::default().stride(2))?,
                &[2, 3, 5],
            )?,
            module(
                "conv_transpose2d",
                ConvTranspose2d::with_options(
                    3,
                    2,
                    3,
                    ConvTranspose2dOptions::default().stride(2).padding(1).output_padding(1),
                )?,
                &[2, 3, 4, 4],
            )?,
            module("max_pool1d", MaxPool1d::new(2), &[2, 3, 8])?,
            module("max_pool2d", MaxPool2d::new(2), &[2, 3, 6, 6])?,
            module("avg_pool1d", AvgPool1d::new(2), &[2, 3, 8])?,
            module("avg_pool2d", AvgPool2d::new(2), &[2, 3, 6, 6])?,
            module("adaptive_avg_pool2d", AdaptiveAvgPool2d::new(1), &[2, 3, 5, 5])?,
            module("batch_norm1d", BatchNorm1d::new(4)?, &[2, 4, 5])?,
            module("batch_norm2d", BatchNorm2d::new(4)?, &[2, 4, 5, 5])?,
            module("layer_norm", LayerNorm::new(&[6])?, &[2, 3, 6])?,
            module("group_norm", GroupNorm::new(2, 4)?, &[2, 4, 5, 5])?,
            module(
                "instance_norm2d",
                InstanceNorm2d::with_options(4, InstanceNormOptions { affine: true, ..Default::default() })?,
                &[2, 4, 5, 5],
            )?,
            module("rms_norm", RMSNorm::new(&[6])?, &[2, 3, 6])?,
            module("rnn", RNN::with_options(4, 5, rnn)?, &[2, 3, 4])?,
            module("rnn_bidirectional_2layer", RNN::with_options(4, 5, rnn2)?, &[2, 3, 4])?,
            module("lstm", LSTM::with_options(4, 5, rnn)?, &[2, 3, 4])?,
            module("lstm_bidirectional_2layer", LSTM::with_options(4, 5, rnn2)?, &[2, 3, 4])?,
            module("gru", GRU::with_options(4, 5, rnn)?, &[2, 3, 4])?,
            module("gru_bidirectional_2layer", GRU::with_options(4, 5, rnn2)?, &[2, 3, 4])?,
            module("transformer_encoder_layer", TransformerEncoderLayer::with_options(8, 2, layer)?, &[2, 3, 8])?,
            module("upsample_nearest", Upsample::scale_factor(2.0), &[2, 3, 4, 4])?,
            module("upsample_bilinear", Upsample::scale_factor(2.0).mode(InterpolateMode::Bilinear), &[2, 3, 4, 4])?,
            module("relu", ReLU, &[2, 5])?,
            module("gelu", GELU::new(), &[2, 5])?,
            module("gelu_tanh", GELU::tanh(), &[2, 5])?,
            module("silu", SiLU, &[2, 5])?,
            module("sigmoid", Sigmoid, &[2, 5])?,
            module("tanh", Tanh, &[2, 5])?,
            module("softmax", Softmax::new(-1), &[2, 3, 5])?,
            module("log_softmax", LogSoftmax::new(1), &[2, 5])?,
            module("flatten", Flatten::new(), &[2, 3, 2, 2])?,
            module("unflatten", Unflatten::new(1, [2, 3]), &[2, 6])?,
            module("dropout", Sequential::new().add(Dropout::new(0.3)?).add(Linear::new(5, 3)?), &[2, 5])?,
        ];
        let embedding = Embedding::new(10, 4)?;
        let tokens = Var::new(Tensor::from_vec((0..10i64).map(|i| (i * 7) % 10).collect::<Vec<_>>(), [2, 5])?);
        out.push(Case {
            name: "embedding",
            params: embedding.named_parameters(),
            f: Box::new(move |x| Ok(vec![embedding.forward(&x[0])?])),
            inputs: vec![tokens],
        });
        let mha = MultiheadAttention::with_options(
            8,
            2,
            MultiheadAttentionOptions { batch_first: true, ..Default::default() },
        )?;
        mha.eval();
        out.push(Case {
            name: "multihead_attention",
            params: mha.named_parameters(),
            f: Box::new(move |x| {
                let args = ember_nn::MultiheadAttentionArgs { need_weights: false, ..Default::default() };
                Ok(vec![mha.forward_with(&x[0], &x[0], &x[0], &args)?.output])
            }),
            inputs: vec![randn(&[2, 3, 8])?],
        });
        let decoder = TransformerDecoderLayer::with_options(8, 2, gelu_layer)?;
        decoder.eval();
        out.push(Case {
            name: "transformer_decoder_layer",
            params: decoder.named_parameters(),
            f: Box::new(move |x| Ok(vec![decoder.forward_with(&x[0], &x[1], &DecoderMasks::default())?])),
            inputs: vec![randn(&[2, 3, 8])?, randn(&[2, 4, 8])?],
        });
        let stack = Sequential::new()
            .add(Conv2d::with_options(3, 4, 3, Conv2dOptions::default().padding(1))?)
            .add(GroupNorm::new(2, 4)?)
            .add(ReLU)
            .add(Upsample::scale_factor(2.0))
            .add(ConvTranspose2d::with_options(4, 2, 2, ConvTranspose2dOptions::default().stride(2))?);
        out.push(module("conv_groupnorm_upsample", stack, &[1, 3, 4, 4])?);
        Ok(out)
    }

    /// Layers ember cannot export yet, with the reason (each is checked to still fail).
    pub fn refused() -> Result<Vec<(Case, &'static str)>> {
        Ok(vec![(module("leakyrelu", LeakyReLU::new(0.1), &[2, 5])?, "'leaky_relu' has no export description")])
    }

    /// The case's ONNX bytes and its outputs.
    pub fn export(case: &Case) -> Result<(Vec<u8>, Vec<Var>)> {
        let bytes = export_fn_bytes(&case.f, &case.params, &case.inputs, &ExportOptions::default())?;
        let outputs = (case.f)(&case.inputs)?;
        Ok((bytes, outputs))
    }
}

/// The operator types of an ONNX file, in order.
fn op_types(bytes: &[u8]) -> Vec<String> {
    use prost::Message;
    let model = ember_onnx::proto::ModelProto::decode(bytes).expect("ember writes valid protobuf");
    model.graph.map(|g| g.node.into_iter().map(|n| n.op_type).collect()).unwrap_or_default()
}

/// With `EMBER_ONNX_LAYERS_OUT=<dir>`, writes `<layer>.onnx` and `<layer>.safetensors`
/// (`input.<i>`, `output.<i>`) for `onnx_layers.py check-ember`; always checks that every
/// export reloads in ember and matches to 1e-5.
#[test]
fn write_ember_exports() -> Result<()> {
    let out = std::env::var_os("EMBER_ONNX_LAYERS_OUT").map(PathBuf::from);
    for case in ember_layers::cases()? {
        let (bytes, outputs) = ember_layers::export(&case)?;
        let back = ember_onnx::load_bytes(&bytes)?.run(&case.inputs.iter().collect::<Vec<_>>())?;
        for (y, want) in back.iter().zip(&outputs) {
            let d = max_diff(&y.value(), &want.value())?;
            assert!(d <= 1e-5, "{}: ember's export reloads {d:e} away", case.name);
        }
        if let Some(dir) = &out {
            std::fs::create_dir_all(dir).expect("output directory");
            std::fs::write(dir.join(format!("{}.onnx", case.name)), &bytes).expect("write");
            let mut io = ember_io::StateDict::new();
            for (i, x) in case.inputs.iter().enumerate() {
                io.insert(format!("input.{i}"), x.value());
            }
            for (i, y) in outputs.iter().enumerate() {
                io.insert(format!("output.{i}"), y.value());
            }
            ember_io::save_safetensors(dir.join(format!("{}.safetensors", case.name)), &io)?;
        }
    }
    Ok(())
}

#[test]
fn ember_exports_ran_in_onnx_runtime() -> Result<()> {
    let text = std::fs::read_to_string(dir().join("ember_exports.json")).expect("ember_exports.json");
    let checked: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let layers = checked["layers"].as_object().expect("layers");
    let cases = ember_layers::cases()?;
    let names: BTreeSet<&str> = cases.iter().map(|c| c.name).collect();
    let recorded: BTreeSet<&str> = layers.keys().map(String::as_str).collect();
    assert_eq!(names, recorded, "rerun tools/parity/onnx_layers.py check-ember");
    for case in &cases {
        let entry = &layers[case.name];
        let diff = entry["max_abs_diff"].as_f64().expect("max_abs_diff");
        assert!(entry["ok"].as_bool() == Some(true) && diff <= 1e-5, "{}: ONNX Runtime is {diff:e} away", case.name);
        // The file checked is the one ember writes today.
        let (bytes, _) = ember_layers::export(case)?;
        let ops: Vec<String> =
            entry["ops"].as_array().expect("ops").iter().map(|v| v.as_str().unwrap_or_default().to_string()).collect();
        assert_eq!(op_types(&bytes), ops, "{}: the export changed; rerun onnx_layers.py check-ember", case.name);
    }
    Ok(())
}

#[test]
fn layers_ember_cannot_export_still_say_why() -> Result<()> {
    for (case, why) in ember_layers::refused()? {
        let err = ember_layers::export(&case).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains(why), "{}: expected an error containing {why:?}, got {err:?}", case.name);
    }
    Ok(())
}
