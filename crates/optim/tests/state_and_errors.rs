//! `state_dict` / `load_state_dict` round trips that resume training bit for bit, and the
//! errors for bad settings, bad parameter lists and state dicts that do not fit.

use ember_autograd::Var;
use ember_optim::{
    Adam, AdamConfig, AdamW, CosineAnnealingLR, LambdaLR, LrScheduler, Optimizer, OptimizerState, RmsProp,
    RmsPropConfig, Sgd, SgdConfig, StepLR, clip_grad_norm_,
};
use ember_tensor::{DType, Error, Result, Tensor};

/// A small model: two parameters of different shapes and a third that joins the loss late.
fn model() -> Vec<Var> {
    // Under the test generator lock: another test drawing meanwhile would change the values.
    ember_testing::gradcheck::seeded(3, || {
        [&[3usize, 2][..], &[2], &[4]].iter().map(|s| Var::param(Tensor::randn(*s).unwrap())).collect()
    })
}

fn copy_of(params: &[Var]) -> Vec<Var> {
    params.iter().map(|p| Var::param(p.value().copy())).collect()
}

/// One training step: a quadratic with cross terms, the third parameter only from step 3.
fn train_step(opt: &mut dyn Optimizer, step: usize) -> Result<()> {
    let p = opt.params().to_vec();
    opt.zero_grad();
    let a = p[0].matmul(&p[1])?; // [3]
    let mut loss = ((&a * &a)?.sum_all() + p[1].tanh().sum_all())?;
    if step >= 3 {
        loss = (loss + (&p[2] * &p[2])?.sum_all().mul_scalar(0.5))?;
    }
    loss.backward()?;
    opt.step()
}

fn values(params: &[Var]) -> Vec<Vec<f32>> {
    params.iter().map(|p| p.value().to_vec::<f32>().unwrap()).collect()
}

type Make = fn(Vec<Var>) -> Box<dyn Optimizer>;

/// Every optimizer kind with every state buffer in use.
fn makers() -> Vec<(&'static str, Make)> {
    vec![
        ("sgd", |p| {
            Box::new(Sgd::with_params(p).lr(0.05).momentum(0.9).nesterov(true).weight_decay(0.01).build().unwrap())
        }),
        ("adam", |p| Box::new(Adam::with_params(p).lr(0.05).amsgrad(true).weight_decay(0.01).build().unwrap())),
        ("adamw", |p| Box::new(AdamW::with_params(p).lr(0.05).amsgrad(true).build().unwrap())),
        ("rmsprop", |p| Box::new(RmsProp::with_params(p).lr(0.01).momentum(0.5).centered(true).build().unwrap())),
    ]
}

#[test]
fn state_dict_round_trip_continues_identically() -> Result<()> {
    for (name, make) in makers() {
        let params = model();
        let mut original = make(params.clone());
        for step in 0..5 {
            train_step(original.as_mut(), step)?;
        }
        let saved = original.state_dict();
        let saved_copy = saved.clone();

        // Through a file (a checkpoint): every scalar and tensor reads back exactly.
        let path = std::env::temp_dir().join(format!("ember-optim-{name}-{}.safetensors", std::process::id()));
        saved.save(&path)?;
        let from_file = OptimizerState::load(&path)?;
        std::fs::remove_file(&path).ok();
        assert_eq!(from_file.optimizer, saved.optimizer);
        assert_eq!(from_file.scalars, saved.scalars, "{name}: scalars changed through the file");
        assert_eq!(from_file.tensors.keys().collect::<Vec<_>>(), saved.tensors.keys().collect::<Vec<_>>());
        for (k, t) in &saved.tensors {
            let back = &from_file.tensors[k];
            assert_eq!((back.dtype(), back.shape()), (t.dtype(), t.shape()), "{name}: {k}");
            assert_eq!(back.to_vec_f64()?, t.to_vec_f64()?, "{name}: {k} changed through the file");
        }

        // A fresh optimizer with other settings, over fresh parameters holding the values.
        let resumed_params = copy_of(&params);
        let mut resumed: Box<dyn Optimizer> = match name {
            "sgd" => Box::new(Sgd::with_params(resumed_params.clone()).build()?),
            "adam" => Box::new(Adam::with_params(resumed_params.clone()).build()?),
            "adamw" => Box::new(AdamW::with_params(resumed_params.clone()).build()?),
            _ => Box::new(RmsProp::with_params(resumed_params.clone()).build()?),
        };
        resumed.load_state_dict(&from_file)?;
        assert_eq!(resumed.lr(), original.lr(), "{name}: lr not restored");

        for step in 5..10 {
            train_step(original.as_mut(), step)?;
            train_step(resumed.as_mut(), step)?;
        }
        assert_eq!(values(&params), values(&resumed_params), "{name}: the resumed run diverged");

        // The saved dict is a snapshot: the steps since did not write into it.
        for (k, t) in &saved.tensors {
            assert_eq!(t.to_vec_f64()?, saved_copy.tensors[k].to_vec_f64()?, "{name}: {k} changed after saving");
        }
        let later = original.state_dict();
        assert!(
            later.tensors.iter().any(|(k, t)| t.to_vec_f64().ok() != saved.tensors[k].to_vec_f64().ok()),
            "{name}: the state did not evolve"
        );
    }
    Ok(())
}

