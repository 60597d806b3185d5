//! The preamble every PyTorch parity test file shares: its committed fixture, parsed once
//! ([`LazyFixture`], named by [`parity_fixture!`](crate::parity_fixture)), and for the files of
//! `scenarios` one `#[test]` per scenario plus the check that the fixture and the file list
//! the same ones ([`parity_suite!`](macro@crate::parity_suite)).

use crate::compare::Tolerance;
use crate::fixture::parse_fixture;
use crate::scenario::{Case, ScenarioFixture, run_scenario};
use ember_tensor::Result;
use serde::de::DeserializeOwned;
use std::sync::OnceLock;

/// A fixture file compiled into a test binary, parsed on first use and then shared by every
/// test of the binary (they run on several threads).
///
/// ```
/// use ember_testing::LazyFixture;
/// static FIXTURE: LazyFixture<Vec<u32>> = LazyFixture::new("tools/parity/fixtures/n.json", "[1, 2]");
/// assert_eq!(FIXTURE.get(), &[1, 2]);
/// assert_eq!(FIXTURE.path(), "tools/parity/fixtures/n.json");
/// ```
pub struct LazyFixture<T = ScenarioFixture> {
    path: &'static str,
    text: &'static str,
    parsed: OnceLock<T>,
}

impl<T> LazyFixture<T> {
    /// The fixture whose contents are `text`, read from `path` (relative to the repository
    /// root; it names the file in messages).
    pub const fn new(path: &'static str, text: &'static str) -> Self {
        LazyFixture { path, text, parsed: OnceLock::new() }
    }

    /// The path the fixture was read from, relative to the repository root.
    pub fn path(&self) -> &'static str {
        self.path
    }
}

impl<T: DeserializeOwned> LazyFixture<T> {
    /// The parsed fixture. Panics naming the file when it does not parse: a test cannot go
    /// on without its fixture.
    #[track_caller]
    pub fn get(&self) -> &T {
        self.parsed.get_or_init(|| parse_fixture(self.path, self.text))
    }
}

impl LazyFixture<ScenarioFixture> {
    /// Replays scenario `name` with `build`, comparing within `tol`, and panics listing
    /// every problem (see [`run_scenario`]).
    #[track_caller]
    pub fn run(&self, name: &str, tol: Tolerance, build: impl FnOnce(&mut Case<'_>) -> Result<()>) {
        run_scenario(self.get(), self.path, name, tol, build);
    }

    /// Asserts that the fixture lists each scenario once, and exactly `implemented` (see
    /// [`ScenarioFixture::assert_lists`]).
    #[track_caller]
    pub fn assert_lists(&self, implemented: &[&str]) {
        self.get().assert_lists(self.path, implemented);
    }
}

/// The tolerance of the parity suites that replay each computation in `f64` and, under a
/// name ending in `_f32`, in `f32`: `1e-10 + 1e-10 * |expected|` for `f64` (a few ulps of
/// rounding through a short chain of ops), `1e-5 + 1e-5 * |expected|` for `f32` (the same
/// chain accumulated in another order than PyTorch's).
///
/// ```
/// use ember_testing::{Tolerance, f64_or_f32_by_name};
/// assert_eq!(f64_or_f32_by_name("conv2d_basic"), Tolerance::new(1e-10, 1e-10));
/// assert_eq!(f64_or_f32_by_name("conv2d_basic_f32"), Tolerance::new(1e-5, 1e-5));
/// ```
pub fn f64_or_f32_by_name(scenario: &str) -> Tolerance {
    if scenario.ends_with("_f32") { Tolerance::new(1e-5, 1e-5) } else { Tolerance::new(1e-10, 1e-10) }
}

/// A [`LazyFixture`] of the file `tools/parity/fixtures/<name>`, compiled into the test
/// binary. The invoking crate must sit two levels below the repository root
/// (`crates/<crate>`), as every ember crate does.
///
/// ```
/// use ember_testing::LazyFixture;
/// static FIXTURE: LazyFixture = ember_testing::parity_fixture!("higher_order.json");
/// assert_eq!(FIXTURE.path(), "tools/parity/fixtures/higher_order.json");
/// assert!(FIXTURE.get().names().contains(&"hvp_mlp"));
/// ```
#[macro_export]
macro_rules! parity_fixture {
    ($name:literal) => {
        $crate::LazyFixture::new(
            concat!("tools/parity/fixtures/", $name),
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/parity/fixtures/", $name)),
        )
    };
}

/// The parity suite of a `scenarios` fixture: the fixture `tools/parity/fixtures/<fixture>`
/// as a `static FIXTURE`, one `#[test]` per scenario that replays it with `build::<name>`
/// (a function `fn(&mut Case<'_>) -> Result<()>` in the invoking file's `mod build`) within
/// `tolerance(name)`, and the test `fixture_and_tests_list_the_same_scenarios`, which fails
/// when the fixture and the list disagree, so that no scenario is skipped silently.
///
/// ```
/// use ember_tensor::Result;
/// use ember_testing::{Case, Tolerance};
///
/// ember_testing::parity_suite! {
///     fixture: "higher_order.json",
///     tolerance: |_| Tolerance::new(1e-5, 1e-5),
///     scenarios: [wgan_gp_tanh, wgan_gp_leaky_relu, hvp_mlp, input_gradient_penalty],
/// }
///
/// /// The scenarios, each the computation of the Python function of the same name: its
/// /// inputs from `c.param` / `c.constant`, its values to `c.output`, gradients to `c.grad`.
/// mod build {
///     use super::*;
///     pub fn wgan_gp_tanh(c: &mut Case<'_>) -> Result<()> {
///         // ...
/// #       let _ = c;
///         Ok(())
///     }
/// #   pub fn wgan_gp_leaky_relu(_: &mut Case<'_>) -> Result<()> { Ok(()) }
/// #   pub fn hvp_mlp(_: &mut Case<'_>) -> Result<()> { Ok(()) }
/// #   pub fn input_gradient_penalty(_: &mut Case<'_>) -> Result<()> { Ok(()) }
///     // ... one function per scenario.
/// }
/// # fn main() {
/// #     FIXTURE.assert_lists(IMPLEMENTED);
/// # }
/// ```
#[macro_export]
macro_rules! parity_suite {
    (fixture: $file:literal, tolerance: $tol:expr, scenarios: [$($name:ident),* $(,)?] $(,)?) => {
        /// The fixture this file replays.
        static FIXTURE: $crate::LazyFixture = $crate::parity_fixture!($file);

        /// Every scenario this file rebuilds, in the fixture's order.
        const IMPLEMENTED: &[&str] = &[$(stringify!($name)),*];

        $(
            #[test]
            fn $name() {
                let tolerance: fn(&str) -> $crate::Tolerance = $tol;
                FIXTURE.run(stringify!($name), tolerance(stringify!($name)), build::$name);
            }
        )*

        #[test]
        fn fixture_and_tests_list_the_same_scenarios() {
            FIXTURE.assert_lists(IMPLEMENTED);
        }
    };
}
