//! DistributedDataParallel over a group of one rank: the average of one rank's gradients is
//! those gradients, so the wrapped model trains bit for bit like the plain one (and like
//! two ranks that see the same data), its gradients stay the tensors backward made, and the
//! counters of the reduction still work (`ddp.rs` checks one rank's unused-parameter errors
//! beside the same checks on two ranks).

use ember_autograd::Var;
use ember_distributed::{DdpOptions, DistributedDataParallel, LocalGroup, ProcessGroup};
use ember_nn::{CrossEntropyOptions, Linear, LinearOptions, Module, ReLU, Sequential, StateDict, cross_entropy};
use ember_optim::{Adam, AdamConfig, Optimizer};
use ember_tensor::{DType, Error, Result, Tensor};
use std::sync::Arc;
use std::time::Duration;

/// A small MLP, 20-32-16-10, in f32.
fn mlp() -> Result<Sequential> {
    Ok(Sequential::new()
        .add(Linear::new(20, 32)?)
        .add(ReLU)
        .add(Linear::new(32, 16)?)
        .add(ReLU)
        .add(Linear::new(16, 10)?))
}

/// Batch `step` of 8 deterministic samples.
fn batch(step: usize) -> Result<(Var, Tensor)> {
    let x: Vec<f32> = (0..8 * 20).map(|k| (((k + 131 * step) * 7919) % 1009) as f32 / 1009.0 - 0.5).collect();
    let y: Vec<i64> = (0..8).map(|i| ((i + step) * 7 % 10) as i64).collect();
    Ok((Var::new(Tensor::from_vec(x, [8, 20])?), Tensor::from_vec(y, [8])?))
}

/// A copy of `model`'s state that later training does not change.
fn snapshot(model: &dyn Module) -> StateDict {
    model.state_dict().iter().map(|(k, v)| (k.to_string(), v.copy())).collect()
}

/// Parameters, then the last step's gradients, each parameter's as a vector.
type Trained = (Vec<Vec<f32>>, Vec<Vec<f32>>);

/// The parameters after `steps` Adam steps of `model`, and the gradients of the last step.
fn train(model: &dyn Module, steps: usize) -> Result<Trained> {
    train_zeroing(model, steps, false)
}

/// [`train`], zeroing the gradients in place from the second step on (PyTorch's
/// `zero_grad(set_to_none=False)`) when `in_place`, else setting them to none.
fn train_zeroing(model: &dyn Module, steps: usize, in_place: bool) -> Result<Trained> {
    let mut opt = Adam::new(model.parameters(), AdamConfig { lr: 1e-2, ..Default::default() })?;
    let mut grads = Vec::new();
    for s in 0..steps {
        let (x, y) = batch(s)?;
        let loss = cross_entropy(&model.forward(&x)?, &y, CrossEntropyOptions::default())?;
        if in_place && s > 0 {
            for p in model.parameters() {
                p.grad().expect("a gradient").zero_()?;
            }
        } else {
            opt.zero_grad();
        }
        loss.backward()?;
        grads =
            model.parameters().iter().map(|p| p.grad().expect("a gradient").to_vec::<f32>()).collect::<Result<_>>()?;
        opt.step()?;
    }
    let params = model.parameters().iter().map(|p| p.value().to_vec::<f32>()).collect::<Result<_>>()?;
    Ok((params, grads))
}

fn one_rank() -> Result<Arc<dyn ProcessGroup>> {
    let group = LocalGroup::new_world(1)?.pop().ok_or_else(|| Error::invalid("test", "one rank"))?;
    Ok(Arc::new(group))
}

