//! Gradient-flow control, one test per tool (docs/design.md, 'Accumulation rules'):
//! no_grad, detach, retain_graph and freezing, plus a frozen adapter between an encoder
//! and a head.

use ember_autograd::{EnableGradGuard, NoGradGuard, Var, enable_grad, is_grad_enabled, no_grad};
use ember_tensor::{DType, Result, Tensor};

fn param(v: &[f64]) -> Var {
    Var::param(Tensor::from_slice(v, [v.len()]).unwrap())
}

#[test]
fn no_grad_records_no_history() {
    let w = param(&[1.0, 2.0]);
    let y = no_grad(|| w.mul_scalar(2.0).exp().sum_all());
    assert!(y.is_leaf() && !y.requires_grad());
    assert!(y.backward().is_err(), "nothing to differentiate");
    assert!(is_grad_enabled());
}

#[test]
fn guards_nest_and_restore() {
    let w = param(&[1.0]);
    {
        let _outer = NoGradGuard::new();
        assert!(!w.mul_scalar(2.0).requires_grad());
        {
            let _inner = EnableGradGuard::new();
            assert!(w.mul_scalar(2.0).requires_grad());
        }
        assert!(!is_grad_enabled());
        assert!(enable_grad(|| w.mul_scalar(2.0).requires_grad()));
    }
    assert!(is_grad_enabled());
}

#[test]
fn grad_mode_is_restored_after_a_panic() {
    let r = std::panic::catch_unwind(|| {
        let _g = NoGradGuard::new();
        panic!("a failure inside no_grad");
    });
    assert!(r.is_err());
    assert!(is_grad_enabled());
}

#[test]
fn detach_shares_storage_and_cuts_the_graph() -> Result<()> {
    let a = param(&[1.0, 2.0]);
    let b = a.mul_scalar(3.0);
    let d = b.detach();
    assert!(d.is_leaf() && !d.requires_grad());
    assert!(d.value().shares_storage(&b.value()));
    // x -> A -> B.detach() -> C -> loss: C gets gradients, A does not.
    let c = param(&[10.0, 10.0]);
    d.mul(&c)?.sum_all().backward()?;
    assert_eq!(c.grad().unwrap().to_vec::<f64>()?, vec![3.0, 6.0]);
    assert!(a.grad().is_none());
    Ok(())
}

#[test]
fn detach_node_stays_in_the_graph_but_stops_gradients() -> Result<()> {
    let a = param(&[1.0, 2.0]);
    let b = a.mul_scalar(3.0).detach_node();
    // Like anything that does not require grad, it is a leaf (PyTorch's rule), though it
    // stays in the graph as an operation.
    assert!(b.is_leaf() && !b.requires_grad());
    assert_eq!(b.op_name(), "detach");
    let c = param(&[1.0, 1.0]);
    b.mul(&c)?.sum_all().backward()?;
    assert!(a.grad().is_none());
    assert_eq!(c.grad().unwrap().to_vec::<f64>()?, vec![3.0, 6.0]);
    Ok(())
}

#[test]
fn retain_graph_allows_a_second_backward() -> Result<()> {
    let w = param(&[2.0]);
    let h = w.square();
    let l1 = h.mul_scalar(3.0).sum_all();
    let l2 = h.mul_scalar(5.0).sum_all();
    l1.backward_with(None, true)?;
    l2.backward()?;
    assert_eq!(w.grad().unwrap().to_vec::<f64>()?, vec![(3.0 + 5.0) * 4.0]);
    Ok(())
}

