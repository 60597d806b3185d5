//! LSTM training speed: `LSTM(28, 128)` over 28 steps on a batch of 64 (MNIST rows as a
//! sequence), a `Linear(128, 10)` head on the last hidden state, cross-entropy, backward
//! and a plain SGD update, at 2 threads. The counterpart of tools/bench/lstm_torch.py.
//!
//! Prints the median step time and the training throughput:
//!
//!     lstm step_ms=... samples_per_s=...
//!
//! Run: `cargo run --release -p ember-nn --example lstm_bench -- [--hidden H] [--batch B]
//! [--reps R] [--threads N] [--device D]` (defaults 128, 64, 20 timed steps, 2 threads, `cpu`; `torch-cpu` needs
//! `--features ember-tensor/libtorch`; tools/bench/lstm_torch.py takes the same shape options).
//! With `EMBER_PROFILE=1`, also a per-operation profile of one step.

use ember_autograd::{Var, no_grad};
use ember_nn::{CrossEntropyOptions, LSTM, Linear, Module, RnnOptions, cross_entropy};
use ember_tensor::{Device, Error, Result, Tensor, manual_seed};
use std::time::Instant;

const STEPS: usize = 28;
const INPUT: usize = 28;
const WARMUP: usize = 3;

/// The shape and length of the run: `--hidden`, `--batch`, `--reps`, and the worker
/// threads, `--threads` (2 unless given: the comparison's setting).
struct Args {
    hidden: usize,
    batch: usize,
    reps: usize,
    threads: usize,
}

impl Args {
    /// Reads `--hidden H --batch B --reps R --threads N` (any order, each optional).
    fn parse() -> Result<Args> {
        let mut args = Args { hidden: 128, batch: 64, reps: 20, threads: 2 };
        let mut it = std::env::args().skip(1);
        while let Some(flag) = it.next() {
            let slot = match flag.as_str() {
                "--hidden" => &mut args.hidden,
                "--batch" => &mut args.batch,
                "--reps" => &mut args.reps,
                "--threads" => &mut args.threads,
                // Read by `device_arg`.
                "--device" => {
                    it.next();
                    continue;
                }
                _ => {
                    return Err(Error::invalid(
                        "lstm_bench",
                        format!("unknown argument {flag:?} (--hidden, --batch, --reps, --threads, --device)"),
                    ));
                }
            };
            let value = it.next().ok_or_else(|| Error::invalid("lstm_bench", format!("{flag} needs a value")))?;
            *slot = value
                .parse()
                .map_err(|_| Error::invalid("lstm_bench", format!("{flag} takes a positive integer, got {value:?}")))?;
        }
        Ok(args)
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The device `--device` names (default `cpu`), checked to be available.
fn device_arg() -> Result<Device> {
    let args: Vec<String> = std::env::args().collect();
    let Some(name) = args.iter().position(|a| a == "--device").map(|i| args.get(i + 1)) else {
        return Ok(Device::Cpu);
    };
    let name = name.ok_or_else(|| Error::invalid("lstm_bench", "--device needs a value"))?;
    let device: Device = name.parse().map_err(|e| Error::invalid("lstm_bench", format!("--device: {e}")))?;
    device.check_available().map_err(|e| Error::invalid("lstm_bench", format!("--device {device}: {e}")))?;
    Ok(device)
}

fn main() -> Result<()> {
    let Args { hidden, batch, reps, threads } = Args::parse()?;
    let device = device_arg()?;
    ember_tensor::threading::set_num_threads(threads)?;
    manual_seed(0);
    let lstm = LSTM::with_options(INPUT, hidden, RnnOptions::default().batch_first(true))?;
    let head = Linear::new(hidden, 10)?;
    lstm.to_device(device)?;
    head.to_device(device)?;
    let x = Var::new(Tensor::randn([batch, STEPS, INPUT])?.to_device(device)?);
    let y = Tensor::from_vec((0..batch as i64).map(|i| i % 10).collect::<Vec<_>>(), [batch])?.to_device(device)?;
    let params: Vec<Var> = lstm.parameters().into_iter().chain(head.parameters()).collect();
    let mut times = Vec::new();
    for rep in 0..WARMUP + reps.max(1) {
        let start = Instant::now();
        let out = lstm.run(&x, None)?;
        let logits = head.forward(&out.h_n.select(0, 0)?)?;
        let loss = cross_entropy(&logits, &y, CrossEntropyOptions::default())?;
        loss.backward()?;
        no_grad(|| -> Result<()> {
            for p in &params {
                if let Some(g) = p.grad() {
                    p.value().add_scaled_(&g, -0.01)?;
                }
                p.zero_grad();
            }
            Ok(())
        })?;
        if rep >= WARMUP {
            times.push(start.elapsed().as_secs_f64());
        }
    }
    if std::env::var_os("EMBER_PROFILE").is_some() {
        // One more step under the profiler: where the time goes, per operation.
        let (result, prof) = ember_autograd::profile(|| -> Result<()> {
            let out = lstm.run(&x, None)?;
            let logits = head.forward(&out.h_n.select(0, 0)?)?;
            cross_entropy(&logits, &y, CrossEntropyOptions::default())?.backward()
        });
        result?;
        println!("{}", prof.table());
    }
    let step = median(times);
    println!("lstm step_ms={:.3} samples_per_s={:.0}", step * 1e3, batch as f64 / step);
    Ok(())
}