#[test]
fn state_dict_names_what_it_holds() -> Result<()> {
    let params = model();
    let mut opt = Adam::with_params(params.clone()).amsgrad(true).build()?;
    train_step(&mut opt, 0)?;
    let d = opt.state_dict();
    assert_eq!(d.optimizer, "Adam");
    let keys: Vec<&str> = d.tensors.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "state.0.exp_avg",
            "state.0.exp_avg_sq",
            "state.0.max_exp_avg_sq",
            "state.1.exp_avg",
            "state.1.exp_avg_sq",
            "state.1.max_exp_avg_sq"
        ]
    );
    for k in ["lr", "beta1", "beta2", "eps", "weight_decay", "amsgrad", "num_params", "state.0.step", "state.1.step"] {
        assert!(d.scalars.contains_key(k), "missing {k}");
    }
    assert!(!d.scalars.contains_key("state.2.step"), "parameter 2 has had no gradient yet");
    Ok(())
}

#[test]
fn state_of_another_precision_is_converted() -> Result<()> {
    let p64 = Var::param(Tensor::from_vec(vec![1.0f64, 2.0], [2])?);
    let mut opt64 = Sgd::with_params(vec![p64.clone()]).momentum(0.9).build()?;
    p64.set_grad(Some(Tensor::from_vec(vec![0.5f64, 0.25], [2])?))?;
    opt64.step()?;
    let p32 = Var::param(Tensor::from_vec(vec![1.0f32, 2.0], [2])?);
    let mut opt32 = Sgd::with_params(vec![p32.clone()]).build()?;
    opt32.load_state_dict(&opt64.state_dict())?;
    let buf = &opt32.state_dict().tensors["state.0.momentum_buffer"];
    assert_eq!(buf.dtype(), DType::F32);
    assert_eq!(buf.to_vec::<f32>()?, vec![0.5, 0.25]);
    Ok(())
}

/// The error of `load_state_dict` for `dict` as a string, checking that the optimizer is
/// unchanged by the failed load.
fn load_error(opt: &mut dyn Optimizer, dict: &OptimizerState) -> String {
    let before = opt.state_dict();
    let e = match opt.load_state_dict(dict) {
        Err(e) => e.to_string(),
        Ok(()) => panic!("loading a bad state dict succeeded"),
    };
    let after = opt.state_dict();
    assert_eq!(before.scalars, after.scalars, "a failed load changed the optimizer ({e})");
    assert_eq!(before.tensors.keys().collect::<Vec<_>>(), after.tensors.keys().collect::<Vec<_>>());
    e
}

#[test]
fn load_state_dict_names_what_does_not_fit() -> Result<()> {
    let params = model();
    let mut adam = Adam::with_params(params.clone()).amsgrad(true).build()?;
    train_step(&mut adam, 0)?;
    let good = adam.state_dict();
    let mut target = Adam::with_params(copy_of(&params)).build()?;
    target.load_state_dict(&good)?; // the reference case loads

    let mut sgd = Sgd::with_params(copy_of(&params)).build()?;
    let e = load_error(&mut sgd, &good);
    assert!(e.contains("\"Adam\"") && e.contains("Sgd"), "{e}");

    let mut fewer = Adam::with_params(copy_of(&params[..2])).build()?;
    let e = load_error(&mut fewer, &good);
    assert!(e.contains("3 parameters") && e.contains("has 2"), "{e}");

    let mut d = good.clone();
    d.tensors.insert("state.1.exp_avg".into(), Tensor::zeros([5], DType::F32)?);
    let e = load_error(&mut target, &d);
    assert!(e.contains("state.1.exp_avg") && e.contains("[5]") && e.contains("[2]"), "{e}");

    let mut d = good.clone();
    d.tensors.remove("state.0.max_exp_avg_sq");
    let e = load_error(&mut target, &d);
    assert!(e.contains("state.0.max_exp_avg_sq"), "{e}");

    let mut d = good.clone();
    d.scalars.remove("beta2");
    let e = load_error(&mut target, &d);
    assert!(e.contains("beta2"), "{e}");

    let mut d = good.clone();
    d.scalars.insert("momentum".into(), 0.9);
    let e = load_error(&mut target, &d);
    assert!(e.contains("momentum") && e.contains("does not use"), "{e}");

    let mut d = good.clone();
    d.scalars.insert("amsgrad".into(), 0.5);
    let e = load_error(&mut target, &d);
    assert!(e.contains("amsgrad") && e.contains("0 or 1"), "{e}");

    let mut d = good.clone();
    d.scalars.insert("state.0.step".into(), -1.0);
    let e = load_error(&mut target, &d);
    assert!(e.contains("state.0.step"), "{e}");

    let mut d = good.clone();
    d.scalars.insert("beta1".into(), 1.5);
    let e = load_error(&mut target, &d);
    assert!(e.contains("beta1"), "{e}");

    let mut d = good.clone();
    d.tensors.insert("state.0.exp_avg".into(), Tensor::zeros([3, 2], DType::I64)?);
    let e = load_error(&mut target, &d);
    assert!(e.contains("state.0.exp_avg") && e.contains("i64"), "{e}");

    // Without AMSGrad the max buffers are left over.
    let mut d = good.clone();
    d.scalars.insert("amsgrad".into(), 0.0);
    let e = load_error(&mut target, &d);
    assert!(e.contains("max_exp_avg_sq"), "{e}");
    Ok(())
}

