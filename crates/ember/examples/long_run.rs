//! Throughput over a long run of the quick-start MLP (784-256-128-10), window by window, for
//! `tools/bench/long_run.sh` (which runs PyTorch's `tools/bench/long_run.py` beside it).
//!
//! Training runs `--steps` steps and prints the samples per second of each stretch of
//! `--window` steps, so that a slowdown that builds up over a run (numbers drifting into
//! subnormals, memory growing) shows where a short benchmark would average it away; then the
//! process's peak resident memory.
//!
//! ```text
//! cargo run --release --example long_run -- [--steps 10000] [--window 1000] [--batch 64]
//!     [--data random|mnist] [--optim adam|sgd] [--threads 2] [--mnist-dir data/mnist]
//!     [--prefetch 2]
//! ```
//!
//! `--data random` cycles through a pool of 8,192 inputs drawn from U[0, 1) with random
//! labels 0..9, in order; `--data mnist` draws shuffled batches of the standardised MNIST
//! training set, epoch after epoch. Adam runs at lr 1e-3, SGD at lr 0.01 without momentum.
//!
//! Output, tab-separated (lines starting with `#` are comments):
//!
//! ```text
//! window  <first step>  <last step>  <samples/s>  <loss at the last step>
//! total   <steps>       <seconds>    <samples/s>
//! peak_rss_bytes  <bytes>
//! ```

use clap::{Parser, ValueEnum};
use ember::data::{Batches, DataLoader, TensorDataset};
use ember::mnist;
use ember::nn::{CrossEntropyOptions, Module, cross_entropy};
use ember::optim::{Adam, AdamConfig, Optimizer, Sgd, SgdConfig};
use ember::tensor::storage::peak_rss;
use ember::{DType, Error, Result, Tensor, Var};
use std::path::PathBuf;
use std::time::Instant;

/// The number of random inputs cycled through with `--data random`.
const RANDOM_POOL: usize = 8192;

#[derive(Parser)]
struct Args {
    /// Training steps.
    #[arg(long, default_value_t = 10_000)]
    steps: usize,
    /// Steps per reported window.
    #[arg(long, default_value_t = 1000)]
    window: usize,
    /// Samples per step.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// The inputs: random (a pool of 8,192 uniform inputs) or mnist.
    #[arg(long, value_enum, default_value_t = Source::Random)]
    data: Source,
    /// The optimizer: Adam (lr 1e-3) or plain SGD (lr 0.01).
    #[arg(long, value_enum, default_value_t = Optim::Adam)]
    optim: Optim,
    /// Worker threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// The MNIST directory, for `--data mnist`.
    #[arg(long, default_value = "data/mnist")]
    mnist_dir: PathBuf,
    /// Seed of the global generator (weights, random data, shuffling).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// MNIST batches built ahead on the loader's worker thread (0: on the training thread).
    #[arg(long, default_value_t = ember::data::DEFAULT_PREFETCH)]
    prefetch: usize,
}

#[derive(Clone, Copy, ValueEnum)]
enum Source {
    Random,
    Mnist,
}

#[derive(Clone, Copy, ValueEnum)]
enum Optim {
    Adam,
    Sgd,
}

/// Where the batches come from.
enum Feed {
    /// `[RANDOM_POOL, 784]` inputs and `[RANDOM_POOL]` labels, cut into consecutive batches.
    Random { x: Tensor, y: Tensor, next: usize },
    /// Shuffled MNIST batches, a new epoch when one ends.
    Mnist { loader: DataLoader<TensorDataset>, epoch: Batches },
}

