//! LLaMA-family checkpoints (LLaMA, Mistral, Qwen2) against transformers, from the tiny
//! random checkpoints and outputs that `tools/parity/model_fixtures/llama.py` wrote into
//! `tools/parity/fixtures/models/llama/`: logits and hidden states, left-padded batches,
//! cached incremental decoding, greedy continuations, bf16 checkpoints, saving, and the
//! errors of checkpoints that do not fit.

use ember_autograd::{Var, no_grad};
use ember_io::{LoadOptions, StateDict, load_safetensors, save_safetensors};
use ember_models::generation::{CausalLm, DecoderInput, position_ids};
use ember_models::llama::{LlamaConfig, LlamaForCausalLM};
use ember_nn::Module;
use ember_tensor::{DType, Tensor};
use std::path::{Path, PathBuf};

/// Every fixture configuration; see the fixture script for what each varies.
const CONFIGS: [&str; 7] =
    ["llama_mha", "llama_gqa2_linear", "llama_gqa4_llama3", "llama_odd_bf16", "qwen2", "mistral", "mistral_window"];
/// Row 0 of the padded batch starts with this many padding positions.
const PAD: usize = 3;

fn dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/parity/fixtures/models/llama").join(name)
}

fn expected(name: &str) -> StateDict {
    load_safetensors(dir(name).join("expected.safetensors")).unwrap()
}

fn get(s: &StateDict, key: &str) -> Tensor {
    s.get(key).unwrap_or_else(|| panic!("fixture key {key}")).clone()
}

/// The model in f32 (bf16 checkpoints converted on load).
fn model(name: &str) -> LlamaForCausalLM {
    LlamaForCausalLM::from_pretrained_with(&dir(name).join("checkpoint"), &LoadOptions::default().dtype(DType::F32))
        .unwrap()
}

fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.shape().dims(), b.shape().dims());
    let (a, b) = (a.to_dtype(DType::F64).to_vec::<f64>().unwrap(), b.to_dtype(DType::F64).to_vec::<f64>().unwrap());
    a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ember-llama-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A copy of a fixture's checkpoint directory to spoil.
fn copy_checkpoint(name: &str, tag: &str) -> PathBuf {
    let out = scratch(tag);
    for entry in std::fs::read_dir(dir(name).join("checkpoint")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), out.join(entry.file_name())).unwrap();
    }
    out
}

#[test]
fn logits_and_hidden_states_match_transformers_for_every_config() {
    for name in CONFIGS {
        let m = model(name);
        let e = expected(name);
        let ids = get(&e, "input_ids");
        let hidden = no_grad(|| m.hidden_states(&ids, None)).unwrap();
        let d = max_diff(&hidden.value(), &get(&e, "hidden"));
        assert!(d < 1e-4, "{name}: hidden states differ by {d}");
        let logits = no_grad(|| m.forward(&ids, None)).unwrap();
        let d = max_diff(&logits.value(), &get(&e, "logits"));
        assert!(d < 1e-4, "{name}: logits differ by {d}");
        // The Module form (ids as a Var) is the same forward.
        let module = no_grad(|| Module::forward(&m, &Var::new(ids.clone()))).unwrap();
        assert_eq!(max_diff(&module.value(), &logits.value()), 0.0, "{name}");
    }
}

#[test]
fn left_padded_batches_match_transformers_and_the_unpadded_rows() {
    for name in CONFIGS {
        let m = model(name);
        let e = expected(name);
        let (ids, mask) = (get(&e, "padded_input_ids"), get(&e, "padded_mask"));
        let logits = no_grad(|| m.forward(&ids, Some(&mask))).unwrap().value();
        let want = get(&e, "padded_logits");
        let seq = ids.shape().dims()[1];
        // Padded positions' logits are meaningless; compare the real ones.
        let real0 = logits.narrow(0, 0, 1).unwrap().narrow(1, PAD, seq - PAD).unwrap();
        let d = max_diff(&real0, &want.narrow(0, 0, 1).unwrap().narrow(1, PAD, seq - PAD).unwrap());
        assert!(d < 1e-4, "{name}: padded row differs from transformers by {d}");
        let d = max_diff(&logits.narrow(0, 1, 1).unwrap(), &want.narrow(0, 1, 1).unwrap());
        assert!(d < 1e-4, "{name}: unpadded row differs from transformers by {d}");
        // Row 0 holds the first seq - PAD tokens of input_ids: the same logits alone.
        let alone = get(&e, "logits").narrow(1, 0, seq - PAD).unwrap();
        let d = max_diff(&real0, &alone);
        assert!(d < 1e-4, "{name}: the padded row differs from the row alone by {d}");
    }
}

