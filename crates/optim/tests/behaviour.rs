//! What an optimizer step touches and what it leaves alone: frozen parameters, parameters
//! without gradients, other optimizers' parameters, strided values, unusual gradients;
//! versions and autograd's in-place checks; clipping with shared gradient storage.

use ember_autograd::Var;
use ember_optim::{Adam, AdamW, Optimizer, RmsProp, Sgd, clip_grad_norm_};
use ember_tensor::{DType, Result, Tensor};

fn vec64(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape.to_vec()).unwrap()
}

fn values(p: &Var) -> Vec<f64> {
    p.value().to_vec_f64().unwrap()
}

/// One optimizer of every kind, with momentum and weight decay on where they exist, over
/// `params`.
fn every_optimizer(params: &[Var]) -> Vec<(&'static str, Box<dyn Optimizer>)> {
    let p = || params.to_vec();
    vec![
        (
            "sgd",
            Box::new(Sgd::with_params(p()).lr(0.1).momentum(0.9).nesterov(true).weight_decay(0.1).build().unwrap()),
        ),
        ("adam", Box::new(Adam::with_params(p()).lr(0.1).amsgrad(true).weight_decay(0.1).build().unwrap())),
        ("adamw", Box::new(AdamW::with_params(p()).lr(0.1).build().unwrap())),
        ("rmsprop", Box::new(RmsProp::with_params(p()).lr(0.1).momentum(0.5).centered(true).build().unwrap())),
    ]
}

#[test]
fn frozen_and_gradientless_parameters_are_untouched() {
    for kind in 0..4 {
        let active = Var::param(vec64(&[1.0, -2.0, 3.0], &[3]));
        let frozen = Var::param(vec64(&[4.0, 5.0], &[2]));
        let idle = Var::param(vec64(&[6.0], &[1]));
        let params = [active.clone(), frozen.clone(), idle.clone()];
        let (name, mut opt) = every_optimizer(&params).swap_remove(kind);
        frozen.freeze().unwrap();
        for _ in 0..3 {
            opt.zero_grad();
            active.set_grad(Some(vec64(&[0.5, 0.5, -0.5], &[3]))).unwrap();
            // A gradient put on a frozen parameter by hand still does not move it.
            frozen.set_grad(Some(vec64(&[1.0, 1.0], &[2]))).unwrap();
            opt.step().unwrap();
        }
        assert_ne!(values(&active), vec![1.0, -2.0, 3.0], "{name}: the active parameter did not move");
        assert_eq!(values(&frozen), vec![4.0, 5.0], "{name}: a frozen parameter moved");
        assert_eq!(values(&idle), vec![6.0], "{name}: a parameter without a gradient moved");
        assert_eq!(frozen.value().version(), 0, "{name}: a frozen parameter was written");
        assert_eq!(idle.value().version(), 0, "{name}: a parameter without a gradient was written");
        let state = opt.state_dict();
        let owners: Vec<&String> = state.tensors.keys().filter(|k| !k.starts_with("state.0.")).collect();
        assert!(owners.is_empty(), "{name}: state for skipped parameters: {owners:?}");
        assert!(!state.tensors.is_empty(), "{name}: no state for the active parameter");
    }
}

#[test]
fn skipped_parameter_keeps_its_state_and_step_count() {
    let a = Var::param(vec64(&[1.0], &[1]));
    let b = Var::param(vec64(&[1.0], &[1]));
    let mut opt = Adam::with_params(vec![a.clone(), b.clone()]).lr(0.1).build().unwrap();
    for step in 0..5 {
        opt.zero_grad();
        a.set_grad(Some(vec64(&[1.0], &[1]))).unwrap();
        if step < 2 {
            b.set_grad(Some(vec64(&[1.0], &[1]))).unwrap();
        }
        opt.step().unwrap();
    }
    let s = opt.state_dict();
    assert_eq!(s.scalars["state.0.step"], 5.0);
    assert_eq!(s.scalars["state.1.step"], 2.0);
}

#[test]
fn two_optimizers_own_disjoint_subsets() -> Result<()> {
    let encoder = Var::param(vec64(&[1.0, 2.0], &[2]));
    let head = Var::param(vec64(&[3.0], &[1]));
    let mut slow = Sgd::with_params(vec![encoder.clone()]).lr(0.01).build()?;
    let mut fast = Adam::with_params(vec![head.clone()]).lr(0.5).build()?;
    let loss = (encoder.sum_all() * &head)?; // d/d encoder = head, d/d head = sum(encoder)
    loss.backward()?;

    slow.step()?;
    assert_eq!(values(&encoder), vec![1.0 - 0.01 * 3.0, 2.0 - 0.01 * 3.0]);
    assert_eq!(values(&head), vec![3.0], "the other optimizer's parameter moved");

    fast.step()?;
    assert!((values(&head)[0] - 2.5).abs() < 1e-6, "Adam's first step is lr against the gradient's sign");

    slow.zero_grad();
    assert!(encoder.grad().is_none());
    assert!(head.grad().is_some(), "zero_grad cleared another optimizer's gradient");
    Ok(())
}

