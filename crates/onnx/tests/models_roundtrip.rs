//! The pretrained architectures through ONNX, both ways, on the tiny random checkpoints of
//! `tools/parity/fixtures/models/` (fixtures by `tools/parity/onnx_models.py`):
//!
//! - ember's export of each model's forward (token ids or images in, logits out, fixed
//!   shapes) imports into ember again and gives ember's logits to 1e-5, and the file read
//!   from the graph input (another input gives other logits); `onnx_models.py check-ember`
//!   ran those files in ONNX Runtime (`ember_exports.json`, held to what ember writes);
//! - the transformers / torchvision-layout twins exported by PyTorch's two exporters
//!   (`tools/parity/fixtures/onnx_models/<model>.<exporter>.onnx`) import and match
//!   PyTorch's logits to 1e-5, and every exporter has its file or its recorded failure;
//!   the twins are ember's models (ember's logits on their input are PyTorch's to 1e-5);
//! - BERT and ResNet also export with a dynamic batch.

use ember_autograd::{Var, no_grad};
use ember_io::load_safetensors;
use ember_models::bert::BertForSequenceClassification;
use ember_models::gpt2::Gpt2LmHeadModel;
use ember_models::llama::LlamaForCausalLM;
use ember_models::resnet::ResNet;
use ember_models::vit::ViTForImageClassification;
use ember_nn::Module;
use ember_onnx::ExportOptions;
use ember_tensor::{DType, Result, Tensor};
use std::collections::BTreeSet;
use std::path::PathBuf;

fn models_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/parity/fixtures/models")
}

fn onnx_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/parity/fixtures/onnx_models")
}

fn max_diff(a: &Tensor, b: &Tensor) -> Result<f64> {
    assert_eq!(a.shape(), b.shape());
    let (a, b) = (a.to_dtype(DType::F64).to_vec::<f64>()?, b.to_dtype(DType::F64).to_vec::<f64>()?);
    Ok(a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max))
}

/// A model, the input it is exported on (a fixture's own) and another input of that shape.
struct Case {
    name: &'static str,
    model: Box<dyn Module>,
    input: Tensor,
    other: Tensor,
}

fn fixture_tensor(path: &str, key: &str) -> Result<Tensor> {
    let state = load_safetensors(models_dir().join(path))?;
    Ok(state.get(key).unwrap_or_else(|| panic!("{path} lacks {key}")).clone())
}

/// Other token ids of the same shape: each shifted by one within the vocabulary.
fn shifted(ids: &Tensor, vocab: i64) -> Result<Tensor> {
    let v: Vec<i64> = ids.to_vec::<i64>()?.iter().map(|&i| (i + 1) % vocab).collect();
    Tensor::from_vec(v, ids.shape().clone())
}

/// Every architecture: GPT-2 (tied head, `gelu_new`), LLaMA with grouped-query attention
/// and linear and llama3 rope scaling, BERT with a classification head, ViT, ResNet-18.
fn cases() -> Result<Vec<Case>> {
    let dir = models_dir();
    let mut out = Vec::new();
    let ids = fixture_tensor("gpt2/tied_outputs.safetensors", "input_ids")?;
    out.push(Case {
        name: "gpt2",
        model: Box::new(Gpt2LmHeadModel::from_pretrained(&dir.join("gpt2/tied"))?),
        other: shifted(&ids, 512)?,
        input: ids,
    });
    for name in ["llama_gqa2_linear", "llama_gqa4_llama3"] {
        let ids = fixture_tensor(&format!("llama/{name}/expected.safetensors"), "input_ids")?;
        out.push(Case {
            name,
            model: Box::new(LlamaForCausalLM::from_pretrained(&dir.join("llama").join(name).join("checkpoint"))?),
            other: shifted(&ids, 97)?,
            input: ids,
        });
    }
    let ids = fixture_tensor("bert/cls/expected.safetensors", "input_ids")?;
    out.push(Case {
        name: "bert",
        model: Box::new(BertForSequenceClassification::from_pretrained(&dir.join("bert/cls"))?),
        other: shifted(&ids, 50)?,
        input: ids,
    });
    let pixels = fixture_tensor("vit/cls/expected.safetensors", "pixel_values")?;
    out.push(Case {
        name: "vit",
        model: Box::new(ViTForImageClassification::from_pretrained(&dir.join("vit/cls"))?),
        other: pixels.mul_scalar(-1.0),
        input: pixels,
    });
    let images = fixture_tensor("resnet/expected.safetensors", "input")?;
    out.push(Case {
        name: "resnet",
        model: Box::new(ResNet::from_pretrained(&dir.join("resnet/resnet18_w4.pth"))?),
        other: images.mul_scalar(-1.0),
        input: images,
    });
    Ok(out)
}