fn err_of<T: std::fmt::Debug>(r: Result<T>) -> String {
    match r {
        Err(e) => e.to_string(),
        Ok(v) => panic!("expected an error, got {v:?}"),
    }
}

#[test]
fn bad_settings_are_refused_by_name() {
    let p = || vec![Var::param(Tensor::zeros([2], DType::F32).unwrap())];
    let e = err_of(Sgd::with_params(p()).lr(-0.1).build());
    assert!(e.contains("lr") && e.contains("-0.1"), "{e}");
    let e = err_of(Sgd::with_params(p()).lr(f64::NAN).build());
    assert!(e.contains("lr") && e.contains("NaN"), "{e}");
    let e = err_of(Sgd::with_params(p()).nesterov(true).build());
    assert!(e.contains("nesterov") && e.contains("momentum"), "{e}");
    let e = err_of(Sgd::new(p(), SgdConfig { momentum: 0.9, dampening: 0.1, nesterov: true, ..Default::default() }));
    assert!(e.contains("dampening"), "{e}");
    let e = err_of(Sgd::with_params(p()).weight_decay(-1.0).build());
    assert!(e.contains("weight_decay"), "{e}");
    let e = err_of(Adam::with_params(p()).betas((0.9, 1.0)).build());
    assert!(e.contains("beta2") && e.contains("[0, 1)"), "{e}");
    let e = err_of(Adam::new(p(), AdamConfig { betas: (-0.1, 0.9), ..Default::default() }));
    assert!(e.contains("beta1"), "{e}");
    let e = err_of(AdamW::with_params(p()).eps(-1e-8).build());
    assert!(e.contains("eps"), "{e}");
    let e = err_of(RmsProp::new(p(), RmsPropConfig { alpha: 1.5, ..Default::default() }));
    assert!(e.contains("alpha"), "{e}");
    let e = err_of(RmsProp::with_params(p()).momentum(-0.5).build());
    assert!(e.contains("momentum"), "{e}");
}

#[test]
fn bad_parameter_lists_are_refused() {
    let e = err_of(Adam::with_params(Vec::new()).build());
    assert!(e.contains("empty"), "{e}");
    let w = Var::param(Tensor::ones([2], DType::F32).unwrap());
    let e = err_of(Sgd::with_params(vec![w.clone(), w.mul_scalar(2.0)]).build());
    assert!(e.contains("parameter 1") && e.contains("leaves"), "{e}");
    let i = Var::param(Tensor::arange(0, 3).unwrap());
    let e = err_of(RmsProp::with_params(vec![i]).build());
    assert!(e.contains("parameter 0") && e.contains("i64"), "{e}");
}

#[test]
fn a_gradient_of_another_dtype_is_an_error_naming_the_parameter() -> Result<()> {
    let a = Var::param(Tensor::zeros([2], DType::F64)?);
    let b = Var::param(Tensor::zeros([2], DType::F32)?);
    let mut opt = Sgd::with_params(vec![a.clone(), b.clone()]).lr(0.1).build()?;
    a.set_grad(Some(Tensor::ones([2], DType::F64)?))?;
    b.set_grad(Some(Tensor::ones([2], DType::F64)?))?;
    let e = err_of(opt.step());
    assert!(e.contains("parameter 1") && e.contains("f32") && e.contains("f64"), "{e}");
    assert_eq!(a.value().to_vec::<f64>()?, vec![0.0, 0.0], "parameters were changed before the error");
    Ok(())
}

