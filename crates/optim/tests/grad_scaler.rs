//! `GradScaler`'s rules: skipped steps on infinite and NaN gradients leave the parameters
//! and the optimizer's state untouched, the scale backs off and grows, `unscale_` runs once
//! per iteration and `step` does not unscale again after it, the order errors PyTorch
//! raises, a disabled scaler passes everything through, the state round-trips (in memory,
//! through a `torch.save` file and inside ember's optimizer-state file), `scale` is a
//! recorded multiplication, and gradients that share storage are unscaled once.

use ember_autograd::{Var, gradcheck};
use ember_optim::{Adam, GradScaler, GradScalerConfig, GradScalerState, Optimizer, OptimizerState, Sgd};
use ember_tensor::{DType, Result, Tensor};

fn param(v: &[f32]) -> Var {
    Var::param(Tensor::from_vec(v.to_vec(), [v.len()]).unwrap())
}

fn grad(v: &[f32]) -> Option<Tensor> {
    Some(Tensor::from_vec(v.to_vec(), [v.len()]).unwrap())
}

fn values(v: &Var) -> Vec<f32> {
    v.value().to_vec::<f32>().unwrap()
}

fn grad_values(v: &Var) -> Vec<f32> {
    v.grad().unwrap().to_vec::<f32>().unwrap()
}

/// A scaler with a small scale and interval, so that tests see growth quickly.
fn small_scaler(interval: u64) -> GradScaler {
    GradScaler::builder().init_scale(8.0).growth_interval(interval).build().unwrap()
}

/// The optimizer state as bits, so that "untouched" means bit for bit.
fn state_bits(s: &OptimizerState) -> Vec<(String, Vec<u64>)> {
    let scalars = s.scalars.iter().map(|(k, v)| (k.clone(), vec![v.to_bits()]));
    let tensors =
        s.tensors.iter().map(|(k, t)| (k.clone(), t.to_vec_f64().unwrap().into_iter().map(f64::to_bits).collect()));
    scalars.chain(tensors).collect()
}

#[test]
fn defaults_are_pytorchs() {
    let s = GradScaler::new();
    assert!(s.is_enabled());
    assert_eq!(s.get_scale(), 65536.0);
    assert_eq!((s.growth_factor(), s.backoff_factor(), s.growth_interval()), (2.0, 0.5, 2000));
    assert_eq!(s.growth_tracker(), 0);
    assert_eq!(
        GradScalerConfig::default(),
        GradScalerConfig {
            init_scale: 65536.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
            enabled: true
        }
    );
}

#[test]
fn an_infinite_or_nan_gradient_skips_the_step_and_leaves_adam_untouched() -> Result<()> {
    for bad in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
        let w = param(&[1.0, -2.0, 3.0]);
        let v = param(&[0.5, 0.25]);
        let mut opt = Adam::with_params(vec![w.clone(), v.clone()]).lr(0.1).build()?;
        let mut scaler = small_scaler(100);
        // One clean step first, so that Adam has moments and a step count to keep.
        w.set_grad(grad(&[8.0, 16.0, -8.0]))?;
        v.set_grad(grad(&[4.0, 4.0]))?;
        assert!(scaler.step(&mut opt)?);
        scaler.update()?;
        let (w_before, v_before, state_before) = (values(&w), values(&v), state_bits(&opt.state_dict()));
        assert_eq!(opt.state_dict().scalars["state.0.step"], 1.0);

        // Only `v`'s gradient is bad; the whole step is skipped, `w` included.
        w.set_grad(grad(&[8.0, 8.0, 8.0]))?;
        v.set_grad(grad(&[bad, 4.0]))?;
        assert!(!scaler.step(&mut opt)?, "a {bad} gradient must skip the step");
        assert_eq!(values(&w), w_before);
        assert_eq!(values(&v), v_before);
        assert_eq!(state_bits(&opt.state_dict()), state_before, "Adam's moments and step count after {bad}");
        // The gradients were still unscaled, as PyTorch leaves them.
        assert_eq!(grad_values(&w), vec![1.0, 1.0, 1.0]);
        scaler.update()?;
        assert_eq!(scaler.get_scale(), 4.0, "backoff after {bad}");
        assert_eq!(scaler.growth_tracker(), 0);
    }
    Ok(())
}

