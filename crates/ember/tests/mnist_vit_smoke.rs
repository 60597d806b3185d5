//! The CI smoke training of the patch Transformer: one epoch on the first 4,000 MNIST
//! training images must reach 45% on the first 2,000 test images (a Transformer starts
//! more slowly than the LSTM; chance is 10%), and the saved model must reload into a fresh
//! one with the same accuracy. (A correctness check; the full run is
//! `cargo run --release --example mnist_vit`.)

mod common;

use common::{Smoke, one_epoch_learns_and_reloads};
use ember::{Result, mnist};

#[test]
fn one_epoch_on_four_thousand_images_learns() -> Result<()> {
    let smoke =
        Smoke { name: "mnist_vit", build: mnist::vit_classifier, images: 4_000, batch: 32, lr: 2e-3, accuracy: 0.45 };
    one_epoch_learns_and_reloads(&smoke).map(drop)
}
