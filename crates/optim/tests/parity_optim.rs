//! PyTorch parity: optimizer trajectories, scheduler learning rates and `clip_grad_norm_`
//! replayed with ember and compared with what PyTorch computed.
//!
//! The expected numbers are committed in `tools/parity/fixtures/optim.json`, written by
//! `tools/parity/optim.py` (its docstring describes the problem and the format; regenerate
//! with `python tools/parity/optim.py` in an environment with torch), so this test needs no
//! Python. Each optimizer scenario runs 20 steps on the fixture's problem, recomputing the
//! loss and its gradients with ember's autograd at every step, and compares every parameter
//! after every step, the learning rate each step used, and the optimizer's state after the
//! last step.
//!
//! Tolerances (`|ember - torch| <= tol · (1 + |torch|)`): f64 scenarios at 1e-10, far
//! tighter than the 1e-5 the project asks for, because the kernels follow ATen's operations
//! in ATen's order and agree to rounding (the largest difference measured is 6e-15); a
//! misplaced `eps` or bias correction shows up at 1e-8 or above. f32 scenarios at 1e-5: the
//! f32 gradients come from reductions summed in another order than PyTorch's (about 1e-7
//! relative each), and 20 steps of feedback through the parameters amplify that (the
//! largest difference measured is 9.4e-7, in centered RMSprop with momentum, whose
//! `√(s - ḡ²)` cancels digits).

use ember_autograd::Var;
use ember_optim::{
    Adam, AdamConfig, AdamW, AdamWConfig, CosineAnnealingLR, LambdaLR, LrScheduler, Optimizer, OptimizerState, RmsProp,
    RmsPropConfig, Sgd, SgdConfig, StepLR, clip_grad_norm_,
};
use ember_tensor::{Error, Result, Tensor};
use ember_testing::compare::values_like;
use ember_testing::{FixtureTensor, LazyFixture};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

static FIXTURE: LazyFixture<Fixture> = ember_testing::parity_fixture!("optim.json");
const TOL_F64: f64 = 1e-10;
const TOL_F32: f64 = 1e-5;
const PARAM_NAMES: [&str; 4] = ["W", "b", "late", "unused"];

#[derive(Deserialize)]
struct Fixture {
    steps: usize,
    late_from: usize,
    problem: BTreeMap<String, FixtureTensor>,
    optimizers: Vec<OptimizerCase>,
    schedulers: Vec<SchedulerCase>,
    clip: Vec<ClipCase>,
}

#[derive(Deserialize)]
struct OptimizerCase {
    name: String,
    optimizer: String,
    config: BTreeMap<String, Value>,
    dtype: String,
    scheduler: Option<Value>,
    lrs: Vec<f64>,
    trajectory: BTreeMap<String, Vec<FixtureTensor>>,
    state: BTreeMap<String, Value>,
}

#[derive(Deserialize)]
struct SchedulerCase {
    name: String,
    scheduler: Value,
    base_lr: f64,
    lrs: Vec<f64>,
}

#[derive(Deserialize)]
struct ClipCase {
    name: String,
    dtype: String,
    max_norm: f64,
    norm_type: Value,
    grads: BTreeMap<String, Option<FixtureTensor>>,
    total_norm: f64,
    clipped: BTreeMap<String, Option<FixtureTensor>>,
}

/// The named functions of `LAMBDAS` in `tools/parity/optim.py`.
fn lambda(name: &str) -> Option<fn(usize) -> f64> {
    match name {
        "exp_0.9" => Some(|e| 0.9f64.powf(e as f64)),
        "warmup_4" => Some(|e| ((e + 1) as f64 / 4.0).min(1.0)),
        "halve_every_3_plus_linear" => Some(|e| 0.5f64.powf((e / 3) as f64) + 0.01 * e as f64),
        _ => None,
    }
}

/// Reads the numeric and boolean settings of a fixture config.
struct Config<'a>(&'a BTreeMap<String, Value>);

impl Config<'_> {
    fn num(&self, key: &str, default: f64) -> f64 {
        self.0.get(key).and_then(Value::as_f64).unwrap_or(default)
    }
    fn flag(&self, key: &str, default: bool) -> bool {
        self.0.get(key).and_then(Value::as_bool).unwrap_or(default)
    }
    fn betas(&self, default: (f64, f64)) -> (f64, f64) {
        match self
            .0
            .get("betas")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_f64).collect::<Vec<_>>())
        {
            Some(b) if b.len() == 2 => (b[0], b[1]),
            _ => default,
        }
    }
    /// Keys this reader does not know, which would otherwise be ignored silently.
    fn unknown(&self) -> Vec<&str> {
        const KNOWN: [&str; 10] =
            ["lr", "momentum", "dampening", "nesterov", "weight_decay", "betas", "eps", "amsgrad", "alpha", "centered"];
        self.0.keys().map(String::as_str).filter(|k| !KNOWN.contains(k)).collect()
    }
}

