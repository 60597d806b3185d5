//! `GradScaler` against PyTorch's `torch.amp.GradScaler("cpu")`, from fixtures written by
//! `tools/parity/grad_scaler.py`: the scripted iterations (NaN, overflowing and `-inf`
//! gradients in chosen steps, manual `unscale_`, a manual `update(new_scale)`, odd growth and
//! backoff factors, growth past `f32`'s range) replay bit for bit: the same steps skipped,
//! the same unscaled gradients, parameters, scales and growth trackers. PyTorch's usual
//! training checkpoint (`{"optimizer": ..., "scaler": ...}`) resumes the run, PyTorch's
//! `scaler.state_dict()` file reads back as ember's own state, and ember's written state is
//! byte for byte `ember_scaler_state.pt`, which the script checked PyTorch loads.
//! `EMBER_WRITE_PT_FIXTURES=1` writes that file instead.

use ember_autograd::Var;
use ember_io::pt::load_pt_value;
use ember_optim::{GradScaler, GradScalerConfig, GradScalerState, Optimizer, OptimizerState, Sgd, SgdConfig};
use ember_tensor::{Result, Tensor};
use serde_json::Value;
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/parity/fixtures/grad_scaler")).join(name)
}

fn scenarios() -> Vec<Value> {
    let text = std::fs::read_to_string(fixture("grad_scaler.json")).unwrap();
    let all: Value = serde_json::from_str(&text).unwrap();
    all["scenarios"].as_array().unwrap().clone()
}

fn scenario(name: &str) -> Value {
    scenarios().into_iter().find(|s| s["name"] == name).unwrap()
}

/// A float32 tensor from the list of its bit patterns (as signed 32-bit integers).
fn tensor(bits: &Value, shape: &[usize]) -> Tensor {
    let v: Vec<f32> =
        bits.as_array().unwrap().iter().map(|b| f32::from_bits(b.as_i64().unwrap() as i32 as u32)).collect();
    Tensor::from_vec(v, shape).unwrap()
}

/// `ours` equals PyTorch's bits, NaN matching NaN whatever its payload.
#[track_caller]
fn same_bits(what: &str, ours: &Tensor, theirs: &Value) {
    let theirs = tensor(theirs, ours.shape()).to_vec::<f32>().unwrap();
    let ours = ours.to_vec::<f32>().unwrap();
    for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        assert!(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()), "{what}[{i}]: {a:e}, PyTorch {b:e}");
    }
}

/// The two parameters of the scripted loss, their optimizer and the scaler.
struct Run {
    w: Var,
    b: Var,
    opt: Sgd,
    scaler: GradScaler,
}

fn sgd_config(s: &Value) -> SgdConfig {
    SgdConfig {
        lr: s["sgd"]["lr"].as_f64().unwrap(),
        momentum: s["sgd"]["momentum"].as_f64().unwrap(),
        ..Default::default()
    }
}

fn scaler_config(s: &Value) -> GradScalerConfig {
    let c = &s["scaler"];
    GradScalerConfig {
        init_scale: c["init_scale"].as_f64().unwrap(),
        growth_factor: c["growth_factor"].as_f64().unwrap(),
        backoff_factor: c["backoff_factor"].as_f64().unwrap(),
        growth_interval: c["growth_interval"].as_u64().unwrap(),
        enabled: true,
    }
}

/// A run from the scenario's initial parameters.
fn start(s: &Value) -> Result<Run> {
    let w = Var::param(tensor(&s["w0"], &[5]));
    let b = Var::param(tensor(&s["b0"], &[2, 3]));
    let opt = Sgd::new(vec![w.clone(), b.clone()], sgd_config(s))?;
    let scaler = GradScaler::with_config(scaler_config(s))?;
    Ok(Run { w, b, opt, scaler })
}

/// One scripted iteration, checked against what PyTorch did in it.
fn iterate(run: &mut Run, step: &Value, what: &str) -> Result<()> {
    let x = Var::new(tensor(&step["x"], &[5]));
    let z = Var::new(tensor(&step["z"], &[2, 3]));
    run.opt.zero_grad();
    assert_eq!(run.scaler.get_scale(), step["scale_used"].as_f64().unwrap(), "{what}: the scale used");
    let loss = ((&run.w * &x)?.sum_all() + (&run.b * &z)?.sum_all())?;
    run.scaler.scale(&loss)?.backward()?;
    if let Some(inject) = step["inject"].as_object() {
        let p = if inject["param"] == "w" { &run.w } else { &run.b };
        let mut g = p.grad().unwrap().to_vec::<f32>()?;
        g[inject["index"].as_u64().unwrap() as usize] = inject["value"].as_str().unwrap().parse::<f32>().unwrap();
        p.set_grad(Some(Tensor::from_vec(g, p.shape().dims())?))?;
    }
    if step["manual_unscale"].as_bool().unwrap() {
        run.scaler.unscale_(&run.opt)?;
    }
    let stepped = run.scaler.step(&mut run.opt)?;
    assert_eq!(stepped, step["stepped"].as_bool().unwrap(), "{what}: stepped");
    same_bits(&format!("{what}: w.grad"), &run.w.grad().unwrap(), &step["grad_w"]);
    same_bits(&format!("{what}: b.grad"), &run.b.grad().unwrap(), &step["grad_b"]);
    same_bits(&format!("{what}: w"), &run.w.value(), &step["w"]);
    same_bits(&format!("{what}: b"), &run.b.value(), &step["b"]);
    match step["new_scale"].as_f64() {
        Some(new_scale) => run.scaler.update_to(new_scale)?,
        None => run.scaler.update()?,
    }
    assert_eq!(run.scaler.get_scale(), step["scale_after"].as_f64().unwrap(), "{what}: the scale after update");
    assert_eq!(run.scaler.growth_tracker(), step["tracker_after"].as_u64().unwrap(), "{what}: the growth tracker");
    Ok(())
}

