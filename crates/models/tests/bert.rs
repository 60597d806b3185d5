//! BERT against transformers: hidden states, pooled output, MLM and classification logits
//! of three tiny checkpoints (single-file and sharded, with and without the `bert.` prefix,
//! f32 and bf16, three activations, odd head counts) on padded batches; the WordPiece
//! tokenizer's ids; errors naming the file and the key; a save / load round trip; the
//! gradient of an encoder layer. Fixtures: `tools/parity/model_fixtures/bert.py`.

mod encoders_common;

use ember_autograd::{Var, gradcheck};
use ember_io::LoadOptions;
use ember_models::bert::{BertConfig, BertForMaskedLM, BertForSequenceClassification, BertInput, BertModel};
use ember_models::tokenizer::Tokenizer;
use ember_nn::Module;
use ember_tensor::{DType, Tensor};
use encoders_common::*;

fn input(expected: &ember_io::StateDict, with_types: bool) -> BertInput {
    let mut input = BertInput::new(expected.get("input_ids").unwrap().clone())
        .attention_mask(expected.get("attention_mask").unwrap().clone());
    if with_types {
        input = input.token_type_ids(expected.get("token_type_ids").unwrap().clone());
    }
    input
}

#[test]
fn masked_lm_logits_and_hidden_states_match_transformers() {
    let dir = fixture("bert/mlm");
    let want = expected(&dir);
    let model = BertForMaskedLM::from_pretrained(&dir).unwrap();
    let logits = model.forward_with(&input(&want, true)).unwrap();
    assert_close("mlm logits", &logits.value(), want.get("logits").unwrap(), 1e-4);
    let hidden = model.bert().forward_with(&input(&want, true)).unwrap();
    assert_close("mlm hidden", &hidden.last_hidden_state.value(), want.get("last_hidden_state").unwrap(), 1e-4);
    assert!(hidden.pooler_output.is_none(), "BertForMaskedLM has no pooler");
}

#[test]
fn the_encoder_of_a_masked_lm_checkpoint_loads_without_its_head() {
    let dir = fixture("bert/mlm");
    let want = expected(&dir);
    let bert = BertModel::from_pretrained(&dir).unwrap();
    assert!(!bert.has_pooler());
    let out = bert.forward_with(&input(&want, true)).unwrap();
    assert_close("hidden", &out.last_hidden_state.value(), want.get("last_hidden_state").unwrap(), 1e-4);
}

#[test]
fn sharded_sequence_classification_matches_transformers() {
    let dir = fixture("bert/cls");
    let want = expected(&dir);
    let model = BertForSequenceClassification::from_pretrained(&dir).unwrap();
    assert_eq!(model.classifier().out_features(), 3);
    let logits = model.forward_with(&input(&want, true)).unwrap();
    assert_close("cls logits", &logits.value(), want.get("logits").unwrap(), 1e-4);
    let out = model.bert().forward_with(&input(&want, true)).unwrap();
    assert_close("cls hidden", &out.last_hidden_state.value(), want.get("last_hidden_state").unwrap(), 1e-4);
    assert_close("cls pooled", &out.pooler_output.unwrap().value(), want.get("pooler_output").unwrap(), 1e-4);
}

#[test]
fn a_bf16_checkpoint_loads_converted_and_native() {
    let dir = fixture("bert/base");
    let want = expected(&dir);
    let converted = BertModel::from_pretrained_with(&dir, &LoadOptions::default().dtype(DType::F32)).unwrap();
    assert_eq!(converted.dtype(), DType::F32);
    let out = converted.forward_with(&input(&want, false)).unwrap();
    assert_close("bf16->f32 hidden", &out.last_hidden_state.value(), want.get("last_hidden_state").unwrap(), 1e-4);
    assert_close("bf16->f32 pooled", &out.pooler_output.unwrap().value(), want.get("pooler_output").unwrap(), 1e-4);

    let native = BertModel::from_pretrained(&dir).unwrap();
    assert_eq!(native.dtype(), DType::BF16);
    assert!(native.parameters().iter().all(|p| p.dtype() == DType::BF16));
    let out = native.forward_with(&input(&want, false)).unwrap();
    assert_eq!(out.last_hidden_state.dtype(), DType::BF16);
    // bf16 arithmetic: about 3 significant digits on values of order 1.
    let hidden = out.last_hidden_state.value().to_dtype(DType::F32);
    assert_close("native bf16 hidden", &hidden, want.get("last_hidden_state").unwrap(), 0.1);
}

#[test]
fn the_wordpiece_tokenizer_gives_the_python_ids() {
    let dir = fixture("bert/mlm");
    let checks: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tokenizer_checks.json")).unwrap()).unwrap();
    let tok = Tokenizer::from_dir(&dir).unwrap();
    assert_eq!(tok.vocab_size(), checks["vocab_size"].as_u64().unwrap() as usize);
    for (i, text) in checks["texts"].as_array().unwrap().iter().enumerate() {
        let text = text.as_str().unwrap();
        let ids: Vec<u64> = tok.encode(text, true).unwrap().into_iter().map(u64::from).collect();
        let want: Vec<u64> = checks["ids"][i].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
        assert_eq!(ids, want, "{text}");
        let plain: Vec<u64> = tok.encode(text, false).unwrap().into_iter().map(u64::from).collect();
        let want: Vec<u64> = checks["ids_plain"][i].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
        assert_eq!(plain, want, "{text} without special tokens");
        let ids32: Vec<u32> = ids.iter().map(|&i| i as u32).collect();
        assert_eq!(tok.decode(&ids32, true).unwrap(), checks["decoded"][i].as_str().unwrap());
    }
    // The fixture's inputs are these ids.
    let want = expected(&dir);
    let first: Vec<i64> = want.get("input_ids").unwrap().narrow(0, 0, 1).unwrap().to_vec::<i64>().unwrap();
    let ids: Vec<i64> = checks["ids"][0].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
    assert_eq!(&first[..ids.len()], ids.as_slice());
}