fn build_optimizer(kind: &str, config: &BTreeMap<String, Value>, params: Vec<Var>) -> Result<Box<dyn Optimizer>> {
    let c = Config(config);
    if !c.unknown().is_empty() {
        return Err(Error::invalid("fixture", format!("unknown config keys {:?}", c.unknown())));
    }
    Ok(match kind {
        "sgd" => {
            let d = SgdConfig::default();
            Box::new(Sgd::new(
                params,
                SgdConfig {
                    lr: c.num("lr", d.lr),
                    momentum: c.num("momentum", d.momentum),
                    dampening: c.num("dampening", d.dampening),
                    nesterov: c.flag("nesterov", d.nesterov),
                    weight_decay: c.num("weight_decay", d.weight_decay),
                },
            )?)
        }
        "adam" => {
            let d = AdamConfig::default();
            Box::new(Adam::new(
                params,
                AdamConfig {
                    lr: c.num("lr", d.lr),
                    betas: c.betas(d.betas),
                    eps: c.num("eps", d.eps),
                    weight_decay: c.num("weight_decay", d.weight_decay),
                    amsgrad: c.flag("amsgrad", d.amsgrad),
                },
            )?)
        }
        "adamw" => {
            let d = AdamWConfig::default();
            Box::new(AdamW::new(
                params,
                AdamWConfig {
                    lr: c.num("lr", d.lr),
                    betas: c.betas(d.betas),
                    eps: c.num("eps", d.eps),
                    weight_decay: c.num("weight_decay", d.weight_decay),
                    amsgrad: c.flag("amsgrad", d.amsgrad),
                },
            )?)
        }
        "rmsprop" => {
            let d = RmsPropConfig::default();
            Box::new(RmsProp::new(
                params,
                RmsPropConfig {
                    lr: c.num("lr", d.lr),
                    alpha: c.num("alpha", d.alpha),
                    eps: c.num("eps", d.eps),
                    weight_decay: c.num("weight_decay", d.weight_decay),
                    momentum: c.num("momentum", d.momentum),
                    centered: c.flag("centered", d.centered),
                },
            )?)
        }
        other => return Err(Error::invalid("fixture", format!("unknown optimizer {other:?}"))),
    })
}

fn build_scheduler(spec: &Value, opt: &mut dyn Optimizer) -> Result<Box<dyn LrScheduler>> {
    let bad = || Error::invalid("fixture", format!("bad scheduler {spec}"));
    let num = |k: &str| spec.get(k).and_then(Value::as_f64).ok_or_else(bad);
    let count = |k: &str| spec.get(k).and_then(Value::as_u64).map(|v| v as usize).ok_or_else(bad);
    Ok(match spec.get("kind").and_then(Value::as_str) {
        Some("step") => Box::new(StepLR::new(opt, count("step_size")?, num("gamma")?)?),
        Some("cosine") => Box::new(CosineAnnealingLR::new(opt, count("t_max")?, num("eta_min")?)?),
        Some("lambda") => {
            let f = spec.get("fn").and_then(Value::as_str).and_then(lambda).ok_or_else(bad)?;
            Box::new(LambdaLR::new(opt, f))
        }
        _ => return Err(bad()),
    })
}

/// Compares values, recording the largest scaled difference and naming mismatches.
struct Check {
    tol: f64,
    worst: f64,
    failures: Vec<String>,
}

impl Check {
    fn new(tol: f64) -> Check {
        Check { tol, worst: 0.0, failures: Vec::new() }
    }

    fn scalar(&mut self, what: &str, got: f64, want: f64) {
        let err = (got - want).abs() / (1.0 + want.abs());
        self.worst = self.worst.max(err);
        if err.is_nan() || err > self.tol {
            self.failures.push(format!("{what}: ember {got}, torch {want}"));
        }
    }

    fn tensor(&mut self, what: &str, got: &Tensor, want: &FixtureTensor) {
        let got = match values_like(got, want) {
            Ok(v) => v,
            Err(e) => return self.failures.push(format!("{what}: {e}")),
        };
        let before = self.failures.len();
        for (i, (&g, &w)) in got.iter().zip(&want.data).enumerate() {
            self.scalar(&format!("{what}[{i}]"), g, w);
            if self.failures.len() > before + 3 {
                // A few elements say enough about one tensor.
                self.failures.truncate(before + 3);
                break;
            }
        }
    }
}

