//! DistributedDataParallel's gradients are views into its flat buckets (PyTorch's
//! `gradient_as_bucket_view`): backward accumulates into them and the all-reduce averages
//! them where they lie. These tests check the aliasing and the values through `zero_grad`,
//! `no_sync`, unused parameters and gradients the user replaced.

use ember_autograd::Var;
use ember_distributed::{DdpOptions, DistributedDataParallel, LocalGroup, ProcessGroup};
use ember_nn::{Linear, LinearOptions, Module, Sequential};
use ember_tensor::{DType, Result, Tensor};
use std::sync::Arc;

/// Linear 3-4, Linear 4-2 in f64, with buckets small enough that the second layer's
/// parameters fill the first bucket and the first layer's the second.
fn two_layers() -> Result<Sequential> {
    let lin = |i, o| Linear::with_options(i, o, LinearOptions { bias: true, dtype: DType::F64 });
    Ok(Sequential::new().add(lin(3, 4)?).add(lin(4, 2)?))
}

const TINY_BUCKETS: DdpOptions = DdpOptions {
    bucket_cap_mb: 1e-5,
    broadcast_buffers: true,
    find_unused_parameters: false,
    gradient_as_bucket_view: true,
};

/// Rank `rank`'s input: its rows differ between ranks.
fn input(rank: usize) -> Result<Var> {
    let x: Vec<f64> = (0..6).map(|k| (k as f64 + 1.0) * (rank as f64 + 1.0) / 7.0).collect();
    Ok(Var::new(Tensor::from_vec(x, [2, 3])?))
}

/// The gradients of `model`'s parameters, by name.
fn grads(model: &dyn Module) -> Vec<(String, Option<Tensor>)> {
    model.named_parameters().into_iter().map(|(n, p)| (n, p.grad())).collect()
}

/// Checks that every gradient of a bucket shares that bucket's storage and no other's.
fn assert_bucket_views(ddp: &DistributedDataParallel<Sequential>) {
    let grads = grads(ddp.module());
    let of = |name: &str| grads.iter().find(|(n, _)| n == name).and_then(|(_, g)| g.clone()).expect("a gradient");
    let buckets = ddp.bucket_names();
    assert!(buckets.len() > 1, "{buckets:?}");
    for (b, names) in buckets.iter().enumerate() {
        let first = of(&names[0]);
        for name in names {
            assert!(of(name).shares_storage(&first), "{name} is not a view of bucket {b}");
        }
        for other in buckets.iter().skip(b + 1) {
            assert!(!of(&other[0]).shares_storage(&first), "buckets {b} and the next share storage");
        }
    }
}

fn values(model: &dyn Module) -> Result<Vec<Vec<f64>>> {
    model.parameters().iter().map(|p| p.grad().expect("a gradient").to_vec_f64()).collect()
}

fn assert_close(got: &[Vec<f64>], want: &[Vec<f64>]) {
    for (g, w) in got.iter().zip(want) {
        for (a, b) in g.iter().zip(w) {
            assert!((a - b).abs() < 1e-12, "{a} != {b}");
        }
    }
}

#[test]
fn gradients_are_views_of_their_bucket_and_stay_so_through_zero_grad() -> Result<()> {
    let init: Vec<Tensor> = two_layers()?.parameters().iter().map(|p| p.value().copy()).collect();
    let expected = expected_grads_from(&init, 1)?;
    let out = LocalGroup::spawn(2, |g| {
        let rank = g.rank();
        let model = two_layers()?;
        for (p, v) in model.parameters().iter().zip(&init) {
            p.value().copy_(v)?;
        }
        let ddp = DistributedDataParallel::with_options(model, Arc::new(g), TINY_BUCKETS)?;
        assert!(ddp.parameters().iter().all(Var::grad_in_place));
        let mut storages = Vec::new();
        let mut all = Vec::new();
        for _ in 0..3 {
            ddp.zero_grad();
            ddp.forward(&input(rank)?)?.sum_all().backward()?;
            assert_bucket_views(&ddp);
            all.push(values(&ddp)?);
            let first = ddp.parameters()[0].grad().expect("a gradient");
            storages.push(Arc::as_ptr(first.storage()) as usize);
        }
        // The same bucket every step, not a new one.
        assert!(storages.windows(2).all(|w| w[0] == w[1]), "{storages:?}");
        let params = ddp.module().parameters();
        drop(ddp);
        assert!(params.iter().all(|p| !p.grad_in_place()));
        Ok(all)
    });
    for r in out {
        for step in r? {
            assert_close(&step, &expected);
        }
    }
    Ok(())
}

