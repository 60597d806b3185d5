//! Test support shared by ember's own test suites (not published).
//!
//! ember's PyTorch parity tests replay computations whose expected numbers a script under
//! `tools/parity/` wrote into committed JSON fixtures. Every fixture stores tensors the same
//! way and every test compares them the same way, so both live here once:
//!
//! - [`elementwise`]: the one table of elementwise-op cases ([`UNARY`], and `BINARY` for
//!   functions of two tensors) that drives the
//!   tensor crate's reference tests and the autograd crate's gradient checks;
//! - [`fixture`]: a fixture tensor ([`FixtureTensor`]) and parsing a fixture file;
//! - [`compare`]: how close a value must be ([`Tolerance`]) and what a mismatch reports;
//! - [`prop`]: the inputs and strategies of the API property tests;
//! - [`scenario`]: the `scenarios` fixture format (inputs, outputs and gradients by name)
//!   and [`run_scenario`], which replays one and checks that every fixture tensor was used;
//! - [`parity_preamble`]: the preamble of a parity test file, once: its fixture parsed once
//!   ([`LazyFixture`], [`parity_fixture!`]) and, for a `scenarios` fixture, one test per
//!   scenario plus the check that the file and the fixture list the same ones
//!   ([`parity_suite!`]);
//! - [`cuda`]: the CPU-against-device harness of the CUDA suites ([`require_cuda!`],
//!   [`cuda::Parity`], [`cuda::Tol`]);
//! - [`gradcheck`]: seeded inputs and first- and second-order gradient checks.

pub mod compare;
pub mod cuda;
pub mod elementwise;
pub mod fixture;
pub mod gradcheck;
pub mod parity_preamble;
pub mod prop;
pub mod scenario;

pub use compare::{Tolerance, tensor_mismatch};
pub use elementwise::{Grad, UNARY, UnaryCase};
pub use fixture::{FixtureTensor, parse_fixture};
pub use parity_preamble::{LazyFixture, f64_or_f32_by_name};
pub use scenario::{Case, Scenario, ScenarioFixture, run_scenario};
