//! Multi-task learning on MNIST with a shared trunk, a classification head and a regression
//! head, behind `cargo run --release --example multitask` and the test
//! `tests/multitask_smoke.rs`.
//!
//! One trunk (784-256-128, ReLU) feeds two heads: the digit's class (10 logits, trained with
//! cross-entropy) and the digit's **ink mass** (1 output, trained with the squared error),
//! the mean intensity of the image's pixels, computed from the image itself
//! ([`ink_targets`]) in standard units over the MNIST training set ([`INK_MEAN`],
//! [`INK_STD`]). The training loss is the [weighted](Weights) sum of the two.
//!
//! The trunk's parameters receive the gradients of both losses. There are two ways to get
//! them, and they must agree:
//!
//! - **separately**: `(w_digit · digit_loss).backward_with(None, true)` keeps the shared
//!   graph (its saved values) alive, then `(w_ink · ink_loss).backward()` runs through it
//!   again; the trunk's leaf gradients accumulate the two contributions (accumulation rule 1
//!   of docs/design.md);
//! - **summed**: `(w_digit · digit_loss + w_ink · ink_loss).backward()`, one pass, where the
//!   two signals meet at the trunk's output and are added there before flowing through the
//!   trunk.
//!
//! The two differ only in where float additions happen, so the shared gradients agree to
//! rounding; [`shared_gradient_gap`] measures by how much. Summing is the cheaper of the two
//! (one backward through the trunk instead of two), so training uses it.
//!
//! A head can be frozen ([`MultiTask::freeze_head`], which is `Module::freeze` on it): its
//! parameters get no gradient and the optimizers skip them, so they stay bit-identical,
//! while its loss still trains the trunk through it and the other head learns as before.
//!
//! ```no_run
//! use ember::multitask::{self, Head, MultiTask, Weights};
//! use ember::optim::{Adam, AdamConfig};
//! ember::manual_seed(0);
//! let (train, test) = (ember::mnist::load("data/mnist", true)?, ember::mnist::load("data/mnist", false)?);
//! let model = MultiTask::new()?;
//! model.freeze_head(Head::Ink)?; // optional: the ink head stays as initialised
//! let mut opt = Adam::new(model.parameters(), AdamConfig { lr: 1e-3, ..Default::default() })?;
//! let weights = Weights { digit: 1.0, ink: 0.5 };
//! let x = train.images.narrow(0, 0, 64)?;
//! let y = train.labels.narrow(0, 0, 64)?;
//! assert!(multitask::shared_gradient_gap(&model, &x, &y, &weights)? < 1e-6);
//! multitask::train_step(&model, &mut opt, &x, &y, &weights)?;
//! let eval = multitask::evaluate(&model, &test)?;
//! println!("digit {:.2}%, ink mass R² {:.3}", 100.0 * eval.digit_accuracy, eval.ink_r2);
//! # Ok::<(), ember::Error>(())
//! ```

use crate::autograd::{Var, no_grad};
use crate::mnist::{self, Data, LAYERS};
use crate::nn::{CrossEntropyOptions, Linear, Module, ReLU, Reduction, Sequential, cross_entropy, mse_loss};
use crate::optim::Optimizer;
use crate::tensor::{Error, Result, Tensor};
use std::fmt;
use std::str::FromStr;

/// The width of the trunk's output, the features both heads read.
pub const FEATURES: usize = 128;

/// The mean ink mass (mean pixel intensity in `[0, 1]`) of the MNIST training images: the
/// mean pixel intensity, [`mnist::MEAN`].
pub const INK_MEAN: f64 = mnist::MEAN;

/// The standard deviation of the ink mass over the 60,000 MNIST training images, measured
/// from the IDX file (0.043298). The regression target is `(ink - INK_MEAN) / INK_STD`, of
/// mean 0 and variance 1 on the training set, so that its squared error starts on the
/// scale of the digit's cross-entropy.
pub const INK_STD: f64 = 0.0433;

/// One of the two heads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Head {
    /// The digit classifier (10 logits).
    Digit,
    /// The ink-mass regressor (1 output).
    Ink,
}

impl Head {
    /// Both heads, in the order of the parameters.
    pub const ALL: [Head; 2] = [Head::Digit, Head::Ink];

    /// The head's name, as `--freeze-head` takes it and as its parameters are prefixed.
    pub fn name(self) -> &'static str {
        match self {
            Head::Digit => "digit",
            Head::Ink => "ink",
        }
    }
}

impl fmt::Display for Head {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Head {
    type Err = Error;