#[test]
fn a_misnamed_key_is_named_with_the_file() {
    let dir = copy_dir(&fixture("bert/mlm"), "bert-misnamed");
    let file = dir.join("model.safetensors");
    edit_safetensors(&file, |s| {
        *s = renamed(
            s,
            "bert.encoder.layer.1.attention.self.query.weight",
            "bert.encoder.layer.1.attention.self.qurey.weight",
        )
    });
    let err = BertForMaskedLM::from_pretrained(&dir).err().unwrap().to_string();
    assert!(err.contains("bert.encoder.layer.1.attention.self.query.weight"), "{err}");
    assert!(err.contains("qurey"), "{err}");
    assert!(err.contains(&dir.display().to_string()), "{err}");
}

#[test]
fn a_wrong_shape_is_named_with_the_key_and_the_file() {
    let dir = copy_dir(&fixture("bert/mlm"), "bert-shape");
    let file = dir.join("model.safetensors");
    edit_safetensors(&file, |s| {
        s.insert("bert.encoder.layer.0.intermediate.dense.weight", Tensor::zeros([36, 30], DType::F32).unwrap());
    });
    let err = BertForMaskedLM::from_pretrained(&dir).err().unwrap().to_string();
    assert!(err.contains("bert.encoder.layer.0.intermediate.dense.weight"), "{err}");
    assert!(err.contains("36"), "{err}");
    assert!(err.contains(&dir.display().to_string()), "{err}");
}

#[test]
fn a_missing_shard_and_a_truncated_file_are_named() {
    let dir = copy_dir(&fixture("bert/cls"), "bert-shard");
    std::fs::remove_file(dir.join("model-00003-of-00004.safetensors")).unwrap();
    let err = BertForSequenceClassification::from_pretrained(&dir).err().unwrap().to_string();
    assert!(err.contains("model-00003-of-00004.safetensors") && err.contains("bert."), "{err}");

    let dir = copy_dir(&fixture("bert/mlm"), "bert-truncated");
    let file = dir.join("model.safetensors");
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
    let err = BertForMaskedLM::from_pretrained(&dir).err().unwrap().to_string();
    assert!(err.contains("model.safetensors"), "{err}");
}

#[test]
fn a_checkpoint_of_another_layout_fails() {
    // A classifier checkpoint has no MLM head: loading it as BertForMaskedLM names the
    // missing keys instead of loading half the weights.
    let err = BertForMaskedLM::from_pretrained(&fixture("bert/cls")).err().unwrap().to_string();
    assert!(err.contains("cls.predictions.bias"), "{err}");
}

#[test]
fn save_pretrained_round_trips_and_keeps_the_config() {
    let src = fixture("bert/mlm");
    let want = expected(&src);
    let model = BertForMaskedLM::from_pretrained(&src).unwrap();
    let dir = scratch("bert-save");
    model.save_pretrained(&dir).unwrap();
    let back = BertForMaskedLM::from_pretrained(&dir).unwrap();
    let logits = back.forward_with(&input(&want, true)).unwrap();
    assert_close("reloaded logits", &logits.value(), want.get("logits").unwrap(), 1e-4);
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["architectures"][0], "BertForMaskedLM");
    assert_eq!(config["num_attention_heads"], 3);
    // transformers' own keys: the tied decoder is not written.
    let saved = ember_io::load_safetensors(dir.join("model.safetensors")).unwrap();
    assert!(saved.contains_key("cls.predictions.transform.LayerNorm.weight"));
    assert!(!saved.keys().any(|k| k.starts_with("cls.predictions.decoder")));
}

#[test]
fn a_classifier_on_a_pretrained_encoder_trains_and_ids_are_checked() {
    let bert = BertModel::from_pretrained(&fixture("bert/mlm")).unwrap();
    let model = BertForSequenceClassification::from_bert(bert, 4).unwrap();
    assert!(model.bert().has_pooler());
    let ids = Tensor::from_vec(vec![2i64, 40, 41, 3], [1, 4]).unwrap();
    let logits = model.forward_with(&BertInput::new(ids)).unwrap();
    assert_eq!(logits.shape().dims(), &[1, 4]);
    logits.sum_all().backward().unwrap();
    assert!(model.classifier().weight().grad().is_some());

    let long = Tensor::zeros([1, 41], DType::I64).unwrap();
    let err = model.forward_with(&BertInput::new(long)).err().unwrap().to_string();
    assert!(err.contains("max_position_embeddings") && err.contains("41"), "{err}");
}

#[test]
fn an_encoder_layer_passes_gradcheck_with_a_padding_mask() {
    ember_tensor::manual_seed(7);
    let config = BertConfig {
        vocab_size: 10,
        hidden_size: 6,
        num_hidden_layers: 1,
        num_attention_heads: 3,
        intermediate_size: 5,
        max_position_embeddings: 8,
        hidden_act: "gelu_new".into(),
        layer_norm_eps: 1e-5,
        ..Default::default()
    };
    let bert = BertModel::new(&config, false).unwrap();
    bert.eval();
    bert.to_dtype(DType::F64).unwrap();
    let layer = &bert.encoder().layers()[0];
    let mask = Var::new(Tensor::from_vec(vec![1u8, 1, 1, 0, 1, 1, 1, 1], [2, 1, 1, 4]).unwrap());
    let x = Tensor::normal([2, 4, 6], 0.0, 1.0, DType::F64).unwrap();
    gradcheck(|v| layer.forward_masked(&v[0], Some(&mask)), &[x], 1e-6, 1e-6, 1e-4).unwrap();
}