fn export(case: &Case) -> Result<Vec<u8>> {
    let options = ExportOptions::default().input_names(&["input"]).output_names(&["logits"]);
    ember_onnx::export_bytes(case.model.as_ref(), &Var::new(case.input.clone()), &options)
}

/// The operator types of an ONNX file, in order.
fn op_types(bytes: &[u8]) -> Vec<String> {
    use prost::Message;
    let model = ember_onnx::proto::ModelProto::decode(bytes).expect("ember writes valid protobuf");
    model.graph.map(|g| g.node.into_iter().map(|n| n.op_type).collect()).unwrap_or_default()
}

/// With `EMBER_ONNX_MODELS_OUT=<dir>`, writes `<model>.onnx` and `<model>.safetensors`
/// (`input.0`, `output.0`: ember's logits) for `onnx_models.py check-ember`; always checks
/// that every export imports into ember and gives ember's logits to 1e-5, on the input it
/// was traced on and on another.
#[test]
fn write_ember_exports() -> Result<()> {
    let out = std::env::var_os("EMBER_ONNX_MODELS_OUT").map(PathBuf::from);
    for case in cases()? {
        let bytes = export(&case)?;
        let back = ember_onnx::load_bytes(&bytes)?;
        let mut logits = Vec::new();
        for x in [&case.input, &case.other] {
            let want = no_grad(|| case.model.forward(&Var::new(x.clone())))?.value();
            let got = no_grad(|| back.forward(&Var::new(x.clone())))?.value();
            let d = max_diff(&got, &want)?;
            println!("{}: reloaded {d:e} away", case.name);
            assert!(d <= 1e-5, "{}: ember's export reloads {d:e} away from ember's logits", case.name);
            logits.push(want);
        }
        // The file reads its input rather than holding the traced one as a constant.
        assert!(max_diff(&logits[0], &logits[1])? > 1e-3, "{}: another input gives the same logits", case.name);
        if let Some(dir) = &out {
            std::fs::create_dir_all(dir).expect("output directory");
            std::fs::write(dir.join(format!("{}.onnx", case.name)), &bytes).expect("write");
            let mut io = ember_io::StateDict::new();
            io.insert("input.0", case.input.clone());
            io.insert("output.0", logits.swap_remove(0));
            ember_io::save_safetensors(dir.join(format!("{}.safetensors", case.name)), &io)?;
        }
    }
    Ok(())
}

/// With a dynamic batch, the models whose traced graph holds nothing batch-sized but the
/// input (BERT, ResNet) export and run at another batch size. (GPT-2's flattened position
/// ids, LLaMA's per-batch rotary tables and ViT's expanded class token are refused,
/// naming the constant or the expand.)
#[test]
fn bert_and_resnet_export_with_a_dynamic_batch() -> Result<()> {
    for case in cases()?.into_iter().filter(|c| c.name == "bert" || c.name == "resnet") {
        let options = ExportOptions::default().dynamic_batch(true);
        let back = ember_onnx::load_bytes(&ember_onnx::export_bytes(
            case.model.as_ref(),
            &Var::new(case.input.clone()),
            &options,
        )?)?;
        let x = Var::new(Tensor::cat(&[&case.other, &case.input], 0)?);
        let (got, want) = no_grad(|| Ok((back.forward(&x)?, case.model.forward(&x)?)))?;
        let d = max_diff(&got.value(), &want.value())?;
        assert!(d <= 1e-5, "{}: {d:e} away at batch {}", case.name, x.shape()[0]);
    }
    Ok(())
}

#[test]
fn ember_exports_ran_in_onnx_runtime() -> Result<()> {
    let text = std::fs::read_to_string(onnx_dir().join("ember_exports.json")).expect("ember_exports.json");
    let checked: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let models = checked["models"].as_object().expect("models");
    let cases = cases()?;
    let names: BTreeSet<&str> = cases.iter().map(|c| c.name).collect();
    let recorded: BTreeSet<&str> = models.keys().map(String::as_str).collect();
    assert_eq!(names, recorded, "rerun tools/parity/onnx_models.py check-ember");
    for case in &cases {
        let entry = &models[case.name];
        let diff = entry["max_abs_diff"].as_f64().expect("max_abs_diff");
        assert!(entry["ok"].as_bool() == Some(true) && diff <= 1e-5, "{}: ONNX Runtime is {diff:e} away", case.name);
        // The file checked is the one ember writes today.
        let ops: Vec<String> =
            entry["ops"].as_array().expect("ops").iter().map(|v| v.as_str().unwrap_or_default().to_string()).collect();
        assert_eq!(
            op_types(&export(case)?),
            ops,
            "{}: the export changed; rerun onnx_models.py check-ember",
            case.name
        );
    }
    Ok(())
}