    /// `digit` or `ink`.
    fn from_str(s: &str) -> Result<Head> {
        Head::ALL.into_iter().find(|h| h.name() == s).ok_or_else(|| {
            Error::invalid("multitask", format!("no head named {s:?}; the heads are \"digit\" and \"ink\""))
        })
    }
}

/// The weights of the two losses in the training loss.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Weights {
    /// The weight of the digit's cross-entropy.
    pub digit: f64,
    /// The weight of the ink mass's squared error.
    pub ink: f64,
}

impl Default for Weights {
    fn default() -> Self {
        Weights { digit: 1.0, ink: 1.0 }
    }
}

impl FromStr for Weights {
    type Err = Error;

    /// Two finite numbers `>= 0`, `digit,ink` (`1,0.5`).
    fn from_str(s: &str) -> Result<Weights> {
        let bad =
            |why: &str| Error::invalid("multitask", format!("weights {s:?}: {why}; expected digit,ink like 1,0.5"));
        let parts: Vec<&str> = s.split(',').map(str::trim).collect();
        let [digit, ink] = parts[..] else {
            return Err(bad("two numbers needed"));
        };
        let parse = |t: &str| match t.parse::<f64>() {
            Ok(w) if w.is_finite() && w >= 0.0 => Ok(w),
            _ => Err(bad(&format!("{t:?} is not a finite number >= 0"))),
        };
        Ok(Weights { digit: parse(digit)?, ink: parse(ink)? })
    }
}

/// A shared trunk with a digit head and an ink-mass head.
pub struct MultiTask {
    trunk: Sequential,
    digit: Linear,
    ink: Linear,
}

/// The two heads' outputs for a batch.
pub struct Outputs {
    /// `[N, 10]` logits of the digit's class.
    pub digit: Var,
    /// `[N, 1]` predicted ink mass, in standard units.
    pub ink: Var,
}

/// The two losses of a batch, not yet differentiated nor weighted.
pub struct Losses {
    /// Cross-entropy of the digit head.
    pub digit: Var,
    /// Mean squared error of the ink head, in squared standard units.
    pub ink: Var,
}

impl Losses {
    /// The training loss: `weights.digit · digit + weights.ink · ink`.
    pub fn weighted(&self, weights: &Weights) -> Result<Var> {
        self.digit.mul_scalar(weights.digit).add(&self.ink.mul_scalar(weights.ink))
    }
}

impl MultiTask {
    /// A fresh model with PyTorch's default initialisation from ember's global generator:
    /// trunk `784-256-128` with ReLU after each layer, heads `128-10` and `128-1`.
    pub fn new() -> Result<MultiTask> {
        let trunk = Sequential::new()
            .add(Linear::new(LAYERS[0], LAYERS[1])?)
            .add(ReLU)
            .add(Linear::new(LAYERS[1], FEATURES)?)
            .add(ReLU);
        Ok(MultiTask { trunk, digit: Linear::new(FEATURES, 10)?, ink: Linear::new(FEATURES, 1)? })
    }

    /// Both heads' outputs for `[N, 784]` images.
    pub fn forward(&self, x: &Var) -> Result<Outputs> {
        let features = self.trunk.forward(x)?;
        Ok(Outputs { digit: self.digit.forward(&features)?, ink: self.ink.forward(&features)? })
    }

    /// The layer of a head.
    pub fn head(&self, head: Head) -> &Linear {
        match head {
            Head::Digit => &self.digit,
            Head::Ink => &self.ink,
        }
    }

    /// Freezes a head ([`Module::freeze`]): its parameters stop requiring grad, so they get
    /// no gradient and optimizers leave them bit-identical; its loss still reaches the trunk.
    pub fn freeze_head(&self, head: Head) -> Result<()> {
        self.head(head).freeze()
    }

