//! Transfer learning with a frozen encoder ([`ember::transfer`]): pretrain on the MNIST
//! digits 0-4, save, reload, freeze the encoder, fine-tune a new head on the digits 5-9.
//!
//! ```text
//! cargo run --release --example transfer -- [--pretrain-epochs 2] [--finetune-epochs 2]
//!     [--batch-size 64] [--lr 1e-3] [--train-images N] [--data data/mnist]
//!     [--out runs/transfer] [--seed 0]
//! ```
//!
//! It prints the pretrained model's accuracy on 0-4 (before and after the save and reload),
//! the accuracy on 5-9 before and after fine-tuning, checks that the frozen encoder's
//! parameters are bit-identical afterwards (an error otherwise), and compares the time per
//! epoch with the same fine-tuning run with the encoder left trainable, from the same
//! checkpoint and the same new head.

mod common;

use clap::Parser;
use common::cli::Common;
use ember::mnist::{self, Data};
use ember::nn::{Module, ModuleExt};
use ember::optim::{Adam, AdamConfig};
use ember::transfer::{self, Classifier};
use ember::{Error, Result};
use std::path::Path;
use std::time::Instant;

/// Pretrain on digits 0-4, reload, freeze the encoder and fine-tune a new head on 5-9;
/// compare with fine-tuning the whole network.
#[derive(Parser)]
struct Args {
    /// Passes over the digits 0-4 for pretraining.
    #[arg(long, default_value_t = 2)]
    pretrain_epochs: usize,
    /// Passes over the digits 5-9 for fine-tuning (frozen, then full).
    #[arg(long, default_value_t = 2)]
    finetune_epochs: usize,
    /// Samples per optimisation step.
    #[arg(long, default_value_t = 64)]
    batch_size: usize,
    /// Adam's learning rate.
    #[arg(long, default_value_t = 1e-3)]
    lr: f64,
    /// Use the first N training images only (all by default).
    #[arg(long)]
    train_images: Option<usize>,
    #[command(flatten)]
    common: Common,
}

/// Trains `model` for `epochs` over `data`; returns the seconds of each epoch.
fn fit(model: &Classifier, data: &Data, args: &Args, epochs: usize) -> Result<Vec<f64>> {
    let mut opt = Adam::new(model.parameters(), AdamConfig { lr: args.lr, ..Default::default() })?;
    let loader = mnist::loader(data, args.batch_size, args.common.seed)?;
    let mut seconds = Vec::new();
    for _ in 0..epochs {
        let started = Instant::now();
        mnist::train_epoch(model, &mut opt, None, &loader, |_, _| {})?;
        seconds.push(started.elapsed().as_secs_f64());
    }
    Ok(seconds)
}

/// The pretrained checkpoint with a new head; the head's initial weights depend only on
/// the seed, so that the frozen and the full run start from the same point.
fn reload_with_new_head(path: &Path, seed: u64) -> Result<Classifier> {
    let model = transfer::classifier()?;
    model.load(path)?;
    ember::manual_seed(seed.wrapping_add(1));
    model.with_new_head()
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.pretrain_epochs == 0 || args.finetune_epochs == 0 || args.batch_size == 0 {
        return Err(Error::invalid(
            "transfer",
            "--pretrain-epochs, --finetune-epochs and --batch-size must be positive",
        ));
    }
    let out = args.common.start("transfer")?;
    let mut train = mnist::load(&args.common.data, true)?;
    if let Some(n) = args.train_images {
        train = train.take(n)?;
    }
    let test = mnist::load(&args.common.data, false)?;
    let (train_low, test_low) = (transfer::digits(&train, 0..5)?, transfer::digits(&test, 0..5)?);
    let (train_high, test_high) = (transfer::digits(&train, 5..10)?, transfer::digits(&test, 5..10)?);
    println!(
        "digits 0-4: {} training, {} test images; digits 5-9: {} training, {} test images",
        train_low.len(),
        test_low.len(),
        train_high.len(),
        test_high.len()
    );
    let accuracy =
        |model: &Classifier, data: &Data| -> Result<f64> { Ok(100.0 * mnist::evaluate(model, data)?.accuracy) };

    // Pretraining on 0-4, saved and reloaded into a fresh model.
    let model = transfer::classifier()?;
    println!("encoder 784-256-128 (ReLU), head 128-5; Adam lr {}, batch {}", args.lr, args.batch_size);
    let seconds = fit(&model, &train_low, &args, args.pretrain_epochs)?;
    let pretrained = accuracy(&model, &test_low)?;
    println!("pretrained on 0-4 in {:.1} s: test accuracy on 0-4 {pretrained:.2}%", seconds.iter().sum::<f64>());
    let path = out.join("pretrained_0_4.safetensors");
    model.save(&path)?;
    let reloaded = transfer::classifier()?;
    reloaded.load(&path)?;
    println!("saved {} and reloaded: test accuracy on 0-4 {:.2}%", path.display(), accuracy(&reloaded, &test_low)?);

    // Fine-tuning on 5-9 with the encoder frozen.
    let frozen = reload_with_new_head(&path, args.common.seed)?;
    frozen.freeze_encoder()?;
    let before = accuracy(&frozen, &test_high)?;
    let snapshot = frozen.encoder_snapshot()?;
    let trainable: usize = frozen.parameters().iter().filter(|p| p.requires_grad()).map(|p| p.numel()).sum();
    println!(
        "new head for 5-9, encoder frozen ({trainable} of {} parameters trainable): test accuracy on 5-9 {before:.2}% \
         before fine-tuning",
        frozen.num_parameters()
    );
    let frozen_seconds = fit(&frozen, &train_high, &args, args.finetune_epochs)?;
    let after = accuracy(&frozen, &test_high)?;
    println!("after {} epochs of fine-tuning the head: {after:.2}%", args.finetune_epochs);
    if frozen.encoder_snapshot()? != snapshot {
        return Err(Error::invalid("transfer", "a frozen encoder parameter changed during fine-tuning"));
    }
    if frozen.encoder().parameters().iter().any(|p| p.grad().is_some()) {
        return Err(Error::invalid("transfer", "a frozen encoder parameter holds a gradient"));
    }
    println!("frozen encoder parameters: bit-identical to the checkpoint, no gradients");

    // The same fine-tuning with every parameter trainable, for the timing.
    let full = reload_with_new_head(&path, args.common.seed)?;
    let full_seconds = fit(&full, &train_high, &args, args.finetune_epochs)?;
    let full_after = accuracy(&full, &test_high)?;
    let (f, t) = (mean(&frozen_seconds), mean(&full_seconds));
    println!("time per epoch on 5-9: frozen encoder {f:.2} s, full network {t:.2} s ({:.1}x faster frozen)", t / f);
    println!("test accuracy on 5-9: frozen encoder {after:.2}%, full network {full_after:.2}%");
    Ok(())
}
