//! The CI smoke training of the patch Transformer: one epoch on the first 4,000 MNIST
//! training images must reach 45% on the first 2,000 test images (a Transformer starts
//! more slowly than the LSTM; chance is 10%), and the saved model must reload into a fresh
//! one with the same accuracy. (A correctness check; the full run is
//! `cargo run --release --example mnist_vit`.)

mod amp;
mod common;

use amp::driver::quick_start::Example;
use common::{Smoke, one_epoch_learns_and_reloads};
use ember::{Result, mnist};

#[test]
fn one_epoch_on_four_thousand_images_learns() -> Result<()> {
    let smoke =
        Smoke { name: "mnist_vit", build: mnist::vit_classifier, images: 4_000, batch: 32, lr: 2e-3, accuracy: 0.45 };
    one_epoch_learns_and_reloads(&smoke).map(drop)
}

/// `--amp bf16`: the header names the mode, the loss falls and the model learns.
#[test]
fn the_quick_start_learns_under_bf16_autocast() -> Result<()> {
    let example = Example {
        name: "mnist_vit",
        checkpoint: "mnist_vit",
        description: "patch Transformer",
        build: mnist::vit_classifier,
        epochs: 1,
    };
    let flags = [
        "--amp",
        "bf16",
        "--epochs",
        "1",
        "--train-images",
        "1600",
        "--test-images",
        "500",
        "--batch-size",
        "32",
        "--lr",
        "2e-3",
    ];
    let outcome = amp::quick_start(example, &flags)?;
    assert!(amp::line(&outcome.log, "model: ").ends_with("; bf16 autocast"), "{:?}", outcome.log);
    amp::assert_falls(&outcome.losses, 5, 0.9);
    assert!(outcome.accuracy >= 0.2, "test accuracy {:.2}%", 100.0 * outcome.accuracy);
    Ok(())
}
