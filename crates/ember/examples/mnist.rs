//! Trains the 784-256-128-10 MLP on MNIST with Adam and shows it working: a progress bar
//! with loss and throughput, test accuracy after every epoch, the saved model reloaded and
//! re-evaluated, and the loss/accuracy curves as an SVG.
//!
//! ```text
//! cargo run --release --example mnist -- [--epochs 3] [--batch-size 64] [--lr 1e-3]
//!     [--schedule cosine|constant] [--data data/mnist] [--out runs/mnist] [--seed 0]
//!     [--train-images N] [--test-images N] [--graph] [--device cpu|cuda|cuda:N|torch-cpu]
//!     [--amp bf16|f16]
//! ```
//!
//! Inputs are standardised with MNIST's pixel mean and deviation, and the learning rate
//! decays from `--lr` to zero along a cosine over the run: together they take the test
//! accuracy after 3 epochs from about 97.2–97.5% (plain `x / 255`, constant rate) to about
//! 97.9–98.0% across seeds. `--schedule constant` trains with Adam at a fixed `--lr`.

mod common;

use common::quick_start::{self, Example};
use ember::mnist;

fn main() -> ember::Result<()> {
    quick_start::main(Example {
        name: "mnist",
        checkpoint: "mnist_mlp",
        description: "784-256-128-10 MLP",
        epochs: 3,
        build: mnist::mlp,
    })?;
    Ok(())
}
