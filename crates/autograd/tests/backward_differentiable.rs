//! An operation whose backward is not differentiable (it computes on raw tensors, as fast
//! fused kernels do) declares it with `Op::backward_differentiable`: plain backward through
//! it works, and `create_graph` through it is an error naming it instead of wrong
//! higher-order gradients.

use ember_autograd::{BackwardCtx, Function, FunctionCtx, Grads, Op, Saves, Var, grad};
use ember_tensor::{Result, Tensor};

/// `y = x^2`, whose backward computes `2 x g` on raw tensors.
struct RawSquare;

impl Op for RawSquare {
    fn name(&self) -> &str {
        "raw_square"
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].mul(inputs[0])
    }
    fn backward(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        let x = ctx.input(0)?.value();
        let gx = g.value().mul(&x)?.mul_scalar(2.0);
        Ok([Some(Var::new(gx))].into_iter().collect())
    }
    fn saves(&self) -> Saves {
        Saves::INPUTS
    }
    fn backward_differentiable(&self) -> bool {
        false
    }
}

/// `y = x^2` with its backward written with `Var` operations (the default declaration).
struct VarSquare;

impl Op for VarSquare {
    fn name(&self) -> &str {
        "var_square"
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].mul(inputs[0])
    }
    fn backward(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        let x = ctx.input(0)?;
        Ok([Some(g.mul(&x.mul_scalar(2.0))?)].into_iter().collect())
    }
}

fn x() -> Result<Var> {
    Ok(Var::param(Tensor::from_vec(vec![1.0f64, -2.0, 3.0], [3])?))
}

#[test]
fn plain_backward_through_a_non_differentiable_backward_works() -> Result<()> {
    let x = x()?;
    Var::apply_op(RawSquare, &[&x])?.sum_all().backward()?;
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![2.0, -4.0, 6.0]);
    // And through grad(), without create_graph.
    let y = Var::apply_op(RawSquare, &[&x])?.mul_scalar(0.5).sum_all();
    let g = grad(&[&y], &[&x], &[], false, false)?[0].clone().unwrap();
    assert_eq!(g.value().to_vec::<f64>()?, vec![1.0, -2.0, 3.0]);
    Ok(())
}

#[test]
fn create_graph_through_a_non_differentiable_backward_is_an_error_naming_the_op() -> Result<()> {
    let x = x()?;
    let y = Var::apply_op(RawSquare, &[&x])?.exp().sum_all();
    let err = grad(&[&y], &[&x], &[], false, true).unwrap_err().to_string();
    assert!(err.contains("raw_square") && err.contains("create_graph"), "{err}");
    let err = y.backward_full(None, false, true).unwrap_err().to_string();
    assert!(err.contains("raw_square") && err.contains("create_graph"), "{err}");
    // The graph is still usable without create_graph.
    y.backward()?;
    assert!(x.grad().is_some());
    Ok(())
}

#[test]
fn a_differentiable_backward_gives_second_derivatives() -> Result<()> {
    let x = x()?;
    let y = Var::apply_op(VarSquare, &[&x])?.sum_all();
    let d1 = grad(&[&y], &[&x], &[], false, true)?[0].clone().unwrap();
    assert_eq!(d1.value().to_vec::<f64>()?, vec![2.0, -4.0, 6.0]);
    let d2 = grad(&[&d1.sum_all()], &[&x], &[], false, false)?[0].clone().unwrap();
    assert_eq!(d2.value().to_vec::<f64>()?, vec![2.0, 2.0, 2.0]);
    Ok(())
}

/// A custom function keeps its own declaration (`Function::differentiable_backward`),
/// which the engine reads through the same `Op` method.
struct Halve;

impl Function for Halve {
    fn forward(&self, _: &mut FunctionCtx, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        Ok(vec![inputs[0].mul_scalar(0.5)])
    }
    fn backward(&self, _: &FunctionCtx, grads: &[Var]) -> Result<Vec<Option<Var>>> {
        Ok(vec![Some(grads[0].mul_scalar(0.5))])
    }
}

#[test]
fn a_custom_function_not_declared_differentiable_is_refused_by_name() -> Result<()> {
    let x = x()?;
    let y = Halve.apply(&[&x])?.remove(0).sum_all();
    let err = grad(&[&y], &[&x], &[], true, true).unwrap_err().to_string();
    assert!(err.contains("Halve") && err.contains("create_graph"), "{err}");
    y.backward()?;
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![0.5, 0.5, 0.5]);
    Ok(())
}