#[test]
fn the_scale_backs_off_on_every_bad_step_and_grows_after_the_interval() -> Result<()> {
    let w = param(&[1.0]);
    let mut opt = Sgd::with_params(vec![w.clone()]).lr(0.0).build()?;
    let mut scaler = small_scaler(3);
    // (gradient finite, scale after the update, tracker after the update)
    let script = [
        (true, 8.0, 1),
        (true, 8.0, 2),
        (true, 16.0, 0),
        (false, 8.0, 0),
        (false, 4.0, 0),
        (true, 4.0, 1),
        (false, 2.0, 0),
        (true, 2.0, 1),
        (true, 2.0, 2),
        (true, 4.0, 0),
    ];
    for (i, (finite, scale, tracker)) in script.into_iter().enumerate() {
        w.set_grad(grad(&[if finite { 1.0 } else { f32::INFINITY }]))?;
        assert_eq!(scaler.step(&mut opt)?, finite, "iteration {i}");
        scaler.update()?;
        assert_eq!((scaler.get_scale(), scaler.growth_tracker()), (scale, tracker), "iteration {i}");
    }
    Ok(())
}

#[test]
fn unscale_divides_once_and_step_does_not_unscale_again() -> Result<()> {
    let w = param(&[1.0, 2.0]);
    let mut opt = Sgd::with_params(vec![w.clone()]).lr(0.5).build()?;
    let mut scaler = small_scaler(100);
    w.set_grad(grad(&[8.0, -16.0]))?;
    scaler.unscale_(&opt)?;
    assert_eq!(grad_values(&w), vec![1.0, -2.0]);
    let err = scaler.unscale_(&opt).unwrap_err().to_string();
    assert!(err.contains("unscale_() has already been called"), "{err}");
    assert_eq!(grad_values(&w), vec![1.0, -2.0], "a refused unscale_ changes nothing");
    assert!(scaler.step(&mut opt)?);
    assert_eq!(grad_values(&w), vec![1.0, -2.0], "step after unscale_ must not unscale again");
    assert_eq!(values(&w), vec![0.5, 3.0]);
    let err = scaler.unscale_(&opt).unwrap_err().to_string();
    assert!(err.contains("after step()"), "{err}");
    let err = scaler.step(&mut opt).unwrap_err().to_string();
    assert!(err.contains("step() has already been called"), "{err}");
    assert_eq!(values(&w), vec![0.5, 3.0], "a refused step changes nothing");
    scaler.update()?;
    // The next iteration starts afresh.
    w.set_grad(grad(&[8.0, 8.0]))?;
    scaler.unscale_(&opt)?;
    assert!(scaler.step(&mut opt)?);
    assert_eq!(values(&w), vec![0.0, 2.5]);
    Ok(())
}

#[test]
fn step_without_unscale_unscales_itself() -> Result<()> {
    let w = param(&[1.0, 2.0]);
    let mut opt = Sgd::with_params(vec![w.clone()]).lr(0.5).build()?;
    let mut scaler = small_scaler(100);
    w.set_grad(grad(&[8.0, -16.0]))?;
    assert!(scaler.step(&mut opt)?);
    assert_eq!(grad_values(&w), vec![1.0, -2.0]);
    assert_eq!(values(&w), vec![0.5, 3.0]);
    Ok(())
}

#[test]
fn several_optimizers_share_one_update() -> Result<()> {
    let (a, b) = (param(&[1.0]), param(&[1.0]));
    let mut opt_a = Sgd::with_params(vec![a.clone()]).lr(1.0).build()?;
    let mut opt_b = Sgd::with_params(vec![b.clone()]).lr(1.0).build()?;
    let mut scaler = small_scaler(100);
    a.set_grad(grad(&[8.0]))?;
    b.set_grad(grad(&[f32::NAN]))?;
    assert!(scaler.step(&mut opt_a)?);
    assert!(!scaler.step(&mut opt_b)?);
    assert_eq!((values(&a), values(&b)), (vec![0.0], vec![1.0]));
    // One optimizer's overflow backs the shared scale off.
    scaler.update()?;
    assert_eq!(scaler.get_scale(), 4.0);
    Ok(())
}

#[test]
fn the_order_errors_are_pytorchs() -> Result<()> {
    let w = param(&[1.0]);
    let mut opt = Sgd::with_params(vec![w.clone()]).lr(0.5).build()?;
    let mut scaler = small_scaler(100);
    let err = scaler.update().unwrap_err().to_string();
    assert!(err.contains("no inf checks were recorded prior to update()"), "{err}");
    // No gradient at all: nothing was checked.
    let err = scaler.step(&mut opt).unwrap_err().to_string();
    assert!(err.contains("no inf checks were recorded for this optimizer"), "{err}");
    assert_eq!(values(&w), vec![1.0]);
    Ok(())
}

