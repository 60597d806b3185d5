//! Trains a small convolutional network on MNIST with Adam, with the MLP quick start's
//! conveniences: a progress bar, test accuracy after every epoch, the checkpoint reloaded
//! and re-evaluated, and the curves as an SVG (`runs/mnist_cnn/`).
//!
//! ```text
//! cargo run --release --example mnist_cnn -- [--epochs 3] [--batch-size 64] [--lr 1e-3]
//!     [--schedule cosine|constant] [--data data/mnist] [--out runs/mnist_cnn] [--seed 0]
//!     [--train-images N] [--test-images N] [--graph] [--device cpu|cuda|cuda:N|torch-cpu]
//!     [--amp bf16|f16]
//! ```
//!
//! The model is [`ember::mnist::cnn`]: two 5x5 convolutions (16 and 32 channels, padded to
//! keep the size) each followed by ReLU and 2x2 max pooling, then a 1568-128-10 classifier.
//! Three epochs at batch 64 with a cosine-decayed learning rate reach about 99% test
//! accuracy.

mod common;

use common::quick_start::{self, Example};
use ember::mnist;

fn main() -> ember::Result<()> {
    quick_start::main(Example {
        name: "mnist_cnn",
        checkpoint: "mnist_cnn",
        description: "CNN (conv 5x5 16, pool, conv 5x5 32, pool, 1568-128-10)",
        epochs: 3,
        build: mnist::cnn,
    })?;
    Ok(())
}
