//! `BatchNorm2d` training speed on the shapes the LeNet and ResNet benchmarks train through:
//! forward + backward (input, weight and bias gradients) at 2 threads, the median of repeated
//! runs in milliseconds, one line per shape:
//!
//!     shape=[64, 6, 24, 24] forward_ms=... forward_backward_ms=...
//!
//! The PyTorch counterpart is tools/bench/batch_norm_torch.py.
//!
//! Run: `cargo run --release -p ember-nn --example batch_norm_bench`.

use ember_autograd::Var;
use ember_nn::{BatchNorm2d, Module};
use ember_tensor::{Result, Tensor, manual_seed};
use std::time::Instant;

const WARMUP: usize = 3;
const REPS: usize = 21;
const SHAPES: [[usize; 4]; 2] = [[64, 6, 24, 24], [8, 64, 56, 56]];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<()> {
    ember_tensor::threading::set_num_threads(2)?;
    manual_seed(0);
    for shape in SHAPES {
        let bn = BatchNorm2d::new(shape[1])?;
        let x = Var::param(Tensor::randn(shape)?);
        let gy = Tensor::randn(shape)?;
        let (mut forward, mut total) = (vec![], vec![]);
        for rep in 0..WARMUP + REPS {
            let t0 = Instant::now();
            let y = bn.forward(&x)?;
            let t1 = Instant::now();
            y.backward_with(Some(&gy), false)?;
            let t2 = Instant::now();
            x.zero_grad();
            bn.zero_grad();
            if rep >= WARMUP {
                forward.push((t1 - t0).as_secs_f64() * 1e3);
                total.push((t2 - t0).as_secs_f64() * 1e3);
            }
        }
        println!("shape={shape:?} forward_ms={:.3} forward_backward_ms={:.3}", median(forward), median(total));
    }
    Ok(())
}
