//! Inference speed of the pretrained architectures at 2 threads, f32: the counterpart of
//! tools/bench/models_torch.py, run by tools/bench/models_compare.sh.
//!
//!     models_bench WORKLOAD [REPS]
//!
//! runs one workload (one per process, so that the peak RSS is that workload's) and prints
//!
//!     WORKLOAD per_s=... unit=tokens/s|images/s median_ms=... peak_rss_mb=...
//!
//! `per_s` is the work of one repetition over its median time. The workloads:
//!
//! - `small-generate`: `data/models/gpt2-shakespeare` (from `from_pretrained`), greedy
//!   generation with the KV cache at batch 1, a 16-token prompt and 128 new tokens (no stop
//!   token); tokens/s counts the new tokens over the whole `generate` call, the prompt's
//!   forward included.
//! - `gpt2-generate`: GPT-2-small's shape (12 layers, 768 wide, 12 heads, vocabulary 50257,
//!   1024 positions) with random weights, a 16-token prompt and 64 new tokens.
//! - `gpt2-prompt`: the same model, one cached forward of a 512-token prompt into an empty
//!   cache, keeping the last position's logits (what generation does with a prompt);
//!   tokens/s counts the prompt's tokens.
//! - `resnet50`: ResNet-50 (1000 classes, random weights) in evaluation mode on a batch of
//!   8 images of 3x224x224; images/s.
//!
//! One untimed repetition warms up before `REPS` timed ones (default 5 for the small model,
//! 3 otherwise). `MODELS_BENCH_THREADS` sets another number of threads (for comparisons at
//! one thread; the published figures use 2), and `EMBER_PROFILE=1` adds a per-operation
//! profile of one more repetition.
//!
//! Run: `cargo run --release -p ember-models --example models_bench -- gpt2-generate`.

use ember_autograd::{Var, no_grad};
use ember_models::generation::{CausalLm, DecoderInput, GenerationConfig, generate};
use ember_models::gpt2::{Gpt2Config, Gpt2LmHeadModel};
use ember_models::resnet::{ResNet, ResNetConfig};
use ember_nn::Module;
use ember_tensor::{DType, Error, Result, Tensor};
use std::ops::ControlFlow;
use std::path::Path;
use std::time::Instant;

/// The shipped small model, relative to the repository root (where the scripts run).
const SMALL_MODEL: &str = "data/models/gpt2-shakespeare";
/// The prompt of both generation workloads: fixed ids inside either vocabulary.
const PROMPT_LEN: usize = 16;
const SMALL_NEW: usize = 128;
const GPT2_NEW: usize = 64;
const LONG_PROMPT: usize = 512;
const RESNET_BATCH: usize = 8;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The process's peak resident set (`VmHWM`), in MiB; 0 where /proc is missing.
fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// `1, 2, ..., len` as the prompt's ids: the same on the PyTorch side.
fn prompt(len: usize) -> Vec<u32> {
    (1..=len as u32).collect()
}

/// A randomly initialised model of GPT-2-small's configuration (transformers'
/// `GPT2Config()` defaults), in evaluation mode (no dropout), as the PyTorch side's.
fn gpt2_small() -> Result<Gpt2LmHeadModel> {
    let config =
        Gpt2Config { vocab_size: 50257, n_positions: 1024, n_embd: 768, n_layer: 12, n_head: 12, ..Default::default() };
    let model = Gpt2LmHeadModel::new(config, DType::F32)?;
    model.eval();
    Ok(model)
}

/// Times `reps` runs of `work` after one untimed run; returns the median milliseconds.
/// With `EMBER_PROFILE` set, profiles one more run and prints its per-operation table.
fn time_ms(reps: usize, mut work: impl FnMut() -> Result<()>) -> Result<f64> {
    work()?;
    let mut ms = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = Instant::now();
        work()?;
        ms.push(start.elapsed().as_secs_f64() * 1e3);
    }
    if std::env::var_os("EMBER_PROFILE").is_some() {
        let (result, profile) = ember_autograd::profile(&mut work);
        result?;
        let options = ember_autograd::profiler::TableOptions { group_by_input_shape: true, ..Default::default() };
        println!("{}", profile.table_with(options));
    }
    Ok(median(ms))
}

