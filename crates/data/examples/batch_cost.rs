//! What building MNIST batches costs next to a training step.
//!
//! ```sh
//! cargo run --release -p ember-data --example batch_cost [-- path/to/mnist]
//! ```
//!
//! Times loading the training split (checksums included), building one batch of 64 with
//! and without the `u8 -> f32` transform, a whole shuffled epoch of batches, one training
//! step of a 784-128-10 perceptron (forward, backward, SGD update), and an epoch of such
//! steps fed by the loader without and with prefetch.

use ember_autograd::Var;
use ember_data::{DataLoader, Dataset, Mnist, Split, TensorDataset, transform};
use ember_tensor::{DType, Result, Tensor, manual_seed};
use std::time::{Duration, Instant};

const BATCH: usize = 64;

fn main() -> Result<()> {
    let dir =
        std::env::args().nth(1).unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/mnist").into());
    manual_seed(0);

    let start = Instant::now();
    let (images, labels) = Mnist::load(&dir, Split::Train)?;
    println!("load + verify the training split: {:>10.1} ms", ms(start.elapsed()));
    let dataset = TensorDataset::new(vec![images, labels])?;
    let to_f32 = transform::images_to_f32(true);

    // Random batches, as a shuffled epoch draws them.
    let order = Tensor::randperm(dataset.len())?.to_vec::<i64>()?;
    let batches: Vec<Vec<usize>> = order.chunks_exact(BATCH).map(|c| c.iter().map(|&i| i as usize).collect()).collect();
    let per_batch = |f: &dyn Fn(&[usize]) -> Result<Vec<Tensor>>| -> Result<Duration> {
        let start = Instant::now();
        for b in &batches {
            f(b)?;
        }
        Ok(start.elapsed() / batches.len() as u32)
    };
    let raw = per_batch(&|b| dataset.get_batch(b))?;
    println!("batch of {BATCH}, u8 [64, 28, 28]:      {:>10.1} us", us(raw));
    let converted = per_batch(&|b| to_f32(dataset.get_batch(b)?))?;
    println!("batch of {BATCH}, f32 [64, 784]:         {:>10.1} us", us(converted));

    let loader = |prefetch| {
        DataLoader::builder(dataset.clone())
            .batch_size(BATCH)
            .shuffle(true)
            .seed(1)
            .prefetch(prefetch)
            .transform(transform::images_to_f32(true))
            .build()
    };
    let start = Instant::now();
    let mut n = 0;
    for batch in &loader(0)? {
        n += batch?[0].shape()[0];
    }
    println!("epoch of batches alone ({n} samples): {:>8.1} ms", ms(start.elapsed()));

    let model = Mlp::new()?;
    let first = to_f32(dataset.get_batch(&batches[0])?)?;
    for _ in 0..20 {
        model.step(&first[0], &first[1])?; // warm the buffer pool and the thread pool
    }
    let steps = 300;
    let start = Instant::now();
    let mut loss = 0.0;
    for b in batches.iter().take(steps) {
        let batch = to_f32(dataset.get_batch(b)?)?;
        loss = model.step(&batch[0], &batch[1])?;
    }
    let step = start.elapsed() / steps as u32;
    println!("training step (784-128-10 MLP, SGD): {:>10.1} us (loss {loss:.3}; includes its batch)", us(step));
    println!("batch share of a step:               {:>10.1} %", 100.0 * converted.as_secs_f64() / step.as_secs_f64());

    for prefetch in [0, 2] {
        let start = Instant::now();
        for batch in &loader(prefetch)? {
            let batch = batch?;
            model.step(&batch[0], &batch[1])?;
        }
        println!("training epoch, prefetch {prefetch}:          {:>10.1} ms", ms(start.elapsed()));
    }
    Ok(())
}

/// A two-layer perceptron trained with plain SGD.
struct Mlp {
    params: [Var; 4],
}

impl Mlp {
    fn new() -> Result<Mlp> {
        Ok(Mlp {
            params: [
                Var::param(Tensor::randn([784, 128])?.mul_scalar(0.05)),
                Var::param(Tensor::zeros([128], DType::F32)?),
                Var::param(Tensor::randn([128, 10])?.mul_scalar(0.1)),
                Var::param(Tensor::zeros([10], DType::F32)?),
            ],
        })
    }

    /// One forward, backward and update on a batch; returns the loss.
    fn step(&self, x: &Tensor, y: &Tensor) -> Result<f64> {
        let [w1, b1, w2, b2] = &self.params;
        let hidden = Var::new(x.clone()).matmul(w1)?.add(b1)?.relu();
        let log_probs = hidden.matmul(w2)?.add(b2)?.log_softmax(1)?;
        let loss = log_probs.gather(1, y.unsqueeze(1)?)?.mean_all().neg();
        loss.backward()?;
        for p in &self.params {
            if let Some(g) = p.grad() {
                p.set_value(p.value().sub(&g.mul_scalar(0.1))?)?;
            }
            p.zero_grad();
        }
        loss.item()
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