impl Feed {
    fn new(args: &Args) -> Result<Feed> {
        match args.data {
            Source::Random => {
                if args.batch > RANDOM_POOL {
                    return Err(Error::invalid("long_run", format!("--batch must be at most {RANDOM_POOL}")));
                }
                let x = Tensor::rand([RANDOM_POOL, mnist::LAYERS[0]])?;
                let y = Tensor::rand([RANDOM_POOL])?.mul_scalar(10.0).to_dtype(DType::I64);
                Ok(Feed::Random { x, y, next: 0 })
            }
            Source::Mnist => {
                let train = mnist::load(&args.mnist_dir, true)?;
                let ds = TensorDataset::new(vec![train.images.clone(), train.labels.clone()])?;
                let loader = DataLoader::builder(ds)
                    .batch_size(args.batch)
                    .shuffle(true)
                    .seed(args.seed)
                    .prefetch(args.prefetch)
                    .build()?;
                let epoch = loader.iter();
                Ok(Feed::Mnist { loader, epoch })
            }
        }
    }

    /// The next `(inputs, labels)` batch.
    fn next(&mut self, batch: usize) -> Result<(Tensor, Tensor)> {
        match self {
            Feed::Random { x, y, next } => {
                if *next + batch > RANDOM_POOL {
                    *next = 0;
                }
                let start = *next;
                *next += batch;
                Ok((x.narrow(0, start, batch)?, y.narrow(0, start, batch)?))
            }
            Feed::Mnist { loader, epoch } => {
                let fields = match epoch.next() {
                    Some(b) => b?,
                    None => {
                        *epoch = loader.iter();
                        epoch.next().ok_or_else(|| Error::invalid("long_run", "the MNIST loader has no batches"))??
                    }
                };
                match <[Tensor; 2]>::try_from(fields) {
                    Ok([x, y]) => Ok((x, y)),
                    Err(f) => {
                        Err(Error::invalid("long_run", format!("expected (images, labels), got {} fields", f.len())))
                    }
                }
            }
        }
    }
}

fn optimizer(args: &Args, model: &dyn Module) -> Result<Box<dyn Optimizer>> {
    Ok(match args.optim {
        Optim::Adam => Box::new(Adam::new(model.parameters(), AdamConfig { lr: 1e-3, ..Default::default() })?),
        Optim::Sgd => Box::new(Sgd::new(model.parameters(), SgdConfig { lr: 0.01, ..Default::default() })?),
    })
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.steps == 0 || args.window == 0 || args.batch == 0 {
        return Err(Error::invalid("long_run", "--steps, --window and --batch must be positive"));
    }
    ember::tensor::threading::set_num_threads(args.threads)?;
    ember::manual_seed(args.seed);
    let model = mnist::mlp()?;
    let mut opt = optimizer(&args, &model)?;
    let mut feed = Feed::new(&args)?;
    println!(
        "# ember long_run data={} optim={} batch={} steps={} window={} threads={}",
        args.data.to_possible_value().map_or("?".into(), |v| v.get_name().to_string()),
        args.optim.to_possible_value().map_or("?".into(), |v| v.get_name().to_string()),
        args.batch,
        args.steps,
        args.window,
        args.threads
    );
    println!("# kind\tfirst_step\tlast_step\tsamples_per_s\tloss");
    let started = Instant::now();
    // (first step, samples so far, start time) of the current window.
    let mut window = (0, 0, Instant::now());
    let mut samples = 0;
    for step in 0..args.steps {
        let (x, y) = feed.next(args.batch)?;
        // An MNIST epoch ends with a short batch.
        samples += x.shape()[0];
        let loss = cross_entropy(&model.forward(&Var::new(x))?, &y, CrossEntropyOptions::default())?;
        opt.zero_grad();
        loss.backward()?;
        opt.step()?;
        let done = step + 1;
        if done % args.window == 0 || done == args.steps {
            // Reading the loss waits for nothing (kernels run synchronously); it is only
            // read here so that both sides do the same work per step.
            let loss = loss.item()?;
            let (first, before, t) = window;
            let rate = (samples - before) as f64 / t.elapsed().as_secs_f64();
            println!("window\t{}\t{}\t{rate:.0}\t{loss:.4}", first + 1, done);
            window = (done, samples, Instant::now());
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!("total\t{}\t{secs:.3}\t{:.0}", args.steps, samples as f64 / secs);
    match peak_rss() {
        Some(bytes) => println!("peak_rss_bytes\t{bytes}"),
        None => println!("# peak resident memory is not reported on this system"),
    }
    Ok(())
}
