//! Training throughput on MNIST with Adam 1e-3, in samples per second, for
//! `tools/bench/mlp_train.sh` (which runs PyTorch's equivalent next to it): the quick-start
//! MLP (784-256-128-10), LeNet-5 or the CNN quick start's model (`--model`).
//!
//! For each batch size: one warm-up epoch, then the median over `--epochs` timed epochs of
//! shuffled batches from the in-memory training set. `--traced` also times the same steps
//! with the model and loss traced once (static mode) and re-run by setting values.
//!
//! With `--amp bf16|f16` the eager step's forward pass and loss run under CPU autocast in that
//! dtype (parameters and Adam in `f32`; mode `eager-bf16` or `eager-f16` in the output), as
//! tools/bench/amp_torch.py does with `torch.autocast("cpu", ...)`. `--memory` adds a line
//! `activation_bytes-<mode>  batch  bytes` per batch size: the peak live tensor bytes of one
//! more eager step above those held before it (parameters, gradients, Adam's state).
//! `--device torch-cpu` trains on PyTorch's CPU kernels (the `libtorch` feature), each batch
//! moved there as the quick starts move it.
//!
//! ```text
//! cargo run --release --example train_bench -- [--model mlp|lenet|cnn] [--batch 64 --batch 256]
//!     [--epochs 3] [--traced] [--no-pool] [--amp bf16|f16] [--memory] [--device cpu|torch-cpu]
//! ```

mod common;

use clap::Parser;
use common::amp::{Amp, AmpArg, activation_bytes};
use ember::autograd::{CachedLoss, Traced, Var};
use ember::mnist;
use ember::nn::{CrossEntropyOptions, Module, Sequential, cross_entropy};
use ember::optim::{Adam, AdamConfig, Optimizer};
use ember::{Device, Result, Tensor};
use std::sync::Arc;
use std::time::Instant;

/// The models to measure.
#[derive(Clone, Copy, clap::ValueEnum)]
enum Model {
    /// The quick-start MLP, 784-256-128-10.
    Mlp,
    /// LeNet-5 ([`mnist::lenet5`]).
    Lenet,
    /// The CNN quick start's model ([`mnist::cnn`]).
    Cnn,
}

impl Model {
    fn build(self) -> Result<Sequential> {
        match self {
            Model::Mlp => mnist::mlp(),
            Model::Lenet => mnist::lenet5(),
            Model::Cnn => mnist::cnn(),
        }
    }
}

