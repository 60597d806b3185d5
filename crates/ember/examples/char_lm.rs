//! A character-level causal Transformer language model ([`ember::char_lm`]) trained on the
//! four plays of Shakespeare shipped in `data/shakespeare` (origin and licence in its
//! README).
//!
//! ```text
//! cargo run --release --example char_lm -- [--epochs 4] [--steps 300] [--batch-size 32]
//!     [--lr 1e-3] [--layers 3] [--d-model 128] [--context 64] [--sample-len 400]
//!     [--prompt "ROMEO."] [--temperature 0.8] [--corpus data/shakespeare] [--out runs/char_lm] [--seed 0]
//!     [--device cpu|cuda|cuda:N] [--amp bf16|f16]
//! ```
//!
//! Each epoch is `--steps` Adam steps on random windows of the training text; after each it
//! prints the validation loss in nats and bits per character beside the corpus's unigram
//! entropy (the loss of the best context-free model, which the model must beat). At the end
//! it saves the model to `<out>/char_lm.safetensors`, draws the losses to
//! `<out>/char_lm_curves.svg` and prints `--sample-len` characters sampled after
//! `--prompt` (reproducible with `--seed`). With `--amp`, the forward passes (training,
//! validation and sampling) run under autocast in that dtype, the parameters and Adam in
//! `f32`, and `f16` scales the loss (PyTorch's recipe; `examples/common/amp.rs`).

mod common;

use clap::Parser;
use common::amp::{Amp, AmpArg};
use common::cli::Common;
use common::plot::{Panel, Series, save_svg};
use common::progress;
use ember::char_lm::{self, CharModel, Corpus, ModelConfig};
use ember::nn::{Module, ModuleExt};
use ember::optim::{Adam, AdamConfig};
use ember::{Device, Result};
use plotters::style::{BLACK, BLUE, RED};
use std::path::PathBuf;
use std::time::Instant;

/// Validation windows per evaluation (each `--context` characters).
const VALID_WINDOWS: usize = 512;

/// Train a small causal Transformer on Shakespeare, character by character, and sample
/// from it.
#[derive(Parser)]
pub struct Args {
    /// Passes of `--steps` optimisation steps each (validation after each).
    #[arg(long, default_value_t = 4)]
    epochs: usize,
    /// Optimisation steps per epoch.
    #[arg(long, default_value_t = 300)]
    steps: usize,
    /// Windows per step.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// Adam's learning rate.
    #[arg(long, default_value_t = 1e-3)]
    lr: f64,
    /// Transformer layers.
    #[arg(long, default_value_t = 3)]
    layers: usize,
    /// Width of the model.
    #[arg(long, default_value_t = 128)]
    d_model: usize,
    /// Characters of context (the training window).
    #[arg(long, default_value_t = 64)]
    context: usize,
    /// Characters to sample at the end.
    #[arg(long, default_value_t = 400)]
    sample_len: usize,
    /// The text the sample continues.
    #[arg(long, default_value = "ROMEO.")]
    prompt: String,
    /// Sampling temperature (below 1: more conservative).
    #[arg(long, default_value_t = 0.8)]
    temperature: f64,
    /// The directory of `.txt` files to train on (with an optional SHA256SUMS).
    #[arg(long, default_value = "data/shakespeare")]
    corpus: PathBuf,
    #[command(flatten)]
    common: Common,
    /// Where to train: `cpu`, `cuda` or `cuda:N` (a GPU needs the `cuda` feature).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// `--amp bf16|f16`.
    #[command(flatten)]
    amp: AmpArg,
}

/// What a run printed and measured, for the caller to check.
// Only the smoke test, which includes this file, reads the fields.
#[allow(dead_code)]
pub struct Outcome {
    /// The training loss of every step, in order.
    pub losses: Vec<f64>,
    /// The validation loss before training, in nats per character.
    pub initial_validation: f64,
    /// The validation loss after the last epoch, in nats per character.
    pub validation: f64,
    /// Every line the run printed outside the progress bar, in order.
    pub log: Vec<String>,
}

fn main() -> Result<()> {
    run(Args::parse()).map(drop)
}

