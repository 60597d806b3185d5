//! The CNN quick start's CI smoke training: one epoch on the first 6,000 MNIST training
//! images must reach 90% accuracy on the first 2,000 test images, and the saved model must
//! reload into a fresh one with the same accuracy. (A correctness check; speed is measured
//! by the benchmarks, not here.)

use ember::mnist;
use ember::nn::{Module, ModuleExt};
use ember::optim::{Adam, AdamConfig};
use ember::{Result, manual_seed};

#[test]
fn one_epoch_on_six_thousand_images_reaches_ninety_percent() -> Result<()> {
    manual_seed(0);
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/mnist");
    let train = mnist::load(data, true)?.take(6_000)?;
    let test = mnist::load(data, false)?.take(2_000)?;
    let model = mnist::cnn()?;
    let names: Vec<String> = model.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["1.weight", "1.bias", "4.weight", "4.bias", "8.weight", "8.bias", "10.weight", "10.bias"]);
    let mut opt = Adam::new(model.parameters(), AdamConfig { lr: 1e-3, ..Default::default() })?;
    let loader = mnist::loader(&train, 64, 0)?;
    let mut losses = Vec::new();
    mnist::train_epoch(&model, &mut opt, None, &loader, |_, loss| losses.push(loss))?;
    assert_eq!(losses.len(), 94);
    assert!(losses.iter().all(|l| l.is_finite()));
    let accuracy = mnist::evaluate(&model, &test)?.accuracy;
    assert!(accuracy >= 0.90, "test accuracy {:.2}% after one epoch on 6k images", 100.0 * accuracy);

    let dir = std::env::temp_dir().join(format!("ember-mnist-cnn-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| ember::Error::io(&dir, e))?;
    let path = dir.join("mnist_cnn.safetensors");
    model.save(&path)?;
    let reloaded = mnist::cnn()?;
    reloaded.load(&path)?;
    assert_eq!(mnist::evaluate(&reloaded, &test)?.accuracy, accuracy);
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