/// The mean over two ranks of `steps` backward passes' gradients, from `init`.
fn expected_grads_from(init: &[Tensor], steps: usize) -> Result<Vec<Vec<f64>>> {
    let model = two_layers()?;
    for (p, v) in model.parameters().iter().zip(init) {
        p.value().copy_(v)?;
    }
    let mut per_rank = Vec::new();
    for rank in 0..2 {
        model.zero_grad();
        for _ in 0..steps {
            model.forward(&input(rank)?)?.sum_all().backward()?;
        }
        per_rank.push(values(&model)?);
    }
    Ok(per_rank[0]
        .iter()
        .zip(&per_rank[1])
        .map(|(a, b)| a.iter().zip(b).map(|(x, y)| (x + y) / 2.0).collect())
        .collect())
}

#[test]
fn no_sync_accumulates_into_the_views_and_the_next_backward_reduces_the_sum() -> Result<()> {
    let init: Vec<Tensor> = two_layers()?.parameters().iter().map(|p| p.value().copy()).collect();
    let expected = expected_grads_from(&init, 3)?;
    let out = LocalGroup::spawn(2, |g| {
        let rank = g.rank();
        let model = two_layers()?;
        for (p, v) in model.parameters().iter().zip(&init) {
            p.value().copy_(v)?;
        }
        let ddp = DistributedDataParallel::with_options(model, Arc::new(g), TINY_BUCKETS)?;
        // A synced step makes the gradients views; zeroing them in place keeps them views.
        ddp.forward(&input(rank)?)?.sum_all().backward()?;
        for p in ddp.parameters() {
            p.grad().expect("a gradient").zero_()?;
        }
        {
            let _accumulate = ddp.no_sync();
            for _ in 0..2 {
                ddp.forward(&input(rank)?)?.sum_all().backward()?;
                // Accumulated in place: still the bucket's views, holding this rank's sum.
                assert_bucket_views(&ddp);
            }
        }
        ddp.forward(&input(rank)?)?.sum_all().backward()?;
        assert_bucket_views(&ddp);
        values(&ddp)
    });
    for r in out {
        assert_close(&r?, &expected);
    }
    Ok(())
}

#[test]
fn a_gradient_the_user_replaced_is_copied_into_the_bucket_and_accumulated() -> Result<()> {
    let init: Vec<Tensor> = two_layers()?.parameters().iter().map(|p| p.value().copy()).collect();
    let expected = expected_grads_from(&init, 1)?;
    let out = LocalGroup::spawn(2, |g| {
        let rank = g.rank();
        let model = two_layers()?;
        for (p, v) in model.parameters().iter().zip(&init) {
            p.value().copy_(v)?;
        }
        let ddp = DistributedDataParallel::with_options(model, Arc::new(g), TINY_BUCKETS)?;
        ddp.forward(&input(rank)?)?.sum_all().backward()?;
        // Every rank replaces the first weight's gradient with its own tensor of ones.
        let w = ddp.parameters()[0].clone();
        let mine = Tensor::ones(w.shape().dims(), DType::F64)?;
        w.set_grad(Some(mine.clone()))?;
        ddp.forward(&input(rank)?)?.sum_all().backward()?;
        // Backward added into the user's tensor, which then went into the bucket: the
        // gradient is the view again.
        assert_bucket_views(&ddp);
        assert!(!w.grad().expect("a gradient").shares_storage(&mine));
        let got = w.grad().expect("a gradient").to_vec::<f64>()?;
        let others = values(&ddp)?;
        Ok((got, others))
    });
    for r in out {
        let (got, others) = r?;
        let want: Vec<f64> = expected[0].iter().map(|g| g + 1.0).collect();
        assert_close(&[got], &[want]);
        // The others accumulated two steps' averages.
        let twice: Vec<Vec<f64>> = expected[1..].iter().map(|g| g.iter().map(|x| 2.0 * x).collect()).collect();
        assert_close(&others[1..], &twice);
    }
    Ok(())
}

/// Two heads: every rank uses `a`, only rank 0 uses `b`.
struct Heads {
    a: Linear,
    b: Linear,
    use_b: bool,
}

impl Module for Heads {
    fn forward(&self, x: &Var) -> Result<Var> {
        let y = self.a.forward(x)?;
        if self.use_b { y.add(&self.b.forward(x)?) } else { Ok(y) }
    }
    fn named_parameters(&self) -> Vec<(String, Var)> {
        let a = self.a.named_parameters().into_iter().map(|(n, p)| (format!("a.{n}"), p));
        a.chain(self.b.named_parameters().into_iter().map(|(n, p)| (format!("b.{n}"), p))).collect()
    }
    fn set_training(&self, _: bool) {}
}

