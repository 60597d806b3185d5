//! What backward frees, what it keeps, and recomputation of freed values (docs/design.md,
//! 'Value versions and re-execution').

use ember_autograd::Var;
use ember_tensor::{DType, Result, Tensor};

#[test]
fn held_values_survive_backward_without_recomputation() -> Result<()> {
    let w = Var::param(Tensor::ones([3, 2], DType::F32)?);
    let x = Var::new(Tensor::ones([4, 3], DType::F32)?);
    let logits = x.matmul(&w)?.relu();
    let loss = logits.sum_all();
    loss.backward()?;
    // Reading a value the user holds costs nothing: it was never freed.
    assert_eq!(logits.value().to_vec::<f32>()?, vec![3.0; 8]);
    assert_eq!(logits.recompute_count(), 0);
    assert_eq!(loss.recompute_count(), 0);
    Ok(())
}

#[test]
fn second_backward_through_freed_nodes_recomputes_them() -> Result<()> {
    let w = Var::param(Tensor::from_vec(vec![1.0f64, 2.0], [2])?);
    let loss = w.exp().mul_scalar(3.0).sum_all(); // d/dw = 3 e^w; exp's value is freed
    loss.backward()?;
    let first = w.grad().unwrap().to_vec::<f64>()?;
    loss.backward()?; // the intermediate exp is recomputed from the leaves instead of failing
    let second = w.grad().unwrap().to_vec::<f64>()?;
    for (a, b) in first.iter().zip(&second) {
        assert!((b - 2.0 * a).abs() < 1e-12);
    }
    Ok(())
}

#[test]
fn retained_graph_is_not_recomputed() -> Result<()> {
    let w = Var::param(Tensor::from_vec(vec![1.0f64], [1])?);
    let e = w.exp();
    let loss = e.sum_all();
    drop(e);
    loss.backward_with(None, true)?;
    loss.backward_with(None, true)?;
    let inputs = loss.inputs()?;
    assert_eq!(inputs[0].recompute_count(), 0);
    Ok(())
}

#[test]
fn inplace_change_of_a_saved_tensor_is_an_error() -> Result<()> {
    let x = Var::param(Tensor::from_vec(vec![1.0f64, 2.0], [2])?);
    let y = x.exp(); // exp saves its output
    let loss = y.sum_all();
    y.value().mul_scalar_(2.0)?; // modify the saved value in place
    let e = loss.backward().unwrap_err().to_string();
    assert!(e.contains("modified by an inplace operation") && e.contains("exp"), "{e}");
    assert!(e.contains("version 1") && e.contains("version 0"), "{e}");
    Ok(())
}

#[test]
fn inplace_change_of_an_unsaved_tensor_is_fine() -> Result<()> {
    let x = Var::param(Tensor::from_vec(vec![1.0f64, 2.0], [2])?);
    let y = x.add_scalar(1.0); // add saves nothing
    let loss = y.sum_all();
    y.value().mul_scalar_(2.0)?;
    loss.backward()?;
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![1.0, 1.0]);
    Ok(())
}

#[test]
fn a_million_node_chain_backpropagates_and_drops() -> Result<()> {
    let x = Var::param(Tensor::scalar(1.0f32));
    let mut y = x.clone();
    for _ in 0..1_000_000 {
        y = y.add_scalar(1.0);
    }
    y.backward()?;
    assert_eq!(x.grad().unwrap().to_scalar::<f32>()?, 1.0);
    drop(y); // freeing the chain must not recurse either
    Ok(())
}

/// An intermediate's value written in place after it was computed cannot be recomputed
/// (recomputation gives the value from before the write), so backward keeps it: a second
/// backward through the freed rest of the graph differentiates at the written value.
#[test]
fn a_value_written_in_place_is_kept_for_later_backward_calls() -> Result<()> {
    let w = Var::param(Tensor::from_vec(vec![0.5f64, -0.25], [2])?);
    let h = w.mul_scalar(2.0);
    h.value().add_scalar_(1.0)?; // h = 2w + 1 from now on
    let loss = h.exp().sum_all(); // d loss / dw = 2 e^(2w + 1)
    drop(h);
    loss.backward()?;
    loss.backward()?; // through values the first backward freed
    let expected: Vec<f64> = [0.5f64, -0.25].iter().map(|w| 2.0 * 2.0 * (2.0 * w + 1.0).exp()).collect();
    let got = w.grad().expect("a gradient").to_vec::<f64>()?;
    for (a, b) in got.iter().zip(&expected) {
        assert!((a - b).abs() < 1e-12, "{got:?}, expected {expected:?} (twice 2 e^(2w+1))");
    }
    Ok(())
}

/// With `create_graph`, an intermediate keeps only the value of its gradient: the
/// gradient's graph reaches back to the node (here `2 h g` to `h`), so keeping it there
/// would make a cycle that is never freed. Once the user drops their handles (and the leaf's
/// graph-carrying gradient, as PyTorch requires too), the whole graph is freed.
#[test]
fn create_graph_leaves_no_cycle_through_intermediate_gradients() -> Result<()> {
    let x = Var::param(Tensor::from_vec(vec![1.0f64, 2.0], [2])?);
    let h = x.mul_scalar(2.0);
    let y = h.square().sum_all();
    y.backward_full(None, false, true)?;
    // Readable until the next backward (docs/design.md, 'Accumulation rules'), as a value.
    assert_eq!(h.grad().expect("readable").to_vec::<f64>()?, vec![4.0, 8.0]);
    // The leaf's gradient carries the graph of its computation, for higher orders.
    assert!(x.grad_var().expect("a gradient").requires_grad());
    let value = std::sync::Arc::downgrade(h.value().storage());
    x.zero_grad();
    drop((h, y));
    assert!(value.upgrade().is_none(), "the intermediate's value outlived every handle to its graph");
    // The intermediate's readable gradient is a plain value; a retain_grad node keeps the
    // graph-carrying one, like a leaf.
    let h = x.mul_scalar(2.0);
    let r = x.mul_scalar(3.0);
    r.retain_grad()?;
    h.square().add(&r.square())?.sum_all().backward_full(None, false, true)?;
    assert!(!h.grad_var().expect("readable").requires_grad());
    assert!(r.grad_var().expect("retained").requires_grad());
    x.zero_grad();
    r.zero_grad();
    Ok(())
}