#[test]
fn a_value_replaced_with_another_shape_is_an_error_not_a_panic() -> Result<()> {
    let w = Var::param(Tensor::zeros([2], DType::F32)?);
    let mut opt = Adam::with_params(vec![w.clone()]).build()?;
    w.set_grad(Some(Tensor::ones([2], DType::F32)?))?;
    opt.step()?;
    w.set_value(Tensor::zeros([3], DType::F32)?)?;
    w.set_grad(Some(Tensor::ones([3], DType::F32)?))?;
    let e = err_of(opt.step());
    assert!(e.contains("parameter 0") && e.contains("exp_avg") && e.contains("[3]"), "{e}");
    Ok(())
}

#[test]
fn bad_scheduler_and_clip_settings_are_refused() {
    let mut opt = Sgd::with_params(vec![Var::param(Tensor::zeros([1], DType::F32).unwrap())]).build().unwrap();
    let e = err_of(StepLR::new(&mut opt, 0, 0.5));
    assert!(e.contains("step_size"), "{e}");
    let e = err_of(StepLR::new(&mut opt, 2, f64::NAN));
    assert!(e.contains("gamma"), "{e}");
    let e = err_of(CosineAnnealingLR::new(&mut opt, 0, 0.0));
    assert!(e.contains("t_max"), "{e}");
    let e = err_of(CosineAnnealingLR::new(&mut opt, 5, f64::INFINITY));
    assert!(e.contains("eta_min"), "{e}");
    assert_eq!(opt.lr(), 1e-3, "a refused scheduler changed the learning rate");

    let p = [Var::param(Tensor::zeros([1], DType::F32).unwrap())];
    for (max_norm, norm_type, what) in
        [(-1.0, 2.0, "max_norm"), (f64::NAN, 2.0, "max_norm"), (1.0, 0.0, "norm_type"), (1.0, f64::NAN, "norm_type")]
    {
        let e = err_of(clip_grad_norm_(&p, max_norm, norm_type));
        assert!(e.contains(what) && e.contains("clip_grad_norm_"), "{e}");
    }
}

#[test]
fn schedulers_drive_any_optimizer_through_the_trait() -> Result<()> {
    let w = Var::param(Tensor::zeros([1], DType::F32)?);
    let mut opt: Box<dyn Optimizer> = Box::new(Adam::with_params(vec![w]).lr(0.2).build()?);
    let mut sched = LambdaLR::new(opt.as_mut(), |e| 1.0 / (1 + e) as f64);
    assert_eq!(opt.lr(), 0.2);
    sched.step(opt.as_mut());
    sched.step(opt.as_mut());
    assert_eq!(sched.last_epoch(), 2);
    assert!((opt.lr() - 0.2 / 3.0).abs() < 1e-15);
    assert!((sched.get_lr() - opt.lr()).abs() == 0.0);
    Ok(())
}

#[test]
fn error_type_is_embers() {
    // Every fallible function returns ember_tensor::Error, so `?` composes across crates.
    fn compiles() -> std::result::Result<(), Error> {
        let w = Var::param(Tensor::zeros([1], DType::F32)?);
        let mut opt = Sgd::with_params(vec![w]).build()?;
        opt.step()?;
        clip_grad_norm_(opt.params(), 1.0, 2.0)?;
        Ok(())
    }
    assert!(compiles().is_ok());
}

#[test]
fn state_files_that_are_not_optimizer_state_are_refused_by_name() -> Result<()> {
    let dir = std::env::temp_dir();
    // A model's weights: a safetensors file without the optimizer kind.
    let weights = dir.join(format!("ember-optim-weights-{}.safetensors", std::process::id()));
    let mut model = ember_io::StateDict::new();
    model.insert("0.weight", Tensor::zeros([2, 2], DType::F32)?);
    ember_io::save_safetensors(&weights, &model)?;
    let e = OptimizerState::load(&weights).unwrap_err().to_string();
    assert!(e.contains("not an optimizer state file") && e.contains("ember-optim-weights"), "{e}");
    // A scalar that is not a number.
    let bad = dir.join(format!("ember-optim-bad-scalar-{}.safetensors", std::process::id()));
    let metadata = std::collections::BTreeMap::from([
        ("ember.optimizer".to_string(), "Adam".to_string()),
        ("ember.scalar.lr".to_string(), "fast".to_string()),
    ]);
    ember_io::save_safetensors_with_metadata(&bad, &ember_io::StateDict::new(), &metadata)?;
    let e = OptimizerState::load(&bad).unwrap_err().to_string();
    assert!(e.contains("\"lr\" is \"fast\", not a number"), "{e}");
    // A missing file names the file.
    let e = OptimizerState::load(dir.join("ember-optim-missing.safetensors")).unwrap_err().to_string();
    assert!(e.contains("ember-optim-missing"), "{e}");
    for p in [weights, bad] {
        std::fs::remove_file(p).ok();
    }
    Ok(())
}
