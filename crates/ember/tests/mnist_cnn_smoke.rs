//! The CNN quick start's CI smoke training: one epoch on the first 6,000 MNIST training
//! images must reach 90% accuracy on the first 2,000 test images, and the saved model must
//! reload into a fresh one with the same accuracy; its parameters carry PyTorch's
//! `nn.Sequential` names. (A correctness check; speed is measured by the benchmarks, not
//! here.)

mod amp;
mod common;

use amp::driver::quick_start::Example;
use common::{Smoke, one_epoch_learns_and_reloads};
use ember::nn::Module;
use ember::{Result, mnist};

#[test]
fn one_epoch_on_six_thousand_images_reaches_ninety_percent() -> Result<()> {
    let smoke = Smoke { name: "mnist_cnn", build: mnist::cnn, images: 6_000, batch: 64, lr: 1e-3, accuracy: 0.90 };
    let model = one_epoch_learns_and_reloads(&smoke)?;
    let names: Vec<String> = model.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["1.weight", "1.bias", "4.weight", "4.bias", "8.weight", "8.bias", "10.weight", "10.bias"]);
    Ok(())
}

/// `--amp bf16`: the header names the mode, the loss falls and the model learns.
#[test]
fn the_quick_start_learns_under_bf16_autocast() -> Result<()> {
    let example =
        Example { name: "mnist_cnn", checkpoint: "mnist_cnn", description: "CNN", build: mnist::cnn, epochs: 1 };
    let flags = ["--amp", "bf16", "--epochs", "1", "--train-images", "1600", "--test-images", "500"];
    let outcome = amp::quick_start(example, &flags)?;
    assert!(amp::line(&outcome.log, "model: ").ends_with("; bf16 autocast"), "{:?}", outcome.log);
    amp::assert_falls(&outcome.losses, 5, 0.6);
    assert!(outcome.accuracy >= 0.5, "test accuracy {:.2}%", 100.0 * outcome.accuracy);
    Ok(())
}
