//! Code shared by the examples. Cargo builds only the files at the top of `examples/` (and
//! `examples/*/main.rs`) as examples, so this directory is a module, not an example.
//!
//! Each example uses its own subset of these helpers; the rest would be dead code in that
//! example's build, so the lint is off for the module as a whole.
#![allow(dead_code)]

pub mod amp;
pub mod cli;
pub mod image;
pub mod plot;
pub mod progress;
pub mod quick_start;