/// Replays a whole scenario from its start.
fn replay(name: &str) -> Result<Run> {
    let s = scenario(name);
    let mut run = start(&s)?;
    for (i, step) in s["steps"].as_array().unwrap().iter().enumerate() {
        iterate(&mut run, step, &format!("{name} iteration {i}"))?;
    }
    Ok(run)
}

#[test]
fn powers_of_two_skips_backs_off_and_grows_as_pytorch() -> Result<()> {
    let s = scenario("powers_of_two");
    let skipped = s["steps"].as_array().unwrap().iter().filter(|st| st["stepped"] == false).count();
    assert_eq!(skipped, 3, "the fixture skips the NaN, overflow and -inf iterations");
    replay("powers_of_two").map(drop)
}

#[test]
fn odd_factors_round_as_pytorch() -> Result<()> {
    replay("odd_factors").map(drop)
}

#[test]
fn growth_past_f32_is_dropped_as_in_pytorch() -> Result<()> {
    let run = replay("ceiling")?;
    assert_eq!(run.scaler.get_scale(), 2f64.powi(127));
    Ok(())
}

#[test]
fn pytorch_training_checkpoint_resumes_the_run() -> Result<()> {
    let s = scenario("powers_of_two");
    let after = s["checkpoint_after"].as_u64().unwrap() as usize;
    let steps = s["steps"].as_array().unwrap();
    let checkpoint = load_pt_value(fixture("checkpoint.pt"))?;

    let w = Var::param(tensor(&steps[after - 1]["w"], &[5]));
    let b = Var::param(tensor(&steps[after - 1]["b"], &[2, 3]));
    let mut opt = Sgd::new(vec![w.clone(), b.clone()], SgdConfig::default())?;
    opt.load_state_dict(&OptimizerState::from_pt(checkpoint.get("optimizer").unwrap(), "Sgd")?)?;
    let mut scaler = GradScaler::new();
    let state = GradScalerState::from_pt(checkpoint.get("scaler").unwrap())?;
    scaler.load_state_dict(&state)?;
    assert_eq!(scaler.get_scale(), steps[after - 1]["scale_after"].as_f64().unwrap());
    assert_eq!(scaler.growth_tracker(), steps[after - 1]["tracker_after"].as_u64().unwrap());
    assert_eq!(scaler.growth_interval(), 3);

    let mut run = Run { w, b, opt, scaler };
    for (i, step) in steps.iter().enumerate().skip(after) {
        iterate(&mut run, step, &format!("resumed iteration {i}"))?;
    }
    Ok(())
}

#[test]
fn pytorch_scaler_state_file_is_embers_state() -> Result<()> {
    let run = replay("odd_factors")?;
    let ours = run.scaler.state_dict().unwrap();
    let theirs = GradScalerState::load_pt(fixture("scaler_state.pt"))?;
    assert_eq!(ours, theirs);
    Ok(())
}

#[test]
fn ember_scaler_state_is_the_file_pytorch_was_checked_to_load() -> Result<()> {
    let run = replay("odd_factors")?;
    let state = run.scaler.state_dict().unwrap();
    if std::env::var_os("EMBER_WRITE_PT_FIXTURES").is_some() {
        return state.save_pt(fixture("ember_scaler_state.pt"));
    }
    let path = std::env::temp_dir().join(format!("ember-scaler-pt-{}.pt", std::process::id()));
    state.save_pt(&path)?;
    let written = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).ok();
    assert!(
        written == std::fs::read(fixture("ember_scaler_state.pt")).unwrap(),
        "GradScalerState::save_pt no longer writes the bytes PyTorch was checked to load; rerun tools/parity/grad_scaler.py"
    );
    assert_eq!(GradScalerState::load_pt(fixture("ember_scaler_state.pt"))?, state);
    Ok(())
}
