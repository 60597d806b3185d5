//! DistributedDataParallel over LocalGroup: two ranks with batch B train exactly like one
//! process with batch 2B; buckets, no_sync, unused parameters and buffers behave like
//! PyTorch's.

use ember_autograd::Var;
use ember_distributed::{DdpOptions, DistributedDataParallel, LocalGroup, ProcessGroup};
use ember_nn::{
    BatchNorm1d, CrossEntropyOptions, Linear, LinearOptions, Module, ReLU, Sequential, StateDict, cross_entropy,
};
use ember_optim::{Optimizer, Sgd, SgdConfig};
use ember_tensor::{DType, Result, Tensor};
use std::sync::Arc;

/// The MNIST quick-start MLP, 784-256-128-10, in `dtype`.
fn mlp(dtype: DType) -> Result<Sequential> {
    let lin = |i, o| Linear::with_options(i, o, LinearOptions { bias: true, dtype });
    Ok(Sequential::new().add(lin(784, 256)?).add(ReLU).add(lin(256, 128)?).add(ReLU).add(lin(128, 10)?))
}

/// `n` deterministic MNIST-shaped samples (no global generator: tests run side by side).
fn data(n: usize, dtype: DType) -> Result<(Tensor, Tensor)> {
    let x: Vec<f64> = (0..n * 784).map(|k| (((k * 7919) % 1009) as f64 / 1009.0 - 0.5) * 2.0).collect();
    let y: Vec<i64> = (0..n as i64).map(|i| (i * 7) % 10).collect();
    Ok((Tensor::from_vec(x, [n, 784])?.to_dtype(dtype), Tensor::from_vec(y, [n])?))
}

/// A copy of `model`'s state that later training does not change.
fn snapshot(model: &dyn Module) -> StateDict {
    model.state_dict().iter().map(|(k, v)| (k.to_string(), v.copy())).collect()
}

fn params(model: &dyn Module) -> Result<Vec<Vec<f64>>> {
    model.parameters().iter().map(|p| p.value().to_vec_f64()).collect()
}

fn sgd(model: &dyn Module) -> Result<Sgd> {
    Sgd::new(model.parameters(), SgdConfig { lr: 0.1, momentum: 0.9, ..Default::default() })
}

/// One SGD step on `model` with rows `rows` of the data.
fn step(model: &dyn Module, opt: &mut Sgd, x: &Tensor, y: &Tensor, start: usize, len: usize) -> Result<()> {
    let logits = model.forward(&Var::new(x.narrow(0, start, len)?))?;
    let loss = cross_entropy(&logits, &y.narrow(0, start, len)?, CrossEntropyOptions::default())?;
    opt.zero_grad();
    loss.backward()?;
    opt.step()
}

/// Trains 2 ranks with batch `b` and one process with batch `2b` on the same samples for
/// `steps` steps, and returns the largest parameter difference.
fn two_ranks_against_one(dtype: DType, steps: usize, b: usize, bucket_cap_mb: f64) -> Result<f64> {
    let (x, y) = data(steps * 2 * b, dtype)?;
    let single = mlp(dtype)?;
    let init = snapshot(&single);
    let mut opt = sgd(&single)?;
    for s in 0..steps {
        step(&single, &mut opt, &x, &y, s * 2 * b, 2 * b)?;
    }
    let expected = params(&single)?;

    let ranks = LocalGroup::spawn(2, |g| {
        let rank = g.rank();
        let model = mlp(dtype)?;
        // Only rank 0 starts from the reference state: construction broadcasts it.
        if rank == 0 {
            model.load_state_dict(&init)?;
        }
        let options = DdpOptions { bucket_cap_mb, ..Default::default() };
        let ddp = DistributedDataParallel::with_options(model, Arc::new(g), options)?;
        let mut opt = sgd(&ddp)?;
        for s in 0..steps {
            step(&ddp, &mut opt, &x, &y, s * 2 * b + rank * b, b)?;
        }
        assert_eq!(ddp.stats().steps, steps as u64);
        params(ddp.module())
    });
    let mut worst = 0.0f64;
    for r in ranks {
        for (got, want) in r?.iter().zip(&expected) {
            for (a, b) in got.iter().zip(want) {
                worst = worst.max((a - b).abs());
            }
        }
    }
    Ok(worst)
}

#[test]
fn two_ranks_with_batch_b_train_like_one_process_with_batch_2b_in_f64() -> Result<()> {
    // Small buckets: several all-reduces per step, launched during backward.
    let worst = two_ranks_against_one(DType::F64, 3, 8, 0.1)?;
    assert!(worst < 1e-6, "largest parameter difference {worst}");
    Ok(())
}

