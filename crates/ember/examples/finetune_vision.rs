//! Fine-tunes a new head on a frozen ResNet-18 ([`ember::models::resnet`]) for MNIST: the
//! backbone from a torchvision checkpoint (or random weights), its batch norms in
//! evaluation mode, a new 10-class `fc` the only thing trained.
//!
//! ```text
//! cargo run --release --features models --example finetune_vision -- \
//!     [--checkpoint resnet18-f37072fd.pth] [--steps 300] [--batch-size 32] [--lr 1e-3]
//!     [--size 32] [--test-images 1000] [--data data/mnist] [--seed 0]
//! ```
//!
//! The 28x28 digits are resized (bilinear) to `--size` and repeated to 3 channels. With
//! `--checkpoint`, any torchvision ResNet state dict (`.pth` or `.safetensors`) works; its
//! depth and width are read off the file. Without it the backbone is random and frozen
//! (its batch-norm statistics estimated from 30 training batches first), so the head
//! learns from random features: a baseline that a pretrained backbone should beat.
//! It prints the test accuracy before and after training and checks that the backbone's
//! parameters did not change.

use clap::Parser;
use ember::autograd::{Var, no_grad};
use ember::io::LoadOptions;
use ember::mnist::{self, Data};
use ember::models::resnet::{ResNet, ResNetConfig};
use ember::nn::functional::{InterpolateArgs, InterpolateMode};
use ember::nn::{CrossEntropyOptions, Module, cross_entropy};
use ember::optim::{Adam, AdamConfig, Optimizer};
use ember::{DType, Error, Result, Tensor};
use std::path::PathBuf;
use std::time::Instant;

/// Fine-tune a new head on a frozen ResNet-18 for MNIST.
#[derive(Parser)]
struct Args {
    /// A torchvision ResNet state dict (`.pth` or `.safetensors`); random weights without.
    #[arg(long)]
    checkpoint: Option<PathBuf>,
    /// Optimisation steps of the head.
    #[arg(long, default_value_t = 300)]
    steps: usize,
    /// Images per step.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// Adam's learning rate.
    #[arg(long, default_value_t = 1e-3)]
    lr: f64,
    /// The side the digits are resized to.
    #[arg(long, default_value_t = 32)]
    size: usize,
    /// Test images to evaluate on.
    #[arg(long, default_value_t = 1000)]
    test_images: usize,
    /// The directory with the MNIST IDX files.
    #[arg(long, default_value = "data/mnist")]
    data: PathBuf,
    /// Seed of the global generator (head, random backbone, batch order).
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// Standardised `[n, 784]` digits as `[n, 3, size, size]` images.
fn to_images(flat: &Tensor, size: usize) -> Result<Var> {
    let n = flat.shape().dims()[0];
    let x = Var::new(flat.reshape([n, 1, 28, 28])?);
    let x = x.interpolate(&InterpolateArgs::size([size, size]).mode(InterpolateMode::Bilinear))?;
    x.expand([n, 3, size, size])
}

/// Test accuracy of `model` on `data`.
fn accuracy(model: &ResNet, data: &Data, size: usize) -> Result<f64> {
    no_grad(|| {
        let mut correct = 0.0;
        let n = data.len();
        for start in (0..n).step_by(200) {
            let len = 200.min(n - start);
            let logits = model.forward(&to_images(&data.images.narrow(0, start, len)?, size)?)?;
            let predicted = logits.value().argmax(1, false)?;
            correct += predicted.eq(&data.labels.narrow(0, start, len)?)?.to_dtype(DType::F64).sum_all().item()?;
        }
        Ok(correct / n.max(1) as f64)
    })
}

/// Running statistics of the batch norms from 30 training batches (1 - 0.9^30 = 96% of the
/// way from the initial ones at momentum 0.1), without a graph; the model is left in
/// evaluation mode.
fn calibrate_batch_norms(model: &ResNet, train: &Data, args: &Args) -> Result<()> {
    model.train();
    let loader = mnist::loader(train, args.batch_size, args.seed + 1)?;
    no_grad(|| -> Result<()> {
        for batch in loader.iter().take(30) {
            let batch = batch?;
            model.forward(&to_images(&batch[0], args.size)?)?;
        }
        Ok(())
    })?;
    model.eval();
    Ok(())
}

fn main() -> Result<()> {
    let args = Args::parse();
    ember::manual_seed(args.seed);
    if args.batch_size == 0 || args.size < 32 {
        return Err(Error::invalid("finetune_vision", "--batch-size must be positive and --size at least 32"));
    }
    let mut model = match &args.checkpoint {
        Some(path) => ResNet::from_pretrained_with(path, &LoadOptions::default().dtype(DType::F32))?,
        None => ResNet::new(&ResNetConfig::resnet18(1000))?,
    };
    model.replace_fc(10)?;
    // Batch norms keep their running statistics: the whole model stays in evaluation mode.
    model.eval();
    let backbone = model.backbone_parameters();
    for p in &backbone {
        p.freeze()?;
    }
    let before: Vec<Vec<f64>> = backbone.iter().map(|p| p.value().to_vec_f64()).collect::<Result<_>>()?;
    println!(
        "ResNet {:?} {:?} (width {}) from {}: {} backbone parameters frozen, head {} -> 10",
        model.config().block,
        model.config().layers,
        model.config().width,
        args.checkpoint.as_ref().map_or("random weights".to_string(), |p| p.display().to_string()),
        backbone.iter().map(|p| p.numel()).sum::<usize>(),
        model.config().features(),
    );

    let train = mnist::load(&args.data, true)?;
    let test = mnist::load(&args.data, false)?.take(args.test_images)?;
    if args.checkpoint.is_none() {
        // A random backbone's batch norms hold the initial statistics (mean 0, variance
        // 1), under which its features are nearly the same for every image: estimate them
        // from training batches first, as any checkpoint's were.
        calibrate_batch_norms(&model, &train, &args)?;
    }
    println!("test accuracy before: {:.2}%", 100.0 * accuracy(&model, &test, args.size)?);

    let mut opt = Adam::new(model.fc().parameters(), AdamConfig { lr: args.lr, ..Default::default() })?;
    let loader = mnist::loader(&train, args.batch_size, args.seed)?;
    let started = Instant::now();
    let mut step = 0;
    let mut running = 0.0;
    'train: loop {
        for batch in loader.iter() {
            let batch = batch?;
            let [x, y] = batch.as_slice() else {
                return Err(Error::invalid("finetune_vision", "expected batches of (images, labels)"));
            };
            let logits = model.forward(&to_images(x, args.size)?)?;
            let loss = cross_entropy(&logits, y, CrossEntropyOptions::default())?;
            opt.zero_grad();
            loss.backward()?;
            opt.step()?;
            running += loss.item()?;
            step += 1;
            if step % 50 == 0 {
                println!("step {step:>5}  loss {:.4}  ({:.1} s)", running / 50.0, started.elapsed().as_secs_f64());
                running = 0.0;
            }
            if step >= args.steps {
                break 'train;
            }
        }
    }
    println!("test accuracy after {step} steps: {:.2}%", 100.0 * accuracy(&model, &test, args.size)?);
    for (p, b) in backbone.iter().zip(&before) {
        if p.value().to_vec_f64()? != *b {
            return Err(Error::invalid("finetune_vision", "a frozen backbone parameter changed"));
        }
    }
    println!("backbone unchanged; {:.1} s of training", started.elapsed().as_secs_f64());
    Ok(())
}
