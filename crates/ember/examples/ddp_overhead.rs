//! The cost of `DistributedDataParallel` itself, for `tools/bench/ddp_overhead.sh`: the
//! quick-start MLP (784-256-128-10) and CNN trained with Adam on random MNIST-shaped
//! batches, plain and wrapped in DDP over a one-rank `LocalGroup` (whose all-reduce has
//! nothing to combine), in alternating windows of `--steps` steps.
//!
//! Each set times one window of each (the DDP window first in odd sets) and prints
//! `set=<n> model=<m> plain_samples_per_s=<x> ddp_samples_per_s=<y> ratio=<y/x>`; the
//! script takes the minimum and median ratio. `--only plain|ddp` instead runs that one
//! configuration for `--steps` steps after the warm-up and prints nothing, for counting
//! instructions per step under callgrind (two step counts, subtracted).
//!
//! ```text
//! cargo run --release --features distributed --example ddp_overhead -- [--model mlp|cnn]
//!     [--batch 128] [--steps 40] [--sets 3] [--warmup 5] [--only plain|ddp]
//! ```

use clap::Parser;
use ember::autograd::Var;
use ember::distributed::{DistributedDataParallel, LocalGroup};
use ember::mnist;
use ember::nn::{CrossEntropyOptions, Module, Sequential, cross_entropy};
use ember::optim::{Adam, AdamConfig, Optimizer};
use ember::{Result, Tensor};
use std::sync::Arc;
use std::time::Instant;

#[derive(Parser)]
struct Args {
    /// `mlp` (784-256-128-10) or `cnn`.
    #[arg(long, default_value = "mlp")]
    model: String,
    /// Samples per step.
    #[arg(long, default_value_t = 128)]
    batch: usize,
    /// Steps per timed window.
    #[arg(long, default_value_t = 40)]
    steps: usize,
    /// Sets of one plain and one DDP window.
    #[arg(long, default_value_t = 3)]
    sets: usize,
    /// Untimed steps of each configuration first.
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// Run only `plain` or `ddp`, untimed (for callgrind).
    #[arg(long)]
    only: Option<String>,
}

/// Random batches the steps cycle through (so that data loading is not measured).
const BATCHES: usize = 4;

fn build(model: &str) -> Result<Sequential> {
    match model {
        "mlp" => mnist::mlp(),
        "cnn" => mnist::cnn(),
        other => Err(ember::Error::invalid("ddp_overhead", format!("unknown --model {other}: mlp or cnn"))),
    }
}

/// One training configuration: a model and its optimizer.
struct Run {
    model: Box<dyn Module>,
    opt: Adam,
}

impl Run {
    fn new(model: Box<dyn Module>) -> Result<Run> {
        let opt = Adam::new(model.parameters(), AdamConfig { lr: 1e-3, ..Default::default() })?;
        Ok(Run { model, opt })
    }

    fn steps(&mut self, n: usize, data: &[(Tensor, Tensor)], step: &mut usize) -> Result<()> {
        for _ in 0..n {
            let (x, y) = &data[*step % data.len()];
            *step += 1;
            let logits = self.model.forward(&Var::new(x.clone()))?;
            let loss = cross_entropy(&logits, y, CrossEntropyOptions::default())?;
            self.opt.zero_grad();
            loss.backward()?;
            self.opt.step()?;
        }
        Ok(())
    }

    /// Samples per second over a window of `n` steps.
    fn window(&mut self, n: usize, batch: usize, data: &[(Tensor, Tensor)], step: &mut usize) -> Result<f64> {
        let start = Instant::now();
        self.steps(n, data, step)?;
        Ok((n * batch) as f64 / start.elapsed().as_secs_f64())
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    ember::manual_seed(0);
    let data: Vec<(Tensor, Tensor)> = (0..BATCHES)
        .map(|_| {
            let labels: Vec<i64> = (0..args.batch as i64).map(|i| i % 10).collect();
            Ok((Tensor::randn([args.batch, 784])?, Tensor::from_vec(labels, [args.batch])?))
        })
        .collect::<Result<_>>()?;
    let group = LocalGroup::new_world(1)?
        .pop()
        .ok_or_else(|| ember::Error::invalid("ddp_overhead", "a one-rank group has one rank"))?;
    let mut plain = Run::new(Box::new(build(&args.model)?))?;
    let mut ddp = Run::new(Box::new(DistributedDataParallel::new(build(&args.model)?, Arc::new(group))?))?;
    let (mut plain_step, mut ddp_step) = (0, 0);

    match args.only.as_deref() {
        Some("plain") => return plain.steps(args.warmup + args.steps, &data, &mut plain_step),
        Some("ddp") => return ddp.steps(args.warmup + args.steps, &data, &mut ddp_step),
        Some(other) => return Err(ember::Error::invalid("ddp_overhead", format!("--only {other}: plain or ddp"))),
        None => {}
    }
    plain.steps(args.warmup, &data, &mut plain_step)?;
    ddp.steps(args.warmup, &data, &mut ddp_step)?;
    for set in 1..=args.sets {
        // DDP first in odd sets, as tools/bench/sets.py reports it.
        let (p, d) = if set % 2 == 1 {
            let d = ddp.window(args.steps, args.batch, &data, &mut ddp_step)?;
            (plain.window(args.steps, args.batch, &data, &mut plain_step)?, d)
        } else {
            let p = plain.window(args.steps, args.batch, &data, &mut plain_step)?;
            (p, ddp.window(args.steps, args.batch, &data, &mut ddp_step)?)
        };
        println!(
            "set={set} model={} plain_samples_per_s={p:.1} ddp_samples_per_s={d:.1} ratio={:.4}",
            args.model,
            d / p
        );
    }
    Ok(())
}
