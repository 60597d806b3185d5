//! The optimizers' rule for parameters that no longer require grad: a step skips them even
//! when a stale gradient is still set (PyTorch would apply it), leaving their value and
//! their state (moments, momentum buffer, step count) bit-identical; once they require grad
//! again, their updates resume where they stopped.

use ember_autograd::Var;
use ember_optim::{Adam, AdamW, Optimizer, OptimizerState, RmsProp, Sgd};
use ember_tensor::{Result, Tensor};

/// Every optimizer kind, with the options that give it the most state: momentum, weight
/// decay, Nesterov, AMSGrad, a centered average.
const KINDS: [&str; 6] = ["sgd", "sgd-plain", "adam", "adam-amsgrad", "adamw", "rmsprop"];

fn build(kind: &str, params: Vec<Var>) -> Result<Box<dyn Optimizer>> {
    Ok(match kind {
        "sgd" => Box::new(Sgd::with_params(params).lr(0.1).momentum(0.9).nesterov(true).weight_decay(0.1).build()?),
        "sgd-plain" => Box::new(Sgd::with_params(params).lr(0.1).weight_decay(0.1).build()?),
        "adam" => Box::new(Adam::with_params(params).lr(0.1).weight_decay(0.1).build()?),
        "adam-amsgrad" => Box::new(Adam::with_params(params).lr(0.1).amsgrad(true).build()?),
        "adamw" => Box::new(AdamW::with_params(params).lr(0.1).weight_decay(0.1).build()?),
        "rmsprop" => {
            Box::new(RmsProp::with_params(params).lr(0.1).momentum(0.5).centered(true).weight_decay(0.1).build()?)
        }
        other => unreachable!("no optimizer kind {other}"),
    })
}

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_vec_f64().unwrap().into_iter().map(f64::to_bits).collect()
}

/// The state as comparable bits: every scalar and every tensor element.
fn state_bits(s: &OptimizerState) -> Vec<(String, Vec<u64>)> {
    let scalars = s.scalars.iter().map(|(k, v)| (k.clone(), vec![v.to_bits()]));
    scalars.chain(s.tensors.iter().map(|(k, t)| (k.clone(), bits(t)))).collect()
}

/// The entries of `s` that belong to parameter `i` (`state.<i>.<name>`).
fn param_state(s: &OptimizerState, i: usize) -> Vec<(String, Vec<u64>)> {
    let prefix = format!("state.{i}.");
    state_bits(s).into_iter().filter(|(k, _)| k.starts_with(&prefix)).collect()
}

/// Gradients that change from step to step, so that a skipped or repeated update shows.
fn grads(step: usize) -> (Tensor, Tensor) {
    let s = step as f64;
    (
        Tensor::from_vec(vec![0.5 + 0.1 * s, -0.25, 1.0 - 0.2 * s], [3]).unwrap(),
        Tensor::from_vec(vec![-1.0 + 0.3 * s, 0.75], [2]).unwrap(),
    )
}

fn params() -> (Var, Var) {
    (
        Var::param(Tensor::from_vec(vec![1.0f64, -2.0, 3.0], [3]).unwrap()),
        Var::param(Tensor::from_vec(vec![4.0f64, -5.0], [2]).unwrap()),
    )
}

