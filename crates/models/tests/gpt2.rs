//! GPT-2 against transformers (fixtures written by tools/parity/model_fixtures/gpt2.py):
//! logits and hidden states of three checkpoint layouts, cached steps, greedy and batched
//! generation, sampling, the logits processors, the tokenizer, loading errors, and saving.

use ember_autograd::Var;
use ember_io::{LoadOptions, StateDict, load_safetensors, save_safetensors};
use ember_models::generation::{CausalLm, DecoderInput, GenerationConfig, generate, position_ids, process_logits};
use ember_models::gpt2::{Gpt2Block, Gpt2Config, Gpt2LmHeadModel};
use ember_models::tokenizer::Tokenizer;
use ember_nn::Module;
use ember_tensor::{DType, Tensor};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/parity/fixtures/models/gpt2")
}

fn load(name: &str) -> Gpt2LmHeadModel {
    Gpt2LmHeadModel::from_pretrained(&fixtures().join(name)).unwrap()
}

fn outputs(name: &str) -> StateDict {
    load_safetensors(fixtures().join(format!("{name}_outputs.safetensors"))).unwrap()
}

fn floats(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32).to_vec::<f32>().unwrap()
}

/// The largest absolute difference, over the `[batch, positions, ..]` entries whose
/// position `keep(row, position)` selects.
fn max_diff(actual: &Tensor, expected: &Tensor, keep: impl Fn(usize, usize) -> bool) -> f32 {
    assert_eq!(actual.shape().dims(), expected.shape().dims());
    let dims = actual.shape().dims();
    let inner = dims[2..].iter().product::<usize>();
    let (a, e) = (floats(actual), floats(expected));
    let mut worst = 0f32;
    for (i, (x, y)) in a.iter().zip(&e).enumerate() {
        let (row, pos) = (i / inner / dims[1], i / inner % dims[1]);
        if keep(row, pos) {
            worst = worst.max((x - y).abs());
        }
    }
    worst
}

/// Logits and last hidden states, unpadded and left-padded (compared where the mask keeps
/// a token; transformers and ember fill padded query rows differently).
fn check_outputs(model: &Gpt2LmHeadModel, out: &StateDict, tol: f32) {
    let ids = out.get("input_ids").unwrap();
    let mask = out.get("attention_mask").unwrap();
    let kept = mask.to_vec::<i64>().unwrap();
    let positions = ids.shape().dims()[1];
    let all = |_: usize, _: usize| true;
    let unpadded = |r: usize, p: usize| kept[r * positions + p] != 0;
    let hidden = model.last_hidden_state(ids, None).unwrap().value();
    assert!(max_diff(&hidden, out.get("last_hidden_state").unwrap(), all) < tol);
    let logits = model.forward(ids, None).unwrap().value();
    let d = max_diff(&logits, out.get("logits").unwrap(), all);
    assert!(d < tol, "logits differ by {d}");
    let logits = model.forward(ids, Some(mask)).unwrap().value();
    let d = max_diff(&logits, out.get("logits_padded").unwrap(), unpadded);
    assert!(d < tol, "padded logits differ by {d}");
    let hidden = model.last_hidden_state(ids, Some(mask)).unwrap().value();
    assert!(max_diff(&hidden, out.get("last_hidden_state_padded").unwrap(), unpadded) < tol);
}

#[test]
fn tied_single_file_checkpoint_matches_transformers() {
    let model = load("tied");
    assert_eq!(model.config().n_head, 3);
    assert!(model.named_parameters().iter().all(|(n, _)| !n.starts_with("lm_head")));
    check_outputs(&model, &outputs("tied"), 1e-4);
}

#[test]
fn untied_sharded_checkpoint_matches_transformers() {
    let model = load("untied-sharded");
    assert!(!model.config().tie_word_embeddings && model.config().scale_attn_by_inverse_layer_idx);
    check_outputs(&model, &outputs("untied-sharded"), 1e-4);
}