/// Trains and samples as `args` say.
pub fn run(args: Args) -> Result<Outcome> {
    if args.epochs == 0 || args.steps == 0 || args.batch_size == 0 {
        return Err(ember::Error::invalid("char_lm", "--epochs, --steps and --batch-size must be positive"));
    }
    let device: Device = args.device.parse().map_err(|e| ember::Error::invalid("char_lm", format!("--device: {e}")))?;
    device.check_available().map_err(|e| ember::Error::invalid("char_lm", format!("--device {device}: {e}")))?;
    let out = args.common.start("char_lm")?;
    let mut log = Vec::new();
    let mut say = |line: String| {
        println!("{line}");
        log.push(line);
    };
    let corpus = Corpus::load(&args.corpus)?;
    let entropy = corpus.unigram_entropy();
    say(format!(
        "corpus {}: {} training and {} validation characters, {} distinct; unigram entropy {:.3} nats ({:.3} bits) per character",
        args.corpus.display(),
        corpus.train().len(),
        corpus.valid().len(),
        corpus.vocab_size(),
        entropy,
        entropy / std::f64::consts::LN_2
    ));
    let config = ModelConfig {
        d_model: args.d_model,
        heads: 4,
        layers: args.layers,
        context: args.context,
        ..ModelConfig::default()
    };
    let model = CharModel::new(corpus.vocab_size(), &config)?;
    model.to_device(device)?;
    let mut amp = Amp::new(args.amp.amp, device);
    let params: usize = model.parameters().iter().map(|p| p.numel()).sum();
    say(format!(
        "causal Transformer on {device}: {} layers, width {}, {} heads, context {}; {params} parameters; Adam lr {}; {}",
        config.layers,
        config.d_model,
        config.heads,
        config.context,
        args.lr,
        amp.describe()
    ));
    let mut opt = Adam::new(model.parameters(), AdamConfig { lr: args.lr, ..Default::default() })?;

    let (mut train_curve, mut valid_curve) = (Vec::new(), Vec::new());
    let first = amp.run(|| model.validation_loss(&corpus, VALID_WINDOWS))?;
    valid_curve.push((0.0, first));
    say(format!("before training: validation loss {first:.3} nats/char"));
    let mut losses = Vec::with_capacity(args.epochs * args.steps);
    let started = Instant::now();
    for epoch in 1..=args.epochs {
        model.set_training(true);
        let bar = progress::bar(args.steps, format!("epoch {epoch}/{}", args.epochs))?;
        let mut sum = 0.0;
        for step in 0..args.steps {
            let starts = char_lm::random_starts(corpus.train(), args.context, args.batch_size)?;
            let (x, y) = char_lm::windows(corpus.train(), &starts, args.context)?;
            let loss = amp.run(|| model.loss(&x, &y))?;
            amp.backward_and_step(&loss, &mut opt)?;
            let value = loss.item()?;
            losses.push(value);
            sum += value;
            let at = ((epoch - 1) * args.steps + step + 1) as f64;
            train_curve.push((at, value));
            bar.set_message(format!("loss {value:.3}"));
            bar.inc(1);
        }
        bar.finish_and_clear();
        let valid = amp.run(|| model.validation_loss(&corpus, VALID_WINDOWS))?;
        valid_curve.push(((epoch * args.steps) as f64, valid));
        let scale = amp.loss_scale().map(|s| format!(", loss scale {s}")).unwrap_or_default();
        say(format!(
            "epoch {epoch}: training loss {:.3}, validation loss {valid:.3} nats/char ({:.3} bits; unigram entropy {:.3} bits), {:.1} s{scale}",
            sum / args.steps as f64,
            valid / std::f64::consts::LN_2,
            entropy / std::f64::consts::LN_2,
            started.elapsed().as_secs_f64()
        ));
    }
    let last = valid_curve.last().map_or(first, |p| p.1);
    say(format!(
        "validation loss {last:.5} nats/char is {} the unigram entropy {entropy:.3}",
        if last < entropy { "below" } else { "NOT below" }
    ));

    let checkpoint = out.join("char_lm.safetensors");
    model.save(&checkpoint)?;
    let steps = (args.epochs * args.steps) as f64;
    let panel = Panel::new(
        "character-level language model",
        "step",
        "cross-entropy (nats/char)",
        vec![
            Series::line("training", train_curve, BLUE),
            Series::line("validation", valid_curve, RED),
            Series::dotted("unigram entropy", vec![(0.0, entropy), (steps, entropy)], BLACK),
        ],
    );
    let curves = out.join("char_lm_curves.svg");
    save_svg(&curves, &[panel])?;
    say(format!("saved {} and {}", checkpoint.display(), curves.display()));

    let text = amp.run(|| model.sample(&corpus, &args.prompt, args.sample_len, args.temperature))?;
    say(format!("\nsample (seed {}, temperature {}):\n{}{}", args.common.seed, args.temperature, args.prompt, text));
    Ok(Outcome { losses, initial_validation: first, validation: last, log })
}
