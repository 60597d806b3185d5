//! `Loss::cached()`: every loss object as a criterion that builds its subgraph once per
//! output node (docs/design.md, 'Static mode') and gives the eager loss's values and
//! gradients.

mod common;

use common::{idx, t32};
use ember_autograd::{Traced, Var};
use ember_nn::{
    BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss, L1Loss, Linear, Loss, MSELoss, Module, NLLLoss, Reduction,
    Sequential, Sigmoid,
};
use ember_tensor::{Result, Tensor};
use std::sync::Arc;

/// A traced `3 -> width` linear model (with `then` applied to its output) and its parameters.
fn traced(width: usize, then: Option<Sigmoid>) -> Result<(Traced, Vec<Var>)> {
    let weight = t32(&(0..3 * width).map(|i| (i as f32 - 4.0) / 7.0).collect::<Vec<_>>(), &[width, 3]);
    let mut model =
        Sequential::new().add(Linear::from_parts(weight, Some(Tensor::zeros([width], ember_tensor::DType::F32)?))?);
    if let Some(s) = then {
        model.push(s);
    }
    let model = Arc::new(model);
    let params = model.parameters();
    Ok((Traced::new(move |x: &Var| model.forward(x)), params))
}

fn inputs() -> Tensor {
    t32(&[0.5, -1.0, 2.0, 1.5, 0.0, -0.5, -2.0, 1.0, 0.25, 1.0, 1.0, -1.0], &[4, 3])
}

fn grads(params: &[Var]) -> Vec<Vec<f32>> {
    params.iter().map(|p| p.grad().map_or_else(Vec::new, |g| g.to_vec::<f32>().unwrap())).collect()
}

/// Runs `loss` cached on a traced model's output against each target in turn, checking the
/// value and the parameter gradients against the eager loss on a fresh eager output, and
/// that every call after the first re-ran the same loss node.
fn check<L: Loss + Copy + 'static>(loss: L, width: usize, sigmoid: bool, targets: &[Tensor]) -> Result<()> {
    let then = sigmoid.then_some(Sigmoid);
    let (model, params) = traced(width, then)?;
    let criterion = loss.cached();
    let x = inputs();
    let mut first: Option<Var> = None;
    for target in targets {
        for p in &params {
            p.zero_grad();
        }
        let cached = criterion.forward(&model.forward(&x)?, target)?;
        cached.backward()?;
        let (cached_value, cached_grads) = (cached.item()?, grads(&params));
        match &first {
            None => first = Some(cached.clone()),
            Some(f) => assert!(f.same_node(&cached), "a second target rebuilt the loss subgraph"),
        }
        assert_eq!(criterion.cached(), 1);

        for p in &params {
            p.zero_grad();
        }
        let mut out = Var::new(x.clone()).linear(&params[0], Some(&params[1]))?;
        if sigmoid {
            out = out.sigmoid();
        }
        let eager = loss.forward(&out, &Var::new(target.clone()))?;
        eager.backward()?;
        assert_eq!(cached_value, eager.item()?, "value for target {target:?}");
        assert_eq!(cached_grads, grads(&params), "gradients for target {target:?}");
    }
    Ok(())
}

#[test]
fn every_loss_object_caches_and_matches_its_eager_form() -> Result<()> {
    let real = |seed: f32| t32(&(0..8).map(|i| ((i as f32 + seed) * 0.77).sin()).collect::<Vec<_>>(), &[4, 2]);
    let probs = |seed: f32| t32(&(0..8).map(|i| ((i as f32 + seed) * 0.61).sin().abs()).collect::<Vec<_>>(), &[4, 2]);
    let targets = [real(0.0), real(3.0), real(0.0)];
    check(MSELoss::default(), 2, false, &targets)?;
    check(MSELoss(Reduction::Sum), 2, false, &targets)?;
    check(L1Loss::default(), 2, false, &targets)?;
    check(HuberLoss::default(), 2, false, &targets)?;
    check(BCEWithLogitsLoss::default(), 2, false, &[probs(0.0), probs(5.0)])?;
    check(BCELoss::default(), 2, true, &[probs(1.0), probs(2.0)])?;
    let classes = [idx(&[0, 2, 1, 2], &[4]), idx(&[1, 1, 0, 0], &[4])];
    check(CrossEntropyLoss::default(), 3, false, &classes)?;
    check(NLLLoss::default(), 3, false, &classes)?;
    Ok(())
}

/// Each distinct output node gets its own subgraph; a dropped eager output takes its entry
/// with it.
#[test]
fn one_subgraph_per_output_node() -> Result<()> {
    let (model, params) = traced(2, None)?;
    let criterion = MSELoss::default().cached();
    let four = model.forward(inputs())?;
    let two = model.forward(inputs().narrow(0, 0, 2)?)?;
    let a = criterion.forward(&four, Tensor::zeros([4, 2], ember_tensor::DType::F32)?)?;
    let b = criterion.forward(&two, Tensor::zeros([2, 2], ember_tensor::DType::F32)?)?;
    assert!(!a.same_node(&b));
    assert_eq!(criterion.cached(), 2);
    let again = criterion.forward(&four, Tensor::ones([4, 2], ember_tensor::DType::F32)?)?;
    assert!(again.same_node(&a));
    assert_eq!(criterion.cached(), 2);

    for _ in 0..4 {
        let eager = Var::new(inputs()).linear(&params[0], Some(&params[1]))?;
        criterion.forward(&eager, Tensor::zeros([4, 2], ember_tensor::DType::F32)?)?.backward()?;
    }
    assert!(criterion.cached() <= 3, "{} subgraphs kept", criterion.cached());
    Ok(())
}

/// A target of another shape is checked by the loss as on a first call, not broadcast
/// through the subgraph built for the first target's shape.
#[test]
fn a_target_of_another_shape_is_checked_again() -> Result<()> {
    let (model, _) = traced(2, None)?;
    let criterion = MSELoss::default().cached();
    let out = model.forward(inputs())?;
    criterion.forward(&out, Tensor::zeros([4, 2], ember_tensor::DType::F32)?)?;
    let err = criterion.forward(&out, Tensor::zeros([2], ember_tensor::DType::F32)?);
    assert!(err.is_err_and(|e| e.to_string().contains("must match")));
    Ok(())
}