/// The logits of `ids` (`[batch, seq]`) fed as a prompt of `prompt` positions and then one
/// position at a time through `forward_cached`, joined along the sequence.
fn incremental_logits(m: &LlamaForCausalLM, ids: &Tensor, mask: Option<&Tensor>, prompt: usize) -> Tensor {
    let (b, seq) = (ids.shape().dims()[0], ids.shape().dims()[1]);
    let mut cache = m.new_cache();
    let mut pieces = Vec::new();
    let mut start = 0;
    while start < seq {
        let n = if start == 0 { prompt } else { 1 };
        let new_ids = ids.narrow(1, start, n).unwrap();
        let seen = mask.map(|m| m.narrow(1, 0, start + n).unwrap());
        let pos = position_ids(seen.as_ref(), b, start, n).unwrap();
        let input = DecoderInput { input_ids: &new_ids, position_ids: &pos, attention_mask: seen.as_ref() };
        pieces.push(no_grad(|| m.forward_cached(&input, &mut cache)).unwrap().value());
        start += n;
    }
    assert_eq!(cache.seq_len(), seq);
    Tensor::cat(&pieces.iter().collect::<Vec<_>>(), 1).unwrap()
}

#[test]
fn cached_incremental_decoding_equals_the_full_forward() {
    for name in CONFIGS {
        let m = model(name);
        let e = expected(name);
        let ids = get(&e, "input_ids");
        let full = no_grad(|| m.forward(&ids, None)).unwrap().value();
        let d = max_diff(&incremental_logits(&m, &ids, None, 3), &full);
        assert!(d < 1e-4, "{name}: cached decoding differs by {d}");
        // Left-padded: a padded prompt of 5, then one position at a time.
        let (ids, mask) = (get(&e, "padded_input_ids"), get(&e, "padded_mask"));
        let full = no_grad(|| m.forward(&ids, Some(&mask))).unwrap().value();
        let inc = incremental_logits(&m, &ids, Some(&mask), 5);
        let seq = ids.shape().dims()[1];
        let real = |t: &Tensor| t.narrow(1, PAD, seq - PAD).unwrap();
        let d = max_diff(&real(&inc), &real(&full));
        assert!(d < 1e-4, "{name}: padded cached decoding differs by {d}");
    }
}

/// The index of the largest of each row of `[rows, vocab]` logits.
#[test]
fn kept_logits_are_the_last_positions_with_padding_too() {
    for name in CONFIGS {
        let m = model(name);
        let ids = get(&expected(name), "input_ids");
        let (b, seq) = (ids.shape().dims()[0], ids.shape().dims()[1]);
        // Row 0 left-padded by one position: the mask and position ids reach the kept rows.
        let mut keep_mask = vec![1i64; b * seq];
        keep_mask[0] = 0;
        let mask = Tensor::from_vec(keep_mask, [b, seq]).unwrap();
        let pos = position_ids(Some(&mask), b, 0, seq).unwrap();
        let input = DecoderInput { input_ids: &ids, position_ids: &pos, attention_mask: Some(&mask) };
        let full = no_grad(|| m.forward_cached(&input, &mut m.new_cache())).unwrap().value();
        let mut cache = m.new_cache();
        let last = no_grad(|| m.forward_cached_keep(&input, &mut cache, 1)).unwrap().value();
        let d = max_diff(&last, &full.narrow(1, seq - 1, 1).unwrap());
        assert!(d < 1e-6, "{name}: the last position's logits differ by {d}");
        assert_eq!(cache.seq_len(), seq);
    }
}

fn argmax_rows(logits: &Tensor) -> Vec<i64> {
    let vocab = logits.shape().dims()[1];
    let v = logits.to_dtype(DType::F64).to_vec::<f64>().unwrap();
    v.chunks(vocab)
        .map(|row| {
            row.iter().enumerate().fold((0, f64::NEG_INFINITY), |b, (i, &x)| if x > b.1 { (i, x) } else { b }).0 as i64
        })
        .collect()
}

#[test]
fn greedy_continuations_match_transformers_generate() {
    for name in CONFIGS {
        let m = model(name);
        let e = expected(name);
        let prompt = get(&e, "greedy_prompt");
        let want = get(&e, "greedy_tokens").to_vec::<i64>().unwrap();
        let margins = get(&e, "greedy_margins").to_vec::<f64>().unwrap();
        // Teacher-forced: each step is fed transformers' token, so that a step whose top-2
        // margin is within rounding (where either token is right) does not send the rest
        // down another path; every step with a clear margin must pick transformers' token.
        let mut cache = m.new_cache();
        let mut ids = prompt.clone();
        let mut checked = 0;
        for (step, (&token, &margin)) in want.iter().zip(&margins).enumerate() {
            let (past, n) = (cache.seq_len(), ids.shape().dims()[1]);
            let pos = position_ids(None, 1, past, n).unwrap();
            let input = DecoderInput { input_ids: &ids, position_ids: &pos, attention_mask: None };
            let logits = no_grad(|| m.forward_cached(&input, &mut cache)).unwrap().value();
            let next = argmax_rows(&logits.narrow(1, n - 1, 1).unwrap().reshape([1, m.vocab_size()]).unwrap())[0];
            if margin > 1e-3 {
                assert_eq!(next, token, "{name}: step {step} (margin {margin:.2e})");
                checked += 1;
            }
            ids = Tensor::from_vec(vec![token], [1, 1]).unwrap();
        }
        assert!(checked >= 28, "{name}: only {checked} of {} steps had a clear margin", want.len());
    }
}

