//! Trains the MNIST quick-start model data-parallel over MPI processes: each rank reads
//! its own shard of the training set (`DistributedSampler`), `DistributedDataParallel`
//! averages the gradients during backward, and rank 0 prints progress, evaluates and saves
//! the checkpoint (which loads into the plain `mnist::mlp()`).
//!
//! ```text
//! cargo build --release --features mpi --example mnist_ddp
//! mpirun -np 2 target/release/examples/mnist_ddp [--epochs 1] [--batch-size 64] [--lr 1e-3]
//!     [--model mlp|cnn] [--bucket-cap-mb 25] [--data data/mnist] [--out runs/mnist_ddp]
//!     [--train-images N] [--steps N] [--synthetic] [--bench] [--plain] [--mpi-all-reduce]
//! ```
//!
//! `--batch-size` is per rank: two ranks with 64 train like one process with 128.
//! `--synthetic` trains on random images (no MNIST files needed); `--steps` stops each
//! epoch early; `--bench` prints one `key=value` line of throughput and overlap figures
//! (used by `tools/bench/ddp_scaling.sh`). `--plain` trains the same model in this one
//! process without MPI or DDP (run it without `mpirun`): the baseline that data-parallel
//! training has to beat. `--mpi-all-reduce` turns off the shared-memory all-reduce that
//! ranks on one host use (`MpiOptions::shared_memory`), for comparison.

use clap::Parser;
use ember::data::{DataLoader, TensorDataset};
use ember::distributed::{DdpOptions, DistributedDataParallel, DistributedSampler, MpiGroup, MpiOptions, ProcessGroup};
use ember::mnist;
use ember::nn::{Module, ModuleExt};
use ember::optim::{Adam, AdamConfig};
use ember::{Result, Tensor};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

#[derive(Parser)]
struct Args {
    /// Passes over the training set.
    #[arg(long, default_value_t = 1)]
    epochs: usize,
    /// Samples per optimisation step on each rank.
    #[arg(long, default_value_t = 64)]
    batch_size: usize,
    /// Adam's learning rate.
    #[arg(long, default_value_t = 1e-3)]
    lr: f64,
    /// The quick-start model: `mlp` (784-256-128-10) or `cnn`.
    #[arg(long, default_value = "mlp")]
    model: String,
    /// Gradient bucket size in MiB.
    #[arg(long, default_value_t = 25.0)]
    bucket_cap_mb: f64,
    /// Seed of the initial weights (rank 0's are broadcast) and of the shuffling.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The directory with the MNIST IDX files.
    #[arg(long, default_value = "data/mnist")]
    data: PathBuf,
    /// Where rank 0 writes the checkpoint.
    #[arg(long, default_value = "runs/mnist_ddp")]
    out: PathBuf,
    /// Train on the first N training images only.
    #[arg(long)]
    train_images: Option<usize>,
    /// Stop each epoch after N steps.
    #[arg(long)]
    steps: Option<usize>,
    /// Random images instead of MNIST (no files needed).
    #[arg(long)]
    synthetic: bool,
    /// Print one line of throughput and overlap figures.
    #[arg(long)]
    bench: bool,
    /// Train the plain model in this process, without MPI or DDP.
    #[arg(long)]
    plain: bool,
    /// All-reduce through MPI's messages even where the ranks share a host.
    #[arg(long)]
    mpi_all_reduce: bool,
}

/// The model being trained: plain, or wrapped for data-parallel training.
enum Trained {
    Plain(Box<dyn Module>),
    Ddp(DistributedDataParallel<Box<dyn Module>>),
}

impl Trained {
    fn model(&self) -> &dyn Module {
        match self {
            Trained::Plain(m) => m,
            Trained::Ddp(d) => d,
        }
    }

