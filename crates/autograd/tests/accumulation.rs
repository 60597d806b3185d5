//! The rules of docs/design.md, 'Accumulation rules', each with a small worked example.

use ember_autograd::Var;
use ember_tensor::{DType, Result, Tensor};

fn t(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_slice(v, shape).unwrap()
}

fn vals(x: &Tensor) -> Vec<f64> {
    x.to_vec_f64().unwrap()
}

#[test]
fn leaf_grads_accumulate_until_zero_grad() -> Result<()> {
    let w = Var::param(t(&[1.0, 2.0], &[2]));
    for _ in 0..3 {
        w.mul_scalar(3.0).sum_all().backward()?;
    }
    assert_eq!(vals(&w.grad().unwrap()), vec![9.0, 9.0]);
    w.zero_grad();
    assert!(w.grad().is_none());
    w.mul_scalar(3.0).sum_all().backward()?;
    assert_eq!(vals(&w.grad().unwrap()), vec![3.0, 3.0]);
    Ok(())
}

/// Rule 4: `u(param) -> w(param) -> out`. `w` accumulates across the two backward calls,
/// but the signal it passes to `u` in the second call is only the second loss's:
/// `u.grad = d(L1 + L2)/du`, not `dL1/du + d(L1 + L2)/du`.
#[test]
fn each_backward_propagates_only_its_own_signal() -> Result<()> {
    let u = Var::param(t(&[1.0], &[1]));
    let w = u.mul_scalar(2.0); // dw/du = 2
    w.retain_grad()?; // w keeps an accumulator, like a parameter
    let l1 = w.mul_scalar(3.0).sum_all(); // dL1/dw = 3
    let l2 = w.mul_scalar(5.0).sum_all(); // dL2/dw = 5
    l1.backward_with(None, true)?;
    assert_eq!(vals(&w.grad().unwrap()), vec![3.0]);
    assert_eq!(vals(&u.grad().unwrap()), vec![6.0]);
    l2.backward()?;
    assert_eq!(vals(&w.grad().unwrap()), vec![8.0], "w accumulates dL1/dw + dL2/dw");
    assert_eq!(vals(&u.grad().unwrap()), vec![16.0], "u.grad = (3 + 5) * 2, not 3*2 + 8*2 = 22");
    Ok(())
}

/// The multi-task example: x -> w_shared -> features -> {w1 -> out1, w2 -> out2}, two
/// losses, two backward calls. `w_shared.grad` is task 1 + task 2; `features.grad` is the
/// second task's own signal, not an accumulation.
#[test]
fn multi_task_shared_features() -> Result<()> {
    let x = Var::new(t(&[1.0, 2.0, 3.0, 4.0, 0.0, 0.0, 0.0, 0.0], &[2, 4]));
    let w_shared = Var::param(Tensor::ones([4, 1], DType::F64)?);
    let features = x.matmul(&w_shared)?; // [2, 1]
    let w1 = Var::param(Tensor::scalar(1.0f64));
    let w2 = Var::param(Tensor::scalar(1.0f64));
    let out1 = features.mul(&w1)?.sum_all();
    let out2 = features.mul(&w2)?.sum_all();

    out1.backward_with(None, true)?;
    assert_eq!(vals(&w_shared.grad().unwrap()), vec![1.0, 2.0, 3.0, 4.0]);
    assert_eq!(vals(&features.grad().unwrap()), vec![1.0, 1.0]);

    out2.backward_with(None, true)?;
    assert_eq!(vals(&w_shared.grad().unwrap()), vec![2.0, 4.0, 6.0, 8.0], "task1 + task2");
    assert_eq!(vals(&features.grad().unwrap()), vec![1.0, 1.0], "the second task's own signal");
    assert_eq!(vals(&w1.grad().unwrap()), vec![10.0]);
    assert_eq!(vals(&w2.grad().unwrap()), vec![10.0]);
    Ok(())
}

#[test]
fn intermediate_grads_live_until_the_next_backward() -> Result<()> {
    let x = Var::param(t(&[1.0, 2.0], &[2]));
    let h = x.mul_scalar(2.0);
    let y = h.square().sum_all(); // dy/dh = 2h = [4, 8]
    y.backward_with(None, true)?;
    assert_eq!(vals(&h.grad().unwrap()), vec![4.0, 8.0], "readable after retain_graph=true");
    // Another backward through h replaces (does not add to) its gradient...
    let z = h.sum_all();
    z.backward_with(None, true)?;
    assert_eq!(vals(&h.grad().unwrap()), vec![1.0, 1.0]);
    // ...and one without retain_graph frees it.
    y.backward()?;
    assert!(h.grad().is_none(), "freed by retain_graph=false");
    assert_eq!(vals(&x.grad().unwrap()), vec![2.0 * 4.0 + 2.0 + 2.0 * 4.0, 2.0 * 8.0 + 2.0 + 2.0 * 8.0]);
    Ok(())
}