#[test]
fn update_to_sets_the_scale_and_keeps_the_tracker() -> Result<()> {
    let w = param(&[1.0]);
    let mut opt = Sgd::with_params(vec![w.clone()]).lr(0.0).build()?;
    let mut scaler = small_scaler(5);
    w.set_grad(grad(&[1.0]))?;
    scaler.step(&mut opt)?;
    scaler.update()?;
    assert_eq!(scaler.growth_tracker(), 1);
    w.set_grad(grad(&[1.0]))?;
    scaler.step(&mut opt)?;
    scaler.update_to(777.7)?;
    assert_eq!(scaler.get_scale(), f64::from(777.7f32), "rounded to f32 as PyTorch's fill_");
    assert_eq!(scaler.growth_tracker(), 1);
    // The iteration is over: the optimizer can be stepped again.
    w.set_grad(grad(&[1.0]))?;
    assert!(scaler.step(&mut opt)?);
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e39] {
        assert!(scaler.update_to(bad).is_err(), "update_to({bad})");
    }
    Ok(())
}

#[test]
fn a_disabled_scaler_passes_everything_through() -> Result<()> {
    let w = param(&[1.0, 2.0]);
    let mut opt = Sgd::with_params(vec![w.clone()]).lr(0.5).build()?;
    let mut scaler = GradScaler::builder().enabled(false).growth_factor(0.0).build()?;
    assert!(!scaler.is_enabled());
    assert_eq!(scaler.get_scale(), 1.0);
    let loss = (&w * &w)?.sum_all();
    let scaled = scaler.scale(&loss)?;
    assert!(scaled.same_node(&loss), "a disabled scaler returns the loss itself");
    w.set_grad(grad(&[f32::INFINITY, 2.0]))?;
    scaler.unscale_(&opt)?;
    scaler.unscale_(&opt)?;
    assert_eq!(grad_values(&w), vec![f32::INFINITY, 2.0], "nothing unscaled");
    w.set_grad(grad(&[2.0, 2.0]))?;
    assert!(scaler.step(&mut opt)?);
    assert_eq!(values(&w), vec![0.0, 1.0]);
    scaler.update()?;
    scaler.update_to(5.0)?;
    assert_eq!(scaler.get_scale(), 1.0);
    assert_eq!(scaler.state_dict(), None, "PyTorch's disabled scaler has an empty state dict");
    let state = GradScaler::new().state_dict().unwrap();
    scaler.load_state_dict(&state)?;
    assert_eq!(scaler.get_scale(), 1.0);
    Ok(())
}

#[test]
fn settings_out_of_range_are_errors_naming_them() {
    let cases: [(GradScalerConfig, &str); 7] = [
        (GradScalerConfig { growth_factor: 1.0, ..Default::default() }, "growth_factor"),
        (GradScalerConfig { growth_factor: f64::INFINITY, ..Default::default() }, "growth_factor"),
        (GradScalerConfig { backoff_factor: 1.0, ..Default::default() }, "backoff_factor"),
        (GradScalerConfig { backoff_factor: 0.0, ..Default::default() }, "backoff_factor"),
        (GradScalerConfig { init_scale: 0.0, ..Default::default() }, "init_scale"),
        (GradScalerConfig { init_scale: 1e39, ..Default::default() }, "init_scale"),
        (GradScalerConfig { growth_interval: 0, ..Default::default() }, "growth_interval"),
    ];
    for (config, name) in cases {
        let err = GradScaler::with_config(config).unwrap_err().to_string();
        assert!(err.contains(name), "{config:?}: {err}");
    }
    let mut s = GradScaler::new();
    assert!(s.set_growth_factor(0.5).is_err());
    assert!(s.set_backoff_factor(2.0).is_err());
    assert!(s.set_growth_interval(0).is_err());
    s.set_growth_factor(3.0).unwrap();
    s.set_backoff_factor(0.25).unwrap();
    s.set_growth_interval(7).unwrap();
    assert_eq!((s.growth_factor(), s.backoff_factor(), s.growth_interval()), (3.0, 0.25, 7));
}