/// Two steps on both parameters, then `frozen` stops requiring grad (with `how`) while its
/// stale gradient stays set: two more steps leave it and its state bit-identical, while
/// the other parameter keeps learning. Then it requires grad again, and its next update is
/// exactly the one an optimizer that never saw the frozen steps makes.
fn freeze_skip_and_resume(kind: &str, how: &str) -> Result<()> {
    let (active, frozen) = params();
    let mut opt = build(kind, vec![active.clone(), frozen.clone()])?;
    // The reference sees `frozen` alone, and only on the steps where it requires grad.
    let (_, reference) = params();
    let mut ref_opt = build(kind, vec![reference.clone()])?;
    for step in 0..2 {
        let (ga, gf) = grads(step);
        opt.zero_grad();
        active.set_grad(Some(ga))?;
        frozen.set_grad(Some(gf.clone()))?;
        opt.step()?;
        ref_opt.zero_grad();
        reference.set_grad(Some(gf))?;
        ref_opt.step()?;
    }
    assert_eq!(bits(&frozen.value()), bits(&reference.value()), "{kind}: the reference diverged before freezing");

    match how {
        "requires_grad_" => {
            // Keeps the last gradient: the stale one a step must not apply.
            frozen.requires_grad_(false)?;
            assert!(frozen.grad().is_some(), "requires_grad_(false) keeps the gradient");
        }
        _ => {
            // Var::freeze drops the gradient; one set by hand afterwards is just as stale.
            frozen.freeze()?;
            frozen.set_grad(Some(grads(9).1))?;
        }
    }
    let value = bits(&frozen.value());
    let version = frozen.value().version();
    let state = param_state(&opt.state_dict(), 1);
    // Plain SGD keeps no state; every other kind has some for the parameter by now.
    assert!(kind == "sgd-plain" || !state.is_empty(), "{kind}: no state before freezing");
    for step in 2..4 {
        let before = bits(&active.value());
        // Only the active parameter's gradient is cleared, as a loop over the trainable
        // parameters would; the frozen one keeps its stale gradient.
        active.zero_grad();
        active.set_grad(Some(grads(step).0))?;
        opt.step()?;
        assert_ne!(bits(&active.value()), before, "{kind}/{how}: step {step} did not update the active parameter");
        assert!(frozen.grad().is_some(), "{kind}/{how}: the stale gradient is still there");
        assert_eq!(bits(&frozen.value()), value, "{kind}/{how}: step {step} moved a frozen parameter");
        assert_eq!(frozen.value().version(), version, "{kind}/{how}: step {step} wrote a frozen parameter");
        assert_eq!(param_state(&opt.state_dict(), 1), state, "{kind}/{how}: step {step} changed a frozen state");
    }

    // Requiring grad again resumes the updates from the state the freeze kept.
    match how {
        "requires_grad_" => frozen.requires_grad_(true)?,
        _ => frozen.unfreeze()?,
    };
    for step in 4..6 {
        let (ga, gf) = grads(step);
        opt.zero_grad();
        active.set_grad(Some(ga))?;
        frozen.set_grad(Some(gf.clone()))?;
        opt.step()?;
        ref_opt.zero_grad();
        reference.set_grad(Some(gf))?;
        ref_opt.step()?;
        assert_eq!(
            bits(&frozen.value()),
            bits(&reference.value()),
            "{kind}/{how}: step {step} after unfreezing differs from an optimizer that never saw the frozen steps"
        );
    }
    assert_ne!(bits(&frozen.value()), value, "{kind}/{how}: the unfrozen parameter did not move");
    assert_eq!(
        param_state(&opt.state_dict(), 1).into_iter().map(|(_, b)| b).collect::<Vec<_>>(),
        param_state(&ref_opt.state_dict(), 0).into_iter().map(|(_, b)| b).collect::<Vec<_>>(),
        "{kind}/{how}: the state after unfreezing differs from the reference's"
    );
    Ok(())
}

#[test]
fn requires_grad_false_with_a_stale_gradient_is_skipped_by_every_optimizer() -> Result<()> {
    for kind in KINDS {
        freeze_skip_and_resume(kind, "requires_grad_")?;
    }
    Ok(())
}

#[test]
fn frozen_with_a_gradient_set_by_hand_is_skipped_by_every_optimizer() -> Result<()> {
    for kind in KINDS {
        freeze_skip_and_resume(kind, "freeze")?;
    }
    Ok(())
}

#[test]
fn a_parameter_frozen_before_its_first_step_gets_no_state() -> Result<()> {
    for kind in KINDS {
        let (active, frozen) = params();
        frozen.requires_grad_(false)?;
        let mut opt = build(kind, vec![active.clone(), frozen.clone()])?;
        let value = bits(&frozen.value());
        for step in 0..3 {
            let (ga, gf) = grads(step);
            active.set_grad(Some(ga))?;
            frozen.set_grad(Some(gf))?;
            opt.step()?;
        }
        assert_eq!(bits(&frozen.value()), value, "{kind}: a parameter that never required grad moved");
        let state = opt.state_dict();
        assert!(param_state(&state, 1).is_empty(), "{kind}: state for a parameter that never required grad");
        // The active one has its state (plain SGD keeps none).
        assert!(kind == "sgd-plain" || !param_state(&state, 0).is_empty(), "{kind}: no state for the active one");
    }
    Ok(())
}

#[test]
fn zero_grad_sets_gradients_to_none() -> Result<()> {
    for kind in KINDS {
        let (a, b) = params();
        let opt = build(kind, vec![a.clone(), b.clone()])?;
        let (ga, gb) = grads(0);
        a.set_grad(Some(ga))?;
        b.requires_grad_(false)?;
        b.set_grad(Some(gb))?;
        opt.zero_grad();
        // set_to_none, for frozen parameters too: nothing stale remains to be stepped.
        assert!(a.grad().is_none() && b.grad().is_none(), "{kind}: zero_grad left a gradient");
    }
    Ok(())
}
