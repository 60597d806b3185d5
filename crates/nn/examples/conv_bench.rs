//! Convolution layer speed on ResNet-like shapes: a `Conv2d(c, c, 3, padding=1)` with bias
//! on a batch of 8, forward and forward + backward (input, weight and bias gradients), at 2
//! threads. The counterpart of tools/bench/conv_torch.py; tools/bench/conv_compare.sh runs
//! both and compares.
//!
//! Prints one line per shape, the median of repeated runs in milliseconds, and how many
//! large allocations after the warm-up the buffer pool could not serve (0: every step
//! reuses the blocks of the step before):
//!
//!     c=64 hw=56 forward_ms=... forward_backward_ms=... pool_misses=0
//!
//! With `--lenet` it measures LeNet-5's two convolutions instead, on a batch of 64:
//! `Conv2d(1, 6, 5)` on 28x28 and `Conv2d(6, 16, 5)` on 12x12 (small images,
//! where copying windows costs as much as the products). `--threads N` sets the threads,
//! `--reps N` the measured repetitions (default 9).
//!
//! Run: `cargo run --release -p ember-nn --example conv_bench [-- --lenet]`, or on LibTorch
//! `cargo run --release -p ember-nn --features ember-tensor/libtorch --example conv_bench --
//! --device torch-cpu`.

use ember_autograd::Var;
use ember_nn::{Conv2d, Conv2dOptions, Module};
use ember_tensor::storage::memory_stats;
use ember_tensor::{Device, Error, Result, Tensor, manual_seed};
use std::time::Instant;

const WARMUP: usize = 2;

/// One measured layer: batch, input and output channels, kernel, padding, input size.
struct Shape {
    batch: usize,
    c_in: usize,
    c_out: usize,
    kernel: usize,
    padding: usize,
    hw: usize,
}

/// ResNet's second and third stages: `Conv2d(c, c, 3, padding=1)` on a batch of 8.
const RESNET: [Shape; 2] = [
    Shape { batch: 8, c_in: 64, c_out: 64, kernel: 3, padding: 1, hw: 56 },
    Shape { batch: 8, c_in: 128, c_out: 128, kernel: 3, padding: 1, hw: 28 },
];

/// LeNet-5's convolutions on a batch of 64.
const LENET: [Shape; 2] = [
    Shape { batch: 64, c_in: 1, c_out: 6, kernel: 5, padding: 0, hw: 28 },
    Shape { batch: 64, c_in: 6, c_out: 16, kernel: 5, padding: 0, hw: 12 },
];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The device `--device` names (default `cpu`), checked to be available.
fn device_arg(args: &[String]) -> Result<Device> {
    let Some(name) = args.iter().position(|a| a == "--device").map(|i| args.get(i + 1)) else {
        return Ok(Device::Cpu);
    };
    let name = name.ok_or_else(|| Error::invalid("conv_bench", "--device needs a value"))?;
    let device: Device = name.parse().map_err(|e| Error::invalid("conv_bench", format!("--device: {e}")))?;
    device.check_available().map_err(|e| Error::invalid("conv_bench", format!("--device {device}: {e}")))?;
    Ok(device)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str, default: usize| {
        args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)?.parse().ok()).unwrap_or(default)
    };
    let (threads, reps) = (flag("--threads", 2), flag("--reps", 9));
    let shapes = if args.iter().any(|a| a == "--lenet") { &LENET } else { &RESNET };
    let device = device_arg(&args)?;
    ember_tensor::threading::set_num_threads(threads)?;
    manual_seed(0);
    for &Shape { batch, c_in, c_out, kernel, padding, hw } in shapes {
        let conv = Conv2d::with_options(c_in, c_out, kernel, Conv2dOptions::default().padding(padding))?;
        conv.to_device(device)?;
        let x = Var::param(Tensor::randn([batch, c_in, hw, hw])?.to_device(device)?);
        let y = conv.forward(&x)?;
        let gy = Tensor::randn(y.shape().dims())?.to_device(device)?;
        let (mut forward, mut total) = (vec![], vec![]);
        let mut misses = 0;
        for rep in 0..WARMUP + reps {
            if rep == WARMUP {
                misses = memory_stats().pool_misses;
            }
            let start = Instant::now();
            let y = conv.forward(&x)?;
            let forwarded = start.elapsed().as_secs_f64();
            y.backward_with(Some(&gy), false)?;
            let done = start.elapsed().as_secs_f64();
            // Gradients are set to none each step (PyTorch's zero_grad(set_to_none=True)).
            x.zero_grad();
            conv.zero_grad();
            if rep >= WARMUP {
                forward.push(forwarded);
                total.push(done);
            }
        }
        println!(
            "c={c_in}->{c_out} k={kernel} hw={hw} forward_ms={:.3} forward_backward_ms={:.3} pool_misses={}",
            median(forward) * 1e3,
            median(total) * 1e3,
            memory_stats().pool_misses - misses
        );
    }
    Ok(())
}
