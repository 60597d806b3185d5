//! Code shared by the MNIST quick starts (`mnist`, `mnist_cnn`). Cargo builds only the
//! examples at the top of `examples/`, so this directory is a module, not an example.

pub mod quick_start;
