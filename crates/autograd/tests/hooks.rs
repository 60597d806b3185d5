//! Gradient hooks: several hooks run in registration order, each seeing the previous one's
//! result; removal through the handle; post-accumulate hooks collecting gradients as they
//! become ready.

use ember_autograd::Var;
use ember_tensor::{Result, Tensor};
use parking_lot::Mutex;
use std::sync::Arc;

fn param(v: &[f64]) -> Var {
    Var::param(Tensor::from_slice(v, [v.len()]).expect("a valid tensor"))
}

#[test]
fn hooks_run_in_registration_order_and_chain() -> Result<()> {
    let x = param(&[1.0, 2.0]);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (s1, s2, s3) = (seen.clone(), seen.clone(), seen.clone());
    x.register_hook(move |g| {
        s1.lock().push(("first", g.value().to_vec::<f64>()?));
        Ok(Some(g.mul_scalar(2.0)))
    })?;
    x.register_hook(move |g| {
        s2.lock().push(("second", g.value().to_vec::<f64>()?));
        Ok(None) // keeps the gradient
    })?;
    x.register_hook(move |g| {
        s3.lock().push(("third", g.value().to_vec::<f64>()?));
        Ok(Some(g.add_scalar(1.0)))
    })?;
    x.mul_scalar(3.0).sum_all().backward()?;
    assert_eq!(*seen.lock(), vec![("first", vec![3.0, 3.0]), ("second", vec![6.0, 6.0]), ("third", vec![6.0, 6.0])]);
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![7.0, 7.0]);
    Ok(())
}

#[test]
fn a_hook_on_an_intermediate_changes_what_flows_upstream() -> Result<()> {
    let x = param(&[1.0, 2.0]);
    let h = x.square();
    h.register_hook(|g| Ok(Some(g.mul_scalar(10.0))))?;
    h.sum_all().backward()?;
    // d/dx sum(x^2) = 2x, scaled by the hook on h.
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![20.0, 40.0]);
    Ok(())
}

#[test]
fn removed_hooks_no_longer_run() -> Result<()> {
    let x = param(&[1.0]);
    let calls = Arc::new(Mutex::new(Vec::new()));
    let (c1, c2) = (calls.clone(), calls.clone());
    let h1 = x.register_hook(move |_| {
        c1.lock().push(1);
        Ok(None)
    })?;
    let _h2 = x.register_hook(move |g| {
        c2.lock().push(2);
        Ok(Some(g.mul_scalar(5.0)))
    })?;
    x.mul_scalar(2.0).sum_all().backward()?;
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![10.0]);
    h1.remove();
    x.zero_grad();
    x.mul_scalar(2.0).sum_all().backward()?;
    assert_eq!(*calls.lock(), vec![1, 2, 2]);
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![10.0]);
    Ok(())
}

#[test]
fn removing_every_hook_restores_plain_gradients() -> Result<()> {
    let x = param(&[1.0]);
    let h = x.register_hook(|g| Ok(Some(g.mul_scalar(100.0))))?;
    h.remove();
    x.mul_scalar(2.0).sum_all().backward()?;
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![2.0]);
    Ok(())
}

#[test]
fn a_hook_error_fails_backward() {
    let x = param(&[1.0]);
    x.register_hook(|_| Err(ember_tensor::Error::autograd("hook refused"))).unwrap();
    let err = x.mul_scalar(2.0).sum_all().backward().unwrap_err();
    assert!(err.to_string().contains("hook refused"), "{err}");
}

