//! Prints the per-op overhead of recorded forward, backward and no-grad forward on chains
//! of `y = y * 1.0001 + 0.0001`, and of freeing the graph after backward (teardown: dropping
//! the last handle), as medians of repeated runs in µs per op, in the format
//! `tools/bench/autograd_compare.sh` reads.
//!
//! `cargo run --release -p ember-autograd --example overhead`

use ember_autograd::{Var, no_grad};

use ember_tensor::{DType, Tensor};
use std::time::Instant;

const STEPS: usize = 1000;
const OPS: f64 = (2 * STEPS) as f64;

fn chain(x: &Var) -> Var {
    let mut y = x.clone();
    for _ in 0..STEPS {
        y = y.mul_scalar(1.0001).add_scalar(0.0001);
    }
    y
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() -> ember_tensor::Result<()> {
    ember_tensor::threading::set_num_threads(2)?;
    let reps = 41;
    for n in [1usize, 64] {
        let x = Var::param(Tensor::ones([n], DType::F32)?);
        let (mut fwd, mut bwd, mut ng, mut down) = (vec![], vec![], vec![], vec![]);
        for _ in 0..reps {
            let t = Instant::now();
            let y = chain(&x).sum_all();
            fwd.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            y.backward()?;
            bwd.push(t.elapsed().as_secs_f64());
            x.zero_grad();
            let t = Instant::now();
            drop(y);
            down.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            let z = no_grad(|| chain(&x));
            ng.push(t.elapsed().as_secs_f64());
            drop(z);
        }
        let us = |v: Vec<f64>| median(v) / OPS * 1e6;
        println!(
            "numel={n} forward_recorded_us={:.4} backward_us={:.4} forward_no_grad_us={:.4} teardown_us={:.4}",
            us(fwd),
            us(bwd),
            us(ng),
            us(down)
        );
    }
    Ok(())
}
