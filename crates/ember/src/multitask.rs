//! Multi-task learning on MNIST with a shared trunk and two heads, behind
//! `cargo run --release --example multitask` and the test `tests/multitask_smoke.rs`.
//!
//! One trunk (784-256-128, ReLU) feeds two heads: the digit's class (10 logits) and whether
//! the digit is at least 5 (2 logits). The trunk's parameters receive the gradients of both
//! losses. There are two ways to get them, and they must agree:
//!
//! - **separately**: `digit_loss.backward_with(None, true)` keeps the shared graph (its
//!   saved values) alive, then `high_loss.backward()` runs through it again; the trunk's
//!   leaf gradients accumulate the two contributions (accumulation rule 1 of
//!   docs/design.md);
//! - **summed**: `(digit_loss + high_loss).backward()`, one pass, where the two signals meet
//!   at the trunk's output and are added there before flowing through the trunk.
//!
//! The two differ only in where float additions happen, so the shared gradients agree to
//! rounding; [`shared_gradient_gap`] measures by how much. Summing is the cheaper of the two
//! (one backward through the trunk instead of two), so training uses it; the separate
//! passes are what a loop needs when the losses are weighted or inspected one at a time.
//!
//! ```no_run
//! use ember::multitask::{self, MultiTask};
//! use ember::optim::{Adam, AdamConfig};
//! ember::manual_seed(0);
//! let (train, test) = (ember::mnist::load("data/mnist", true)?, ember::mnist::load("data/mnist", false)?);
//! let model = MultiTask::new()?;
//! let mut opt = Adam::new(model.parameters(), AdamConfig { lr: 1e-3, ..Default::default() })?;
//! let x = train.images.narrow(0, 0, 64)?;
//! let y = train.labels.narrow(0, 0, 64)?;
//! assert!(multitask::shared_gradient_gap(&model, &x, &y)? < 1e-6);
//! multitask::train_step(&model, &mut opt, &x, &y)?;
//! let acc = multitask::evaluate(&model, &test)?;
//! println!("digit {:.2}%, >= 5 {:.2}%", 100.0 * acc.digit, 100.0 * acc.high);
//! # Ok::<(), ember::Error>(())
//! ```

use crate::autograd::{Var, no_grad};
use crate::mnist::{Data, LAYERS};
use crate::nn::{CrossEntropyOptions, Linear, Module, ReLU, Sequential, cross_entropy};
use crate::optim::Optimizer;
use crate::tensor::{Error, Result, Tensor};

/// The width of the trunk's output, the features both heads read.
pub const FEATURES: usize = 128;

/// A shared trunk with a digit head and a "digit >= 5" head.
pub struct MultiTask {
    trunk: Sequential,
    digit: Linear,
    high: Linear,
}

/// The two heads' logits for a batch.
pub struct Outputs {
    /// `[N, 10]` logits of the digit's class.
    pub digit: Var,
    /// `[N, 2]` logits of "the digit is at least 5".
    pub high: Var,
}

/// The two losses of a batch, not yet differentiated.
pub struct Losses {
    /// Cross-entropy of the digit head.
    pub digit: Var,
    /// Cross-entropy of the ">= 5" head.
    pub high: Var,
}

impl MultiTask {
    /// A fresh model with PyTorch's default initialisation from ember's global generator:
    /// trunk `784-256-128` with ReLU after each layer, heads `128-10` and `128-2`.
    pub fn new() -> Result<MultiTask> {
        let trunk = Sequential::new()
            .add(Linear::new(LAYERS[0], LAYERS[1])?)
            .add(ReLU)
            .add(Linear::new(LAYERS[1], FEATURES)?)
            .add(ReLU);
        Ok(MultiTask { trunk, digit: Linear::new(FEATURES, 10)?, high: Linear::new(FEATURES, 2)? })
    }

    /// Both heads' logits for `[N, 784]` images.
    pub fn forward(&self, x: &Var) -> Result<Outputs> {
        let features = self.trunk.forward(x)?;
        Ok(Outputs { digit: self.digit.forward(&features)?, high: self.high.forward(&features)? })
    }

    /// The parameters with PyTorch-style names: `trunk.0.weight`, ..., `digit.weight`,
    /// `high.bias`.
    pub fn named_parameters(&self) -> Vec<(String, Var)> {
        let prefixed = |prefix: &str, m: &dyn Module| {
            m.named_parameters().into_iter().map(|(k, v)| (format!("{prefix}.{k}"), v)).collect::<Vec<_>>()
        };
        let mut all = prefixed("trunk", &self.trunk);
        all.extend(prefixed("digit", &self.digit));
        all.extend(prefixed("high", &self.high));
        all
    }