/// The fixture's loss at 1-based `step`: a linear regression, plus a quadratic in `late`
/// from step `late_from` on.
fn loss_at(step: usize, f: &Fixture, consts: &BTreeMap<&str, Var>, params: &BTreeMap<&str, Var>) -> Result<Var> {
    let d = ((consts["x"].matmul(&params["W"].t()?)? + &params["b"])? - &consts["y"])?;
    let mut loss = (&d * &d)?.mean_all();
    if step >= f.late_from {
        let e = (&params["late"] - &consts["late_target"])?;
        loss = (loss + (&e * &e)?.sum_all() * 0.5)?;
    }
    Ok(loss)
}

fn run_optimizer_case(f: &Fixture, case: &OptimizerCase) -> Result<Check> {
    let dtype = case.dtype.as_str();
    let mut check = Check::new(if dtype == "f32" { TOL_F32 } else { TOL_F64 });
    let mut params = BTreeMap::new();
    for name in PARAM_NAMES {
        params.insert(name, Var::param(f.problem[name].to_tensor_as(dtype)?));
    }
    let mut consts = BTreeMap::new();
    for name in ["x", "y", "late_target"] {
        consts.insert(name, Var::new(f.problem[name].to_tensor_as(dtype)?));
    }
    let list: Vec<Var> = PARAM_NAMES.iter().map(|n| params[n].clone()).collect();
    let mut opt = build_optimizer(&case.optimizer, &case.config, list)?;
    let mut sched = match &case.scheduler {
        Some(spec) => Some(build_scheduler(spec, opt.as_mut())?),
        None => None,
    };
    for step in 1..=f.steps {
        opt.zero_grad();
        loss_at(step, f, &consts, &params)?.backward()?;
        check.scalar(&format!("lr used by step {step}"), opt.lr(), case.lrs[step - 1]);
        opt.step()?;
        if let Some(s) = &mut sched {
            s.step(opt.as_mut());
        }
        for name in PARAM_NAMES {
            check.tensor(&format!("{name} after step {step}"), &params[name].value(), &case.trajectory[name][step - 1]);
        }
    }
    compare_state(&mut check, &opt.state_dict(), &case.state);
    Ok(check)
}

/// The optimizer's state after the last step against PyTorch's `optimizer.state`, which
/// uses the same buffer names.
fn compare_state(check: &mut Check, got: &OptimizerState, want: &BTreeMap<String, Value>) {
    let per_param = |k: &&String| k.starts_with("state.");
    let mut got_keys: Vec<&String> = got.scalars.keys().chain(got.tensors.keys()).filter(per_param).collect();
    got_keys.sort();
    let want_keys: Vec<&String> = want.keys().collect();
    if got_keys != want_keys {
        check.failures.push(format!("state entries: ember {got_keys:?}, torch {want_keys:?}"));
        return;
    }
    for (key, value) in want {
        match (value.as_f64(), got.scalars.get(key), got.tensors.get(key)) {
            (Some(w), Some(&g), _) => check.scalar(key, g, w),
            (None, _, Some(t)) => match serde_json::from_value::<FixtureTensor>(value.clone()) {
                Ok(w) => check.tensor(key, t, &w),
                Err(e) => check.failures.push(format!("{key}: bad fixture tensor: {e}")),
            },
            _ => check.failures.push(format!("{key}: ember and torch disagree on its kind")),
        }
    }
}

