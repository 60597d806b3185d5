//! Elementwise operations of two `Var`s with broadcasting. Gradients are summed back to
//! each input's shape.

use super::{apply, constant};
use crate::backward_ctx::BackwardCtx;
use crate::op::{Grads, Op, Saves};
use crate::var::Var;
use ember_tensor::{DType, Result, Shape, Tensor};
use smallvec::smallvec;

/// The input shapes, recorded so that backward can reduce broadcast gradients without
/// reading the inputs, and the dtype of an input that differs from the promoted dtype of
/// the output (an `f32` parameter times an `f64` tensor computes in `f64`).
struct Shapes {
    shapes: [Shape; 2],
    casts: [Option<DType>; 2],
}

impl Shapes {
    fn of(a: &Var, b: &Var) -> Self {
        let ((sa, da), (sb, db)) = (a.shape_and_dtype(), b.shape_and_dtype());
        let out = ember_tensor::dtype::result_type(&[(da, sa.rank()), (db, sb.rank())]);
        Shapes { shapes: [sa, sb], casts: [(da != out).then_some(da), (db != out).then_some(db)] }
    }

    /// `grad` for input `i` summed to its shape and cast to its dtype (PyTorch's
    /// `validate_outputs`: a gradient has its input's dtype), if that input needs one.
    fn reduce(&self, ctx: &BackwardCtx<'_>, i: usize, grad: impl FnOnce() -> Result<Var>) -> Result<Option<Var>> {
        if !ctx.needs_input_grad(i) {
            return Ok(None);
        }
        let g = grad()?.sum_to(&self.shapes[i])?;
        Ok(Some(match self.casts[i] {
            Some(dtype) => g.to_dtype(dtype),
            None => g,
        }))
    }
}

macro_rules! binary_op {
    ($(#[$doc:meta])* $method:ident, $Op:ident, $name:literal, $saves:expr,
     |$a:ident, $b:ident| $fwd:expr,
     |$ctx:ident, $g:ident| [$ga:expr, $gb:expr]) => {
        struct $Op(Shapes);
        impl Op for $Op {
            fn name(&self) -> &str {
                $name
            }
            fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
                let ($a, $b) = (&inputs[0], &inputs[1]);
                $fwd
            }
            #[allow(unused_variables)]
            fn backward(&self, $ctx: &BackwardCtx<'_>, $g: &Var) -> Result<Grads> {
                Ok(smallvec![self.0.reduce($ctx, 0, || $ga)?, self.0.reduce($ctx, 1, || $gb)?])
            }
            fn saves(&self) -> Saves {
                $saves
            }
            fn export(&self) -> Result<crate::export::OpExport> {
                Ok(crate::export::OpExport::new($name))
            }
        }
        impl Var {
            $(#[$doc])*
            pub fn $method(&self, other: &Var) -> Result<Var> {
                apply($Op(Shapes::of(self, other)), &[self, other])
            }
        }
    };
}

binary_op!(
    /// `a + b`, broadcasting.
    add, Add, "add", Saves::NONE,
    |a, b| a.add(b),
    |ctx, g| [Ok(g.clone()), Ok(g.clone())]
);
binary_op!(
    /// `a - b`, broadcasting.
    sub, Sub, "sub", Saves::NONE,
    |a, b| a.sub(b),
    |ctx, g| [Ok(g.clone()), Ok(g.neg())]
);
binary_op!(
    /// `a * b`, broadcasting.
    mul, Mul, "mul", Saves::INPUTS,
    |a, b| a.mul(b),
    |ctx, g| [g.mul(&ctx.input(1)?), g.mul(&ctx.input(0)?)]
);
binary_op!(
    /// `a / b`, broadcasting; the gradients are `1 / b` and `-a / b^2`.
    div, Div, "div", Saves::INPUTS,
    |a, b| a.div(b),
    |ctx, g| [g.div(&ctx.input(1)?), Ok(g.mul(&ctx.input(0)?)?.div(&ctx.input(1)?.square())?.neg())]
);
binary_op!(
    /// `a ^ b` elementwise, broadcasting; the gradients are `b a^(b-1)` (0 where `b = 0`)
    /// and `a^b ln a` (0 where `a = 0` and `b >= 0`), PyTorch's `pow_backward_self` and
    /// `pow_backward_exponent`: at a zero base the plain formulas give `0 * inf` and
    /// `0 * ln 0`, both NaN.
    pow, Pow, "pow", Saves::INPUTS,
    |a, b| a.pow(b),
    |ctx, g| [
        {
            let (a, b) = (ctx.input(0)?, ctx.input(1)?);
            let d = g.mul(&b.mul(&a.pow(&b.sub_scalar(1.0))?)?)?;
            let constant_in_a = constant(b.value().eq_scalar(0));
            constant_in_a.where_cond(&constant(d.value().zeros_like()), &d)
        },
        {
            let (a, b) = (ctx.input(0)?, ctx.input(1)?);
            let d = a.pow(&b)?.mul(&a.log())?;
            let (av, bv) = (a.value(), b.value());
            let zero = av.eq_scalar(0).mul(&bv.ge_scalar(0))?;
            g.mul(&constant(zero).where_cond(&constant(d.value().zeros_like()), &d)?)
        }
    ]
);
binary_op!(
    /// The elementwise maximum, broadcasting; ties split the gradient evenly, as in PyTorch.
    maximum, Maximum, "maximum", Saves::INPUTS,
    |a, b| a.maximum(b),
    |ctx, g| [
        g.mul(&tie_mask(&ctx.input(0)?.value(), &ctx.input(1)?.value(), true)?),
        g.mul(&tie_mask(&ctx.input(1)?.value(), &ctx.input(0)?.value(), true)?)
    ]
);
binary_op!(
    /// The elementwise minimum, broadcasting; ties split the gradient evenly.
    minimum, Minimum, "minimum", Saves::INPUTS,
    |a, b| a.minimum(b),
    |ctx, g| [
        g.mul(&tie_mask(&ctx.input(0)?.value(), &ctx.input(1)?.value(), false)?),
        g.mul(&tie_mask(&ctx.input(1)?.value(), &ctx.input(0)?.value(), false)?)
    ]
);

/// 1 where `a` wins (`a > b` for the maximum), 0.5 on ties, 0 elsewhere.
fn tie_mask(a: &Tensor, b: &Tensor, max: bool) -> Result<Var> {
    let wins = if max { a.gt(b)? } else { a.lt(b)? };
    let dtype = a.result_type(b).float_or_default();
    let m = wins.to_dtype(dtype).add(&a.eq(b)?.to_dtype(dtype).mul_scalar(0.5))?;
    Ok(constant(m))
}