#[test]
fn one_rank_trains_bit_identically_to_the_plain_model_and_to_two_ranks_on_the_same_data() -> Result<()> {
    const STEPS: usize = 5;
    let plain = mlp()?;
    let init = snapshot(&plain);
    let expected = train(&plain, STEPS)?;

    let model = mlp()?;
    model.load_state_dict(&init)?;
    let ddp = DistributedDataParallel::new(model, one_rank()?)?;
    assert_eq!(train(&ddp, STEPS)?, expected, "one-rank DDP against the plain model");
    assert_eq!(ddp.stats().steps, STEPS as u64);

    // Two ranks with the same batches average two equal gradients, (g + g) / 2 = g exactly,
    // through the bucket views (which the linear layers write their weight gradients into)
    // and the all-reduce, or through the copy path: both give the plain model's bits,
    // whether the gradients are set to none or zeroed in place between steps.
    for (as_views, in_place) in [(true, false), (true, true), (false, false), (false, true)] {
        let ranks = LocalGroup::spawn(2, |g| {
            let model = mlp()?;
            model.load_state_dict(&init)?;
            let options = DdpOptions { bucket_cap_mb: 1e-3, gradient_as_bucket_view: as_views, ..Default::default() };
            let ddp = DistributedDataParallel::with_options(model, Arc::new(g), options)?;
            assert!(ddp.bucket_names().len() > 1, "{:?}", ddp.bucket_names());
            let trained = train_zeroing(&ddp, STEPS, in_place)?;
            // The gradients are views of their bucket, or tensors of their own (the first
            // layer's weight and bias share a bucket).
            let grad = |i: usize| ddp.parameters()[i].grad().expect("a gradient");
            assert_eq!(grad(0).shares_storage(&grad(1)), as_views);
            Ok(trained)
        });
        for r in ranks {
            assert_eq!(r?, expected, "two-rank DDP on equal data against the plain model (views {as_views})");
        }
    }
    assert_eq!(train_zeroing(&plain_from(&init)?, STEPS, true)?, expected, "zeroing in place, plain");
    Ok(())
}

/// A fresh MLP holding `init`.
fn plain_from(init: &StateDict) -> Result<Sequential> {
    let model = mlp()?;
    model.load_state_dict(init)?;
    Ok(model)
}

#[test]
fn one_rank_gradients_stay_the_tensors_backward_made() -> Result<()> {
    let model = Linear::with_options(3, 2, LinearOptions { bias: true, dtype: DType::F64 })?;
    // A gradient held before wrapping stays as it is.
    let x = Var::new(Tensor::from_vec((1..=6).map(f64::from).collect(), [2, 3])?);
    model.forward(&x)?.sum_all().backward()?;
    let held = model.weight().grad().expect("a gradient");
    let ddp = DistributedDataParallel::with_options(
        model,
        one_rank()?,
        DdpOptions { bucket_cap_mb: 1.0, ..Default::default() },
    )?;
    assert_eq!(ddp.bucket_names(), vec![vec!["bias".to_string(), "weight".to_string()]]);
    let (w, b) = (ddp.module().weight(), ddp.module().bias().expect("a bias"));
    assert!(w.grad().expect("kept").shares_storage(&held));
    assert!(!w.grad_in_place() && !b.grad_in_place());

    ddp.zero_grad();
    ddp.forward(&x)?.sum_all().backward()?;
    let (gw, gb) = (w.grad().expect("a gradient"), b.grad().expect("a gradient"));
    // No flat buffer behind one bucket's gradients.
    assert!(!gw.shares_storage(&gb));
    assert_eq!(gw.to_vec::<f64>()?, vec![5.0, 7.0, 9.0, 5.0, 7.0, 9.0]);
    assert_eq!(gb.to_vec::<f64>()?, vec![2.0, 2.0]);

    // no_sync accumulates; the next backward "reduces" the sum, which stays as it is.
    {
        let _accumulate = ddp.no_sync();
        ddp.forward(&x)?.sum_all().backward()?;
    }
    ddp.forward(&x)?.sum_all().backward()?;
    assert_eq!(w.grad().expect("a gradient").to_vec::<f64>()?, vec![15.0, 21.0, 27.0, 15.0, 21.0, 27.0]);

    let stats = ddp.stats();
    assert_eq!(stats.steps, 2);
    assert_eq!(stats.buckets, 1);
    // Both steps count the bucket's 8 f64s; nothing ran on the communication thread.
    assert_eq!(stats.bytes_reduced, 2 * 8 * 8);
    assert_eq!(stats.all_reduce_time, Duration::ZERO);
    assert_eq!(stats.exposed_wait, Duration::ZERO);
    assert_eq!(stats.hidden_fraction(), 0.0);
    Ok(())
}
