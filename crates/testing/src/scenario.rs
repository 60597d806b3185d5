//! The `scenarios` fixture format and replaying one scenario.
//!
//! A scenario is one computation that a Python function under `tools/parity/` ran in
//! PyTorch and a Rust test rebuilds with ember. The fixture names its leaves (`inputs`),
//! the forward values to compare (`outputs`) and the `.grad` of leaves after backward
//! (`grads`; `null` where PyTorch has none). [`run_scenario`] hands the rebuilt computation
//! a [`Case`] that gives out the inputs and compares what it reports, and fails the test on
//! any mismatch, on an ember error, and on any fixture tensor left unused, so a scenario
//! cannot pass by skipping part of itself.

use crate::compare::{Tolerance, optional_mismatch, tensor_mismatch};
use crate::fixture::FixtureTensor;
use ember_autograd::Var;
use ember_tensor::{Result, Tensor};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

/// A fixture file of scenarios: `{"scenarios": [...]}`.
#[derive(Debug, Deserialize)]
pub struct ScenarioFixture {
    /// The scenarios, in the order the script wrote them.
    pub scenarios: Vec<Scenario>,
}

impl ScenarioFixture {
    /// The scenario called `name`.
    pub fn get(&self, name: &str) -> Option<&Scenario> {
        self.scenarios.iter().find(|s| s.name == name)
    }

    /// Every scenario's name, in the fixture's order (repeats included, so that a test can
    /// catch them).
    pub fn names(&self) -> Vec<&str> {
        self.scenarios.iter().map(|s| s.name.as_str()).collect()
    }

    /// Asserts that the fixture at `path` lists each scenario once, and exactly the
    /// scenarios a test file rebuilds (`implemented`): a scenario added to the script but
    /// not to the tests, or the other way round, fails.
    pub fn assert_lists(&self, path: &str, implemented: &[&str]) {
        let in_fixture = self.names();
        let unique: BTreeSet<&str> = in_fixture.iter().copied().collect();
        assert_eq!(unique.len(), in_fixture.len(), "{path} lists a scenario twice: {in_fixture:?}");
        let implemented: BTreeSet<&str> = implemented.iter().copied().collect();
        let untested: Vec<_> = unique.difference(&implemented).collect();
        let missing: Vec<_> = implemented.difference(&unique).collect();
        assert!(untested.is_empty(), "fixture scenarios with no Rust counterpart here: {untested:?}");
        assert!(missing.is_empty(), "scenarios here that {path} lacks (regenerate it): {missing:?}");
    }
}

/// One scenario's data.
#[derive(Debug, Deserialize)]
pub struct Scenario {
    /// The name, that of the Python function that computed it.
    pub name: String,
    /// What it exercises, in words (shown when it fails).
    #[serde(default)]
    pub about: String,
    /// The leaves, by name.
    pub inputs: BTreeMap<String, FixtureTensor>,
    /// Forward values, by name.
    pub outputs: BTreeMap<String, FixtureTensor>,
    /// Gradients of leaves after backward, by name; `None` where PyTorch has none.
    pub grads: BTreeMap<String, Option<FixtureTensor>>,
}

/// One scenario being replayed: gives out the fixture's inputs, compares what the
/// computation reports, and remembers which fixture tensors were used.
pub struct Case<'a> {
    data: &'a Scenario,
    tol: Tolerance,
    used: BTreeSet<String>,
    failures: Vec<String>,
}

impl<'a> Case<'a> {
    /// The scenario's name.
    pub fn name(&self) -> &str {
        &self.data.name
    }

    /// The input `key` as a tensor in the fixture's dtype. Panics if the fixture has no such
    /// input: the test and the fixture disagree, and nothing else can be checked.
    #[track_caller]
    pub fn tensor(&mut self, key: &str) -> Tensor {
        let name = &self.data.name;
        let t =
            self.data.inputs.get(key).unwrap_or_else(|| panic!("scenario {name}: the fixture has no input {key:?}"));
        self.used.insert(format!("inputs/{key}"));
        t.to_tensor().unwrap_or_else(|e| panic!("scenario {name}: input {key:?} does not make a tensor: {e}"))
    }

    /// The input `key` as a leaf that requires grad (PyTorch: `requires_grad=True`).
    #[track_caller]
    pub fn param(&mut self, key: &str) -> Var {
        Var::param(self.tensor(key))
    }

    /// The input `key` as a leaf without grad: an input, a target, an index or a mask.
    #[track_caller]
    pub fn constant(&mut self, key: &str) -> Var {
        Var::new(self.tensor(key))
    }

    /// Compares the forward value `v` with output `key`.
    pub fn output(&mut self, key: &str, v: &Var) {
        if self.mark("outputs", key) {
            let found = self.data.outputs.get(key).map(|e| tensor_mismatch(&v.value(), e, self.tol));
            self.report(format!("output {key:?}"), found);
        }
    }

    /// Compares `v.grad()` as it is now with grad `key` (which must be absent where the
    /// fixture says `null`).
    pub fn grad(&mut self, key: &str, v: &Var) {
        if self.mark("grads", key) {
            let found = self.data.grads.get(key).map(|e| optional_mismatch(v.grad().as_ref(), e.as_ref(), self.tol));
            self.report(format!("grad {key:?}"), found);
        }
    }

    /// Records a problem the computation found itself.
    pub fn fail(&mut self, problem: impl Into<String>) {
        self.failures.push(problem.into());
    }

    /// Notes that `section/key` is compared; false (and a failure) if it already was.
    fn mark(&mut self, section: &str, key: &str) -> bool {
        let fresh = self.used.insert(format!("{section}/{key}"));
        if !fresh {
            self.fail(format!("{section} {key:?} compared twice (a mistake in the test)"));
        }
        fresh
    }

