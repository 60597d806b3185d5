//! Multi-task learning on MNIST ([`ember::multitask`]): one shared trunk, a digit
//! classifier and a regression head predicting the digit's ink mass (its mean pixel
//! intensity, computed from the image), trained on a weighted sum of the cross-entropy and
//! the squared error.
//!
//! ```text
//! cargo run --release --example multitask -- [--epochs 2] [--batch-size 64] [--lr 1e-3]
//!     [--weights 1,1] [--freeze-head digit|ink] [--check-every 100] [--train-images N]
//!     [--data data/mnist] [--out runs/multitask] [--seed 0]
//! ```
//!
//! `--weights digit,ink` weighs the two losses. `--freeze-head NAME` freezes that head
//! (`Module::freeze`) before training: its parameters must come out bit-identical (the
//! example stops with an error otherwise) while the trunk, which still receives the frozen
//! head's loss through it, and the other head learn.
//!
//! Every `--check-every` steps (and on the first), the trunk's gradients are computed
//! twice on the batch: with the two weighted losses backpropagated separately (the first
//! with `retain_graph = true`) and with one backward of their sum. They must agree to 1e-6;
//! the example stops with an error otherwise. It prints the digit accuracy and the ink
//! head's R² on the test set after every epoch and draws the losses and scores to
//! `<out>/multitask_curves.svg`.

mod common;

use clap::Parser;
use common::cli::Common;
use common::plot::{Panel, Series, save_svg};
use common::progress;
use ember::mnist;
use ember::multitask::{self, Head, MultiTask, Weights};
use ember::nn::Module;
use ember::optim::{Adam, AdamConfig};
use plotters::style::{BLUE, RED};
use std::time::Instant;

/// The largest difference allowed between the two ways of computing the shared gradients.
const TOLERANCE: f64 = 1e-6;

/// Train a shared trunk with a digit classifier and an ink-mass regressor on MNIST, on a
/// weighted sum of their losses, optionally with one head frozen; check that separate
/// backward passes with retain_graph and one backward of the summed loss give the same
/// shared gradients.
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
    /// The weights of the digit's cross-entropy and of the ink mass's squared error.
    #[arg(long, default_value = "1,1")]
    weights: Weights,
    /// Freeze this head (digit or ink): its parameters stay as initialised.
    #[arg(long)]
    freeze_head: Option<Head>,
    /// Compare the separate and the summed backward every this many steps.
    #[arg(long, default_value_t = 100)]
    check_every: usize,
    /// Train on the first N training images only (all by default).
    #[arg(long)]
    train_images: Option<usize>,
    #[command(flatten)]
    common: Common,
}

/// Every value of a head's parameters, as bits.
fn head_bits(model: &MultiTask, head: Head) -> ember::Result<Vec<u32>> {
    let mut bits = Vec::new();
    for p in model.head(head).parameters() {
        bits.extend(p.value().to_vec::<f32>()?.into_iter().map(f32::to_bits));
    }
    Ok(bits)
}

