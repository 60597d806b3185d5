//! Training throughput of the quick-start MLP (784-256-128-10, Adam 1e-3, batch 64) on random
//! data, window by window, to show what subnormal numbers cost and what flushing them to zero
//! saves (`docs/design.md`, "Subnormal numbers").
//!
//! The inputs are a pool of uniform `[0, 1)` vectors with random labels, shuffled into batches
//! as the quick start does. The model cannot learn them, many hidden units die, and Adam's
//! averages of the dead units' weights (whose gradients are exactly zero) decay into the
//! subnormal range after several hundred steps. Each window prints its samples per second and
//! how many parameter and optimizer-state values are subnormal at its end.
//!
//! ```text
//! cargo run --release --example subnormal_probe -- [--flush on|off|default] [--steps 5000]
//!     [--window 1000] [--pool 8192] [--batch 64] [--threads 2] [--seed 0]
//! ```

use clap::{Parser, ValueEnum};
use ember::mnist::{self, Data};
use ember::nn::Module;
use ember::optim::{Adam, AdamConfig, Optimizer};
use ember::tensor::threading;
use ember::{DType, Result, Tensor};
use std::time::Instant;

#[derive(Parser)]
struct Args {
    /// Whether kernels flush subnormals to zero; `default` keeps ember's default (or
    /// `EMBER_FLUSH_DENORMAL`).
    #[arg(long, value_enum, default_value_t = Flush::Default)]
    flush: Flush,
    /// Optimisation steps in all.
    #[arg(long, default_value_t = 5000)]
    steps: usize,
    /// Steps per reported window.
    #[arg(long, default_value_t = 1000)]
    window: usize,
    /// Random samples in the pool the batches are drawn from.
    #[arg(long, default_value_t = 8192)]
    pool: usize,
    /// Samples per step.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Worker threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Seed of the global generator (data, weights, shuffling).
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

#[derive(Clone, Copy, ValueEnum)]
enum Flush {
    On,
    Off,
    Default,
}

/// How many of the tensor's values are subnormal.
fn subnormals(t: &Tensor) -> Result<usize> {
    Ok(t.to_dtype(DType::F32).contiguous().to_vec::<f32>()?.iter().filter(|v| v.is_subnormal()).count())
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.steps == 0 || args.window == 0 || args.batch == 0 || args.pool == 0 {
        return Err(ember::Error::invalid("subnormal_probe", "counts must be positive"));
    }
    threading::set_num_threads(args.threads)?;
    match args.flush {
        Flush::On => {
            if !threading::set_flush_denormal(true) {
                println!("this processor cannot flush subnormals; running without");
            }
        }
        Flush::Off => {
            threading::set_flush_denormal(false);
        }
        Flush::Default => {}
    }
    println!("flush_denormal={} threads={} batch={}", threading::flush_denormal(), args.threads, args.batch);

    ember::manual_seed(args.seed);
    let images = Tensor::rand([args.pool, mnist::LAYERS[0]])?;
    let labels = Tensor::rand([args.pool])?.mul_scalar(10.0).floor().to_dtype(DType::I64);
    let data = Data { images, labels };
    let model = mnist::mlp()?;
    let mut opt = Adam::new(model.parameters(), AdamConfig { lr: 1e-3, ..Default::default() })?;

    // Each `iter()` walks the next epoch in a new order.
    let loader = mnist::loader(&data, args.batch, args.seed)?;
    let mut step = 0usize;
    let mut window_start = Instant::now();
    let mut window_steps = 0usize;
    'run: loop {
        for batch in loader.iter() {
            let batch = batch?;
            let [x, y] = batch.as_slice() else {
                return Err(ember::Error::invalid("subnormal_probe", "expected (images, labels) batches"));
            };
            mnist::train_step(&model, &mut opt, x, y)?;
            step += 1;
            window_steps += 1;
            if window_steps == args.window || step == args.steps {
                let secs = window_start.elapsed().as_secs_f64();
                let mut in_params = 0;
                for p in model.parameters() {
                    in_params += subnormals(&p.value())?;
                }
                let mut in_state = 0;
                for t in opt.state_dict().tensors.values() {
                    in_state += subnormals(t)?;
                }
                println!(
                    "steps {:>6}-{:<6} {:>9.0} samples/s  subnormal: params {in_params}, optimizer state {in_state}",
                    step + 1 - window_steps,
                    step,
                    (window_steps * args.batch) as f64 / secs,
                );
                if step == args.steps {
                    break 'run;
                }
                window_steps = 0;
                window_start = Instant::now();
            }
        }
    }
    Ok(())
}