#[test]
fn bf16_gpt2model_checkpoint_loads_converted_and_natively() {
    let dir = fixtures().join("base-bf16");
    let wide = Gpt2LmHeadModel::from_pretrained_with(&dir, &LoadOptions::default().dtype(DType::F32)).unwrap();
    assert_eq!(wide.transformer().wte().weight().dtype(), DType::F32);
    let out = outputs("base-bf16");
    check_outputs(&wide, &out, 1e-4);
    let native = Gpt2LmHeadModel::from_pretrained(&dir).unwrap();
    assert_eq!(native.transformer().wte().weight().dtype(), DType::BF16);
    let ids = out.get("input_ids").unwrap();
    let logits = native.forward(ids, None).unwrap().value();
    assert_eq!(logits.dtype(), DType::BF16);
    let expected = out.get("logits").unwrap();
    let scale = floats(expected).iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = max_diff(&logits, expected, |_, _| true);
    assert!(d < 0.05 * scale, "bf16 logits differ by {d} (largest logit {scale})");
}

#[test]
fn cached_steps_give_the_full_forward_logits() {
    let model = load("untied-sharded");
    let ids: Vec<i64> = vec![5, 17, 250, 3, 9, 100, 42, 7, 0, 299, 12, 8];
    let full = model.forward(&Tensor::from_vec(ids.clone(), [2, 6]).unwrap(), None).unwrap().value();
    let mut cache = model.new_cache();
    // A prompt of 3 positions, a chunk of 2, then 1: every kind of step.
    let mut start = 0;
    for len in [3, 2, 1] {
        let step_ids: Vec<i64> = (0..2).flat_map(|r| ids[r * 6 + start..r * 6 + start + len].to_vec()).collect();
        let input_ids = Tensor::from_vec(step_ids, [2, len]).unwrap();
        let positions = position_ids(None, 2, start, len).unwrap();
        let input = DecoderInput { input_ids: &input_ids, position_ids: &positions, attention_mask: None };
        let logits = model.forward_cached(&input, &mut cache).unwrap().value();
        let want = full.narrow(1, start, len).unwrap().contiguous();
        let d = max_diff(&logits, &want, |_, _| true);
        assert!(d < 1e-4, "step at {start} differs by {d}");
        start += len;
    }
    assert_eq!(cache.seq_len(), 6);
}

#[test]
fn kept_logits_are_the_last_positions_and_the_cache_still_fills() {
    // Untied (its own lm_head) and tied (the embedding as the head) take the two head paths.
    for name in ["untied-sharded", "tied"] {
        let model = load(name);
        let ids = Tensor::from_vec(vec![5i64, 17, 250, 3, 9, 100, 42, 7, 0, 299], [2, 5]).unwrap();
        let positions = position_ids(None, 2, 0, 5).unwrap();
        let input = DecoderInput { input_ids: &ids, position_ids: &positions, attention_mask: None };
        let mut full_cache = model.new_cache();
        let full = model.forward_cached(&input, &mut full_cache).unwrap().value();
        for keep in [1, 3] {
            let mut cache = model.new_cache();
            let kept = model.forward_cached_keep(&input, &mut cache, keep).unwrap().value();
            let want = full.narrow(1, 5 - keep, keep).unwrap().contiguous();
            let d = max_diff(&kept, &want, |_, _| true);
            assert!(d < 1e-6, "{name}: the last {keep} positions differ by {d}");
            assert_eq!(cache.seq_len(), 5, "{name}: every position is cached");
        }
        // 0 and more than the step's positions keep them all.
        for keep in [0, 9] {
            let kept = model.forward_cached_keep(&input, &mut model.new_cache(), keep).unwrap().value();
            assert_eq!(kept.shape().dims(), full.shape().dims(), "{name}: logits_to_keep {keep}");
        }
    }
}

#[derive(serde::Deserialize)]
struct GreedyRow {
    prompt: Vec<u32>,
    tokens: Vec<u32>,
    margins: Vec<f64>,
}

