//! A WGAN-GP critic step through a checkpointed critic matches the plain one: the gradient
//! penalty `((||d critic / d x_hat||_2 - 1)^2).mean()` is computed with
//! `grad(.., create_graph = true)` at interpolates between real and fake samples, the critic
//! loss is backpropagated, and the critic's parameter gradients, then its parameters after
//! one Adam step, are bitwise those of the same critic run without checkpoints. The critic
//! is checkpointed whole (`ember::autograd::checkpoint`) and in segments
//! (`ember::nn::checkpoint_sequential`).

use ember::autograd::{checkpoint, grad};
use ember::nn::{Linear, LinearOptions, Module, Sequential, Tanh, checkpoint_sequential};
use ember::optim::{Adam, AdamConfig, Optimizer};
use ember::{DType, Result, Tensor, Var, manual_seed};
use std::sync::Arc;

const LAMBDA: f64 = 10.0;

fn linear(i: usize, o: usize) -> Result<Linear> {
    Linear::with_options(i, o, LinearOptions { bias: true, dtype: DType::F64 })
}

/// A small MLP critic with the same weights every time (seeded).
fn critic() -> Result<Arc<Sequential>> {
    manual_seed(21);
    Ok(Arc::new(Sequential::new().add(linear(4, 16)?).add(Tanh).add(linear(16, 16)?).add(Tanh).add(linear(16, 1)?)))
}

#[derive(Clone, Copy, Debug)]
enum How {
    Plain,
    Whole,
    Segments,
}

fn apply(critic: &Arc<Sequential>, x: &Var, how: How) -> Result<Var> {
    match how {
        How::Plain => critic.forward(x),
        How::Whole => {
            let c = critic.clone();
            checkpoint(move |v: &[Var]| c.forward(&v[0]), &[x])
        }
        How::Segments => checkpoint_sequential(critic, 3, x),
    }
}

fn bits(t: &Tensor) -> Result<Vec<u64>> {
    Ok(t.to_vec::<f64>()?.into_iter().map(f64::to_bits).collect())
}

/// One value per parameter, as bits.
type PerParam = Vec<Vec<u64>>;

/// One critic step: the loss's gradients into `.grad`, then one Adam step. Returns the
/// gradients and the updated parameters.
fn critic_step(how: How) -> Result<(PerParam, PerParam)> {
    let critic = critic()?;
    manual_seed(22);
    let real = Var::new(Tensor::randn([8, 4])?.to_dtype(DType::F64));
    // The generator's output, detached for the critic's step.
    let fake = Var::new(Tensor::randn([8, 4])?.to_dtype(DType::F64).mul_scalar(0.5).add_scalar(1.0));
    let eps = Tensor::uniform([8, 1], 0.0, 1.0, DType::F64)?;
    let x_hat = Var::param(real.value().mul(&eps)?.add(&fake.value().mul(&eps.mul_scalar(-1.0).add_scalar(1.0))?)?);

    let d_hat = apply(&critic, &x_hat, how)?;
    assert_eq!(d_hat.op_name() == "checkpoint", matches!(how, How::Whole), "{how:?}");
    let ones = Var::new(d_hat.value().ones_like());
    let g = grad(&[&d_hat], &[&x_hat], &[&ones], false, true)?[0].clone().expect("a gradient at the interpolates");
    assert!(g.requires_grad(), "{how:?}: the penalty's gradient carries its graph");
    let penalty = g.square().sum(1, false)?.sqrt().sub_scalar(1.0).square().mean_all().mul_scalar(LAMBDA);
    let loss = apply(&critic, &fake, how)?.mean_all().sub(&apply(&critic, &real, how)?.mean_all())?.add(&penalty)?;

    let mut adam = Adam::new(critic.parameters(), AdamConfig { lr: 1e-2, ..AdamConfig::default() })?;
    adam.zero_grad();
    loss.backward()?;
    let grads =
        critic.parameters().iter().map(|p| bits(&p.grad().expect("a critic gradient"))).collect::<Result<_>>()?;
    adam.step()?;
    let params = critic.parameters().iter().map(|p| bits(&p.value())).collect::<Result<_>>()?;
    Ok((grads, params))
}

#[test]
fn a_wgan_gp_critic_step_through_a_checkpointed_critic_matches_the_plain_one() -> Result<()> {
    let (plain_grads, plain_params) = critic_step(How::Plain)?;
    for how in [How::Whole, How::Segments] {
        let (grads, params) = critic_step(how)?;
        assert!(grads == plain_grads, "{how:?}: the critic's gradients differ from the plain ones");
        assert!(params == plain_params, "{how:?}: the parameters after one Adam step differ");
    }
    Ok(())
}