    /// The model without the DDP wrapper (its checkpoint loads into the plain model).
    fn inner(&self) -> &dyn Module {
        match self {
            Trained::Plain(m) => m,
            Trained::Ddp(d) => d.module(),
        }
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    let mpi = MpiOptions { shared_memory: !args.mpi_all_reduce, ..Default::default() };
    let group = if args.plain { None } else { Some(MpiGroup::world_with_options(mpi)?) };
    let shared_memory = group.as_ref().is_some_and(MpiGroup::uses_shared_memory);
    let group = group.map(|g| Arc::new(g) as Arc<dyn ProcessGroup>);
    let (rank, world) = group.as_ref().map_or((0, 1), |g| (g.rank(), g.world_size()));
    ember::manual_seed(args.seed);
    let train = if args.synthetic {
        let n = args.train_images.unwrap_or(60_000);
        let labels = Tensor::from_vec((0..n as i64).map(|i| i % 10).collect::<Vec<_>>(), [n])?;
        mnist::Data { images: Tensor::randn([n, 784])?, labels }
    } else {
        let d = mnist::load(&args.data, true)?;
        match args.train_images {
            Some(n) => d.take(n)?,
            None => d,
        }
    };
    let model: Box<dyn Module> = match args.model.as_str() {
        "mlp" => Box::new(mnist::mlp()?),
        "cnn" => Box::new(mnist::cnn()?),
        other => return Err(ember::Error::invalid("mnist_ddp", format!("unknown --model {other}: mlp or cnn"))),
    };
    let options = DdpOptions { bucket_cap_mb: args.bucket_cap_mb, ..Default::default() };
    let dataset = TensorDataset::new(vec![train.images.clone(), train.labels.clone()])?;
    let (trained, loader) = match &group {
        Some(group) => {
            let ddp = DistributedDataParallel::with_options(model, group.clone(), options)?;
            let sampler = DistributedSampler::for_group(train.len(), &**group)?.seed(args.seed);
            (Trained::Ddp(ddp), DataLoader::builder(dataset).batch_size(args.batch_size).sampler(sampler).build()?)
        }
        None => (
            Trained::Plain(model),
            DataLoader::builder(dataset).batch_size(args.batch_size).shuffle(true).seed(args.seed).build()?,
        ),
    };
    let ddp = trained.model();
    let mut opt = Adam::new(ddp.parameters(), AdamConfig { lr: args.lr, ..Default::default() })?;
    let buckets = match &trained {
        Trained::Ddp(d) => d.bucket_names().len(),
        Trained::Plain(_) => 0,
    };
    if rank == 0 {
        println!(
            "mnist_ddp: {} ranks, {} model ({} parameters, {} buckets), {} samples per rank per epoch, batch {} per rank",
            world,
            args.model,
            ddp.num_parameters(),
            buckets,
            loader.len() * args.batch_size,
            args.batch_size
        );
    }

    const WARMUP: usize = 3;
    let (mut timed_steps, mut timed) = (0usize, std::time::Duration::ZERO);
    for epoch in 0..args.epochs {
        ddp.train();
        for (step, batch) in loader.iter().enumerate() {
            if args.steps.is_some_and(|s| step >= s) {
                break;
            }
            if epoch == 0
                && step == WARMUP
                && let Trained::Ddp(d) = &trained
            {
                d.reset_stats();
            }
            let batch = batch?;
            let start = Instant::now();
            let loss = mnist::train_step(ddp, &mut opt, &batch[0], &batch[1])?;
            if epoch > 0 || step >= WARMUP {
                timed += start.elapsed();
                timed_steps += 1;
            }
            if rank == 0 && !args.bench && step % 100 == 0 {
                println!("epoch {epoch} step {step:4}: loss {loss:.4}");
            }
        }
        if rank == 0 && !args.synthetic && !args.bench {
            let test = mnist::load(&args.data, false)?;
            let eval = mnist::evaluate(trained.inner(), &test)?;
            println!("epoch {epoch}: test accuracy {:.2}%, loss {:.4}", 100.0 * eval.accuracy, eval.loss);
        }
    }

    let stats = match &trained {
        Trained::Ddp(d) => d.stats(),
        Trained::Plain(_) => Default::default(),
    };
    if rank == 0 && args.bench && timed_steps > 0 {
        let step_s = timed.as_secs_f64() / timed_steps as f64;
        let steps = stats.steps.max(1) as f64;
        println!(
            "ranks={world} model={} batch_per_rank={} step_ms={:.3} samples_per_s={:.1} allreduce_ms_per_step={:.3} \
             exposed_ms_per_step={:.3} hidden_fraction={:.3} buckets={} mb_per_step={:.3} shared_memory={}",
            args.model,
            args.batch_size,
            step_s * 1e3,
            (world * args.batch_size) as f64 / step_s,
            stats.all_reduce_time.as_secs_f64() * 1e3 / steps,
            stats.exposed_wait.as_secs_f64() * 1e3 / steps,
            stats.hidden_fraction(),
            stats.buckets,
            stats.bytes_reduced as f64 / steps / 1e6,
            u8::from(shared_memory),
        );
    }
    if rank == 0 && !args.bench {
        std::fs::create_dir_all(&args.out).map_err(|e| ember::Error::io(&args.out, e))?;
        let path = args.out.join(format!("mnist_ddp_{}.safetensors", args.model));
        trained.inner().save(&path)?;
        println!("saved {}", path.display());
    }
    Ok(())
}