#[test]
fn optimizer_trajectories_match_pytorch() {
    let f = FIXTURE.get();
    let mut failures = Vec::new();
    for case in &f.optimizers {
        match run_optimizer_case(f, case) {
            Ok(c) => {
                eprintln!("{:<42} max scaled difference {:.1e}", case.name, c.worst);
                failures.extend(c.failures.into_iter().map(|m| format!("{}: {m}", case.name)));
            }
            Err(e) => failures.push(format!("{}: ember error: {e}", case.name)),
        }
    }
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn unused_parameter_never_moves_and_late_one_waits() {
    // The trajectories above compare every parameter; this states the two special ones
    // outright for every scenario: `unused` keeps its exact initial value, `late` keeps its
    // value until its first gradient.
    let f = FIXTURE.get();
    for case in &f.optimizers {
        let start = &f.problem["unused"].data;
        let start = start.iter().map(|&v| if case.dtype == "f32" { f64::from(v as f32) } else { v });
        let start: Vec<f64> = start.collect();
        for (i, t) in case.trajectory["unused"].iter().enumerate() {
            assert_eq!(t.data, start, "{}: torch moved `unused` at step {}", case.name, i + 1);
        }
        let late = &case.trajectory["late"];
        for i in 1..f.late_from - 1 {
            assert_eq!(late[i].data, late[0].data, "{}: torch moved `late` before its gradient", case.name);
        }
    }
}

#[test]
fn schedulers_match_pytorch() {
    let f = FIXTURE.get();
    let mut failures = Vec::new();
    for case in &f.schedulers {
        let w = Var::param(Tensor::scalar(0.0f32));
        let run = || -> Result<Check> {
            let mut check = Check::new(1e-12);
            let mut opt = Sgd::with_params(vec![w.clone()]).lr(case.base_lr).build()?;
            let mut sched = build_scheduler(&case.scheduler, &mut opt)?;
            check.scalar("lr after construction", opt.lr(), case.lrs[0]);
            check.scalar("get_lr after construction", sched.get_lr(), case.lrs[0]);
            for (epoch, &want) in case.lrs.iter().enumerate().skip(1) {
                sched.step(&mut opt);
                check.scalar(&format!("lr at epoch {epoch}"), opt.lr(), want);
                check.scalar(&format!("get_lr at epoch {epoch}"), sched.get_lr(), want);
                if sched.last_epoch() != epoch {
                    check.failures.push(format!("last_epoch {} at epoch {epoch}", sched.last_epoch()));
                }
            }
            Ok(check)
        };
        match run() {
            Ok(c) => failures.extend(c.failures.into_iter().map(|m| format!("{}: {m}", case.name))),
            Err(e) => failures.push(format!("{}: ember error: {e}", case.name)),
        }
    }
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn clip_grad_norm_matches_pytorch() {
    let f = FIXTURE.get();
    let mut failures = Vec::new();
    for case in &f.clip {
        let run = || -> Result<Check> {
            let norm_type = match &case.norm_type {
                Value::String(s) if s == "inf" => f64::INFINITY,
                v => v.as_f64().ok_or_else(|| Error::invalid("fixture", format!("bad norm_type {v}")))?,
            };
            let mut check = Check::new(if case.dtype == "f32" { TOL_F32 } else { 1e-12 });
            let mut params = Vec::new();
            for name in PARAM_NAMES {
                let g = case.grads[name].as_ref().map(|g| g.to_tensor_as(&case.dtype)).transpose()?;
                let shape = case.clipped[name].as_ref().map(|t| t.shape.clone()).unwrap_or(vec![3]);
                let p = Var::param(Tensor::zeros(
                    shape,
                    if case.dtype == "f32" { ember_tensor::DType::F32 } else { ember_tensor::DType::F64 },
                )?);
                p.set_grad(g)?;
                params.push(p);
            }
            let total = clip_grad_norm_(&params, case.max_norm, norm_type)?;
            check.scalar("total norm", total, case.total_norm);
            for (name, p) in PARAM_NAMES.iter().zip(&params) {
                match (&case.clipped[*name], p.grad()) {
                    (Some(want), Some(got)) => check.tensor(&format!("clipped {name}"), &got, want),
                    (None, None) => {}
                    (want, got) => check.failures.push(format!(
                        "{name}: torch has a gradient: {}, ember: {}",
                        want.is_some(),
                        got.is_some()
                    )),
                }
            }
            Ok(check)
        };
        match run() {
            Ok(c) => failures.extend(c.failures.into_iter().map(|m| format!("{}: {m}", case.name))),
            Err(e) => failures.push(format!("{}: ember error: {e}", case.name)),
        }
    }
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn fixture_covers_every_optimizer_scheduler_and_norm() {
    let f = FIXTURE.get();
    let kinds: Vec<&str> = f.optimizers.iter().map(|c| c.optimizer.as_str()).collect();
    for k in ["sgd", "adam", "adamw", "rmsprop"] {
        assert!(kinds.contains(&k), "no {k} scenario in {}", FIXTURE.path());
    }
    let f32_kinds: Vec<&str> = f.optimizers.iter().filter(|c| c.dtype == "f32").map(|c| c.optimizer.as_str()).collect();
    for k in ["sgd", "adam", "adamw", "rmsprop"] {
        assert!(f32_kinds.contains(&k), "no f32 {k} scenario in {}", FIXTURE.path());
    }
    let scheds: Vec<&str> =
        f.schedulers.iter().filter_map(|c| c.scheduler.get("kind").and_then(Value::as_str)).collect();
    for k in ["step", "cosine", "lambda"] {
        assert!(scheds.contains(&k), "no {k} scheduler scenario in {}", FIXTURE.path());
    }
    assert!(f.clip.iter().any(|c| c.norm_type == "inf"), "no infinity-norm clip scenario");
    assert!(f.clip.iter().any(|c| c.norm_type == 2.0), "no 2-norm clip scenario");
    assert!(f.optimizers.iter().all(|c| c.lrs.len() == f.steps), "every scenario records one lr per step");
}
