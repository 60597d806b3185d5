//! `hard_update` and `soft_update`: exact copies and averages of parameters, buffers copied
//! as `load_state_dict(state_dict())` would, errors that name the mismatch, no graph, and a
//! target whose parameters never require grad.

use ember_autograd::Var;
use ember_nn::{BatchNorm1d, Linear, Module, ReLU, Sequential, hard_update, soft_update};
use ember_tensor::{Result, Tensor, manual_seed};

fn mlp(hidden: usize) -> Result<Sequential> {
    Ok(Sequential::new()
        .add(Linear::new(3, hidden)?)
        .add(BatchNorm1d::new(hidden)?)
        .add(ReLU)
        .add(Linear::new(hidden, 2)?))
}

fn values(m: &dyn Module) -> Result<Vec<(String, Vec<f64>)>> {
    m.state_dict().iter().map(|(k, v)| Ok((k.to_string(), v.to_vec_f64()?))).collect()
}

#[test]
fn hard_update_copies_parameters_and_buffers_bit_for_bit() -> Result<()> {
    manual_seed(0);
    let (online, target) = (mlp(5)?, mlp(5)?);
    // A training-mode forward moves the online BatchNorm's running statistics and counter.
    online.forward(&Var::new(Tensor::randn([8, 3])?))?;
    assert_ne!(values(&online)?, values(&target)?);
    hard_update(&target, &online)?;
    let (o, t) = (values(&online)?, values(&target)?);
    assert_eq!(o, t, "every parameter and buffer, num_batches_tracked included");
    assert!(o.iter().any(|(k, _)| k.ends_with("running_mean")));
    // Copies, not aliases: the online network moving on leaves the target alone.
    online.parameters()[0].value().add_scalar_(1.0)?;
    assert_eq!(values(&target)?, t);
    Ok(())
}

#[test]
fn soft_update_is_the_polyak_average_and_copies_buffers() -> Result<()> {
    manual_seed(1);
    let (online, target) = (mlp(4)?, mlp(4)?);
    online.forward(&Var::new(Tensor::randn([6, 3])?))?;
    let tau = 0.3;
    let before: Vec<Vec<f64>> = target.parameters().iter().map(|p| p.value().to_vec_f64()).collect::<Result<_>>()?;
    soft_update(&target, &online, tau)?;
    for ((o, t), old) in online.parameters().iter().zip(target.parameters()).zip(&before) {
        for ((o, t), old) in o.value().to_vec_f64()?.iter().zip(t.value().to_vec_f64()?).zip(old) {
            let want = tau * o + (1.0 - tau) * old;
            assert!((t - want).abs() <= 1e-7, "{t} vs {want}");
        }
    }
    for ((name, o), (_, t)) in online.named_buffers().iter().zip(target.named_buffers()) {
        assert_eq!(o.to_vec_f64()?, t.to_vec_f64()?, "buffer {name} is copied");
    }
    // tau = 1 is a hard copy of the parameters, tau = 0 changes nothing.
    let frozen = values(&target)?;
    soft_update(&target, &online, 0.0)?;
    assert_eq!(values(&target)?, frozen);
    soft_update(&target, &online, 1.0)?;
    assert_eq!(values(&target)?, values(&online)?);
    Ok(())
}

#[test]
fn target_parameters_never_require_grad_or_record() -> Result<()> {
    manual_seed(2);
    let (online, target) = (mlp(4)?, mlp(4)?);
    online.eval();
    target.eval();
    assert!(target.parameters().iter().all(Var::requires_grad));
    hard_update(&target, &online)?;
    for p in target.parameters() {
        assert!(!p.requires_grad() && p.is_leaf() && p.is_frozen(), "target parameters are frozen leaves");
    }
    // A forward through the target outside no_grad records nothing for its parameters: a
    // loss built on it sends gradients to the online network only, and none to the target.
    let x = Var::new(Tensor::randn([5, 3])?);
    let loss = target.forward(
        &online.forward(&x)?.narrow(1, 0, 2)?.matmul(&Var::new(Tensor::ones([2, 3], ember_tensor::DType::F32)?))?,
    )?;
    loss.sum_all().backward()?;
    assert!(target.parameters().iter().all(|p| p.grad().is_none()));
    assert!(online.parameters().iter().all(|p| p.grad().is_some()));
    // soft_update freezes too, and the online network keeps requiring grad.
    let other = mlp(4)?;
    soft_update(&other, &online, 0.5)?;
    assert!(other.parameters().iter().all(|p| !p.requires_grad()));
    assert!(online.parameters().iter().all(Var::requires_grad));
    Ok(())
}

#[test]
fn mismatches_are_errors_that_name_the_parameter_and_shapes() -> Result<()> {
    manual_seed(3);
    let online = mlp(4)?;
    let wider = mlp(6)?;
    let before = values(&wider)?;
    let err = hard_update(&wider, &online).unwrap_err().to_string();
    assert!(err.contains("0.weight") && err.contains("[6, 3]") && err.contains("[4, 3]"), "{err}");
    assert_eq!(values(&wider)?, before, "nothing is written when something does not fit");
    let err = soft_update(&wider, &online, 0.1).unwrap_err().to_string();
    assert!(err.contains("soft_update") && err.contains("0.weight"), "{err}");

    let shorter = Sequential::new().add(Linear::new(3, 4)?);
    let err = hard_update(&shorter, &online).unwrap_err().to_string();
    assert!(err.contains("parameters"), "{err}");

    let renamed = Sequential::new().add(ReLU).add(Linear::new(3, 4)?).add(BatchNorm1d::new(4)?).add(Linear::new(4, 2)?);
    let err = hard_update(&renamed, &online).unwrap_err().to_string();
    assert!(err.contains("1.weight") && err.contains("0.weight"), "{err}");

    let err = soft_update(&mlp(4)?, &online, 1.5).unwrap_err().to_string();
    assert!(err.contains("tau"), "{err}");
    assert!(soft_update(&mlp(4)?, &online, f64::NAN).is_err());

    // A module is not its own target: freezing it would freeze the online network.
    let err = hard_update(&online, &online).unwrap_err().to_string();
    assert!(err.contains("shares parameter 0.weight"), "{err}");
    assert!(online.parameters().iter().all(Var::requires_grad));
    Ok(())
}