/// Appendix B.3: encoder -> frozen adapter -> head. Gradients pass through the frozen
/// adapter to the encoder; the adapter keeps none. Detaching instead would cut the encoder.
#[test]
fn frozen_parameters_pass_gradients_through() -> Result<()> {
    let x = Var::new(Tensor::from_vec(vec![1.0f64, 2.0], [1, 2])?);
    let encoder = Var::param(Tensor::from_vec(vec![1.0f64, 0.0, 0.0, 1.0], [2, 2])?);
    let adapter = Var::param(Tensor::from_vec(vec![2.0f64, 0.0, 0.0, 2.0], [2, 2])?);
    let head = Var::param(Tensor::from_vec(vec![1.0f64, 1.0], [2, 1])?);
    adapter.freeze()?;
    assert!(adapter.is_frozen() && !adapter.requires_grad());
    let loss = x.matmul(&encoder)?.matmul(&adapter)?.matmul(&head)?.sum_all();
    loss.backward()?;
    assert!(adapter.grad().is_none(), "the frozen adapter keeps no gradient");
    assert_eq!(head.grad().unwrap().to_vec::<f64>()?, vec![2.0, 4.0]);
    // d loss / d encoder = x^T (adapter head)^T = [[1],[2]] [[2, 2]]
    assert_eq!(encoder.grad().unwrap().to_vec::<f64>()?, vec![2.0, 2.0, 4.0, 4.0]);

    adapter.unfreeze()?;
    assert!(!adapter.is_frozen() && adapter.requires_grad());
    x.matmul(&encoder)?.matmul(&adapter)?.matmul(&head)?.sum_all().backward()?;
    assert!(adapter.grad().is_some());
    Ok(())
}

#[test]
fn freezing_after_the_forward_prunes_that_branch() -> Result<()> {
    let w = param(&[1.0]);
    let y = w.mul_scalar(2.0).sum_all();
    w.freeze()?;
    y.backward()?;
    assert!(w.grad().is_none());
    Ok(())
}

#[test]
fn requires_grad_rules() -> Result<()> {
    let x = Var::new(Tensor::ones([2], DType::F32)?);
    assert!(!x.requires_grad());
    x.requires_grad_(true)?;
    assert!(x.requires_grad());
    let y = x.mul_scalar(2.0);
    assert!(y.requires_grad());
    assert!(y.requires_grad_(false).is_err(), "only leaves change requires_grad");
    let i = Var::param(Tensor::arange(0, 3)?);
    assert!(!i.requires_grad(), "integer values never require grad");
    assert!(i.requires_grad_(true).is_err());
    Ok(())
}

/// PyTorch's leaf rule: a tensor that does not require grad is a leaf, even when an
/// operation computed it, and `requires_grad_()` turns it into a parameter-like leaf.
#[test]
fn results_of_constants_are_leaves() -> Result<()> {
    let x = Var::new(Tensor::from_vec(vec![1.0f64, 2.0], [2])?);
    let y = x.mul_scalar(2.0);
    assert!(y.is_leaf() && !y.requires_grad());
    assert_eq!(y.op_name(), "mul_scalar");
    y.requires_grad_(true)?;
    assert!(y.is_leaf() && y.requires_grad());
    let loss = y.square().sum_all();
    loss.backward()?;
    assert_eq!(y.grad().expect("the new leaf accumulates").to_vec::<f64>()?, vec![4.0, 8.0]);
    // Backward stops at the new leaf even once its input requires grad too.
    x.requires_grad_(true)?;
    y.square().sum_all().backward()?;
    assert!(x.grad().is_none());
    assert_eq!(y.grad().expect("accumulated twice").to_vec::<f64>()?, vec![8.0, 16.0]);
    // It still re-executes from its input (reactive forward keeps the edge).
    x.set_value(Tensor::from_vec(vec![5.0f64, 6.0], [2])?)?;
    assert_eq!(y.forward()?.to_vec::<f64>()?, vec![10.0, 12.0]);
    // A result that requires grad is not a leaf and cannot stop requiring it.
    let w = param(&[1.0]);
    let h = w.mul_scalar(2.0);
    assert!(!h.is_leaf());
    let e = h.requires_grad_(false).expect_err("a non-leaf cannot stop").to_string();
    assert!(e.contains("only leaves") && e.contains("mul_scalar"), "{e}");
    Ok(())
}