#[test]
fn duplicate_across_optimizers_is_the_callers_choice_but_within_one_is_an_error() {
    let w = Var::param(vec64(&[1.0], &[1]));
    assert!(Sgd::with_params(vec![w.clone()]).build().is_ok());
    assert!(Sgd::with_params(vec![w.clone()]).build().is_ok());
    let e = Sgd::with_params(vec![w.clone(), w.clone()]).build().unwrap_err().to_string();
    assert!(e.contains("parameter 1") && e.contains("more than once"), "{e}");
}

#[test]
fn steps_write_in_place_and_autograd_sees_it() -> Result<()> {
    let w = Var::param(vec64(&[1.0, 2.0], &[2]));
    let before = w.value();
    let mut opt = Sgd::with_params(vec![w.clone()]).lr(0.1).build()?;
    let saved = (&w * &w)?.sum_all(); // mul saves w
    (&w * &w)?.sum_all().backward()?;
    opt.step()?;
    assert!(before.shares_storage(&w.value()), "the step replaced the value instead of updating it");
    assert_eq!(before.version(), 1, "one step, one write");
    assert!(w.requires_grad() && w.is_leaf(), "the step changed the parameter's flags");
    let e = saved.backward().unwrap_err().to_string();
    assert!(e.contains("modified by an inplace operation"), "{e}");
    Ok(())
}

#[test]
fn step_records_no_history() -> Result<()> {
    let w = Var::param(vec64(&[1.0], &[1]));
    let mut opt = Adam::with_params(vec![w.clone()]).build()?;
    (&w * &w)?.sum_all().backward()?;
    opt.step()?;
    assert!(w.is_leaf() && w.op_name() == "leaf");
    assert!(ember_autograd::is_grad_enabled(), "grad mode was not restored");
    Ok(())
}

#[test]
fn strided_values_and_unusual_gradients_update_like_plain_ones() {
    // The same update on a contiguous parameter and on a transposed view of one, with
    // gradients given contiguous, broadcast (stride 0) and as the value's own storage.
    let data = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    let grad = vec64(&[0.5, -0.5, 1.0], &[3, 1]).expand([3, 2]).unwrap();
    for kind in 0..4 {
        let plain = Var::param(vec64(&data, &[2, 3]).t().unwrap().contiguous());
        let strided = Var::param(vec64(&data, &[2, 3]).t().unwrap());
        assert!(!strided.value().is_contiguous());
        let mut a = every_optimizer(std::slice::from_ref(&plain)).swap_remove(kind).1;
        let (name, mut b) = every_optimizer(std::slice::from_ref(&strided)).swap_remove(kind);
        for _ in 0..3 {
            plain.set_grad(Some(grad.contiguous())).unwrap();
            strided.set_grad(Some(grad.clone())).unwrap();
            a.step().unwrap();
            b.step().unwrap();
        }
        assert_eq!(values(&plain), values(&strided), "{name}: a strided value updated differently");
        assert_ne!(values(&plain), vec64(&data, &[2, 3]).t().unwrap().to_vec_f64().unwrap());

        // A gradient that is the value itself (gradient descent on |w|²/2).
        let w = Var::param(vec64(&[2.0, -4.0], &[2]));
        let mut opt = every_optimizer(std::slice::from_ref(&w)).swap_remove(kind).1;
        w.set_grad(Some(w.value())).unwrap();
        opt.step().unwrap();
        let v = values(&w);
        assert!(v[0] < 2.0 && v[1] > -4.0, "{name}: a self-gradient step went the wrong way: {v:?}");
    }
}

#[test]
fn mixed_dtypes_in_one_optimizer() -> Result<()> {
    let a = Var::param(Tensor::from_vec(vec![1.0f32, 2.0], [2])?);
    let b = Var::param(vec64(&[1.0, 2.0], &[2]));
    let mut opt = Sgd::with_params(vec![a.clone(), b.clone()]).lr(0.5).momentum(0.5).build()?;
    for _ in 0..2 {
        a.set_grad(Some(Tensor::from_vec(vec![1.0f32, 1.0], [2])?))?;
        b.set_grad(Some(vec64(&[1.0, 1.0], &[2])))?;
        opt.step()?;
    }
    // buffer 1 then 1.5: p = p - 0.5 - 0.75.
    assert_eq!(a.value().to_vec::<f32>()?, vec![-0.25, 0.75]);
    assert_eq!(b.value().to_vec::<f64>()?, vec![-0.25, 0.75]);
    Ok(())
}