    /// Records the result of one comparison: `None` when the fixture lacks the key.
    fn report(&mut self, what: String, found: Option<Option<String>>) {
        match found {
            None => self.fail(format!("the fixture has no {what}")),
            Some(Some(mismatch)) => self.fail(format!("{what}: {mismatch}")),
            Some(None) => {}
        }
    }

    /// The fixture tensors nothing used or compared.
    fn unused(&self) -> Vec<String> {
        let d = self.data;
        let inputs = d.inputs.keys().map(|k| format!("inputs/{k}"));
        let outputs = d.outputs.keys().map(|k| format!("outputs/{k}"));
        let grads = d.grads.keys().map(|k| format!("grads/{k}"));
        inputs.chain(outputs).chain(grads).filter(|k| !self.used.contains(k)).collect()
    }
}

/// Replays scenario `name` of `fixture` (read from `path`, named in messages) with `build`,
/// comparing within `tol`, and panics listing every problem: a mismatch, an error from
/// ember, a fixture tensor never used, or a scenario missing from the fixture.
///
/// ```
/// use ember_testing::{ScenarioFixture, Tolerance, run_scenario};
/// let fixture: ScenarioFixture = serde_json::from_str(
///     r#"{"scenarios": [{"name": "square", "inputs": {"x": {"dtype": "f64", "shape": [1], "data": [3]}},
///         "outputs": {"y": {"dtype": "f64", "shape": [1], "data": [9]}},
///         "grads": {"x": {"dtype": "f64", "shape": [1], "data": [6]}}}]}"#,
/// ).unwrap();
/// run_scenario(&fixture, "square.json", "square", Tolerance::new(1e-5, 1e-5), |c| {
///     let x = c.param("x");
///     let y = x.square();
///     y.sum_all().backward()?;
///     c.output("y", &y);
///     c.grad("x", &x);
///     Ok(())
/// });
/// ```
#[track_caller]
pub fn run_scenario(
    fixture: &ScenarioFixture,
    path: &str,
    name: &str,
    tol: Tolerance,
    build: impl FnOnce(&mut Case<'_>) -> Result<()>,
) {
    let data = fixture
        .get(name)
        .unwrap_or_else(|| panic!("scenario {name}: missing from {path}; regenerate it with its tools/parity script"));
    let mut case = Case { data, tol, used: BTreeSet::new(), failures: Vec::new() };
    match build(&mut case) {
        Err(e) => case.fail(format!("ember returned an error: {e}")),
        Ok(()) => {
            for k in case.unused() {
                case.fail(format!("fixture tensor {k} was never used or compared"));
            }
        }
    }
    if !case.failures.is_empty() {
        let about = if data.about.is_empty() { String::new() } else { format!(" ({})", data.about) };
        panic!("PyTorch parity failed for scenario {name}{about}:\n  - {}", case.failures.join("\n  - "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::panic::{AssertUnwindSafe, catch_unwind};

    const FIXTURE: &str = r#"{"scenarios": [{"name": "double", "about": "y = 2x",
        "inputs": {"x": {"dtype": "f64", "shape": [2], "data": [1, 2]}},
        "outputs": {"y": {"dtype": "f64", "shape": [2], "data": [2, 4]}},
        "grads": {"x": {"dtype": "f64", "shape": [2], "data": [2, 2]}, "c": null}}]}"#;

    /// The panic message of replaying "double" with `build`, or `None` if it passed.
    fn failure(build: impl FnOnce(&mut Case<'_>) -> Result<()>) -> Option<String> {
        let fixture: ScenarioFixture = crate::parse_fixture("test.json", FIXTURE);
        let tol = Tolerance::new(1e-5, 1e-5);
        let r = catch_unwind(AssertUnwindSafe(|| run_scenario(&fixture, "test.json", "double", tol, build)));
        r.err().map(|p| p.downcast_ref::<String>().cloned().unwrap_or_default())
    }

    #[test]
    fn a_faithful_replay_passes_and_every_shortcut_fails() {
        let faithful = |c: &mut Case<'_>, factor: f64, check_c: bool| -> Result<()> {
            let x = c.param("x");
            let y = x.mul_scalar(factor);
            y.sum_all().backward()?;
            c.output("y", &y);
            c.grad("x", &x);
            if check_c {
                let unrelated = c.constant("x");
                c.grad("c", &unrelated);
            }
            Ok(())
        };
        assert_eq!(failure(|c| faithful(c, 2.0, true)), None);

        let wrong = failure(|c| faithful(c, 3.0, true)).expect("a wrong factor fails");
        assert!(wrong.contains("scenario double (y = 2x)"), "{wrong}");
        assert!(wrong.contains("output \"y\"") && wrong.contains("grad \"x\""), "{wrong}");

        let skipped = failure(|c| faithful(c, 2.0, false)).expect("an unchecked grad fails");
        assert!(skipped.contains("grads/c was never used"), "{skipped}");

        let twice = failure(|c| {
            faithful(c, 2.0, true)?;
            let x = c.param("x");
            c.output("y", &x);
            Ok(())
        })
        .expect("comparing twice fails");
        assert!(twice.contains("compared twice"), "{twice}");

        let error = failure(|c| {
            c.param("x").reshape([3])?;
            Ok(())
        })
        .expect("an ember error fails");
        assert!(error.contains("ember returned an error"), "{error}");

        let unknown = failure(|c| {
            faithful(c, 2.0, true)?;
            let x = c.constant("x");
            c.output("z", &x);
            Ok(())
        })
        .expect("an unknown output fails");
        assert!(unknown.contains("the fixture has no output \"z\""), "{unknown}");
    }
}
