//! Max pooling speed at the LeNet shapes: `max_pool2d` 2x2 stride 2 of `[N, 6, 24, 24]` and
//! `[N, 16, 8, 8]` for N = 64 and 256 (f32), forward and forward + backward (the input
//! requires grad). Prints the median of repeated runs in milliseconds, in the format of
//! `tools/bench/pool_torch.py`, its PyTorch counterpart:
//!
//!     n=64 c=6 hw=24 forward_ms=... forward_backward_ms=...
//!
//! Run: `cargo run --release -p ember-nn --example pool_bench` (threads: `EMBER_NUM_THREADS`).

use ember_autograd::Var;
use ember_nn::functional as F;
use ember_tensor::{Result, Tensor, manual_seed};
use std::time::Instant;

const WARMUP: usize = 3;
const REPS: usize = 21;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<()> {
    manual_seed(0);
    for (n, c, hw) in [(64, 6, 24), (64, 16, 8), (256, 6, 24), (256, 16, 8)] {
        let x = Var::param(Tensor::randn([n, c, hw, hw])?);
        let gy = Var::new(Tensor::randn([n, c, hw / 2, hw / 2])?);
        let args = F::MaxPoolArgs::new(2);
        let (mut fwd, mut total) = (vec![], vec![]);
        for rep in 0..WARMUP + REPS {
            let start = Instant::now();
            let y = F::max_pool2d(&x, &args)?;
            let forwarded = start.elapsed().as_secs_f64();
            y.mul(&gy)?.sum_all().backward()?;
            let done = start.elapsed().as_secs_f64();
            x.zero_grad();
            if rep >= WARMUP {
                fwd.push(forwarded * 1e3);
                total.push(done * 1e3);
            }
        }
        println!("n={n} c={c} hw={hw} forward_ms={:.3} forward_backward_ms={:.3}", median(fwd), median(total));
    }
    Ok(())
}
