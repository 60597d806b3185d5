//! The CI smoke training of the character language model: a small causal Transformer on
//! the shipped Shakespeare must bring its validation loss below the corpus's unigram
//! entropy (the best a model without context can do), and sampling must be reproducible
//! from the seed. (A correctness check; the full run is
//! `cargo run --release --example char_lm`.)

// The example itself, run with a short command line (its `main` is not called here).
#[allow(dead_code)]
#[path = "../examples/char_lm.rs"]
mod char_lm_example;

use ember::char_lm::{self, CharModel, Corpus, ModelConfig};
use ember::nn::Module;
use ember::optim::{Adam, AdamConfig, Optimizer};
use ember::{Result, manual_seed};

/// The tests of this file draw from the global generator; each holds this lock while it
/// does, so that one test's draws do not fall between another's `manual_seed` and its
/// samples (the test harness runs them on parallel threads).
static GENERATOR: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

#[test]
fn a_small_model_beats_the_unigram_entropy_and_samples_reproducibly() -> Result<()> {
    let _generator = GENERATOR.lock();
    manual_seed(0);
    let corpus = Corpus::load(concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/shakespeare"))?;
    assert_eq!(corpus.vocab_size(), corpus.decode(&(0..corpus.vocab_size() as i64).collect::<Vec<_>>()).len());
    let entropy = corpus.unigram_entropy();
    assert!(entropy > 2.5 && entropy < 3.5, "unigram entropy {entropy} nats/char");
    let config = ModelConfig { d_model: 48, heads: 4, layers: 1, context: 32, dropout: 0.0 };
    let model = CharModel::new(corpus.vocab_size(), &config)?;
    let mut opt = Adam::new(model.parameters(), AdamConfig { lr: 3e-3, ..Default::default() })?;
    let before = model.validation_loss(&corpus, 64)?;
    for _ in 0..250 {
        let starts = char_lm::random_starts(corpus.train(), config.context, 16)?;
        let (x, y) = char_lm::windows(corpus.train(), &starts, config.context)?;
        opt.zero_grad();
        let loss = model.loss(&x, &y)?;
        loss.backward()?;
        opt.step()?;
    }
    let after = model.validation_loss(&corpus, 64)?;
    assert!(after < entropy && after < before, "validation loss {before} -> {after}, unigram entropy {entropy}");

    manual_seed(7);
    let a = model.sample(&corpus, "KING.", 40, 0.8)?;
    manual_seed(7);
    let b = model.sample(&corpus, "KING.", 40, 0.8)?;
    assert_eq!(a.chars().count(), 40);
    assert_eq!(a, b);
    assert!(model.sample(&corpus, "", 5, 0.8).is_err());
    assert!(model.sample(&corpus, "KING.", 5, 0.0).is_err());
    Ok(())
}

/// The example with `--amp` and a small model (one layer, width 48, context 32, batches of
/// 16, `steps` Adam steps at 3e-3), its files in a temporary directory.
fn run_example(amp: &str, steps: &str) -> Result<char_lm_example::Outcome> {
    let _generator = GENERATOR.lock();
    let out = std::env::temp_dir().join(format!("ember-char-lm-{amp}-smoke-{}", std::process::id()));
    let argv = [
        "char_lm",
        "--amp",
        amp,
        "--epochs",
        "1",
        "--steps",
        steps,
        "--batch-size",
        "16",
        "--lr",
        "3e-3",
        "--layers",
        "1",
        "--d-model",
        "48",
        "--context",
        "32",
        "--sample-len",
        "20",
    ];
    let out_flag = out.display().to_string();
    let corpus = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/shakespeare");
    let argv = argv.iter().copied().chain(["--corpus", corpus, "--out", out_flag.as_str()]);
    let args = <char_lm_example::Args as clap::Parser>::try_parse_from(argv)
        .map_err(|e| ember::Error::invalid("char_lm", format!("command line: {e}")))?;
    let outcome = char_lm_example::run(args);
    std::fs::remove_dir_all(&out).ok();
    outcome
}

fn line<'a>(log: &'a [String], prefix: &str) -> &'a str {
    log.iter().find(|l| l.starts_with(prefix)).map_or("", String::as_str)
}

fn mean(s: &[f64]) -> f64 {
    s.iter().sum::<f64>() / s.len() as f64
}

/// `--amp bf16`: the header names the mode, and the training and validation losses fall.
#[test]
fn the_example_learns_under_bf16_autocast() -> Result<()> {
    let outcome = run_example("bf16", "150")?;
    assert!(line(&outcome.log, "causal Transformer").ends_with("; bf16 autocast"), "{:?}", outcome.log);
    let l = &outcome.losses;
    assert!(l.iter().all(|v| v.is_finite()) && mean(&l[l.len() - 10..]) < mean(&l[..10]) - 0.5, "losses {l:?}");
    assert!(outcome.validation < outcome.initial_validation - 0.5, "{:?}", outcome.log);
    Ok(())
}

/// `--amp f16`: the header names the mode and the loss scaling, the epoch's line shows the
/// scaler's scale, and the losses fall.
#[test]
fn the_example_learns_under_f16_autocast_with_loss_scaling() -> Result<()> {
    let outcome = run_example("f16", "100")?;
    assert!(
        line(&outcome.log, "causal Transformer").ends_with("; f16 autocast, loss scale from 65536"),
        "{:?}",
        outcome.log
    );
    assert!(line(&outcome.log, "epoch 1:").contains(", loss scale "), "{:?}", outcome.log);
    let l = &outcome.losses;
    assert!(l.iter().all(|v| v.is_finite()) && mean(&l[l.len() - 10..]) < mean(&l[..10]) - 0.3, "losses {l:?}");
    assert!(outcome.validation < outcome.initial_validation - 0.3, "{:?}", outcome.log);
    Ok(())
}