/// Greedy generation of exactly `new` tokens (no stop token) from a `PROMPT_LEN` prompt.
fn generation(model: &dyn CausalLm, new: usize, reps: usize) -> Result<f64> {
    let mut config = GenerationConfig::greedy(new);
    config.stop_tokens.clear();
    let prompts = [prompt(PROMPT_LEN)];
    time_ms(reps, || {
        let out = generate(model, &prompts, &config, |_, _| ControlFlow::Continue(()))?;
        if out[0].len() != new {
            return Err(Error::invalid("models_bench", format!("generated {} tokens, not {new}", out[0].len())));
        }
        Ok(())
    })
}

/// One cached forward of a `LONG_PROMPT`-token prompt into a fresh cache, keeping the last
/// position's logits.
fn prompt_forward(model: &Gpt2LmHeadModel, reps: usize) -> Result<f64> {
    let ids: Vec<i64> = prompt(LONG_PROMPT).into_iter().map(i64::from).collect();
    let input_ids = Tensor::from_vec(ids, [1, LONG_PROMPT])?;
    let position_ids = Tensor::from_vec((0..LONG_PROMPT as i64).collect::<Vec<_>>(), [1, LONG_PROMPT])?;
    let step = DecoderInput { input_ids: &input_ids, position_ids: &position_ids, attention_mask: None };
    time_ms(reps, || {
        let mut cache = model.new_cache();
        let logits = no_grad(|| model.forward_cached_keep(&step, &mut cache, 1))?.value();
        std::hint::black_box(logits.select(1, 0)?.argmax(1, false)?.to_vec::<i64>()?);
        Ok(())
    })
}

fn resnet50(reps: usize) -> Result<f64> {
    let model = ResNet::new(&ResNetConfig::resnet50(1000))?;
    model.eval();
    let images = Var::new(Tensor::randn([RESNET_BATCH, 3, 224, 224])?);
    time_ms(reps, || {
        let logits = no_grad(|| model.forward(&images))?;
        std::hint::black_box(logits.value().to_vec::<f32>()?);
        Ok(())
    })
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let workload = args.first().map(String::as_str).unwrap_or("small-generate");
    let reps = |default: usize| -> Result<usize> {
        match args.get(1).map(|r| (r, r.parse::<usize>())) {
            None => Ok(default),
            Some((_, Ok(n))) if n > 0 => Ok(n),
            Some((r, _)) => Err(Error::invalid("models_bench", format!("REPS must be a positive count, got {r}"))),
        }
    };
    let threads = match std::env::var("MODELS_BENCH_THREADS") {
        Ok(t) => t.parse().map_err(|_| Error::invalid("models_bench", format!("MODELS_BENCH_THREADS={t}")))?,
        Err(_) => 2,
    };
    ember_tensor::threading::set_num_threads(threads)?;
    ember_tensor::manual_seed(0);
    let (ms, work, unit) = match workload {
        "small-generate" => {
            let model = Gpt2LmHeadModel::from_pretrained(Path::new(SMALL_MODEL))?;
            (generation(&model, SMALL_NEW, reps(5)?)?, SMALL_NEW, "tokens/s")
        }
        "gpt2-generate" => {
            let model = gpt2_small()?;
            (generation(&model, GPT2_NEW, reps(3)?)?, GPT2_NEW, "tokens/s")
        }
        "gpt2-prompt" => {
            let model = gpt2_small()?;
            (prompt_forward(&model, reps(3)?)?, LONG_PROMPT, "tokens/s")
        }
        "resnet50" => (resnet50(reps(3)?)?, RESNET_BATCH, "images/s"),
        other => {
            return Err(Error::invalid(
                "models_bench",
                format!("unknown workload {other}: small-generate, gpt2-generate, gpt2-prompt or resnet50"),
            ));
        }
    };
    println!(
        "{workload} per_s={:.3} unit={unit} median_ms={ms:.3} peak_rss_mb={:.1}",
        work as f64 * 1e3 / ms,
        peak_rss_mb()
    );
    Ok(())
}