#[test]
fn set_lr_applies_to_the_next_step() -> Result<()> {
    let w = Var::param(vec64(&[1.0], &[1]));
    let mut opt = Sgd::with_params(vec![w.clone()]).lr(0.5).build()?;
    assert_eq!(opt.lr(), 0.5);
    opt.set_lr(0.25);
    w.set_grad(Some(vec64(&[1.0], &[1])))?;
    opt.step()?;
    assert_eq!(values(&w), vec![0.75]);
    Ok(())
}

#[test]
fn params_are_listed_in_order() -> Result<()> {
    let a = Var::param(vec64(&[1.0], &[1]));
    let b = Var::param(vec64(&[2.0], &[1]));
    let opt = RmsProp::with_params(vec![a.clone(), b.clone()]).build()?;
    assert_eq!(opt.params().len(), 2);
    assert!(opt.params()[0].same_node(&a) && opt.params()[1].same_node(&b));
    Ok(())
}

#[test]
fn builder_and_config_give_the_same_optimizer() -> Result<()> {
    let w = Var::param(vec64(&[1.0], &[1]));
    let built = Adam::with_params(vec![w.clone()]).lr(0.01).betas((0.8, 0.9)).eps(1e-6).amsgrad(true).build()?;
    let config = ember_optim::AdamConfig { lr: 0.01, betas: (0.8, 0.9), eps: 1e-6, amsgrad: true, weight_decay: 0.0 };
    assert_eq!(*built.config(), config);
    assert_eq!(AdamW::with_params(vec![w]).build()?.config().weight_decay, 1e-2, "AdamW's default decay");
    Ok(())
}

#[test]
fn clip_scales_shared_gradient_storage_once() -> Result<()> {
    // Two parameters whose gradients are one tensor: scaling each in place would scale the
    // shared values twice.
    let a = Var::param(vec64(&[0.0, 0.0], &[2]));
    let b = Var::param(vec64(&[0.0, 0.0], &[2]));
    let g = vec64(&[3.0, 4.0], &[2]);
    a.set_grad(Some(g.clone()))?;
    b.set_grad(Some(g.clone()))?;
    let total = clip_grad_norm_(&[a.clone(), b.clone()], 1.0, 2.0)?;
    assert!((total - 50f64.sqrt()).abs() < 1e-12);
    let coef = 1.0 / (50f64.sqrt() + 1e-6);
    for p in [&a, &b] {
        let got = p.grad().unwrap().to_vec::<f64>()?;
        assert!((got[0] - 3.0 * coef).abs() < 1e-12 && (got[1] - 4.0 * coef).abs() < 1e-12, "{got:?}");
    }
    assert_eq!(g.to_vec::<f64>()?, vec![3.0, 4.0], "the shared tensor itself was written");
    Ok(())
}

#[test]
fn clip_handles_broadcast_gradients_and_no_gradients() -> Result<()> {
    let w = Var::param(vec64(&[0.0; 4], &[2, 2]));
    w.set_grad(Some(vec64(&[3.0, 4.0], &[1, 2]).expand([2, 2])?))?;
    let total = clip_grad_norm_(std::slice::from_ref(&w), f64::INFINITY, f64::INFINITY)?;
    assert_eq!(total, 4.0);
    let total = clip_grad_norm_(std::slice::from_ref(&w), 2.0, f64::INFINITY)?;
    assert_eq!(total, 4.0);
    let got = w.grad().unwrap().to_vec::<f64>()?;
    assert!(got.iter().zip([3.0, 4.0, 3.0, 4.0]).all(|(g, e)| (g - e * 2.0 / (4.0 + 1e-6)).abs() < 1e-12));

    let none = Var::param(Tensor::zeros([3], DType::F32)?);
    assert_eq!(clip_grad_norm_(&[none], 1.0, 2.0)?, 0.0);
    Ok(())
}

#[test]
fn clip_propagates_non_finite_norms() -> Result<()> {
    let w = Var::param(vec64(&[0.0, 0.0], &[2]));
    w.set_grad(Some(vec64(&[f64::NAN, 1.0], &[2])))?;
    assert!(clip_grad_norm_(std::slice::from_ref(&w), 1.0, 2.0)?.is_nan());
    assert!(w.grad().unwrap().to_vec::<f64>()?.iter().all(|v| v.is_nan()), "as PyTorch: NaN scaling");
    w.set_grad(Some(vec64(&[f64::NAN, 1.0], &[2])))?;
    assert!(clip_grad_norm_(std::slice::from_ref(&w), 1.0, f64::INFINITY)?.is_nan());
    Ok(())
}

#[test]
fn nothing_to_update_is_not_an_error() -> Result<()> {
    let w = Var::param(vec64(&[1.0], &[1]));
    for (name, mut opt) in every_optimizer(std::slice::from_ref(&w)) {
        opt.step()?;
        assert_eq!(values(&w), vec![1.0], "{name}");
        assert!(opt.state_dict().tensors.is_empty(), "{name}");
    }
    Ok(())
}