#[test]
fn retain_grad_accumulates_like_a_leaf() -> Result<()> {
    let x = Var::param(t(&[1.0, 2.0], &[2]));
    let h = x.mul_scalar(2.0);
    h.retain_grad()?;
    h.sum_all().backward()?;
    h.mul_scalar(3.0).sum_all().backward()?;
    assert_eq!(vals(&h.grad().unwrap()), vec![4.0, 4.0]);
    Ok(())
}

#[test]
fn multi_path_reuse_sums_gradients() -> Result<()> {
    let x = Var::param(t(&[3.0], &[1]));
    let y = x.mul(&x)?.add(&x)?; // x^2 + x, dy/dx = 2x + 1 = 7
    y.sum_all().backward()?;
    assert_eq!(vals(&x.grad().unwrap()), vec![7.0]);
    Ok(())
}

/// Summing the gradients that meet at a node never changes one that is held elsewhere.
/// Here the first to reach `y` is the one `a` keeps as its `.grad` (`add` passes it on as it
/// is); the others (a slice's gradient embedded into zeros, a reshape's as a view of another
/// gradient) are added to it, and `a.grad` must stay what it was.
#[test]
fn summing_gradients_never_writes_into_one_held_elsewhere() -> Result<()> {
    let x = Var::param(t(&[1.0, 2.0, 3.0, 4.0], &[4]));
    let y = x.mul_scalar(2.0);
    let b = y.narrow(0, 1, 2)?.sum_all();
    let c = y.reshape([2, 2])?.mul_scalar(10.0).sum_all();
    let a = y.add(&Var::new(Tensor::zeros([4], DType::F64)?))?;
    a.retain_grad()?;
    let w = Var::new(t(&[1.0, 2.0, 3.0, 4.0], &[4]));
    a.mul(&w)?.sum_all().add(&b)?.add(&c)?.backward()?;
    // dy = w + [0, 1, 1, 0] + 10; dx = 2 dy.
    assert_eq!(vals(&x.grad().unwrap()), vec![22.0, 26.0, 28.0, 28.0]);
    assert_eq!(vals(&a.grad().unwrap()), vec![1.0, 2.0, 3.0, 4.0]);
    // `add` hands one gradient to both of its inputs, here the same node.
    let x = Var::param(t(&[1.0, 2.0], &[2]));
    let y = x.mul_scalar(3.0);
    y.add(&y)?.mul(&Var::new(t(&[1.0, 2.0], &[2])))?.sum_all().backward()?;
    assert_eq!(vals(&x.grad().unwrap()), vec![6.0, 12.0]);
    Ok(())
}

#[test]
fn broadcast_gradients_reduce_to_the_input_shape() -> Result<()> {
    let a = Var::param(Tensor::ones([2, 3], DType::F64)?);
    let b = Var::param(t(&[1.0, 2.0, 3.0], &[3]));
    let c = Var::param(Tensor::scalar(2.0f64));
    a.mul(&b)?.mul(&c)?.sum_all().backward()?;
    assert_eq!(vals(&b.grad().unwrap()), vec![4.0, 4.0, 4.0]);
    assert_eq!(vals(&c.grad().unwrap()), vec![12.0]);
    assert_eq!(a.grad().unwrap().shape(), &[2, 3]);
    Ok(())
}

#[test]
fn non_scalar_roots_need_a_grad_output() -> Result<()> {
    let x = Var::param(t(&[1.0, 2.0], &[2]));
    let y = x.mul_scalar(2.0);
    let e = y.backward().unwrap_err().to_string();
    assert!(e.contains("scalar") && e.contains("[2]"), "{e}");
    y.backward_with(Some(&t(&[1.0, 10.0], &[2])), false)?;
    assert_eq!(vals(&x.grad().unwrap()), vec![2.0, 20.0]);
    let wrong = x.mul_scalar(2.0).backward_with(Some(&t(&[1.0], &[1])), false);
    assert!(wrong.is_err());
    Ok(())
}

#[test]
fn backward_on_a_root_without_grad_is_an_error() {
    let x = Var::new(t(&[1.0], &[1]));
    assert!(x.mul_scalar(2.0).sum_all().backward().is_err());
}
