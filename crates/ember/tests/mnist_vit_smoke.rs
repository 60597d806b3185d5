//! The CI smoke training of the patch Transformer: one epoch on the first 4,000 MNIST
//! training images must reach 45% on the first 2,000 test images (a Transformer starts
//! more slowly than the LSTM; chance is 10%), and the saved model must reload into a fresh one with the same accuracy. (A correctness check; the full
//! run is `cargo run --release --example mnist_vit`.)

use ember::mnist;
use ember::nn::ModuleExt;
use ember::optim::{Adam, AdamConfig};
use ember::{Result, manual_seed};

#[test]
fn one_epoch_on_four_thousand_images_learns() -> Result<()> {
    manual_seed(0);
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/mnist");
    let train = mnist::load(data, true)?.take(4_000)?;
    let test = mnist::load(data, false)?.take(2_000)?;
    let model = mnist::vit_classifier()?;
    let mut opt = Adam::new(ember::nn::Module::parameters(&model), AdamConfig { lr: 2e-3, ..Default::default() })?;
    let loader = mnist::loader(&train, 32, 0)?;
    let mut losses = Vec::new();
    mnist::train_epoch(&model, &mut opt, None, &loader, |_, loss| losses.push(loss))?;
    assert_eq!(losses.len(), 125);
    assert!(losses.iter().all(|l| l.is_finite()));
    let accuracy = mnist::evaluate(&model, &test)?.accuracy;
    assert!(accuracy >= 0.45, "test accuracy {:.2}% after one epoch on 4k images", 100.0 * accuracy);

    let dir = std::env::temp_dir().join(format!("ember-mnist-vit-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| ember::Error::io(&dir, e))?;
    let path = dir.join("mnist_vit.safetensors");
    model.save(&path)?;
    let reloaded = mnist::vit_classifier()?;
    reloaded.load(&path)?;
    assert_eq!(mnist::evaluate(&reloaded, &test)?.accuracy, accuracy);
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
