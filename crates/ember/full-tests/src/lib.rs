//! Integration tests of the `ember` facade that need more than what its examples build:
//! the optional modules (`ember::onnx`, `ember::pnnx`, `ember::distributed`, all turned on
//! here through the `full` feature) or ember-testing. The tests are in `tests/`; this
//! library is empty.
//!
//! They live in their own package so that the `ember` package's dev-dependencies, which
//! every example builds, stay what the examples need, and the package is left out of the
//! workspace's `default-members` so that a bare `cargo run --release --example mnist` does
//! not turn those modules on for the whole build (Cargo unifies features over the packages
//! a command selects). `cargo test --workspace` runs these tests; so does
//! `cargo test -p ember-full-tests`.