// PyTorch's exports of the twins.

/// The models `onnx_models.py` exports through PyTorch, and its exporters.
const TWINS: &[&str] = &["bert", "gpt2", "llama_gqa2_linear", "resnet", "vit"];
const EXPORTERS: &[&str] = &["ts17", "dynamo"];

fn manifest() -> serde_json::Value {
    let text = std::fs::read_to_string(onnx_dir().join("manifest.json")).expect("manifest.json");
    serde_json::from_str(&text).expect("manifest.json is JSON")
}

/// `<model>.<exporter>.onnx` on the stored input; the largest difference from PyTorch's
/// logits.
fn run_twin(model: &str, exporter: &str) -> Result<f64> {
    let graph = ember_onnx::load(onnx_dir().join(format!("{model}.{exporter}.onnx")))?;
    let io = load_safetensors(onnx_dir().join(format!("{model}.safetensors")))?;
    let x = Var::new(io.get("input.0").expect("input.0").clone());
    let y = no_grad(|| graph.forward(&x))?;
    max_diff(&y.value(), io.get("output.0").expect("output.0"))
}

#[test]
fn pytorch_exports_import_and_match_pytorch() {
    let manifest = manifest();
    let mut failures = Vec::new();
    let mut ran = 0;
    for model in TWINS {
        for exporter in EXPORTERS {
            if manifest[model][exporter].get("ops").is_none() {
                continue;
            }
            ran += 1;
            let result = run_twin(model, exporter);
            if let Ok(d) = &result {
                println!("{model}.{exporter}: {d:e}");
            }
            match result {
                Ok(d) if d <= 1e-5 => {}
                Ok(d) => failures.push(format!("{model}.{exporter}: max abs difference {d:e}")),
                Err(e) => failures.push(format!("{model}.{exporter}: {e}")),
            }
        }
    }
    assert!(failures.is_empty(), "{} of {ran} files fail:\n{}", failures.len(), failures.join("\n"));
    assert_eq!(ran, TWINS.len() * EXPORTERS.len(), "every exporter wrote every twin");
}

/// The twins are ember's models: ember's own logits on the stored input are PyTorch's.
#[test]
fn the_twins_compute_embers_logits() -> Result<()> {
    for case in cases()?.into_iter().filter(|c| TWINS.contains(&c.name)) {
        let io = load_safetensors(onnx_dir().join(format!("{}.safetensors", case.name)))?;
        let x = io.get("input.0").expect("input.0");
        assert_eq!(max_diff(x, &case.input)?, 0.0, "{}: the twin ran on another input", case.name);
        let ours = no_grad(|| case.model.forward(&Var::new(x.clone())))?;
        let d = max_diff(&ours.value(), io.get("output.0").expect("output.0"))?;
        println!("{}: ember {d:e} from PyTorch", case.name);
        assert!(d <= 1e-5, "{}: ember's logits are {d:e} from PyTorch's", case.name);
    }
    Ok(())
}

#[test]
fn every_twin_has_its_files_or_a_recorded_failure() {
    let manifest = manifest();
    let named: BTreeSet<&str> = manifest.as_object().expect("object").keys().map(String::as_str).collect();
    assert_eq!(named, TWINS.iter().copied().collect(), "manifest.json and TWINS name different models");
    for model in TWINS {
        assert!(onnx_dir().join(format!("{model}.safetensors")).exists(), "{model}.safetensors is missing");
        for exporter in EXPORTERS {
            let entry = &manifest[model][exporter];
            let file = onnx_dir().join(format!("{model}.{exporter}.onnx"));
            if entry.get("ops").is_some() {
                assert!(file.exists(), "{model}.{exporter}.onnx is missing");
            } else {
                assert!(entry.get("export_error").is_some(), "{model}.{exporter}: neither ops nor export_error");
                assert!(!file.exists(), "{model}.{exporter}.onnx is left from a failed export");
            }
        }
    }
}