#[test]
fn a_parameter_one_rank_left_unused_gets_the_average_as_a_bucket_view() -> Result<()> {
    let out = LocalGroup::spawn(2, |g| {
        let rank = g.rank();
        let opts = LinearOptions { bias: false, dtype: DType::F64 };
        let heads =
            Heads { a: Linear::with_options(2, 1, opts)?, b: Linear::with_options(2, 1, opts)?, use_b: rank == 0 };
        let options = DdpOptions { find_unused_parameters: true, bucket_cap_mb: 1e-6, ..Default::default() };
        let ddp = DistributedDataParallel::with_options(heads, Arc::new(g), options)?;
        let x = Var::new(Tensor::full([1, 2], rank as f64 + 1.0, DType::F64)?);
        ddp.forward(&x)?.sum_all().backward()?;
        let b = ddp.module().b.weight();
        let grad = b.grad().expect("b was used on rank 0, so every rank gets its average");
        // b is alone in its bucket: its gradient is that bucket, whatever rank 1 did.
        let a = ddp.module().a.weight().grad().expect("a gradient");
        assert!(!grad.shares_storage(&a));
        ddp.zero_grad();
        ddp.forward(&x)?.sum_all().backward()?;
        assert!(b.grad().expect("again").shares_storage(&grad));
        Ok((grad.to_vec::<f64>()?, a.to_vec::<f64>()?))
    });
    for r in out {
        let (b, a) = r?;
        // Rank 0's b gradient is its input, 1 each; rank 1 contributes zeros.
        assert_eq!(b, vec![0.5, 0.5]);
        // a: the mean of 1 and 2.
        assert_eq!(a, vec![1.5, 1.5]);
    }
    Ok(())
}

#[test]
fn gradients_held_before_wrapping_move_into_the_buckets() -> Result<()> {
    // Two ranks: a group of one rank has no buckets to move them into (tests/one_rank.rs).
    let out = LocalGroup::spawn(2, |g| {
        let model = two_layers()?;
        model.forward(&input(0)?)?.sum_all().backward()?;
        let before = values(&model)?;
        let ddp = DistributedDataParallel::with_options(model, Arc::new(g), TINY_BUCKETS)?;
        assert_bucket_views(&ddp);
        assert_eq!(values(&ddp)?, before);
        Ok(())
    });
    out.into_iter().collect()
}

/// With `gradient_as_bucket_view` off, gradients are tensors of their own that receive the
/// averages: through `no_sync` accumulation, and for a parameter one rank left unused.
#[test]
fn the_copy_path_gives_the_same_averages_in_gradients_of_their_own() -> Result<()> {
    let init: Vec<Tensor> = two_layers()?.parameters().iter().map(|p| p.value().copy()).collect();
    let expected = expected_grads_from(&init, 3)?;
    let copies = DdpOptions { gradient_as_bucket_view: false, ..TINY_BUCKETS };
    let out = LocalGroup::spawn(2, |g| {
        let rank = g.rank();
        let model = two_layers()?;
        for (p, v) in model.parameters().iter().zip(&init) {
            p.value().copy_(v)?;
        }
        let ddp = DistributedDataParallel::with_options(model, Arc::new(g), copies.clone())?;
        assert!(ddp.parameters().iter().all(|p| !p.grad_in_place() && p.grad_buffer().is_none()));
        {
            let _accumulate = ddp.no_sync();
            for _ in 0..2 {
                ddp.forward(&input(rank)?)?.sum_all().backward()?;
            }
        }
        ddp.forward(&input(rank)?)?.sum_all().backward()?;
        let grads: Vec<Tensor> = ddp.parameters().iter().map(|p| p.grad().expect("a gradient")).collect();
        for (i, a) in grads.iter().enumerate() {
            assert!(grads[i + 1..].iter().all(|b| !a.shares_storage(b)), "gradient {i} shares a buffer");
        }
        values(&ddp)
    });
    for r in out {
        assert_close(&r?, &expected);
    }
    let unused = LocalGroup::spawn(2, |g| {
        let rank = g.rank();
        let opts = LinearOptions { bias: false, dtype: DType::F64 };
        let heads =
            Heads { a: Linear::with_options(2, 1, opts)?, b: Linear::with_options(2, 1, opts)?, use_b: rank == 0 };
        let options = DdpOptions { find_unused_parameters: true, gradient_as_bucket_view: false, ..TINY_BUCKETS };
        let ddp = DistributedDataParallel::with_options(heads, Arc::new(g), options)?;
        let x = Var::new(Tensor::full([1, 2], rank as f64 + 1.0, DType::F64)?);
        ddp.forward(&x)?.sum_all().backward()?;
        let b = ddp.module().b.weight().grad().expect("b was used on rank 0");
        let a = ddp.module().a.weight().grad().expect("a gradient");
        Ok((b.to_vec::<f64>()?, a.to_vec::<f64>()?))
    });
    for r in unused {
        assert_eq!(r?, (vec![0.5, 0.5], vec![1.5, 1.5]));
    }
    Ok(())
}
