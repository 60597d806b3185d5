//! The LibTorch backend against the CPU backend: random programs of `Backend` calls
//! (`backend_program/`) run on both with the same seeds, and every step's results must
//! agree (exactly for selections, indexing, casts and integers; within the step's bound
//! for float arithmetic, whose rounding and summation order differ), errors included:
//! a call that fails on one backend must fail on the other. `backend_program_coverage.rs`
//! checks that the programs reach every method and op-table row.
//!
//! Needs the `libtorch` feature: `cargo test -p ember-tensor --features libtorch --test
//! libtorch_differential` (see tools/libtorch/setup.sh).

#![cfg(feature = "libtorch")]

mod backend_program;

use backend_program::{Program, Step, Tol};
use ember_tensor::Device;
use ember_tensor::backend::backend_for;
use ember_tensor::backend::cpu::CpuBackend;

fn close(a: f64, b: f64, tol: Tol) -> bool {
    if a.is_nan() || b.is_nan() {
        return a.is_nan() && b.is_nan();
    }
    if a == b {
        return true;
    }
    if a.is_infinite() || b.is_infinite() {
        return false;
    }
    (a - b).abs() <= tol.abs + tol.rel * a.abs().max(b.abs())
}

/// The first disagreement between two steps, in words.
fn disagreement(cpu: &Step, torch: &Step) -> Option<String> {
    let head = format!("{} {:?} ({})", cpu.method, cpu.variant, cpu.what);
    match (&cpu.result, &torch.result) {
        (Err(_), Err(_)) => None,
        (Ok(_), Err(e)) => Some(format!("{head}: only LibTorch fails: {e}")),
        (Err(e), Ok(_)) => Some(format!("{head}: only the CPU fails: {e}")),
        (Ok(a), Ok(b)) => {
            if a.len() != b.len() {
                return Some(format!("{head}: {} results against {}", a.len(), b.len()));
            }
            for (k, (x, y)) in a.iter().zip(b).enumerate() {
                if x.dtype != y.dtype || x.data.len() != y.data.len() {
                    return Some(format!(
                        "{head}: result {k} is {} x{} on the CPU, {} x{} on LibTorch",
                        x.dtype,
                        x.data.len(),
                        y.dtype,
                        y.data.len()
                    ));
                }
                if let Some(i) = (0..x.data.len()).find(|&i| !close(x.data[i], y.data[i], cpu.tol)) {
                    return Some(format!(
                        "{head}: result {k} element {i}: CPU {} LibTorch {} (bound {:?})",
                        x.data[i], y.data[i], cpu.tol
                    ));
                }
            }
            None
        }
    }
}

#[test]
fn libtorch_agrees_with_the_cpu_backend_on_random_programs() -> ember_tensor::Result<()> {
    let torch = backend_for(Device::TorchCpu)?;
    let mut failures = Vec::new();
    let mut steps = 0;
    for seed in 0..12 {
        let mut a = Program::new(&CpuBackend, seed);
        let mut b = Program::new(torch, seed);
        if seed == 0 {
            a.run_each();
            b.run_each();
        } else {
            a.run(30);
            b.run(30);
        }
        if a.steps.len() != b.steps.len() {
            failures.push(format!("seed {seed}: {} steps on the CPU, {} on LibTorch", a.steps.len(), b.steps.len()));
        }
        steps += a.steps.len();
        for (x, y) in a.steps.iter().zip(&b.steps) {
            if x.method != y.method {
                failures.push(format!("seed {seed}: the programs diverged at {} / {}", x.method, y.method));
                break;
            }
            if let Some(d) = disagreement(x, y) {
                failures.push(format!("seed {seed}: {d}"));
            }
        }
    }
    assert!(failures.is_empty(), "{} of {steps} steps disagree:\n{}", failures.len(), failures.join("\n"));
    Ok(())
}
