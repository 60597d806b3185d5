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
//! Run: `cargo run --release -p ember-nn --example conv_bench`.

use ember_autograd::Var;
use ember_nn::{Conv2d, Conv2dOptions, Module};
use ember_tensor::storage::memory_stats;
use ember_tensor::{Result, Tensor, manual_seed};
use std::time::Instant;

const BATCH: usize = 8;
const WARMUP: usize = 2;
const REPS: usize = 9;
/// (channels, height and width): ResNet's second and third stages.
const SHAPES: [(usize, usize); 2] = [(64, 56), (128, 28)];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<()> {
    ember_tensor::threading::set_num_threads(2)?;
    manual_seed(0);
    for (c, hw) in SHAPES {
        let conv = Conv2d::with_options(c, c, 3, Conv2dOptions::default().padding(1))?;
        let x = Var::param(Tensor::randn([BATCH, c, hw, hw])?);
        let gy = Tensor::randn([BATCH, c, hw, hw])?;
        let (mut forward, mut total) = (vec![], vec![]);
        let mut misses = 0;
        for rep in 0..WARMUP + REPS {
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
            "c={c} hw={hw} forward_ms={:.3} forward_backward_ms={:.3} pool_misses={}",
            median(forward) * 1e3,
            median(total) * 1e3,
            memory_stats().pool_misses - misses
        );
    }
    Ok(())
}