fn main() -> ember::Result<()> {
    let args = Args::parse();
    if args.epochs == 0 || args.batch_size == 0 || args.check_every == 0 {
        return Err(ember::Error::invalid("multitask", "--epochs, --batch-size and --check-every must be positive"));
    }
    let weights = args.weights;
    let out = args.common.start("multitask")?;
    let mut train = mnist::load(&args.common.data, true)?;
    if let Some(n) = args.train_images {
        train = train.take(n)?;
    }
    let test = mnist::load(&args.common.data, false)?;
    println!("MNIST: {} training and {} test images", train.len(), test.len());

    let model = MultiTask::new()?;
    println!(
        "trunk 784-256-128 (ReLU), heads 128-10 (digit, cross-entropy) and 128-1 (ink mass in standard units, squared \
         error); loss {} * digit + {} * ink; Adam lr {}",
        weights.digit, weights.ink, args.lr
    );
    let frozen = match args.freeze_head {
        Some(head) => {
            model.freeze_head(head)?;
            let trainable: usize = model.parameters().iter().filter(|p| p.requires_grad()).map(|p| p.numel()).sum();
            let total: usize = model.parameters().iter().map(|p| p.numel()).sum();
            println!("{head} head frozen: {trainable} of {total} parameters trainable");
            Some((head, head_bits(&model, head)?))
        }
        None => None,
    };
    // Built over every parameter, the frozen head's included: the optimizer skips those.
    let mut opt = Adam::new(model.parameters(), AdamConfig { lr: args.lr, ..Default::default() })?;
    let loader = mnist::loader(&train, args.batch_size, args.common.seed)?;
    let steps = loader.len();

    let (mut digit_curve, mut ink_curve) = (Vec::new(), Vec::new());
    let (mut digit_acc, mut ink_r2) = (Vec::new(), Vec::new());
    let (mut worst_gap, mut checks) = (0f64, 0usize);
    let started = Instant::now();
    for epoch in 1..=args.epochs {
        let bar = progress::bar(steps, format!("epoch {epoch}/{}", args.epochs))?;
        let (mut d_sum, mut i_sum, mut n) = (0.0, 0.0, 0usize);
        for (step, batch) in loader.iter().enumerate() {
            let batch = batch?;
            let [x, y] = batch.as_slice() else {
                return Err(ember::Error::invalid("multitask", "expected batches of (images, labels)"));
            };
            if step % args.check_every == 0 {
                let gap = multitask::shared_gradient_gap(&model, x, y, &weights)?;
                if gap > TOLERANCE {
                    return Err(ember::Error::invalid(
                        "multitask",
                        format!("epoch {epoch} step {step}: separate and summed shared gradients differ by {gap:e}"),
                    ));
                }
                worst_gap = worst_gap.max(gap);
                checks += 1;
            }
            let (d, i) = multitask::train_step(&model, &mut opt, x, y, &weights)?;
            (d_sum, i_sum, n) = (d_sum + d, i_sum + i, n + 1);
            if n == 50 || step + 1 == steps {
                let t = epoch as f64 - 1.0 + (step + 1) as f64 / steps as f64;
                digit_curve.push((t, d_sum / n as f64));
                ink_curve.push((t, i_sum / n as f64));
                bar.set_message(format!("digit loss {:.4}  ink loss {:.4}", d_sum / n as f64, i_sum / n as f64));
                (d_sum, i_sum, n) = (0.0, 0.0, 0);
            }
            bar.inc(1);
        }
        bar.finish();
        let eval = multitask::evaluate(&model, &test)?;
        digit_acc.push((epoch as f64, 100.0 * eval.digit_accuracy));
        ink_r2.push((epoch as f64, 100.0 * eval.ink_r2));
        println!(
            "epoch {epoch}: test digit accuracy {:.2}%, ink mass MSE {:.4} (R² {:.4})",
            100.0 * eval.digit_accuracy,
            eval.ink_mse,
            eval.ink_r2
        );
    }
    println!("trained in {:.1} s", started.elapsed().as_secs_f64());
    println!(
        "shared gradients, separate backward (retain_graph) vs summed loss: max difference {worst_gap:.2e} over {checks} \
         batches (tolerance {TOLERANCE:e})"
    );
    if let Some((head, before)) = frozen {
        if head_bits(&model, head)? != before {
            return Err(ember::Error::invalid("multitask", format!("the frozen {head} head's parameters changed")));
        }
        if model.head(head).parameters().iter().any(|p| p.grad().is_some()) {
            return Err(ember::Error::invalid("multitask", format!("the frozen {head} head holds a gradient")));
        }
        println!("frozen {head} head: parameters bit-identical to their initial values, no gradients");
    }

    let path = out.join("multitask_curves.svg");
    let losses = Panel::new(
        "training losses",
        "epoch",
        "loss",
        vec![
            Series::line("digit cross-entropy", digit_curve, BLUE),
            Series::line("ink mass squared error", ink_curve, RED),
        ],
    );
    let scores = Panel::new(
        "test scores (%)",
        "epoch",
        "percent",
        vec![Series::dotted("digit accuracy", digit_acc, BLUE), Series::dotted("ink mass R² x 100", ink_r2, RED)],
    );
    save_svg(&path, &[losses, scores])?;
    println!("wrote {}", path.display());
    Ok(())
}
