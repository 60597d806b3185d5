//! Static mode: traced graphs re-run by setting values, gradient routing, and cached
//! criteria (docs/design.md, 'Static mode').

use ember_autograd::{CachedLoss, Traced, Var};
use ember_tensor::{DType, Result, Tensor};

fn t(v: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_slice(v, shape).unwrap()
}

fn linear_model(w: &Var) -> Traced {
    let w = w.clone();
    Traced::new(move |x: &Var| x.matmul(&w))
}

#[test]
fn a_traced_graph_is_built_once_per_shape() -> Result<()> {
    let w = Var::param(t(&[1.0, 2.0], &[2, 1]));
    let model = linear_model(&w);
    let a = model.forward(t(&[1.0, 1.0], &[1, 2]))?;
    let b = model.forward(t(&[2.0, 3.0], &[1, 2]))?;
    assert!(a.same_node(&b));
    assert_eq!(b.value().to_vec::<f32>()?, vec![8.0]);
    assert_eq!(model.num_graphs(), 1);
    let c = model.forward(t(&[1.0, 0.0, 0.0, 1.0], &[2, 2]))?;
    assert!(!c.same_node(&a));
    assert_eq!(model.num_graphs(), 2);
    assert_eq!(c.value().to_vec::<f32>()?, vec![1.0, 2.0]);
    Ok(())
}

#[test]
fn parameters_updated_in_place_are_picked_up() -> Result<()> {
    let w = Var::param(t(&[1.0, 2.0], &[2, 1]));
    let model = linear_model(&w);
    let x = t(&[1.0, 1.0], &[1, 2]);
    assert_eq!(model.forward(&x)?.value().to_vec::<f32>()?, vec![3.0]);
    w.value().mul_scalar_(10.0)?; // an optimizer step, say
    assert_eq!(model.forward(&x)?.value().to_vec::<f32>()?, vec![30.0]);
    Ok(())
}

/// The GradientRouter: a `&Var` input routes gradients into its own graph; a detached one
/// and a tensor route nowhere.
#[test]
fn gradients_are_routed_to_the_input_var() -> Result<()> {
    let g = Var::param(t(&[3.0], &[1, 1])); // a "generator" parameter
    let w = Var::param(t(&[2.0], &[1, 1])); // a "discriminator" parameter
    let disc = linear_model(&w);
    let fake = Var::new(t(&[1.0], &[1, 1])).matmul(&g)?; // fake = 1 * g

    // Through the router: d(fake @ w)/dg = w = 2.
    disc.forward(&fake)?.sum_all().backward()?;
    assert_eq!(g.grad().unwrap().to_vec::<f32>()?, vec![2.0]);
    assert_eq!(w.grad().unwrap().to_vec::<f32>()?, vec![3.0]);

    // Detached: the discriminator still trains, the generator gets nothing.
    g.zero_grad();
    w.zero_grad();
    let out = disc.forward(fake.detach())?;
    assert!(out.inputs()?[0].is_router());
    out.sum_all().backward()?;
    assert!(g.grad().is_none());
    assert_eq!(w.grad().unwrap().to_vec::<f32>()?, vec![3.0]);

    // A plain tensor routes nowhere either.
    w.zero_grad();
    disc.forward(t(&[4.0], &[1, 1]))?.sum_all().backward()?;
    assert!(g.grad().is_none());
    assert_eq!(w.grad().unwrap().to_vec::<f32>()?, vec![4.0]);
    Ok(())
}

#[test]
fn cached_losses_reuse_their_subgraph_per_output() -> Result<()> {
    let w = Var::param(t(&[1.0, 2.0], &[2, 1]));
    let model = linear_model(&w);
    let mse = CachedLoss::new(|out: &Var, target: &Var| Ok(out.sub(target)?.square().mean_all()));
    let x = t(&[1.0, 1.0], &[1, 2]);
    let out = model.forward(&x)?;
    let l1 = mse.forward(&out, t(&[1.0], &[1, 1]))?;
    assert_eq!(l1.item()?, 4.0);
    let l2 = mse.forward(&out, t(&[3.0], &[1, 1]))?;
    assert!(l1.same_node(&l2), "same output, same loss subgraph");
    assert_eq!(l2.item()?, 0.0);
    assert_eq!(mse.cached(), 1);

    // Eager outputs are not hoarded: once the caller drops one, its entry goes.
    for _ in 0..5 {
        let eager = Var::new(x.clone()).matmul(&w)?;
        mse.forward(&eager, t(&[0.0], &[1, 1]))?.backward()?;
    }
    assert!(mse.cached() <= 2, "{} cached", mse.cached());
    Ok(())
}