#[test]
fn the_state_round_trips_in_memory_through_torch_save_and_in_the_optimizer_file() -> Result<()> {
    let w = param(&[1.0]);
    let mut opt = Sgd::with_params(vec![w.clone()]).lr(0.1).momentum(0.9).build()?;
    let mut scaler =
        GradScaler::builder().init_scale(1000.0).growth_factor(1.5).backoff_factor(0.3).growth_interval(4).build()?;
    for g in [f32::NAN, 1.0, 1.0] {
        w.set_grad(grad(&[g]))?;
        scaler.step(&mut opt)?;
        scaler.update()?;
    }
    let state = scaler.state_dict().unwrap();
    assert_eq!(
        state,
        GradScalerState {
            scale: f64::from(300.0f32),
            growth_factor: 1.5,
            backoff_factor: 0.3,
            growth_interval: 4,
            growth_tracker: 2
        }
    );

    let mut fresh = GradScaler::new();
    fresh.load_state_dict(&state)?;
    assert_eq!(fresh.state_dict(), Some(state));

    let dir = std::env::temp_dir();
    let pt = dir.join(format!("ember-scaler-state-{}.pt", std::process::id()));
    state.save_pt(&pt)?;
    let back = GradScalerState::load_pt(&pt);
    std::fs::remove_file(&pt).ok();
    assert_eq!(back?, state);

    // Beside the optimizer's state in ember's safetensors file.
    let file = dir.join(format!("ember-scaler-opt-{}.safetensors", std::process::id()));
    let mut opt_state = opt.state_dict();
    state.write_into(&mut opt_state);
    opt_state.save(&file)?;
    let loaded = OptimizerState::load(&file);
    std::fs::remove_file(&file).ok();
    let mut loaded = loaded?;
    let err = opt.load_state_dict(&loaded).unwrap_err().to_string();
    assert!(err.contains("grad_scaler.scale"), "the optimizer refuses the scaler's entries: {err}");
    assert_eq!(GradScalerState::take_from(&mut loaded)?, Some(state));
    opt.load_state_dict(&loaded)?;
    assert_eq!(GradScalerState::take_from(&mut loaded)?, None);
    Ok(())
}

#[test]
fn bad_states_are_refused_and_change_nothing() -> Result<()> {
    let mut scaler = small_scaler(10);
    let good = scaler.state_dict().unwrap();
    for bad in [
        GradScalerState { scale: 0.0, ..good },
        GradScalerState { scale: f64::NAN, ..good },
        GradScalerState { growth_factor: 0.9, ..good },
        GradScalerState { backoff_factor: 1.5, ..good },
        GradScalerState { growth_interval: 0, ..good },
    ] {
        assert!(scaler.load_state_dict(&bad).is_err(), "{bad:?}");
        assert_eq!(scaler.state_dict(), Some(good));
    }
    let empty = ember_io::pt::PtValue::Dict(vec![]);
    let err = GradScalerState::from_pt(&empty).unwrap_err().to_string();
    assert!(err.contains("disabled GradScaler"), "{err}");
    let mut partial = small_scaler(10).state_dict().map(|s| s.to_pt()).unwrap();
    if let ember_io::pt::PtValue::Dict(entries) = &mut partial {
        entries.retain(|(k, _)| k.as_str() != Some("_growth_tracker"));
    }
    let err = GradScalerState::from_pt(&partial).unwrap_err().to_string();
    assert!(err.contains("_growth_tracker"), "{err}");
    let mut opt_state = OptimizerState::default();
    opt_state.scalars.insert("grad_scaler.scale".into(), 2.0);
    let err = GradScalerState::take_from(&mut opt_state).unwrap_err().to_string();
    assert!(err.contains("grad_scaler.growth_factor"), "{err}");
    Ok(())
}

#[test]
fn scale_is_a_recorded_multiplication() -> Result<()> {
    let scaler = small_scaler(10);
    // Its gradient, numerically: d(8 * sum(x^3)) / dx = 24 x^2.
    let x = Tensor::from_vec(vec![0.5f64, -1.5, 2.0], [3])?;
    gradcheck(|v| scaler.scale(&(&(&v[0] * &v[0])? * &v[0])?.sum_all()), &[x], 1e-6, 1e-6, 1e-6)?;
    // The 0-d f32 scale keeps an f64 loss f64, and backward gives scaled gradients.
    let w = Var::param(Tensor::from_vec(vec![1.0f64, 2.0], [2])?);
    let scaled = scaler.scale(&(&w * &w)?.sum_all())?;
    assert_eq!(scaled.dtype(), DType::F64);
    assert_eq!(scaled.item()?, 40.0);
    scaled.backward()?;
    assert_eq!(w.grad().unwrap().to_vec::<f64>()?, vec![16.0, 32.0]);
    Ok(())
}

