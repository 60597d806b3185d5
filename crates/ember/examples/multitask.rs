//! Multi-task learning on MNIST ([`ember::multitask`]): one shared trunk, a digit head and
//! a "digit >= 5" head, trained on the sum of the two cross-entropies.
//!
//! ```text
//! cargo run --release --example multitask -- [--epochs 2] [--batch-size 64] [--lr 1e-3]
//!     [--check-every 100] [--train-images N] [--data data/mnist] [--out runs/multitask] [--seed 0]
//! ```
//!
//! Every `--check-every` steps (and on the first), the trunk's gradients are computed
//! twice on the batch: with the two losses backpropagated separately (the first with
//! `retain_graph = true`) and with one backward of their sum. They must agree to 1e-6; the
//! example stops with an error otherwise. It prints both heads' test accuracy after every
//! epoch and draws the losses and accuracies to `<out>/multitask_curves.svg`.

mod common;

use clap::Parser;
use common::cli::Common;
use common::plot::{Panel, Series, save_svg};
use common::progress;
use ember::mnist;
use ember::multitask::{self, MultiTask};
use ember::optim::{Adam, AdamConfig};
use plotters::style::{BLUE, RED};
use std::time::Instant;

/// The largest difference allowed between the two ways of computing the shared gradients.
const TOLERANCE: f64 = 1e-6;

/// Train a shared trunk with two heads on MNIST; check that separate backward passes with
/// retain_graph and one backward of the summed loss give the same shared gradients.
#[derive(Parser)]
struct Args {
    /// Passes over the training set.
    #[arg(long, default_value_t = 2)]
    epochs: usize,
    /// Samples per optimisation step.
    #[arg(long, default_value_t = 64)]
    batch_size: usize,
    /// Adam's learning rate.
    #[arg(long, default_value_t = 1e-3)]
    lr: f64,
    /// Compare the separate and the summed backward every this many steps.
    #[arg(long, default_value_t = 100)]
    check_every: usize,
    /// Train on the first N training images only (all by default).
    #[arg(long)]
    train_images: Option<usize>,
    #[command(flatten)]
    common: Common,
}

fn main() -> ember::Result<()> {
    let args = Args::parse();
    if args.epochs == 0 || args.batch_size == 0 || args.check_every == 0 {
        return Err(ember::Error::invalid("multitask", "--epochs, --batch-size and --check-every must be positive"));
    }
    let out = args.common.start("multitask")?;
    let mut train = mnist::load(&args.common.data, true)?;
    if let Some(n) = args.train_images {
        train = train.take(n)?;
    }
    let test = mnist::load(&args.common.data, false)?;
    println!("MNIST: {} training and {} test images", train.len(), test.len());

    let model = MultiTask::new()?;
    println!("trunk 784-256-128 (ReLU), heads 128-10 (digit) and 128-2 (digit >= 5); Adam lr {}", args.lr);
    let mut opt = Adam::new(model.parameters(), AdamConfig { lr: args.lr, ..Default::default() })?;
    let loader = mnist::loader(&train, args.batch_size, args.common.seed)?;
    let steps = loader.len();

    let (mut digit_curve, mut high_curve) = (Vec::new(), Vec::new());
    let (mut digit_acc, mut high_acc) = (Vec::new(), Vec::new());
    let (mut worst_gap, mut checks) = (0f64, 0usize);
    let started = Instant::now();
    for epoch in 1..=args.epochs {
        let bar = progress::bar(steps, format!("epoch {epoch}/{}", args.epochs))?;
        let (mut d_sum, mut h_sum, mut n) = (0.0, 0.0, 0usize);
        for (step, batch) in loader.iter().enumerate() {
            let batch = batch?;
            let [x, y] = batch.as_slice() else {
                return Err(ember::Error::invalid("multitask", "expected batches of (images, labels)"));
            };
            if step % args.check_every == 0 {
                let gap = multitask::shared_gradient_gap(&model, x, y)?;
                if gap > TOLERANCE {
                    return Err(ember::Error::invalid(
                        "multitask",
                        format!("epoch {epoch} step {step}: separate and summed shared gradients differ by {gap:e}"),
                    ));
                }
                worst_gap = worst_gap.max(gap);
                checks += 1;
            }
            let (d, h) = multitask::train_step(&model, &mut opt, x, y)?;
            (d_sum, h_sum, n) = (d_sum + d, h_sum + h, n + 1);
            if n == 50 || step + 1 == steps {
                let t = epoch as f64 - 1.0 + (step + 1) as f64 / steps as f64;
                digit_curve.push((t, d_sum / n as f64));
                high_curve.push((t, h_sum / n as f64));
                bar.set_message(format!("digit loss {:.4}  >=5 loss {:.4}", d_sum / n as f64, h_sum / n as f64));
                (d_sum, h_sum, n) = (0.0, 0.0, 0);
            }
            bar.inc(1);
        }
        bar.finish();
        let acc = multitask::evaluate(&model, &test)?;
        digit_acc.push((epoch as f64, 100.0 * acc.digit));
        high_acc.push((epoch as f64, 100.0 * acc.high));
        println!("epoch {epoch}: test accuracy: digit {:.2}%, digit >= 5 {:.2}%", 100.0 * acc.digit, 100.0 * acc.high);
    }
    println!("trained in {:.1} s", started.elapsed().as_secs_f64());
    println!(
        "shared gradients, separate backward (retain_graph) vs summed loss: max difference {worst_gap:.2e} over {checks} \
         batches (tolerance {TOLERANCE:e})"
    );

    let path = out.join("multitask_curves.svg");
    let losses = Panel::new(
        "training losses",
        "epoch",
        "cross-entropy",
        vec![Series::line("digit", digit_curve, BLUE), Series::line("digit >= 5", high_curve, RED)],
    );
    let accuracy = Panel::new(
        "test accuracy (%)",
        "epoch",
        "accuracy",
        vec![Series::dotted("digit", digit_acc, BLUE), Series::dotted("digit >= 5", high_acc, RED)],
    );
    save_svg(&path, &[losses, accuracy])?;
    println!("wrote {}", path.display());
    Ok(())
}