/// MNIST training throughput in samples per second.
#[derive(Parser)]
struct Args {
    /// The model to train.
    #[arg(long, value_enum, default_value_t = Model::Mlp)]
    model: Model,
    /// Batch sizes to measure.
    #[arg(long = "batch", default_values_t = [64usize, 256])]
    batches: Vec<usize>,
    /// Timed epochs per measurement (after one warm-up epoch).
    #[arg(long, default_value_t = 3)]
    epochs: usize,
    /// Also measure the traced (static-mode) training step.
    #[arg(long)]
    traced: bool,
    /// Measure the traced step before the eager one (to rule out order effects).
    #[arg(long)]
    traced_first: bool,
    /// Turn the tensor buffer pool off (every buffer comes from the system allocator).
    #[arg(long)]
    no_pool: bool,
    /// Worker threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// The MNIST directory.
    #[arg(long, default_value = "data/mnist")]
    data: String,
    /// `--amp bf16|f16` (eager mode only).
    #[command(flatten)]
    amp: AmpArg,
    /// Also measure the eager step's activation memory.
    #[arg(long)]
    memory: bool,
    /// The device: `cpu`, or `torch-cpu` (PyTorch's CPU kernels, the `libtorch` feature).
    #[arg(long, default_value = "cpu")]
    device: String,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Samples per second of `epochs` timed epochs (after a warm-up) of `step`.
fn measure(
    train: &mnist::Data,
    device: Device,
    batch: usize,
    epochs: usize,
    mut step: impl FnMut(&Tensor, &Tensor) -> Result<()>,
) -> Result<f64> {
    let loader = mnist::loader(train, batch, 0)?;
    let mut rates = Vec::new();
    for epoch in 0..=epochs {
        let t = Instant::now();
        for b in &loader {
            let b = b?;
            let [x, y] = b.as_slice() else {
                return Err(ember::Error::invalid("train_bench", "expected (images, labels) batches"));
            };
            step(&x.to_device(device)?, &y.to_device(device)?)?;
        }
        if epoch > 0 {
            rates.push(train.len() as f64 / t.elapsed().as_secs_f64());
        }
    }
    Ok(median(rates))
}

/// Samples per second of eager training (a new graph every step), the forward pass and loss
/// in `amp`'s precision, and with `memory` the activation bytes of one more step.
fn eager_rate(
    model: Model,
    train: &mnist::Data,
    device: Device,
    batch: usize,
    epochs: usize,
    amp: &Amp,
    memory: bool,
) -> Result<(f64, Option<usize>)> {
    ember::manual_seed(0);
    let model = model.build()?;
    model.to_device(device)?;
    let mut opt = Adam::new(model.parameters(), AdamConfig { lr: 1e-3, ..Default::default() })?;
    let mut step = |x: &Tensor, y: &Tensor| -> Result<()> {
        let loss =
            amp.run(|| cross_entropy(&model.forward(&Var::new(x.clone()))?, y, CrossEntropyOptions::default()))?;
        opt.zero_grad();
        loss.backward()?;
        opt.step()?;
        loss.item().map(|_| ())
    };
    let rate = measure(train, device, batch, epochs, &mut step)?;
    let bytes = if memory {
        let x = train.images.narrow(0, 0, batch)?.to_device(device)?;
        let y = train.labels.narrow(0, 0, batch)?.to_device(device)?;
        Some(activation_bytes(|| step(&x, &y))?)
    } else {
        None
    };
    Ok((rate, bytes))
}

/// Samples per second of static-mode training: the model and loss traced once, then re-run.
fn traced_rate(model: Model, train: &mnist::Data, device: Device, batch: usize, epochs: usize) -> Result<f64> {
    ember::manual_seed(0);
    let model = model.build()?;
    model.to_device(device)?;
    let model = Arc::new(model);
    let mut opt = Adam::new(model.parameters(), AdamConfig { lr: 1e-3, ..Default::default() })?;
    let m = model.clone();
    let traced = Traced::new(move |x: &Var| m.forward(x));
    let criterion = CachedLoss::new(|out: &Var, y: &Var| cross_entropy(out, y, CrossEntropyOptions::default()));
    measure(train, device, batch, epochs, |x, y| {
        let loss = criterion.forward(&traced.forward(x)?, y)?;
        opt.zero_grad();
        loss.backward()?;
        opt.step()
    })
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.epochs == 0 || args.batches.contains(&0) {
        return Err(ember::Error::invalid("train_bench", "--epochs and every --batch must be positive"));
    }
    if args.traced && args.amp.amp.is_some() {
        return Err(ember::Error::invalid("train_bench", "--amp measures the eager step only; drop --traced"));
    }
    let device: Device =
        args.device.parse().map_err(|e| ember::Error::invalid("train_bench", format!("--device: {e}")))?;
    device.check_available().map_err(|e| ember::Error::invalid("train_bench", format!("--device {device}: {e}")))?;
    // The scaler is left out: the timed step is autocast's, as in the PyTorch counterpart.
    let amp = Amp::new(args.amp.amp, device).without_scaler();
    let eager = match args.amp.amp {
        None => "eager".to_string(),
        Some(_) => format!("eager-{}", amp.dtype_name()),
    };
    ember::tensor::threading::set_num_threads(args.threads)?;
    ember::tensor::storage::set_pool_enabled(!args.no_pool);
    let train = mnist::load(&args.data, true)?;
    println!("# mode\tbatch\tsamples_per_s");
    for &batch in &args.batches {
        let mut order = vec![false];
        if args.traced {
            if args.traced_first {
                order.insert(0, true);
            } else {
                order.push(true);
            }
        }
        for traced in order {
            if traced {
                let rate = traced_rate(args.model, &train, device, batch, args.epochs)?;
                println!("traced\t{batch}\t{rate:.0}");
            } else {
                let (rate, bytes) = eager_rate(args.model, &train, device, batch, args.epochs, &amp, args.memory)?;
                println!("{eager}\t{batch}\t{rate:.0}");
                if let Some(bytes) = bytes {
                    println!("activation_bytes-{eager}\t{batch}\t{bytes}");
                }
            }
        }
    }
    Ok(())
}