    /// The parameters with PyTorch-style names: `trunk.0.weight`, ..., `digit.weight`,
    /// `ink.bias`.
    pub fn named_parameters(&self) -> Vec<(String, Var)> {
        let prefixed = |prefix: &str, m: &dyn Module| {
            m.named_parameters().into_iter().map(|(k, v)| (format!("{prefix}.{k}"), v)).collect::<Vec<_>>()
        };
        let mut all = prefixed("trunk", &self.trunk);
        for head in Head::ALL {
            all.extend(prefixed(head.name(), self.head(head)));
        }
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

/// The ink-mass targets of standardized images `x` (`[N, 784]`, as [`mnist::load`] gives
/// them): each image's mean raw intensity, `(ink - INK_MEAN) / INK_STD`, as `[N, 1]`.
///
/// A standardized pixel is `(raw - MEAN) / STD`, so the mean of an image's standardized
/// pixels is `(ink - MEAN) / STD`, rescaled here by `STD / INK_STD`.
pub fn ink_targets(x: &Tensor) -> Result<Tensor> {
    Ok(x.mean(1, true)?.mul_scalar(mnist::STD / INK_STD))
}

/// The two losses of `model` on images `x` (`[N, 784]`) with digit labels `y` (`[N]`).
pub fn losses(model: &MultiTask, x: &Tensor, y: &Tensor) -> Result<Losses> {
    let out = model.forward(&Var::new(x.clone()))?;
    Ok(Losses {
        digit: cross_entropy(&out.digit, y, CrossEntropyOptions::default())?,
        ink: mse_loss(&out.ink, ink_targets(x)?, Reduction::Mean)?,
    })
}

/// The shared parameters' gradients with the two weighted losses backpropagated one after
/// the other, the first with `retain_graph = true` so that the second can run through the
/// trunk's graph again. Clears all gradients first.
pub fn shared_gradients_separately(model: &MultiTask, x: &Tensor, y: &Tensor, w: &Weights) -> Result<Vec<Tensor>> {
    model.zero_grad();
    let l = losses(model, x, y)?;
    l.digit.mul_scalar(w.digit).backward_with(None, true)?;
    l.ink.mul_scalar(w.ink).backward()?;
    shared_gradients(model)
}

/// The shared parameters' gradients from one backward of the weighted sum of the losses.
/// Clears all gradients first.
pub fn shared_gradients_summed(model: &MultiTask, x: &Tensor, y: &Tensor, w: &Weights) -> Result<Vec<Tensor>> {
    model.zero_grad();
    losses(model, x, y)?.weighted(w)?.backward()?;
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
pub fn shared_gradient_gap(model: &MultiTask, x: &Tensor, y: &Tensor, w: &Weights) -> Result<f64> {
    let separate = shared_gradients_separately(model, x, y, w)?;
    let summed = shared_gradients_summed(model, x, y, w)?;
    let mut gap = 0f64;
    for (a, b) in separate.iter().zip(&summed) {
        for (u, v) in a.to_vec_f64()?.iter().zip(b.to_vec_f64()?) {
            gap = gap.max((u - v).abs());
        }
    }
    Ok(gap)
}

/// One optimisation step on the weighted sum of the losses; returns the two losses'
/// (unweighted) values, digit then ink.
pub fn train_step(
    model: &MultiTask,
    opt: &mut dyn Optimizer,
    x: &Tensor,
    y: &Tensor,
    weights: &Weights,
) -> Result<(f64, f64)> {
    let l = losses(model, x, y)?;
    opt.zero_grad();
    l.weighted(weights)?.backward()?;
    opt.step()?;
    Ok((l.digit.item()?, l.ink.item()?))
}

/// How well each head does on a data set.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Evaluation {
    /// The fraction of digits classified correctly.
    pub digit_accuracy: f64,
    /// The ink head's mean squared error, in squared standard units (1 is what predicting
    /// the training mean gives on the training set).
    pub ink_mse: f64,
    /// The ink head's coefficient of determination on the data: `1 - MSE / variance` of the
    /// targets (1 is perfect, 0 is no better than the data's mean).
    pub ink_r2: f64,
}

/// Both heads' scores on `data`, without recording a graph.
pub fn evaluate(model: &MultiTask, data: &Data) -> Result<Evaluation> {
    no_grad(|| {
        let (mut correct, mut sse, mut sum, mut sum_sq) = (0f64, 0f64, 0f64, 0f64);
        let n = data.len();
        if n == 0 {
            return Err(Error::invalid("multitask", "evaluate: the data set is empty"));
        }
        for start in (0..n).step_by(1000) {
            let len = 1000.min(n - start);
            let x = data.images.narrow(0, start, len)?;
            let y = data.labels.narrow(0, start, len)?;
            let out = model.forward(&Var::new(x.clone()))?;
            correct += out.digit.value().argmax(1, false)?.eq(&y)?.sum_all().item()?;
            let t = ink_targets(&x)?;
            sse += out.ink.value().sub(&t)?.square().sum_all().item()?;
            sum += t.sum_all().item()?;
            sum_sq += t.square().sum_all().item()?;
        }
        let n = n as f64;
        let variance = sum_sq / n - (sum / n).powi(2);
        Ok(Evaluation { digit_accuracy: correct / n, ink_mse: sse / n, ink_r2: 1.0 - (sse / n) / variance })
    })
}
