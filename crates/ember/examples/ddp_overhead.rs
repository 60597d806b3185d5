//! The cost of `DistributedDataParallel` itself, for `tools/bench/ddp_overhead.sh`: the
//! quick-start MLP (784-256-128-10) and CNN trained with Adam on random MNIST-shaped
//! batches, plain and wrapped in DDP over a one-rank `LocalGroup` (whose all-reduce has
//! nothing to combine), in alternating windows of `--steps` steps.
//!
//! Each set times `--steps` steps of each configuration, cut into `--slices` slices that
//! alternate between the two (DDP first in odd slices of odd sets), and prints
//! `set=<n> model=<m> plain_samples_per_s=<x> ddp_samples_per_s=<y> ratio=<y/x>`; the
//! script takes the minimum and median ratio. The slices are there because the shared host
//! changes speed for seconds at a time (one vCPU or two cores): one window of each, back to
//! back, put one configuration in a slow phase and the other in a fast one often enough to
//! move a set's ratio by 20%, while alternating slices share every phase between both. `--only plain|ddp` instead runs that one
//! configuration for `--steps` steps after the warm-up and prints nothing, for counting
//! instructions per step under callgrind (two step counts, subtracted).
//!
//! ```text
//! cargo run --release --features distributed --example ddp_overhead -- [--model mlp|cnn]
//!     [--batch 128] [--steps 40] [--sets 3] [--slices 1] [--warmup 5] [--only plain|ddp]
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
    /// Alternating slices each set's windows are cut into.
    #[arg(long, default_value_t = 1)]
    slices: usize,
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

    /// Seconds taken by `n` steps.
    fn timed(&mut self, n: usize, data: &[(Tensor, Tensor)], step: &mut usize) -> Result<f64> {
        let start = Instant::now();
        self.steps(n, data, step)?;
        Ok(start.elapsed().as_secs_f64())
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
    let slices = args.slices.clamp(1, args.steps.max(1));
    for set in 1..=args.sets {
        let (mut plain_s, mut ddp_s, mut done) = (0.0, 0.0, 0);
        for slice in 0..slices {
            // Slices differ by at most one step when `steps` does not divide evenly.
            let n = (args.steps * (slice + 1)) / slices - done;
            done += n;
            // DDP first in odd slices of odd sets (as tools/bench/sets.py reports a set's order).
            if (slice + set) % 2 == 1 {
                ddp_s += ddp.timed(n, &data, &mut ddp_step)?;
                plain_s += plain.timed(n, &data, &mut plain_step)?;
            } else {
                plain_s += plain.timed(n, &data, &mut plain_step)?;
                ddp_s += ddp.timed(n, &data, &mut ddp_step)?;
            }
        }
        let samples = (args.steps * args.batch) as f64;
        let (p, d) = (samples / plain_s, samples / ddp_s);
        println!(
            "set={set} model={} plain_samples_per_s={p:.1} ddp_samples_per_s={d:.1} ratio={:.4}",
            args.model,
            d / p
        );
    }
    Ok(())
}
