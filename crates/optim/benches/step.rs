//! Optimizer step cost on the MNIST MLP's parameters (784-256-128-10, 235,146 f32 values):
//! one `step()` of SGD with momentum, Adam and AdamW, gradients already in place.
//!
//! `cargo bench -p ember-optim --bench step`

use criterion::{Criterion, criterion_group, criterion_main};
use ember_autograd::Var;
use ember_optim::{Adam, AdamW, Optimizer, RmsProp, Sgd};
use ember_tensor::{Tensor, manual_seed};

/// The MLP's weight and bias shapes.
const SHAPES: [&[usize]; 6] = [&[256, 784], &[256], &[128, 256], &[128], &[10, 128], &[10]];

/// Fresh parameters with random gradients attached.
fn params() -> Vec<Var> {
    manual_seed(0);
    SHAPES
        .iter()
        .map(|&s| {
            let p = Var::param(Tensor::randn(s).unwrap().mul_scalar(0.05));
            p.set_grad(Some(Tensor::randn(s).unwrap().mul_scalar(1e-3))).unwrap();
            p
        })
        .collect()
}

fn bench_step(c: &mut Criterion, name: &str, mut opt: impl Optimizer) {
    // The first step allocates the state; measure the steady state.
    opt.step().unwrap();
    c.bench_function(name, |b| b.iter(|| opt.step().unwrap()));
}

fn bench(c: &mut Criterion) {
    let n: usize = SHAPES.iter().map(|s| s.iter().product::<usize>()).sum();
    assert_eq!(n, 235_146);
    bench_step(c, "sgd_momentum_step_235k_f32", Sgd::with_params(params()).lr(0.01).momentum(0.9).build().unwrap());
    bench_step(c, "adam_step_235k_f32", Adam::with_params(params()).lr(1e-3).build().unwrap());
    bench_step(c, "adamw_step_235k_f32", AdamW::with_params(params()).lr(1e-3).build().unwrap());
    bench_step(c, "rmsprop_step_235k_f32", RmsProp::with_params(params()).lr(1e-3).build().unwrap());
}

criterion_group!(benches, bench);
criterion_main!(benches);
