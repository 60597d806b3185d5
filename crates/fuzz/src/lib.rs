//! A fuzz driver for ember's file readers that runs on stable Rust.
//!
//! Each target (safetensors state dicts, optimizer state, IDX raw and gzip, MNIST
//! directories) starts from the seed files in `corpus/<target>/`, mutates them with a
//! seeded RNG (bit flips, truncation, splices, boundary values, and format-aware lies in
//! length fields, dimensions, shapes and offsets) and reads every input from disk. An input
//! fails when a reader panics, runs past a time limit, allocates far more than the input's
//! size, or rejects it with an error that does not name the file.
//!
//! ```text
//! cargo run --release -p ember-fuzz -- --target idx --seconds 600
//! cargo run --release -p ember-fuzz -- --target all --seconds 60 --seed 7
//! ```
//!
//! The counting allocator must be the process's global allocator for the allocation check;
//! the binary and the bounded test install it.

pub mod alloc_count;
pub mod corpus;
pub mod driver;
pub mod mutate;
pub mod rng;
pub mod seeds;
pub mod structured;
pub mod target;

pub use driver::{Config, Failure, Report, run};
pub use target::{Input, Target};
