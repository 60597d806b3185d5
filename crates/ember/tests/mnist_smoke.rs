//! The CI smoke training: one epoch on the first 10,000 MNIST training images must reach
//! 90% test accuracy, and the saved model must reload into a fresh one with the same
//! accuracy. (A correctness check; speed is measured by the benchmarks, not here.)

mod amp;

use amp::driver::quick_start::Example;
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

fn mlp_example() -> Example<ember::nn::Sequential> {
    Example { name: "mnist", checkpoint: "mnist_mlp", description: "784-256-128-10 MLP", build: mnist::mlp, epochs: 1 }
}

/// `--amp bf16`: the header names the mode, the loss falls and the model learns.
#[test]
fn the_quick_start_learns_under_bf16_autocast() -> Result<()> {
    let flags = ["--amp", "bf16", "--epochs", "1", "--train-images", "3000", "--test-images", "1000"];
    let outcome = amp::quick_start(mlp_example(), &flags)?;
    assert!(amp::line(&outcome.log, "model: ").ends_with("; bf16 autocast"), "{:?}", outcome.log);
    amp::assert_falls(&outcome.losses, 10, 0.5);
    assert!(outcome.accuracy >= 0.75, "test accuracy {:.2}%", 100.0 * outcome.accuracy);
    Ok(())
}

/// `--amp f16`: the header names the mode and the loss scaling, the epoch's line shows the
/// scaler's scale (no overflow in 47 steps at PyTorch's initial scale, no growth before
/// 2,000 clean steps, so it is still 65536), and the loss falls.
#[test]
fn the_quick_start_learns_under_f16_autocast_with_loss_scaling() -> Result<()> {
    let flags = ["--amp", "f16", "--epochs", "1", "--train-images", "3000", "--test-images", "1000"];
    let outcome = amp::quick_start(mlp_example(), &flags)?;
    assert!(amp::line(&outcome.log, "model: ").ends_with("; f16 autocast, loss scale from 65536"), "{:?}", outcome.log);
    assert!(amp::line(&outcome.log, "epoch 1: ").ends_with(", loss scale 65536"), "{:?}", outcome.log);
    amp::assert_falls(&outcome.losses, 10, 0.5);
    assert!(outcome.accuracy >= 0.75, "test accuracy {:.2}%", 100.0 * outcome.accuracy);
    Ok(())
}

/// Without `--amp` the header says `f32`.
#[test]
fn the_quick_start_header_says_f32_without_amp() -> Result<()> {
    let flags = ["--epochs", "1", "--train-images", "640", "--test-images", "200"];
    let outcome = amp::quick_start(mlp_example(), &flags)?;
    assert!(amp::line(&outcome.log, "model: ").ends_with("; f32"), "{:?}", outcome.log);
    assert!(amp::line(&outcome.log, "epoch 1: ").ends_with('%'), "{:?}", outcome.log);
    Ok(())
}