fn greedy_rows(name: &str) -> Vec<GreedyRow> {
    let text = std::fs::read_to_string(fixtures().join(format!("{name}_greedy.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Greedy tokens equal transformers' up to the first step whose top-2 margin is within
/// float noise (after which the two may rightly diverge).
fn check_greedy(name: &str) {
    let model = load(name);
    for row in greedy_rows(name) {
        let mut streamed = Vec::new();
        let out =
            generate(&model, std::slice::from_ref(&row.prompt), &GenerationConfig::greedy(row.tokens.len()), |r, t| {
                streamed.push((r, t));
                ControlFlow::Continue(())
            })
            .unwrap();
        let sure = row.margins.iter().position(|&m| m <= 1e-3).unwrap_or(row.margins.len());
        assert!(sure >= 8, "too few confident steps in the fixture");
        assert_eq!(out[0][..sure], row.tokens[..sure], "prompt {:?}", row.prompt);
        assert_eq!(streamed.iter().map(|&(_, t)| t).collect::<Vec<_>>(), out[0]);
    }
}

#[test]
fn greedy_generation_matches_transformers() {
    check_greedy("tied");
    check_greedy("untied-sharded");
}

#[test]
fn batched_left_padded_generation_equals_each_prompt_alone() {
    let model = load("tied");
    let prompts: Vec<Vec<u32>> = greedy_rows("tied").into_iter().map(|r| r.prompt).collect();
    assert!(prompts.iter().any(|p| p.len() != prompts[0].len()));
    let config = GenerationConfig::greedy(12);
    let batched = generate(&model, &prompts, &config, |_, _| ControlFlow::Continue(())).unwrap();
    for (p, got) in prompts.iter().zip(&batched) {
        let alone = generate(&model, std::slice::from_ref(p), &config, |_, _| ControlFlow::Continue(())).unwrap();
        assert_eq!(got, &alone[0]);
    }
    let sampled = GenerationConfig { top_k: Some(8), ..GenerationConfig::sampling(12, 3) };
    let batched = generate(&model, &prompts, &sampled, |_, _| ControlFlow::Continue(())).unwrap();
    assert!(batched.iter().all(|r| r.len() == 12));
}

#[test]
fn seeded_sampling_is_reproducible_and_top_k_one_is_greedy() {
    let model = load("tied");
    let prompt = vec![greedy_rows("tied").remove(0).prompt];
    let run = |config: &GenerationConfig| generate(&model, &prompt, config, |_, _| ControlFlow::Continue(())).unwrap();
    let sampling = GenerationConfig { temperature: 1.5, ..GenerationConfig::sampling(24, 42) };
    let first = run(&sampling);
    assert_eq!(first, run(&sampling));
    // Another seed draws another continuation (at temperature 1.5 over 512 tokens, 24 equal
    // draws would be a fluke).
    assert_ne!(first, run(&GenerationConfig { seed: 43, ..sampling.clone() }));
    let top1 = GenerationConfig { top_k: Some(1), ..sampling };
    assert_eq!(run(&top1), run(&GenerationConfig::greedy(24)));
}

#[test]
fn stop_tokens_and_the_callback_end_generation() {
    let model = load("tied");
    let row = greedy_rows("tied").remove(0);
    let stop = row.tokens[7];
    let first = row.tokens.iter().position(|&t| t == stop).unwrap();
    let config = GenerationConfig { stop_tokens: vec![stop], ..GenerationConfig::greedy(32) };
    let out = generate(&model, std::slice::from_ref(&row.prompt), &config, |_, _| ControlFlow::Continue(())).unwrap();
    assert_eq!(out[0], row.tokens[..=first]);
    let mut seen = 0;
    let out = generate(&model, std::slice::from_ref(&row.prompt), &GenerationConfig::greedy(32), |_, _| {
        seen += 1;
        if seen == 5 { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
    })
    .unwrap();
    assert_eq!(out[0].len(), 5);
    let too_long = GenerationConfig::greedy(65);
    let err = generate(&model, &[row.prompt], &too_long, |_, _| ControlFlow::Continue(())).unwrap_err();
    assert!(err.to_string().contains("64 positions"), "{err}");
}

#[test]
fn logits_processors_match_transformers() {
    #[derive(serde::Deserialize)]
    struct Case {
        repetition_penalty: Option<f64>,
        temperature: Option<f64>,
        top_k: Option<usize>,
        top_p: Option<f64>,
    }
    #[derive(serde::Deserialize)]
    struct Cases {
        cases: Vec<Case>,
    }
    let text = std::fs::read_to_string(fixtures().join("processors.json")).unwrap();
    let cases: Cases = serde_json::from_str(&text).unwrap();
    let tensors = load_safetensors(fixtures().join("processors.safetensors")).unwrap();
    let logits = tensors.get("logits").unwrap().to_vec2::<f32>().unwrap();
    let history = tensors.get("history").unwrap().to_vec2::<i64>().unwrap();
    for (i, case) in cases.cases.iter().enumerate() {
        let config = GenerationConfig {
            repetition_penalty: case.repetition_penalty.unwrap_or(1.0),
            temperature: case.temperature.unwrap_or(1.0),
            top_k: case.top_k,
            top_p: case.top_p,
            ..GenerationConfig::sampling(1, 0)
        };
        let want = tensors.get(&format!("case{i}")).unwrap().to_vec2::<f32>().unwrap();
        for ((row, seen), want) in logits.iter().zip(&history).zip(&want) {
            let mut scores = row.clone();
            let seen: Vec<u32> = seen.iter().map(|&t| t as u32).collect();
            process_logits(&mut scores, &seen, &config).unwrap();
            for (got, want) in scores.iter().zip(want) {
                let same = (got == want) || (got - want).abs() < 1e-5;
                assert!(same, "case {i}: {got} vs {want}");
            }
        }
    }
}

#[test]
fn tokenizer_gives_the_python_tokenizers_ids() {
    #[derive(serde::Deserialize)]
    struct Ids {
        texts: Vec<String>,
        ids: Vec<Vec<u32>>,
        decoded: Vec<String>,
    }
    let text = std::fs::read_to_string(fixtures().join("tokenizer_ids.json")).unwrap();
    let want: Ids = serde_json::from_str(&text).unwrap();
    let tok = Tokenizer::from_dir(fixtures()).unwrap();
    assert_eq!(tok.vocab_size(), 512);
    for ((t, ids), decoded) in want.texts.iter().zip(&want.ids).zip(&want.decoded) {
        assert_eq!(&tok.encode(t, false).unwrap(), ids, "{t:?}");
        assert_eq!(&tok.decode(ids, false).unwrap(), decoded);
    }
}

/// A copy of fixture directory `name` in a fresh temporary directory.
fn copy_fixture(name: &str, tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ember-gpt2-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(fixtures().join(name)).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
    }
    dir
}

fn load_error(dir: &Path) -> String {
    let err = Gpt2LmHeadModel::from_pretrained(dir).err().expect("loading should fail").to_string();
    let _ = std::fs::remove_dir_all(dir);
    err
}

#[test]
fn a_renamed_key_is_an_error_naming_the_file_and_the_key() {
    let dir = copy_fixture("tied", "renamed");
    let file = dir.join("model.safetensors");
    let mut state = load_safetensors(&file).unwrap();
    let t = state.remove("transformer.h.1.ln_2.weight").unwrap();
    state.insert("transformer.h.1.ln2.weight", t);
    save_safetensors(&file, &state).unwrap();
    let err = load_error(&dir);
    assert!(err.contains(&dir.display().to_string()), "{err}");
    assert!(err.contains("transformer.h.1.ln_2.weight") && err.contains("transformer.h.1.ln2.weight"), "{err}");
}

#[test]
fn a_wrong_shape_is_an_error_naming_the_file_and_the_key() {
    let dir = copy_fixture("tied", "shape");
    let file = dir.join("model.safetensors");
    let mut state = load_safetensors(&file).unwrap();
    state.insert("transformer.h.0.mlp.c_fc.weight", Tensor::zeros([48, 100], DType::F32).unwrap());
    save_safetensors(&file, &state).unwrap();
    let err = load_error(&dir);
    assert!(err.contains(&dir.display().to_string()) && err.contains("transformer.h.0.mlp.c_fc.weight"), "{err}");
}

#[test]
fn a_missing_shard_is_an_error_naming_the_shard_and_a_key() {
    let dir = copy_fixture("untied-sharded", "shard");
    std::fs::remove_file(dir.join("model-00002-of-00004.safetensors")).unwrap();
    let err = load_error(&dir);
    assert!(err.contains("model.safetensors.index.json") && err.contains("model-00002-of-00004.safetensors"), "{err}");
    assert!(err.contains("transformer."), "{err}");
}

#[test]
fn a_truncated_file_is_an_error_naming_the_file() {
    let dir = copy_fixture("tied", "truncated");
    let file = dir.join("model.safetensors");
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
    let err = load_error(&dir);
    assert!(err.contains("model.safetensors"), "{err}");
}

#[test]
fn a_saved_model_loads_back_with_the_same_logits() {
    let model = load("untied-sharded");
    let dir = std::env::temp_dir().join(format!("ember-gpt2-saved-{}", std::process::id()));
    model.save_pretrained(&dir).unwrap();
    let state = load_safetensors(dir.join("model.safetensors")).unwrap();
    // transformers' layout: Conv1D weights [in, out], the head untied.
    assert_eq!(state.get("transformer.h.0.mlp.c_fc.weight").unwrap().shape().dims(), &[32, 80]);
    assert!(state.contains_key("lm_head.weight"));
    let back = Gpt2LmHeadModel::from_pretrained(&dir).unwrap();
    assert_eq!(back.config(), model.config());
    let ids = Tensor::from_vec(vec![1i64, 2, 3, 4, 5], [1, 5]).unwrap();
    let (a, b) = (model.forward(&ids, None).unwrap().value(), back.forward(&ids, None).unwrap().value());
    assert_eq!(floats(&a), floats(&b));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn training_forward_reaches_every_parameter() {
    let config = Gpt2Config { vocab_size: 40, n_positions: 8, n_embd: 12, n_layer: 2, n_head: 3, ..Default::default() };
    let model = Gpt2LmHeadModel::new(config, DType::F32).unwrap();
    let ids = Tensor::from_vec((0..10).map(|i| i * 3 % 40).collect::<Vec<i64>>(), [2, 5]).unwrap();
    let mask = Tensor::from_vec(vec![0i64, 1, 1, 1, 1, 1, 1, 1, 1, 1], [2, 5]).unwrap();
    model.forward(&ids, Some(&mask)).unwrap().sum_all().backward().unwrap();
    for (name, p) in model.named_parameters() {
        let g = p.grad().unwrap_or_else(|| panic!("{name} has no gradient"));
        assert!(floats(&g).iter().any(|v| *v != 0.0), "{name}'s gradient is zero");
    }
}

#[test]
fn gpt2_block_passes_gradcheck() {
    let config =
        Gpt2Config { n_embd: 6, n_head: 2, n_inner: Some(8), resid_pdrop: 0.0, attn_pdrop: 0.0, ..Default::default() };
    let block = ember_testing::gradcheck::seeded(3, || Gpt2Block::new(&config, 1, DType::F64).unwrap());
    let x = ember_testing::gradcheck::normal(4, &[2, 3, 6]);
    ember_testing::gradcheck::check("Gpt2Block", |v: &[Var]| block.forward(&v[0]), &[x]);
}

#[test]
fn a_directory_ember_wrote_loads_in_transformers_with_the_same_logits() {
    #[derive(serde::Deserialize)]
    struct Verdict {
        missing_keys: Vec<String>,
        unexpected_keys: Vec<String>,
        mismatched_keys: Vec<String>,
        head_is_embedding: bool,
    }
    let text = std::fs::read_to_string(fixtures().join("ember-saved_transformers.json")).unwrap();
    let verdict: Verdict = serde_json::from_str(&text).unwrap();
    assert!(verdict.missing_keys.is_empty() && verdict.unexpected_keys.is_empty());
    assert!(verdict.mismatched_keys.is_empty() && verdict.head_is_embedding);
    let dir = fixtures().join("ember-saved");
    let model = Gpt2LmHeadModel::from_pretrained(&dir).unwrap();
    let theirs = load_safetensors(fixtures().join("ember-saved_transformers.safetensors")).unwrap();
    let logits = model.forward(theirs.get("input_ids").unwrap(), None).unwrap().value();
    let d = max_diff(&logits, theirs.get("logits").unwrap(), |_, _| true);
    assert!(d < 1e-4, "transformers' logits differ by {d}");
    // What ember writes today is what transformers read.
    let again = std::env::temp_dir().join(format!("ember-gpt2-resaved-{}", std::process::id()));
    model.save_pretrained(&again).unwrap();
    for file in ["config.json", "model.safetensors"] {
        assert_eq!(std::fs::read(again.join(file)).unwrap(), std::fs::read(dir.join(file)).unwrap(), "{file}");
    }
    let _ = std::fs::remove_dir_all(&again);
}
