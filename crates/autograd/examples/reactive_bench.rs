//! Reactive re-execution costs (docs/design.md, 'Value versions and re-execution'), printed
//! as medians:
//!
//! - a graph of 1,000 independent branches (`tanh(x_i @ w_i)` summed, then all branches
//!   stacked and summed): the full forward, and the re-forward after changing one branch's
//!   input;
//! - a re-request when nothing changed, for that graph and for a chain of 100,000 nodes.
//!
//! `cargo run --release -p ember-autograd --example reactive_bench`

use ember_autograd::Var;
use ember_tensor::{Result, Tensor};
use std::time::Instant;

const BRANCHES: usize = 1000;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() -> Result<()> {
    ember_tensor::threading::set_num_threads(2)?;
    ember_tensor::manual_seed(0);
    let n = 32;
    let xs: Vec<Var> = (0..BRANCHES).map(|_| Tensor::randn([n, n]).map(Var::new)).collect::<Result<_>>()?;
    let ws: Vec<Var> = (0..BRANCHES).map(|_| Tensor::randn([n, n]).map(Var::param)).collect::<Result<_>>()?;
    let build = || -> Result<Var> {
        let branches: Vec<Var> =
            xs.iter().zip(&ws).map(|(x, w)| Ok(x.matmul(w)?.tanh().sum_all())).collect::<Result<_>>()?;
        let refs: Vec<&Var> = branches.iter().collect();
        Ok(Var::stack(&refs, 0)?.sum_all())
    };

    // A full forward: building (and so computing) every branch.
    let mut full = Vec::new();
    for _ in 0..15 {
        let t = Instant::now();
        let out = build()?;
        full.push(t.elapsed().as_secs_f64());
        drop(out);
    }
    let out = build()?;

    // Changing one branch's input: only that branch, the stack and the sum recompute.
    let mut partial = Vec::new();
    for k in 0..31 {
        xs[k % BRANCHES].set_value(Tensor::randn([n, n])?)?;
        let t = Instant::now();
        out.forward()?;
        partial.push(t.elapsed().as_secs_f64());
    }

    // Nothing changed.
    let mut idle = Vec::new();
    for _ in 0..1001 {
        let t = Instant::now();
        out.forward()?;
        idle.push(t.elapsed().as_secs_f64());
    }

    let x = Var::new(Tensor::scalar(0.0f32));
    let mut chain = x.clone();
    for _ in 0..100_000 {
        chain = chain.add_scalar(1.0);
    }
    chain.forward()?;
    let mut idle_chain = Vec::new();
    for _ in 0..1001 {
        let t = Instant::now();
        chain.forward()?;
        idle_chain.push(t.elapsed().as_secs_f64());
    }

    let (f, p) = (median(full), median(partial));
    println!(
        "branches={BRANCHES} full_forward_ms={:.3} one_branch_reforward_ms={:.4} ratio={:.2}%",
        f * 1e3,
        p * 1e3,
        p / f * 100.0
    );
    println!(
        "unchanged_rerequest_us: branches_graph={:.3} chain_100k={:.3}",
        median(idle) * 1e6,
        median(idle_chain) * 1e6
    );
    Ok(())
}