#[test]
fn bf16_checkpoints_load_natively_and_converted() {
    let name = "llama_odd_bf16";
    let native = LlamaForCausalLM::from_pretrained(&dir(name).join("checkpoint")).unwrap();
    assert!(native.parameters().iter().all(|p| p.dtype() == DType::BF16));
    let e = expected(name);
    let ids = get(&e, "input_ids");
    let logits = no_grad(|| native.forward(&ids, None)).unwrap().value();
    assert_eq!(logits.dtype(), DType::BF16);
    let want = get(&e, "logits");
    let scale = want.abs().to_dtype(DType::F64).to_vec::<f64>().unwrap().into_iter().fold(0.0, f64::max);
    let d = max_diff(&logits, &want);
    // bf16 keeps 8 bits of mantissa: a few per cent of the largest logit after two layers.
    assert!(d < 0.05 * scale, "bf16 logits differ by {d} (largest logit {scale})");
    let converted = model(name);
    assert!(converted.parameters().iter().all(|p| p.dtype() == DType::F32));
}

#[test]
fn save_pretrained_round_trips_config_and_weights() {
    for name in ["llama_gqa4_llama3", "qwen2"] {
        let m = model(name);
        let out = scratch(&format!("save-{name}"));
        m.save_pretrained(&out).unwrap();
        let back = LlamaForCausalLM::from_pretrained(&out).unwrap();
        assert_eq!(back.config(), m.config());
        let ids = get(&expected(name), "input_ids");
        let (a, b) = no_grad(|| (m.forward(&ids, None).unwrap().value(), back.forward(&ids, None).unwrap().value()));
        assert_eq!(max_diff(&a, &b), 0.0, "{name}");
        // A tied model writes no lm_head, as transformers does.
        assert_eq!(
            load_safetensors(out.join("model.safetensors")).unwrap().contains_key("lm_head.weight"),
            !m.config().tie_word_embeddings
        );
    }
}

#[test]
fn the_plain_forward_trains_every_parameter() {
    let m = model("llama_gqa2_linear");
    let ids = get(&expected("llama_gqa2_linear"), "input_ids");
    let loss = m.forward(&ids, None).unwrap().square().mean_all();
    loss.backward().unwrap();
    for (name, p) in m.named_parameters() {
        let g = p.grad().unwrap_or_else(|| panic!("{name} has no gradient"));
        let norm: f64 = g.to_dtype(DType::F64).to_vec::<f64>().unwrap().iter().map(|x| x * x).sum();
        assert!(norm > 0.0, "{name} has a zero gradient");
    }
}

#[test]
fn a_renamed_key_is_named_with_the_file() {
    let d = copy_checkpoint("llama_mha", "renamed");
    let path = d.join("model.safetensors");
    let state = load_safetensors(&path).unwrap();
    let mut renamed = StateDict::new();
    for (k, t) in state.iter() {
        renamed.insert(k.replace("mlp.gate_proj", "mlp.gate"), t.clone());
    }
    save_safetensors(&path, &renamed).unwrap();
    let err = LlamaForCausalLM::from_pretrained(&d).err().unwrap().to_string();
    assert!(err.contains("model.layers.0.mlp.gate_proj.weight"), "{err}");
    assert!(err.contains("model.layers.0.mlp.gate.weight"), "{err}");
    assert!(err.contains(d.to_str().unwrap()), "{err}");
}

#[test]
fn a_wrong_shape_is_named_with_the_key_and_file() {
    let d = copy_checkpoint("llama_mha", "shape");
    let path = d.join("model.safetensors");
    let mut state = load_safetensors(&path).unwrap();
    state.insert("model.layers.1.self_attn.k_proj.weight", Tensor::zeros([16, 32], DType::F32).unwrap());
    save_safetensors(&path, &state).unwrap();
    let err = LlamaForCausalLM::from_pretrained(&d).err().unwrap().to_string();
    assert!(err.contains("model.layers.1.self_attn.k_proj.weight") && err.contains("16"), "{err}");
    assert!(err.contains(d.to_str().unwrap()), "{err}");
}