    /// All parameters, trunk first.
    pub fn parameters(&self) -> Vec<Var> {
        self.named_parameters().into_iter().map(|(_, v)| v).collect()
    }

    /// The trunk's parameters, the ones both losses reach.
    pub fn shared_parameters(&self) -> Vec<Var> {
        self.trunk.parameters()
    }

    /// Clears every parameter's gradient.
    pub fn zero_grad(&self) {
        self.parameters().iter().for_each(Var::zero_grad);
    }
}

/// The ">= 5" labels of digit labels: `1` for 5-9, `0` for 0-4 (`i64`, like the input).
pub fn high_labels(labels: &Tensor) -> Result<Tensor> {
    let high: Vec<i64> = labels.to_vec::<i64>()?.into_iter().map(|d| i64::from(d >= 5)).collect();
    Tensor::from_vec(high, [labels.numel()])
}

/// The two losses of `model` on images `x` (`[N, 784]`) with digit labels `y` (`[N]`).
pub fn losses(model: &MultiTask, x: &Tensor, y: &Tensor) -> Result<Losses> {
    let out = model.forward(&Var::new(x.clone()))?;
    let options = CrossEntropyOptions::default;
    Ok(Losses {
        digit: cross_entropy(&out.digit, y, options())?,
        high: cross_entropy(&out.high, &high_labels(y)?, options())?,
    })
}

/// The shared parameters' gradients with the two losses backpropagated one after the
/// other, the first with `retain_graph = true` so that the second can run through the
/// trunk's graph again. Clears all gradients first.
pub fn shared_gradients_separately(model: &MultiTask, x: &Tensor, y: &Tensor) -> Result<Vec<Tensor>> {
    model.zero_grad();
    let l = losses(model, x, y)?;
    l.digit.backward_with(None, true)?;
    l.high.backward()?;
    shared_gradients(model)
}

/// The shared parameters' gradients from one backward of the summed loss. Clears all
/// gradients first.
pub fn shared_gradients_summed(model: &MultiTask, x: &Tensor, y: &Tensor) -> Result<Vec<Tensor>> {
    model.zero_grad();
    let l = losses(model, x, y)?;
    (&l.digit + &l.high)?.backward()?;
    shared_gradients(model)
}

fn shared_gradients(model: &MultiTask) -> Result<Vec<Tensor>> {
    model
        .shared_parameters()
        .iter()
        .map(|p| p.grad().ok_or_else(|| Error::autograd("multitask: a shared parameter received no gradient")))
        .collect()
}

/// The largest absolute difference between the shared parameters' gradients computed
/// [separately](shared_gradients_separately) and [summed](shared_gradients_summed) on one
/// batch. Leaves the gradients of the summed pass in place.
pub fn shared_gradient_gap(model: &MultiTask, x: &Tensor, y: &Tensor) -> Result<f64> {
    let separate = shared_gradients_separately(model, x, y)?;
    let summed = shared_gradients_summed(model, x, y)?;
    let mut gap = 0f64;
    for (a, b) in separate.iter().zip(&summed) {
        for (u, v) in a.to_vec_f64()?.iter().zip(b.to_vec_f64()?) {
            gap = gap.max((u - v).abs());
        }
    }
    Ok(gap)
}

/// One optimisation step on the summed loss; returns the two losses' values.
pub fn train_step(model: &MultiTask, opt: &mut dyn Optimizer, x: &Tensor, y: &Tensor) -> Result<(f64, f64)> {
    let l = losses(model, x, y)?;
    opt.zero_grad();
    (&l.digit + &l.high)?.backward()?;
    opt.step()?;
    Ok((l.digit.item()?, l.high.item()?))
}

/// The accuracy of each head.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Accuracy {
    /// The fraction of digits classified correctly.
    pub digit: f64,
    /// The fraction of ">= 5" answers that are right.
    pub high: f64,
}

/// Both heads' accuracy on `data`, without recording a graph.
pub fn evaluate(model: &MultiTask, data: &Data) -> Result<Accuracy> {
    no_grad(|| {
        let (mut digit, mut high) = (0f64, 0f64);
        let n = data.len();
        for start in (0..n).step_by(1000) {
            let len = 1000.min(n - start);
            let y = data.labels.narrow(0, start, len)?;
            let out = model.forward(&Var::new(data.images.narrow(0, start, len)?))?;
            digit += out.digit.value().argmax(1, false)?.eq(&y)?.sum_all().item()?;
            high += out.high.value().argmax(1, false)?.eq(&high_labels(&y)?)?.sum_all().item()?;
        }
        let n = n.max(1) as f64;
        Ok(Accuracy { digit: digit / n, high: high / n })
    })
}
