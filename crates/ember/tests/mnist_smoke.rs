//! The CI smoke training: one epoch on the first 10,000 MNIST training images must reach
//! 90% test accuracy, and the saved model must reload into a fresh one with the same
//! accuracy. (A correctness check; speed is measured by the benchmarks, not here.)

use ember::mnist;
use ember::nn::ModuleExt;
use ember::optim::{Adam, AdamConfig};
use ember::{Result, manual_seed};

#[test]
fn one_epoch_on_ten_thousand_images_reaches_ninety_percent() -> Result<()> {
    manual_seed(0);
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/mnist");
    let train = mnist::load(data, true)?.take(10_000)?;
    let test = mnist::load(data, false)?;
    let model = mnist::mlp()?;
    let mut opt = Adam::new(ember::nn::Module::parameters(&model), AdamConfig { lr: 1e-3, ..Default::default() })?;
    let loader = mnist::loader(&train, 64, 0)?;
    let mut losses = Vec::new();
    mnist::train_epoch(&model, &mut opt, None, &loader, |_, loss| losses.push(loss))?;
    assert_eq!(losses.len(), 157);
    assert!(losses.iter().all(|l| l.is_finite()));
    let accuracy = mnist::evaluate(&model, &test)?.accuracy;
    assert!(accuracy >= 0.90, "test accuracy {:.2}% after one epoch on 10k images", 100.0 * accuracy);

    let dir = std::env::temp_dir().join(format!("ember-mnist-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| ember::Error::io(&dir, e))?;
    let path = dir.join("mnist_mlp.safetensors");
    model.save(&path)?;
    let reloaded = mnist::mlp()?;
    reloaded.load(&path)?;
    assert_eq!(mnist::evaluate(&reloaded, &test)?.accuracy, accuracy);
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