#[test]
fn two_ranks_with_batch_b_train_like_one_process_with_batch_2b_in_f32() -> Result<()> {
    let worst = two_ranks_against_one(DType::F32, 3, 8, 25.0)?;
    assert!(worst < 1e-4, "largest parameter difference {worst}");
    Ok(())
}

#[test]
fn buckets_follow_reverse_parameter_order_and_the_cap() -> Result<()> {
    let out = LocalGroup::spawn(1, |g| {
        let ddp = DistributedDataParallel::with_options(
            mlp(DType::F32)?,
            Arc::new(g),
            DdpOptions { bucket_cap_mb: 0.1, ..Default::default() },
        )?;
        Ok(ddp.bucket_names())
    });
    let buckets = out.into_iter().next().expect("one rank")?;
    // 0.weight is 784 KiB, 2.weight 128 KiB, the rest small: the first bucket (capped at
    // 0.1 MiB) closes at 2.weight.
    assert_eq!(buckets, vec![vec!["4.bias", "4.weight", "2.bias", "2.weight"], vec!["0.bias", "0.weight"],]);
    Ok(())
}

#[test]
fn construction_broadcasts_rank_0_and_names_carry_the_module_prefix() -> Result<()> {
    let out = LocalGroup::spawn(2, |g| {
        let lin = Linear::new(3, 2)?;
        lin.weight().value().fill_(g.rank() as f64 + 1.0)?;
        let ddp = DistributedDataParallel::new(lin, Arc::new(g))?;
        let names: Vec<String> = ddp.named_parameters().into_iter().map(|(n, _)| n).collect();
        Ok((names, ddp.module().weight().value().to_vec::<f32>()?))
    });
    for r in out {
        let (names, w) = r?;
        assert_eq!(names, vec!["module.weight", "module.bias"]);
        assert_eq!(w, vec![1.0; 6]);
    }
    Ok(())
}

#[test]
fn no_sync_accumulates_locally_and_the_next_backward_reduces_the_sum() -> Result<()> {
    let out = LocalGroup::spawn(2, |g| {
        let rank = g.rank() as f64;
        let lin = Linear::with_options(2, 1, LinearOptions { bias: false, dtype: DType::F64 })?;
        let ddp = DistributedDataParallel::new(lin, Arc::new(g))?;
        let x = Var::new(Tensor::full([1, 2], rank + 1.0, DType::F64)?);
        let local = {
            let _guard = ddp.no_sync();
            ddp.forward(&x)?.sum_all().backward()?;
            ddp.module().weight().grad().expect("accumulated").to_vec::<f64>()?
        };
        ddp.forward(&x)?.sum_all().backward()?;
        let reduced = ddp.module().weight().grad().expect("reduced").to_vec::<f64>()?;
        Ok((local, reduced))
    });
    // Rank r's gradient is (r + 1) per step; two steps accumulate 2(r + 1); the mean over
    // ranks is (2 + 4) / 2.
    let r0 = out[0].as_ref().expect("rank 0");
    let r1 = out[1].as_ref().expect("rank 1");
    assert_eq!(r0.0, vec![1.0, 1.0]);
    assert_eq!(r1.0, vec![2.0, 2.0]);
    assert_eq!(r0.1, vec![3.0, 3.0]);
    assert_eq!(r1.1, vec![3.0, 3.0]);
    Ok(())
}

/// A module with a head that the forward skips.
struct Skips {
    used: Linear,
    unused: Linear,
}

impl Module for Skips {
    fn forward(&self, x: &Var) -> Result<Var> {
        self.used.forward(x)
    }
    fn named_parameters(&self) -> Vec<(String, Var)> {
        let used = self.used.named_parameters().into_iter().map(|(n, p)| (format!("used.{n}"), p));
        used.chain(self.unused.named_parameters().into_iter().map(|(n, p)| (format!("unused.{n}"), p))).collect()
    }
    fn set_training(&self, _: bool) {}
}

fn skips() -> Result<Skips> {
    let opts = LinearOptions { bias: true, dtype: DType::F64 };
    Ok(Skips { used: Linear::with_options(2, 1, opts)?, unused: Linear::with_options(2, 1, opts)? })
}

