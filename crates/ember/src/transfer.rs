//! Transfer learning on MNIST with a frozen encoder, behind
//! `cargo run --release --example transfer` and the test `tests/transfer_smoke.rs`.
//!
//! A [`Classifier`] (an encoder and a linear head) is trained on the digits 0-4 and saved.
//! A fresh one is loaded from the file, its head replaced by a new one for the digits 5-9,
//! and its encoder frozen with [`Var::freeze`]: the encoder's parameters stop requiring
//! grad and keep no gradient, the optimizer skips them, and since nothing before them
//! requires grad either, the forward through the encoder records no graph and backward
//! stops at the head. Fine-tuning therefore costs a forward through the encoder and a
//! forward and backward through the head, and leaves the encoder bit for bit as loaded.
//!
//! ```no_run
//! use ember::{mnist, transfer};
//! use ember::nn::Module;
//! use ember::optim::{Adam, AdamConfig};
//! ember::manual_seed(0);
//! let train = mnist::load("data/mnist", true)?;
//! let model = transfer::classifier()?;
//! let low = transfer::digits(&train, 0..5)?;
//! let mut opt = Adam::new(model.parameters(), AdamConfig { lr: 1e-3, ..Default::default() })?;
//! mnist::train_epoch(&model, &mut opt, None, &mnist::loader(&low, 64, 0)?, |_, _| {})?;
//! let model = model.with_new_head()?;
//! model.freeze_encoder()?;
//! let mut opt = Adam::new(model.parameters(), AdamConfig { lr: 1e-3, ..Default::default() })?;
//! let high = transfer::digits(&train, 5..10)?;
//! mnist::train_epoch(&model, &mut opt, None, &mnist::loader(&high, 64, 0)?, |_, _| {})?;
//! # Ok::<(), ember::Error>(())
//! ```

use crate::autograd::Var;
use crate::mnist::{Data, LAYERS};
use crate::nn::{Linear, Module, ReLU, Sequential};
use crate::tensor::{Error, Result, Tensor};
use std::ops::Range;

/// The width of the encoder's output, the features the head reads.
pub const FEATURES: usize = 128;

/// Classes per task: five digits each.
pub const CLASSES: usize = 5;

/// An encoder (`784-256-128`, ReLU after each layer) and a linear head (`128-5`).
/// `state_dict` names: `encoder.0.weight`, `encoder.0.bias`, `encoder.2.weight`,
/// `encoder.2.bias`, `head.weight`, `head.bias`.
#[derive(Module)]
pub struct Classifier {
    encoder: Sequential,
    head: Linear,
}

/// A fresh [`Classifier`] with PyTorch's default initialisation from ember's global
/// generator.
pub fn classifier() -> Result<Classifier> {
    let encoder = Sequential::new()
        .add(Linear::new(LAYERS[0], LAYERS[1])?)
        .add(ReLU)
        .add(Linear::new(LAYERS[1], FEATURES)?)
        .add(ReLU);
    Ok(Classifier { encoder, head: Linear::new(FEATURES, CLASSES)? })
}

impl Classifier {
    /// The encoder.
    pub fn encoder(&self) -> &Sequential {
        &self.encoder
    }

    /// The head.
    pub fn head(&self) -> &Linear {
        &self.head
    }

    /// The same encoder with a fresh head (initialised from ember's global generator), for
    /// a new task with as many classes.
    pub fn with_new_head(self) -> Result<Classifier> {
        Ok(Classifier { encoder: self.encoder, head: Linear::new(FEATURES, CLASSES)? })
    }

    /// Freezes every encoder parameter ([`Var::freeze`]).
    pub fn freeze_encoder(&self) -> Result<()> {
        for p in self.encoder.parameters() {
            p.freeze()?;
        }
        Ok(())
    }

    /// Copies of the encoder's parameter values, to check later that they did not move.
    pub fn encoder_snapshot(&self) -> Result<Vec<Vec<f32>>> {
        self.encoder.parameters().iter().map(|p| p.value().to_vec::<f32>()).collect()
    }

    /// The head's logits for the encoder's features of `x`.
    fn forward(&self, x: &Var) -> Result<Var> {
        self.head.forward(&self.encoder.forward(x)?)
    }
}

/// The samples of `data` whose digit lies in `digits`, relabelled to count from
/// `digits.start` (so 5-9 become 0-4), in their original order.
pub fn digits(data: &Data, digits: Range<i64>) -> Result<Data> {
    if digits.is_empty() {
        return Err(Error::invalid("transfer::digits", format!("empty digit range {digits:?}")));
    }
    let labels = data.labels.to_vec::<i64>()?;
    let (keep, relabelled): (Vec<i64>, Vec<i64>) = labels
        .iter()
        .enumerate()
        .filter(|(_, d)| digits.contains(d))
        .map(|(i, d)| (i as i64, d - digits.start))
        .unzip();
    let n = keep.len();
    let index = Tensor::from_vec(keep, [n])?;
    Ok(Data { images: data.images.index_select(0, &index)?, labels: Tensor::from_vec(relabelled, [n])? })
}
