//! Per-op overhead of the autograd engine: 1000 chained `y = y * 1.0001 + 0.0001` (2000
//! ops) on a 1-element and a 64-element `Var`: the forward with recording, the backward,
//! the forward under `no_grad`, and the teardown (dropping the graph after backward). Each
//! measurement excludes the others, as `tools/bench/autograd_torch.py` does for PyTorch:
//! divide the times by 2000 for µs per op.
//!
//! `cargo bench -p ember-autograd`

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use ember_autograd::{Var, no_grad};
use ember_tensor::{DType, Tensor};
use std::hint::black_box;

const STEPS: usize = 1000;

fn chain(x: &Var) -> Var {
    let mut y = x.clone();
    for _ in 0..STEPS {
        y = y.mul_scalar(1.0001).add_scalar(0.0001);
    }
    y
}

fn bench(c: &mut Criterion) {
    ember_tensor::threading::set_num_threads(2).ok();
    for n in [1usize, 64] {
        let x = Var::param(Tensor::ones([n], DType::F32).unwrap());
        let mut g = c.benchmark_group(format!("chain{STEPS}x2_numel{n}"));
        // One graph at a time, as in training: criterion's batched modes would keep hundreds
        // alive and measure the system handing out fresh pages instead. The graph is dropped
        // after the clock stops; teardown is measured on its own below.
        let one = BatchSize::PerIteration;
        g.bench_function("forward_recorded", |b| b.iter_batched(|| (), |()| chain(&x), one));
        g.bench_function("backward", |b| {
            b.iter_batched(
                || chain(&x).sum_all(),
                |y| {
                    y.backward().ok();
                    x.zero_grad();
                    // Returned, so that criterion drops the graph outside the measurement.
                    y
                },
                one,
            )
        });
        g.bench_function("forward_no_grad", |b| b.iter(|| black_box(no_grad(|| chain(&x)))));
        g.bench_function("teardown", |b| {
            b.iter_batched(
                || {
                    let y = chain(&x).sum_all();
                    y.backward().ok();
                    x.zero_grad();
                    y
                },
                drop,
                one,
            )
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