#[test]
fn an_unused_parameter_is_an_error_naming_it_at_the_next_forward() -> Result<()> {
    let out = LocalGroup::spawn(2, |g| {
        let ddp = DistributedDataParallel::new(skips()?, Arc::new(g))?;
        let x = Var::new(Tensor::ones([3, 2], DType::F64)?);
        ddp.forward(&x)?.sum_all().backward()?;
        let finish = ddp.finish().expect_err("unused parameters").to_string();
        ddp.forward(&x)?.sum_all().backward()?;
        let next = ddp.forward(&x).err().map(|e| e.to_string()).unwrap_or_default();
        Ok((finish, next))
    });
    for r in out {
        let (finish, next) = r?;
        assert!(finish.contains("unused.weight") && finish.contains("unused.bias"), "{finish}");
        assert!(finish.contains("find_unused_parameters"), "{finish}");
        assert!(
            next.contains("rank") && next.contains("unused.weight") && next.contains("find_unused_parameters"),
            "{next}"
        );
    }
    Ok(())
}

#[test]
fn find_unused_parameters_reduces_without_them_and_leaves_their_grad_alone() -> Result<()> {
    let out = LocalGroup::spawn(2, |g| {
        let rank = g.rank() as f64;
        let options = DdpOptions { find_unused_parameters: true, ..Default::default() };
        let ddp = DistributedDataParallel::with_options(skips()?, Arc::new(g), options)?;
        let mut grads = Vec::new();
        for _ in 0..2 {
            let x = Var::new(Tensor::full([1, 2], rank + 1.0, DType::F64)?);
            ddp.forward(&x)?.sum_all().backward()?;
            grads.push(ddp.module().used.weight().grad().expect("reduced").to_vec::<f64>()?);
            assert!(ddp.module().unused.weight().grad().is_none());
            ddp.zero_grad();
        }
        Ok((grads, ddp.stats().steps))
    });
    for r in out {
        let (grads, steps) = r?;
        assert_eq!(grads, vec![vec![1.5, 1.5]; 2]);
        assert_eq!(steps, 2);
    }
    Ok(())
}

#[test]
fn buffers_follow_rank_0_at_every_forward() -> Result<()> {
    let out = LocalGroup::spawn(2, |g| {
        let rank = g.rank() as f32;
        let model = Sequential::new().add(Linear::new(2, 2)?).add(BatchNorm1d::new(2)?);
        let ddp = DistributedDataParallel::new(model, Arc::new(g))?;
        let mean = || -> Result<Vec<f32>> {
            let buffers = ddp.named_buffers();
            buffers.iter().find(|(n, _)| n == "module.1.running_mean").expect("a BatchNorm buffer").1.to_vec::<f32>()
        };
        // Each rank trains on its own data, so its running mean moves its own way.
        let x = Var::new(Tensor::from_vec((0..8).map(|i| i as f32 + 10.0 * rank).collect(), [4, 2])?);
        ddp.forward(&x)?.sum_all().backward()?;
        let own = mean()?;
        // The next forward starts from rank 0's buffers (evaluation leaves them as they are).
        ddp.eval();
        ddp.forward(&x)?;
        Ok((own, mean()?))
    });
    let (own0, after0) = out[0].as_ref().expect("rank 0").clone();
    let (own1, after1) = out[1].as_ref().expect("rank 1").clone();
    assert_ne!(own0, own1);
    assert_eq!(after0, own0);
    assert_eq!(after1, own0);
    Ok(())
}

/// A group of one rank.
fn one_rank() -> Result<Arc<dyn ProcessGroup>> {
    let group = LocalGroup::new_world(1)?.pop().ok_or_else(|| ember_tensor::Error::invalid("test", "one rank"))?;
    Ok(Arc::new(group))
}

#[test]
fn one_rank_still_names_unused_parameters_and_find_unused_leaves_them_alone() -> Result<()> {
    let x = Var::new(Tensor::full([3, 2], 2.0, DType::F64)?);
    let ddp = DistributedDataParallel::new(skips()?, one_rank()?)?;
    ddp.forward(&x)?.sum_all().backward()?;
    let finish = ddp.finish().expect_err("unused parameters").to_string();
    assert!(finish.contains("unused.weight") && finish.contains("unused.bias"), "{finish}");
    ddp.forward(&x)?.sum_all().backward()?;
    let next = ddp.forward(&x).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(next.contains("unused.weight") && next.contains("find_unused_parameters"), "{next}");

    let options = DdpOptions { find_unused_parameters: true, ..Default::default() };
    let ddp = DistributedDataParallel::with_options(skips()?, one_rank()?, options)?;
    for _ in 0..2 {
        ddp.zero_grad();
        ddp.forward(&x)?.sum_all().backward()?;
        assert_eq!(ddp.module().used.weight().grad().expect("reduced").to_vec::<f64>()?, vec![6.0, 6.0]);
        assert!(ddp.module().unused.weight().grad().is_none());
    }
    assert_eq!(ddp.stats().steps, 2);
    Ok(())
}
