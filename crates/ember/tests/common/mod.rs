//! The quick starts' CI smoke training, shared by their tests: one epoch of Adam on the
//! first MNIST training images must reach an accuracy on the first 2,000 test images, and
//! the saved model must reload into a fresh one with the same accuracy. (A correctness
//! check; speed is measured by the benchmarks.)

use ember::mnist;
use ember::nn::{Module, ModuleExt};
use ember::optim::{Adam, AdamConfig};
use ember::{Result, manual_seed};

/// One smoke run: the model and how it trains.
pub struct Smoke<M> {
    /// Names the model in messages and temporary files.
    pub name: &'static str,
    /// Builds a fresh model (for training, then for reloading).
    pub build: fn() -> Result<M>,
    /// Training images taken from the front of the set.
    pub images: usize,
    /// Samples per step.
    pub batch: usize,
    /// Adam's learning rate.
    pub lr: f64,
    /// The test accuracy one epoch must reach.
    pub accuracy: f64,
}

/// Trains, checks and reloads as the module doc says; returns the trained model.
pub fn one_epoch_learns_and_reloads<M: Module>(smoke: &Smoke<M>) -> Result<M> {
    manual_seed(0);
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/mnist");
    let train = mnist::load(data, true)?.take(smoke.images)?;
    let test = mnist::load(data, false)?.take(2_000)?;
    let model = (smoke.build)()?;
    let mut opt = Adam::new(model.parameters(), AdamConfig { lr: smoke.lr, ..Default::default() })?;
    let loader = mnist::loader(&train, smoke.batch, 0)?;
    let mut losses = Vec::new();
    mnist::train_epoch(&model, &mut opt, None, &loader, |_, loss| losses.push(loss))?;
    assert_eq!(losses.len(), smoke.images.div_ceil(smoke.batch));
    assert!(losses.iter().all(|l| l.is_finite()), "{}: losses {losses:?}", smoke.name);
    let accuracy = mnist::evaluate(&model, &test)?.accuracy;
    assert!(
        accuracy >= smoke.accuracy,
        "{}: test accuracy {:.2}% after one epoch on {} images",
        smoke.name,
        100.0 * accuracy,
        smoke.images
    );

    let dir = std::env::temp_dir().join(format!("ember-{}-smoke-{}", smoke.name, std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| ember::Error::io(&dir, e))?;
    let path = dir.join(format!("{}.safetensors", smoke.name));
    model.save(&path)?;
    let reloaded = (smoke.build)()?;
    reloaded.load(&path)?;
    assert_eq!(mnist::evaluate(&reloaded, &test)?.accuracy, accuracy);
    std::fs::remove_dir_all(&dir).ok();
    Ok(model)
}