#[test]
fn f64_gradients_unscale_in_f64() -> Result<()> {
    let w = Var::param(Tensor::from_vec(vec![1.0f64], [1])?);
    let mut opt = Sgd::with_params(vec![w.clone()]).lr(1.0).build()?;
    let mut scaler = GradScaler::builder().init_scale(3.0).build()?;
    w.set_grad(Some(Tensor::from_vec(vec![1.0f64], [1])?))?;
    scaler.unscale_(&opt)?;
    // The inverse scale is PyTorch's float32 one, applied in f64.
    let inv = f64::from((1.0f64 / 3.0) as f32);
    assert_eq!(w.grad().unwrap().to_vec::<f64>()?, vec![inv]);
    assert!(scaler.step(&mut opt)?);
    Ok(())
}

#[test]
fn gradients_sharing_storage_are_unscaled_once() -> Result<()> {
    // Two parameters whose gradients are views of one storage, and a third whose gradient
    // is its own value: in-place unscaling would halve the shared storage twice and change
    // the parameter.
    let (a, b, c) = (param(&[0.0, 0.0]), param(&[0.0, 0.0]), param(&[8.0, 16.0]));
    let shared = Tensor::from_vec(vec![8.0f32, 16.0, 24.0, 32.0], [4])?;
    a.set_grad(Some(shared.narrow(0, 0, 2)?))?;
    b.set_grad(Some(shared.narrow(0, 1, 2)?))?;
    c.set_grad(Some(c.value()))?;
    let opt = Sgd::with_params(vec![a.clone(), b.clone(), c.clone()]).lr(0.0).build()?;
    let mut scaler = small_scaler(10);
    scaler.unscale_(&opt)?;
    assert_eq!(grad_values(&a), vec![1.0, 2.0]);
    assert_eq!(grad_values(&b), vec![2.0, 3.0]);
    assert_eq!(grad_values(&c), vec![1.0, 2.0]);
    assert_eq!(values(&c), vec![8.0, 16.0], "the parameter is not its gradient's victim");
    // A broadcast gradient is replaced by an unscaled copy too.
    let d = param(&[0.0, 0.0, 0.0]);
    d.set_grad(Some(Tensor::from_vec(vec![8.0f32], [1])?.expand([3])?))?;
    let opt = Sgd::with_params(vec![d.clone()]).lr(0.0).build()?;
    scaler.unscale_(&opt)?;
    assert_eq!(grad_values(&d), vec![1.0, 1.0, 1.0]);
    Ok(())
}

#[test]
fn strided_gradients_are_unscaled_in_place() -> Result<()> {
    let w = Var::param(Tensor::zeros([3, 2], DType::F32)?);
    let g = Tensor::from_vec(vec![2.0f32, 4.0, 6.0, 8.0, 10.0, 12.0], [2, 3])?.transpose(0, 1)?;
    w.set_grad(Some(g.clone()))?;
    let opt = Sgd::with_params(vec![w.clone()]).lr(0.0).build()?;
    let mut scaler = GradScaler::builder().init_scale(2.0).build()?;
    scaler.unscale_(&opt)?;
    assert_eq!(g.to_vec::<f32>()?, vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0], "written through the transposed view");
    assert_eq!(grad_values(&w), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    Ok(())
}

#[test]
fn frozen_parameters_keep_their_stale_gradients() -> Result<()> {
    let (w, frozen) = (param(&[1.0]), param(&[1.0]));
    let mut opt = Sgd::with_params(vec![w.clone(), frozen.clone()]).lr(1.0).build()?;
    let mut scaler = small_scaler(10);
    w.set_grad(grad(&[8.0]))?;
    frozen.set_grad(grad(&[f32::INFINITY]))?;
    frozen.requires_grad_(false)?;
    assert!(scaler.step(&mut opt)?, "a stale gradient of a frozen parameter does not skip the step");
    assert_eq!(values(&w), vec![0.0]);
    assert_eq!(grad_values(&frozen), vec![f32::INFINITY]);
    assert_eq!(values(&frozen), vec![1.0]);
    Ok(())
}

#[test]
fn integer_gradients_are_refused_before_any_gradient_changes() -> Result<()> {
    let (w, v) = (param(&[1.0]), param(&[1.0]));
    let opt = Sgd::with_params(vec![w.clone(), v.clone()]).lr(1.0).build()?;
    let mut scaler = small_scaler(10);
    w.set_grad(grad(&[8.0]))?;
    v.set_grad(Some(Tensor::from_vec(vec![8i64], [1])?))?;
    let err = scaler.unscale_(&opt).unwrap_err().to_string();
    assert!(err.contains("parameter 1") && err.contains("i64"), "{err}");
    assert_eq!(grad_values(&w), vec![8.0]);
    Ok(())
}
