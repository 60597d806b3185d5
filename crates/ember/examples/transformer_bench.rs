//! Transformer encoder training speed: 4 `TransformerEncoderLayer`s (d_model 128, 4 heads,
//! feed-forward 512, batch first, dropout 0) over sequences of 64 on a batch of 32, the
//! mean over the sequence, a `Linear(128, 10)` head, cross-entropy, backward and an Adam
//! step, at 2 threads. The counterpart of tools/bench/transformer_torch.py, which takes the
//! same shape options: `--d-model D` (heads D / 32, feed-forward 4 D), `--seq`, `--batch`,
//! `--layers`, and `--reps` (timed steps; tools/bench/transformer_grid.sh sets it per shape);
//! `--threads N` changes the 2 threads.
//!
//! Prints the median step time, the training throughput and the step's activation memory:
//!
//!     transformer step_ms=... samples_per_s=... activation_bytes=...
//!
//! `activation_bytes` is the peak of the live tensor bytes during one more step minus the
//! live bytes before it (the parameters, the previous step's gradients, Adam's state and the
//! batch): what the step itself holds at its fullest (tensors of 4 KiB and more).
//!
//! Run: `cargo run --release --example transformer_bench -- [--amp bf16|f16]` (with
//! `EMBER_PROFILE=1`, also a per-operation profile of one step). With `--amp` the forward
//! pass and the loss run under CPU autocast in that dtype (parameters and Adam in `f32`; no
//! loss scaling, which does not change the step's kernels), as
//! tools/bench/amp_torch.py does with `torch.autocast("cpu", ...)`. `--device D` runs it on
//! another device (default `cpu`; `torch-cpu` needs `--features ember/libtorch`).

mod common;

use clap::Parser;
use common::amp::{Amp, AmpArg};
use ember::autograd::Var;
use ember::nn::{
    CrossEntropyOptions, Linear, Module, TransformerEncoder, TransformerEncoderLayer, TransformerLayerOptions,
    cross_entropy,
};
use ember::optim::{Adam, AdamConfig, Optimizer};
use ember::{Result, Tensor, manual_seed};
use std::time::Instant;

const WARMUP: usize = 3;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Times the Transformer encoder's training step.
#[derive(Parser)]
struct Args {
    /// `--amp bf16|f16`.
    #[command(flatten)]
    amp: AmpArg,
    /// The device: `cpu`, or `torch-cpu` (PyTorch's CPU kernels, the `libtorch` feature).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// The model width; the layers have d_model / 32 heads and a 4 x d_model feed-forward.
    #[arg(long, default_value_t = 128)]
    d_model: usize,
    /// Tokens per sequence.
    #[arg(long, default_value_t = 64)]
    seq: usize,
    /// Sequences per step.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Encoder layers.
    #[arg(long, default_value_t = 4)]
    layers: usize,
    /// Timed steps (after 3 untimed ones); the median is reported.
    #[arg(long, default_value_t = 15)]
    reps: usize,
    /// Worker threads (1 for a per-operation profile against PyTorch's on one thread).
    #[arg(long, default_value_t = 2)]
    threads: usize,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let device: ember::Device =
        args.device.parse().map_err(|e| ember::Error::invalid("transformer_bench", format!("--device: {e}")))?;
    device
        .check_available()
        .map_err(|e| ember::Error::invalid("transformer_bench", format!("--device {device}: {e}")))?;
    let (batch, seq, d_model, layers) = (args.batch, args.seq, args.d_model, args.layers);
    // PyTorch's counterpart keeps the head width at 32 (4 heads at d_model 128).
    let heads = (d_model / 32).max(1);
    // The scaler is left out: the timed step is autocast's, as in the PyTorch counterpart.
    let amp = Amp::new(args.amp.amp, device).without_scaler();
    ember::tensor::threading::set_num_threads(args.threads)?;
    manual_seed(0);
    let options =
        TransformerLayerOptions { dim_feedforward: 4 * d_model, dropout: 0.0, batch_first: true, ..Default::default() };
    let encoder =
        TransformerEncoder::new(TransformerEncoderLayer::with_options(d_model, heads, options)?, layers, None)?;
    let head = Linear::new(d_model, 10)?;
    encoder.to_device(device)?;
    head.to_device(device)?;
    let x = Var::new(Tensor::randn([batch, seq, d_model])?.to_device(device)?);
    let y = Tensor::from_vec((0..batch as i64).map(|i| i % 10).collect::<Vec<_>>(), [batch])?.to_device(device)?;
    let params: Vec<Var> = encoder.parameters().into_iter().chain(head.parameters()).collect();
    let mut adam = Adam::new(params, AdamConfig { lr: 1e-4, ..Default::default() })?;
    let step = |adam: &mut Adam| -> Result<()> {
        let loss = amp.run(|| {
            let pooled = encoder.forward(&x)?.mean(1, false)?;
            cross_entropy(&head.forward(&pooled)?, &y, CrossEntropyOptions::default())
        })?;
        adam.zero_grad();
        loss.backward()?;
        adam.step()
    };
    let mut times = Vec::new();
    for rep in 0..WARMUP + args.reps.max(1) {
        let start = Instant::now();
        step(&mut adam)?;
        if rep >= WARMUP {
            times.push(start.elapsed().as_secs_f64());
        }
    }
    if std::env::var_os("EMBER_PROFILE").is_some() {
        let (result, prof) = ember::autograd::profile(|| step(&mut adam));
        result?;
        println!("{}", prof.table());
    }
    let t = median(times);
    let activation = common::amp::activation_bytes(|| step(&mut adam))?;
    println!("transformer step_ms={:.3} samples_per_s={:.0} activation_bytes={activation}", t * 1e3, batch as f64 / t);
    Ok(())
}
