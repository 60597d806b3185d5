//! Custom functions: a `LinearFunction` (`out = input @ weight^T + bias`,
//! backward computing only the gradients asked for) compared with the built-in operations
//! and gradchecked, then a function with two outputs and a differentiable backward used
//! for a second derivative.
//!
//! ```text
//! cargo run --example custom_function
//! ```

use ember::autograd::{Function, FunctionCtx, grad, gradcheck};
use ember::{DType, Error, Result, Tensor, Var};

/// `out = input @ weight^T + bias`.
struct LinearFunction;

impl Function for LinearFunction {
    fn forward(&self, ctx: &mut FunctionCtx, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let [input, weight, bias] = inputs else {
            return Err(Error::autograd("LinearFunction takes input, weight and bias"));
        };
        ctx.save_for_backward(&[input, weight]);
        Ok(vec![input.matmul(&weight.t()?)?.add(bias)?])
    }

    fn backward(&self, ctx: &FunctionCtx, grads: &[Var]) -> Result<Vec<Option<Var>>> {
        let saved = ctx.saved_tensors()?;
        let (input, weight, g) = (&saved[0], &saved[1], &grads[0]);
        let grad_input = if ctx.needs_input_grad(0) { Some(g.matmul(weight)?) } else { None };
        let grad_weight = if ctx.needs_input_grad(1) { Some(g.t()?.matmul(input)?) } else { None };
        let grad_bias = if ctx.needs_input_grad(2) { Some(g.sum(0, false)?) } else { None };
        Ok(vec![grad_input, grad_weight, grad_bias])
    }
}

/// `(sin x, cos x)`: two outputs, and a backward written with `Var` operations on the saved
/// outputs, so that it can be differentiated again.
struct SinCos;

impl Function for SinCos {
    fn forward(&self, ctx: &mut FunctionCtx, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let (s, c) = (inputs[0].sin(), inputs[0].cos());
        ctx.save_for_backward(&[&s, &c]);
        Ok(vec![s, c])
    }

    fn backward(&self, ctx: &FunctionCtx, grads: &[Var]) -> Result<Vec<Option<Var>>> {
        let saved = ctx.saved_tensors()?;
        Ok(vec![Some(grads[0].mul(&saved[1])?.sub(&grads[1].mul(&saved[0])?)?)])
    }

    fn differentiable_backward(&self) -> bool {
        true
    }
}

fn max_difference(a: &Tensor, b: &Tensor) -> Result<f64> {
    let (a, b) = (a.to_vec_f64()?, b.to_vec_f64()?);
    Ok(a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max))
}

fn main() -> Result<()> {
    ember::manual_seed(0);
    let (x, w, b) = (Tensor::randn([4, 3])?, Tensor::randn([5, 3])?, Tensor::randn([5])?);

    let (x1, w1, b1) = (Var::param(x.clone()), Var::param(w.clone()), Var::param(b.clone()));
    let custom = LinearFunction.apply(&[&x1, &w1, &b1])?.remove(0);
    custom.relu().sum_all().backward()?;

    let (x2, w2, b2) = (Var::param(x), Var::param(w), Var::param(b));
    let builtin = x2.matmul(&w2.t()?)?.add(&b2)?;
    builtin.relu().sum_all().backward()?;

    println!("LinearFunction ({}) vs built-in operations, largest differences:", custom.op_name());
    println!("  output  {:.1e}", max_difference(&custom.value(), &builtin.value())?);
    for (name, a, b) in [("input", &x1, &x2), ("weight", &w1, &w2), ("bias", &b1, &b2)] {
        let (ga, gb) = (a.grad(), b.grad());
        let (Some(ga), Some(gb)) = (ga, gb) else { return Err(Error::autograd("a gradient is missing")) };
        println!("  d/d{name:<6} {:.1e}", max_difference(&ga, &gb)?);
    }

    let f64s = |shape: &[usize]| Tensor::randn(shape.to_vec()).map(|t| t.to_dtype(DType::F64));
    gradcheck(
        |v| Ok(LinearFunction.apply(&[&v[0], &v[1], &v[2]])?.remove(0)),
        &[f64s(&[3, 2])?, f64s(&[4, 2])?, f64s(&[4])?],
        1e-6,
        1e-8,
        1e-6,
    )?;
    println!("gradcheck of LinearFunction: passed");

    // d^2/dx^2 (sin x cos x) = -4 sin x cos x, through the two outputs.
    let x = Var::param(Tensor::scalar(0.7f64));
    let outs = SinCos.apply(&[&x])?;
    let f = outs[0].mul(&outs[1])?;
    let d1 = grad(&[&f], &[&x], &[], false, true)?.remove(0).ok_or_else(|| Error::autograd("no d1"))?;
    let d2 = grad(&[&d1], &[&x], &[], false, false)?.remove(0).ok_or_else(|| Error::autograd("no d2"))?;
    println!(
        "SinCos: d2/dx2 sin(x) cos(x) at 0.7 = {:.12} (exact {:.12})",
        d2.item()?,
        -4.0 * 0.7f64.sin() * 0.7f64.cos()
    );
    Ok(())
}