#[test]
fn traced_training_matches_eager_training() -> Result<()> {
    let init = Tensor::normal([3, 1], 0.0, 1.0, DType::F64)?;
    let xs: Vec<Tensor> = (0..4).map(|_| Tensor::normal([5, 3], 0.0, 1.0, DType::F64).unwrap()).collect();
    let train = |traced: bool| -> Result<Vec<f64>> {
        let w = Var::param(init.copy());
        let w2 = w.clone();
        let model = Traced::new(move |x: &Var| Ok(x.matmul(&w2)?.tanh().sum_all()));
        for x in &xs {
            let loss = if traced { model.forward(x)? } else { Var::new(x.clone()).matmul(&w)?.tanh().sum_all() };
            w.zero_grad();
            loss.backward()?;
            let g = w.grad().unwrap();
            w.value().sub_(&g.mul_scalar(0.1))?;
        }
        w.value().to_vec::<f64>()
    };
    assert_eq!(train(true)?, train(false)?);
    Ok(())
}

/// A graph first traced under no-grad must still re-run with new inputs: evaluating a
/// traced model inside `no_grad` before (or without) training is the common case.
#[test]
fn a_graph_first_traced_under_no_grad_re_runs_with_new_inputs() -> Result<()> {
    let w = Var::param(t(&[1.0, 2.0], &[2, 1]));
    let model = linear_model(&w);
    let first = ember_autograd::no_grad(|| model.forward(t(&[1.0, 1.0], &[1, 2])))?;
    assert_eq!(first.value().to_vec::<f32>()?, vec![3.0]);
    let second = ember_autograd::no_grad(|| model.forward(t(&[2.0, 3.0], &[1, 2])))?;
    assert_eq!(second.value().to_vec::<f32>()?, vec![8.0]);
    // The same graph trains afterwards.
    model.forward(t(&[1.0, 0.0], &[1, 2]))?.sum_all().backward()?;
    assert_eq!(w.grad().unwrap().to_vec::<f32>()?, vec![1.0, 0.0]);
    assert_eq!(model.num_graphs(), 1);
    Ok(())
}

#[test]
fn a_loss_first_cached_under_no_grad_re_runs_with_new_targets() -> Result<()> {
    let criterion = CachedLoss::new(|out: &Var, y: &Var| Ok(out.sub(y)?.square().sum_all()));
    let out = Var::param(t(&[1.0, 2.0], &[2]));
    let a = ember_autograd::no_grad(|| criterion.forward(&out, t(&[0.0, 0.0], &[2])))?;
    assert_eq!(a.item()?, 5.0);
    let b = ember_autograd::no_grad(|| criterion.forward(&out, t(&[1.0, 1.0], &[2])))?;
    assert_eq!(b.item()?, 1.0);
    Ok(())
}

/// A build that computes with the input's value instead of the input Var cannot be re-run:
/// every later call would return the first output. That is an error at trace time.
#[test]
fn a_model_that_ignores_its_input_var_is_an_error() {
    let model = Traced::new(|x: &Var| Ok(Var::new(x.value().mul_scalar(2.0))));
    let err = model.forward(t(&[1.0], &[1])).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("does not depend on the input"), "{err}");
    assert_eq!(model.num_graphs(), 0);
}

/// Threads sharing one traced model with one shape share its output node, so a thread may
/// read another's result (documented); but re-runs never fail or produce a value that no
/// input gives.
#[test]
fn concurrent_calls_with_one_shape_do_not_fail() -> Result<()> {
    let w = Var::param(t(&[1.0, 2.0], &[2, 1]));
    let model = std::sync::Arc::new(linear_model(&w));
    model.forward(t(&[0.0, 0.0], &[1, 2]))?;
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let model = model.clone();
            std::thread::spawn(move || -> Result<()> {
                for k in 0..200 {
                    let x = (i * 1000 + k) as f32;
                    let y = model.forward(t(&[x, 0.0], &[1, 2]))?.value().to_vec::<f32>()?[0];
                    assert!(y.fract() == 0.0 && (0.0..4000.0).contains(&y), "{y}");
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| ember_tensor::Error::autograd("thread panicked"))??;
    }
    Ok(())
}