#[test]
fn post_accumulate_hooks_collect_gradients_as_they_become_ready() -> Result<()> {
    // Three layers: backward finishes the last layer's weight first.
    let ws: Vec<Var> = (0..3).map(|i| param(&[1.0 + i as f64])).collect();
    let ready = Arc::new(Mutex::new(Vec::new()));
    for (i, w) in ws.iter().enumerate() {
        let r = ready.clone();
        w.register_post_accumulate_grad_hook(move |leaf| {
            // The hook sees the accumulated .grad of its leaf.
            let g = leaf.grad().expect("accumulated before the hook").to_vec::<f64>()?;
            r.lock().push((i, g[0]));
            Ok(())
        })?;
    }
    let x = Var::new(Tensor::from_slice(&[2.0f64], [1])?);
    let mut h = x.clone();
    for w in &ws {
        h = h.mul(w)?;
    }
    h.sum_all().backward()?;
    // y = x w0 w1 w2 = 2 * 1 * 2 * 3 = 12; dy/dwi = y / wi.
    assert_eq!(*ready.lock(), vec![(2, 4.0), (1, 6.0), (0, 12.0)]);
    // They see the accumulated value on a second backward.
    let mut h = x.clone();
    for w in &ws {
        h = h.mul(w)?;
    }
    h.sum_all().backward()?;
    assert_eq!(ready.lock()[3..], [(2, 8.0), (1, 12.0), (0, 24.0)]);
    Ok(())
}

#[test]
fn a_post_accumulate_hook_can_consume_the_gradient() -> Result<()> {
    // An optimizer fused into backward: apply the update and drop the gradient.
    let w = param(&[1.0, -1.0]);
    w.register_post_accumulate_grad_hook(|leaf| {
        let g = leaf.grad().expect("accumulated");
        leaf.value().sub_(&g.mul_scalar(0.5))?;
        leaf.zero_grad();
        Ok(())
    })?;
    w.square().sum_all().backward()?;
    assert!(w.grad().is_none());
    assert_eq!(w.value().to_vec::<f64>()?, vec![0.0, 0.0]);
    Ok(())
}

#[test]
fn removed_post_accumulate_hooks_no_longer_run() -> Result<()> {
    let w = param(&[1.0]);
    let count = Arc::new(Mutex::new(0));
    let c = count.clone();
    let h = w.register_post_accumulate_grad_hook(move |_| {
        *c.lock() += 1;
        Ok(())
    })?;
    w.mul_scalar(2.0).sum_all().backward()?;
    h.remove();
    w.mul_scalar(2.0).sum_all().backward()?;
    assert_eq!(*count.lock(), 1);
    assert_eq!(w.grad().unwrap().to_vec::<f64>()?, vec![4.0]);
    Ok(())
}

/// PyTorch refuses hooks that could never run and gradients that could never be kept.
#[test]
fn misuse_is_an_error() -> Result<()> {
    let c = Var::new(Tensor::from_slice(&[1.0f64], [1])?);
    let e = c.register_hook(|_| Ok(None)).expect_err("a hook on a constant is refused").to_string();
    assert!(e.contains("cannot register a hook on a Var that doesn't require grad"), "{e}");
    let e = c.register_post_accumulate_grad_hook(|_| Ok(())).expect_err("refused").to_string();
    assert!(e.contains("doesn't require grad"), "{e}");
    let e = c.retain_grad().expect_err("retain_grad on a constant is refused").to_string();
    assert!(e.contains("can't retain_grad on a Var that has requires_grad=false"), "{e}");
    // A non-leaf accumulates nothing, so a post-accumulate hook on it would never run.
    let w = param(&[1.0]);
    let h = w.mul_scalar(2.0);
    let e = h.register_post_accumulate_grad_hook(|_| Ok(())).expect_err("refused on a non-leaf").to_string();
    assert!(e.contains("post accumulate grad hooks cannot be registered on non-leaf"), "{e}");
    // A frozen parameter does not require grad either.
    let f = param(&[1.0]);
    f.freeze()?;
    assert!(f.register_hook(|_| Ok(None)).is_err());
    // What stays allowed: hooks on parameters and on non-leaves that require grad, and
    // retain_grad on either (a no-op on a leaf).
    h.register_hook(|_| Ok(None))?;
    h.retain_grad()?;
    w.retain_grad()?;
    assert!(!w.retains_grad());
    w.register_post_accumulate_grad_hook(|_| Ok(()))?;
    Ok(())
}