#[test]
fn a_missing_shard_and_a_truncated_file_are_named() {
    let d = copy_checkpoint("llama_gqa4_llama3", "shard");
    std::fs::remove_file(d.join("model-00003-of-00005.safetensors")).unwrap();
    let err = LlamaForCausalLM::from_pretrained(&d).err().unwrap().to_string();
    assert!(err.contains("model-00003-of-00005.safetensors") && err.contains("model.layers."), "{err}");

    let d = copy_checkpoint("qwen2", "truncated");
    let path = d.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let err = LlamaForCausalLM::from_pretrained(&d).err().unwrap().to_string();
    assert!(err.contains("model.safetensors"), "{err}");
}

#[test]
fn an_untied_config_over_a_tied_checkpoint_names_lm_head() {
    let d = copy_checkpoint("qwen2", "untied");
    let cfg_path = d.join("config.json");
    let text = std::fs::read_to_string(&cfg_path)
        .unwrap()
        .replace("\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false");
    std::fs::write(&cfg_path, text).unwrap();
    let err = LlamaForCausalLM::from_pretrained(&d).err().unwrap().to_string();
    assert!(err.contains("lm_head.weight"), "{err}");
}

#[test]
fn configs_ember_cannot_run_are_errors_naming_config_json() {
    let d = copy_checkpoint("llama_mha", "yarn");
    let cfg_path = d.join("config.json");
    let mut cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
    cfg["rope_parameters"] = serde_json::json!({"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0});
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let err = LlamaForCausalLM::from_pretrained(&d).err().unwrap().to_string();
    assert!(err.contains("config.json") && err.contains("yarn"), "{err}");

    cfg["rope_parameters"] = serde_json::json!({"rope_type": "default", "rope_theta": 10000.0});
    cfg["hidden_act"] = serde_json::json!("gelu");
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let err = LlamaForCausalLM::from_pretrained(&d).err().unwrap().to_string();
    assert!(err.contains("config.json") && err.contains("gelu"), "{err}");
}

#[test]
fn config_defaults_follow_the_model_type() {
    let parse = |s: &str| serde_json::from_str::<LlamaConfig>(s).unwrap();
    let llama = parse(r#"{"hidden_size": 64, "num_attention_heads": 4}"#);
    assert_eq!((llama.model_type.as_str(), llama.vocab_size, llama.num_key_value_heads), ("llama", 32000, 4));
    assert_eq!((llama.head_dim, llama.rope_theta, llama.max_position_embeddings), (16, 10000.0, 2048));
    let mistral = parse(r#"{"model_type": "mistral", "hidden_size": 64, "num_attention_heads": 8}"#);
    assert_eq!((mistral.num_key_value_heads, mistral.intermediate_size), (8, 14336));
    let qwen = parse(r#"{"model_type": "qwen2", "attention_bias": false}"#);
    assert!(qwen.qkv_bias() && !qwen.o_bias());
    let v4 = parse(r#"{"rope_theta": 500000.0, "rope_scaling": {"type": "linear", "factor": 2.0}}"#);
    let v5 = parse(r#"{"rope_parameters": {"rope_theta": 500000.0, "rope_type": "linear", "factor": 2.0}}"#);
    assert_eq!(v4, v5);
    assert!(serde_json::from_str::<LlamaConfig>(r#"{"model_type": "qwen2", "use_sliding_window": true}"#).is_err());
}

#[test]
fn generate_reproduces_transformers_greedy_continuations() {
    use ember_models::generation::{GenerationConfig, generate};
    use std::ops::ControlFlow;
    for name in CONFIGS {
        let m = model(name);
        let e = expected(name);
        let prompt: Vec<u32> =
            get(&e, "greedy_prompt").to_vec::<i64>().unwrap().into_iter().map(|t| t as u32).collect();
        let want = get(&e, "greedy_tokens").to_vec::<i64>().unwrap();
        let margins = get(&e, "greedy_margins").to_vec::<f64>().unwrap();
        let config = GenerationConfig::greedy(want.len());
        let out = generate(&m, std::slice::from_ref(&prompt), &config, |_, _| ControlFlow::Continue(())).unwrap();
        // Free-running: after a step whose margin is within rounding the paths may part, so
        // compare up to the first such step.
        let sure = margins.iter().take_while(|&&g| g > 1e-3).count();
        let got: Vec<i64> = out[0].iter().map(|&t| i64::from(t)).collect();
        assert_eq!(got[..sure], want[..sure], "{name}");
        // In a batch with a longer prompt (so this one is left-padded), the row is the same.
        let longer: Vec<u32> = (2..9).collect();
        let both = generate(&m, &[prompt, longer], &config, |_, _| ControlFlow::Continue(())).unwrap();
        assert_eq!(both[0][..sure], out[0][..sure], "{name}: left-padded row");
    }
}
