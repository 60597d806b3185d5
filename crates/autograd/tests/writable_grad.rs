//! Gradients written in place (docs/design.md, 'Gradients written in place'): when an
//! operation's gradient is an elementwise function of the incoming gradient alone, backward
//! overwrites the incoming gradient, but only when nothing else can see it; the gradients
//! are bitwise those of new tensors.

use ember_autograd::{BackwardCtx, Grads, Op, Var, grad, profile};
use ember_tensor::{DType, Result, Tensor};
use parking_lot::Mutex;
use smallvec::smallvec;
use std::sync::Arc;

/// The identity, whose backward writes down whether the engine offered it the incoming
/// gradient to overwrite, and whether it refused another `Var` (its input).
struct Probe(Arc<Mutex<Vec<bool>>>);

impl Op for Probe {
    fn name(&self) -> &str {
        "probe"
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        Ok(inputs[0].clone())
    }
    fn backward(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        assert!(ctx.writable_grad(&ctx.input(0)?).is_none(), "only the incoming gradient may be offered");
        self.0.lock().push(ctx.writable_grad(g).is_some());
        Ok(smallvec![Some(g.clone())])
    }
}

/// `x * 2` through a probe; what the probe saw, after `finish` ran backward on the probe's
/// output.
fn probed(finish: impl FnOnce(&Var, &Var) -> Result<()>) -> Result<Vec<bool>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let x = Var::param(Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3])?);
    let p = Var::apply_op(Probe(seen.clone()), &[&x.mul_scalar(2.0)])?;
    finish(&x, &p)?;
    let seen = seen.lock().clone();
    Ok(seen)
}

fn weights() -> Result<Var> {
    Ok(Var::new(Tensor::from_vec(vec![0.5f32, -1.0, 2.0], [3])?))
}

#[test]
fn the_incoming_gradient_is_offered_when_backward_alone_holds_it() -> Result<()> {
    // The gradient of `(p * w).sum()` with respect to `p` is a new dense tensor.
    let seen = probed(|_, p| p.mul(&weights()?)?.sum_all().backward())?;
    assert_eq!(seen, [true]);
    Ok(())
}

#[test]
fn the_incoming_gradient_is_kept_when_anything_else_can_see_it() -> Result<()> {
    // A broadcast view: `sum`'s gradient is one element expanded.
    assert_eq!(probed(|_, p| p.sum_all().backward())?, [false]);
    // A hook that keeps the gradient's value.
    let kept = Arc::new(Mutex::new(None));
    let seen = probed(|_, p| {
        let k = kept.clone();
        p.register_hook(move |g| {
            *k.lock() = Some(g.value());
            Ok(None)
        })?;
        p.mul(&weights()?)?.sum_all().backward()
    })?;
    assert_eq!(seen, [false]);
    // A node that retains its gradient.
    assert_eq!(
        probed(|_, p| {
            p.retain_grad()?;
            p.mul(&weights()?)?.sum_all().backward()
        })?,
        [false]
    );
    // A gradient the caller handed in: its tensor is the caller's.
    let g = Tensor::from_vec(vec![1.0f32, 1.0, 1.0], [3])?;
    assert_eq!(probed(|_, p| p.backward_with(Some(&g), false))?, [false]);
    // `create_graph`: the gradient is part of a graph.
    assert_eq!(probed(|_, p| p.mul(&weights()?)?.sum_all().backward_full(None, false, true))?, [false]);
    // `grad()` asking for the probe's own gradient, and its input's, keeps the first.
    let seen = probed(|x, p| {
        let y = p.mul(&weights()?)?.sum_all();
        grad(&[&y], &[p, x], &[], false, false)?;
        Ok(())
    })?;
    assert_eq!(seen, [false]);
    // An extension watching the thread (the profiler).
    let (result, _) = profile(|| probed(|_, p| p.mul(&weights()?)?.sum_all().backward()));
    assert_eq!(result?, [false]);
    Ok(())
}

/// `x` through every operation whose gradient is written in place (a function of the
/// incoming gradient alone, or its product with a saved value's derivative), then weighted
/// and summed so that the gradient reaching them is dense.
fn chain(x: &Var, keep: bool) -> Result<Var> {
    let mut y = x.clone();
    let steps: [fn(&Var) -> Var; 8] = [
        |v| v.mul_scalar(1.1),
        |v| v.tanh(),
        |v| v.div_scalar(3.0),
        |v| v.neg(),
        |v| v.sigmoid(),
        |v| v.rsub_scalar(2.0),
        |v| v.exp(),
        |v| v.mul_scalar(0.7),
    ];
    for step in steps {
        y = step(&y);
        if keep {
            // A node that retains its gradient keeps every gradient out of reach.
            y.retain_grad()?;
        }
    }
    let w = Var::new(Tensor::randn([64])?.to_dtype(x.dtype()));
    Ok(y.mul(&w)?.sum_all())
}

#[test]
fn gradients_written_in_place_are_bitwise_new_ones() -> Result<()> {
    for dtype in [DType::F32, DType::F64, DType::BF16] {
        let start = Tensor::randn([64])?.to_dtype(dtype);
        let mut grads = Vec::new();
        for keep in [false, true] {
            ember_tensor::manual_seed(7);
            let x = Var::param(start.clone());
            chain(&x, keep)?.backward()?;
            let g = x.grad().ok_or_else(|| ember_tensor::Error::autograd("no gradient"))?;
            assert_eq!(g.dtype(), dtype);
            grads.push(g.to_dtype(DType::F64).to_vec::<f64>()?);
        }
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&grads[0]), bits(&grads[1]), "{dtype}");
    }
    Ok(())
}

#[test]
fn a_gradient_a_hook_kept_is_not_overwritten_later() -> Result<()> {
    let x = Var::param(Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3])?);
    let a = x.mul_scalar(2.0);
    let kept = Arc::new(Mutex::new(None));
    let k = kept.clone();
    a.register_hook(move |g| {
        *k.lock() = Some(g.clone());
        Ok(None)
    })?;
    a.mul_scalar(3.0).mul(&weights()?)?.sum_all().backward()?;
    let seen = kept.lock().take().ok_or_else(|| ember_tensor::Error::autograd("the hook did not run"))?;
    // What reached `a`: 3 w; what reached `x`: 6 w.
    assert_eq!(seen.value().to_vec::<f32>()?, vec![1.5, -3.0, 6.0]);
    assert_eq!(
        x.grad().ok_or_else(|| ember_tensor::Error::autograd("no gradient"))?.to_vec::<f32>()?,
        vec![3.0, -6.0, 12.0]
    );
    Ok(())
}
