//! Peak memory of a deep MLP training step, plain and with gradient checkpointing every 4
//! layers: 32 layers of `relu(h @ W + b)`, 1024 wide, batch 256 (or `--batch N`), f32.
//!
//! The peak is `memory_stats().peak_bytes` after `reset_peak()`, taken right before the
//! step. Gradients are allocated by a first step and then kept, zeroed in place (like
//! PyTorch's `zero_grad(set_to_none=False)`), so the step's peak above the live bytes at its
//! start is what the step itself adds: its activations and transient gradients. The
//! absolute peak (with the 128 MiB of weights and 128 MiB of gradients) is printed too.
//!
//! `cargo run --release -p ember-autograd --example checkpoint_memory [-- --batch N]`

use ember_autograd::Var;
use ember_tensor::storage::{memory_stats, reset_peak};
use ember_tensor::{DType, Result, Tensor};
use std::time::Instant;

const DEPTH: usize = 32;
const WIDTH: usize = 1024;
const DEFAULT_BATCH: usize = 256;
const EVERY: usize = 4;

fn segment(ws: &[Var], bs: &[Var], h: &Var) -> Result<Var> {
    let mut h = h.clone();
    for (w, b) in ws.iter().zip(bs) {
        h = h.matmul(w)?.add(b)?.relu();
    }
    Ok(h)
}

fn forward(ws: &[Var], bs: &[Var], x: &Var, checkpointed: bool) -> Result<Var> {
    if !checkpointed {
        return segment(ws, bs, x);
    }
    let mut h = x.clone();
    for start in (0..ws.len()).step_by(EVERY) {
        let (w, b) = (ws[start..start + EVERY].to_vec(), bs[start..start + EVERY].to_vec());
        h = h.checkpoint(move |h| segment(&w, &b, h))?;
    }
    Ok(h)
}

/// Runs one step; returns (peak above the start, absolute peak, seconds).
fn step(ws: &[Var], bs: &[Var], x: &Var, checkpointed: bool) -> Result<(usize, usize, f64)> {
    for p in ws.iter().chain(bs) {
        if let Some(g) = p.grad() {
            g.zero_()?;
        }
    }
    let base = memory_stats().live_bytes;
    reset_peak();
    let t = Instant::now();
    forward(ws, bs, x, checkpointed)?.mean_all().backward()?;
    let secs = t.elapsed().as_secs_f64();
    let peak = memory_stats().peak_bytes;
    Ok((peak - base, peak, secs))
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The `--batch N` argument, if given.
fn batch_arg() -> Result<usize> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == "--batch") {
        Some(i) => args
            .get(i + 1)
            .and_then(|n| n.parse().ok())
            .filter(|&n: &usize| n > 0)
            .ok_or_else(|| ember_tensor::Error::invalid("checkpoint_memory", "--batch takes a positive number")),
        None => Ok(DEFAULT_BATCH),
    }
}

fn main() -> Result<()> {
    let batch = batch_arg()?;
    ember_tensor::manual_seed(0);
    let scale = (2.0 / WIDTH as f64).sqrt();
    let ws: Vec<Var> = (0..DEPTH)
        .map(|_| Tensor::randn([WIDTH, WIDTH]).map(|t| Var::param(t.mul_scalar(scale))))
        .collect::<Result<_>>()?;
    let bs: Vec<Var> = (0..DEPTH).map(|_| Tensor::zeros([WIDTH], DType::F32).map(Var::param)).collect::<Result<_>>()?;
    let x = Var::new(Tensor::randn([batch, WIDTH])?);
    println!(
        "MLP: {DEPTH} layers of relu(h @ W + b), width {WIDTH}, batch {batch}, f32; checkpoint every {EVERY} layers"
    );
    // Warm-up: allocates the gradients and fills the buffer pool.
    step(&ws, &bs, &x, false)?;
    step(&ws, &bs, &x, true)?;
    let mut results = Vec::new();
    for checkpointed in [false, true] {
        let runs: Vec<(usize, usize, f64)> = (0..3).map(|_| step(&ws, &bs, &x, checkpointed)).collect::<Result<_>>()?;
        let (above, absolute) = (runs[0].0, runs[0].1);
        let mut times: Vec<f64> = runs.iter().map(|r| r.2).collect();
        times.sort_by(f64::total_cmp);
        let label = if checkpointed { "checkpointed" } else { "plain" };
        println!(
            "{label:>12}: step peak above resident {:8.1} MiB   absolute peak {:8.1} MiB   step time {:6.1} ms",
            mib(above),
            mib(absolute),
            times[1] * 1e3
        );
        results.push((above, absolute, times[1]));
    }
    let (plain, ck) = (results[0], results[1]);
    println!(
        "checkpointing: step peak -{:.0}% (absolute -{:.0}%), time x{:.2}",
        100.0 * (1.0 - ck.0 as f64 / plain.0 as f64),
        100.0 * (1.0 - ck.1 as f64 / plain.1 as f64),
        ck.2 / plain.2
    );
    Ok(())
}
