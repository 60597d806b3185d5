//! Training throughput on MNIST with Adam 1e-3, in samples per second, for
//! `tools/bench/mlp_train.sh` (which runs PyTorch's equivalent next to it): the quick-start
//! MLP (784-256-128-10), LeNet-5 or the CNN quick start's model (`--model`).
//!
//! For each batch size: one warm-up epoch, then the median over `--epochs` timed epochs of
//! shuffled batches from the in-memory training set. `--traced` also times the same steps
//! with the model and loss traced once (static mode) and re-run by setting values.
//!
//! ```text
//! cargo run --release --example train_bench -- [--model mlp|lenet|cnn] [--batch 64 --batch 256]
//!     [--epochs 3] [--traced] [--no-pool]
//! ```

use clap::Parser;
use ember::autograd::{CachedLoss, Traced, Var};
use ember::mnist;
use ember::nn::{CrossEntropyOptions, Module, Sequential, cross_entropy};
use ember::optim::{Adam, AdamConfig, Optimizer};
use ember::{Result, Tensor};
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
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Samples per second of `epochs` timed epochs (after a warm-up) of `step`.
fn measure(
    train: &mnist::Data,
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
            step(x, y)?;
        }
        if epoch > 0 {
            rates.push(train.len() as f64 / t.elapsed().as_secs_f64());
        }
    }
    Ok(median(rates))
}

/// Samples per second of eager training: a new graph every step.
fn eager_rate(model: Model, train: &mnist::Data, batch: usize, epochs: usize) -> Result<f64> {
    ember::manual_seed(0);
    let model = model.build()?;
    let mut opt = Adam::new(model.parameters(), AdamConfig { lr: 1e-3, ..Default::default() })?;
    measure(train, batch, epochs, |x, y| mnist::train_step(&model, &mut opt, x, y).map(|_| ()))
}

/// Samples per second of static-mode training: the model and loss traced once, then re-run.
fn traced_rate(model: Model, train: &mnist::Data, batch: usize, epochs: usize) -> Result<f64> {
    ember::manual_seed(0);
    let model = Arc::new(model.build()?);
    let mut opt = Adam::new(model.parameters(), AdamConfig { lr: 1e-3, ..Default::default() })?;
    let m = model.clone();
    let traced = Traced::new(move |x: &Var| m.forward(x));
    let criterion = CachedLoss::new(|out: &Var, y: &Var| cross_entropy(out, y, CrossEntropyOptions::default()));
    measure(train, batch, epochs, |x, y| {
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
            let rate = if traced {
                traced_rate(args.model, &train, batch, args.epochs)?
            } else {
                eager_rate(args.model, &train, batch, args.epochs)?
            };
            println!("{}\t{batch}\t{rate:.0}", if traced { "traced" } else { "eager" });
        }
    }
    Ok(())
}
