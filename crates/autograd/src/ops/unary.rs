//! Elementwise functions of one `Var`.
//!
//! In the formulas, `x` is the input, `y` the output and `g` the incoming gradient.

use super::{apply_infallible, constant};
use crate::backward_ctx::BackwardCtx;
use crate::op::{Grads, Op, Saves};
use crate::var::Var;
use ember_tensor::{Result, Tensor};
use smallvec::smallvec;

/// The gradient of a piecewise-constant function: zeros, as in PyTorch (not "no gradient": a
/// parameter reached only through such a function gets a zero `.grad`, not none).
pub(super) fn zero_gradient(g: &Var) -> Var {
    constant(g.value().zeros_like())
}

/// `x` as a float tensor's dtype, for masks: `mask.to_dtype(float)`.
fn float_mask(mask: Tensor, like: &Tensor) -> Var {
    constant(mask.to_dtype(like.dtype().float_or_default()))
}

macro_rules! unary_op {
    ($(#[$doc:meta])* $method:ident, $Op:ident, $name:literal, $saves:expr,
     |$x:ident| $fwd:expr,
     |$ctx:ident, $g:ident| $bwd:expr) => {
        struct $Op;
        impl Op for $Op {
            fn name(&self) -> &str {
                $name
            }
            fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
                let $x = &inputs[0];
                Ok($fwd)
            }
            #[allow(unused_variables)]
            fn backward(&self, $ctx: &BackwardCtx<'_>, $g: &Var) -> Result<Grads> {
                Ok(smallvec![$bwd])
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
            pub fn $method(&self) -> Var {
                apply_infallible($Op, &[self])
            }
        }
    };
}

unary_op!(
    /// `-x`.
    neg, Neg, "neg", Saves::NONE,
    |x| x.neg(),
    |ctx, g| Some(g.neg())
);
unary_op!(
    /// `|x|`; the gradient is `sign(x)` (0 at 0).
    abs, Abs, "abs", Saves::INPUTS,
    |x| x.abs(),
    |ctx, g| { let x = ctx.input(0)?; Some(g.mul(&constant(x.value().sign()))?) }
);
unary_op!(
    /// `-1`, `0` or `1`; its gradient is zero.
    sign, Sign, "sign", Saves::NONE,
    |x| x.sign(),
    |ctx, g| Some(zero_gradient(g))
);
unary_op!(
    /// `x * x`.
    square, Square, "square", Saves::INPUTS,
    |x| x.square(),
    |ctx, g| Some(g.mul(&ctx.input(0)?.mul_scalar(2.0))?)
);
unary_op!(
    /// `max(x, 0)`.
    relu, Relu, "relu", Saves::OUTPUT,
    |x| x.relu(),
    |ctx, g| { let y = ctx.output()?.value(); Some(g.mul(&float_mask(y.gt_scalar(0), &y))?) }
);
unary_op!(
    /// `e^x`.
    exp, Exp, "exp", Saves::OUTPUT,
    |x| x.exp(),
    |ctx, g| Some(g.mul(&ctx.output()?)?)
);
unary_op!(
    /// The natural logarithm.
    log, Log, "log", Saves::INPUTS,
    |x| x.log(),
    |ctx, g| Some(g.div(&ctx.input(0)?)?)
);
unary_op!(
    /// The square root.
    sqrt, Sqrt, "sqrt", Saves::OUTPUT,
    |x| x.sqrt(),
    |ctx, g| Some(g.div(&ctx.output()?.mul_scalar(2.0))?)
);
unary_op!(
    /// `1 / sqrt(x)`.
    rsqrt, Rsqrt, "rsqrt", Saves::OUTPUT,
    |x| x.rsqrt(),
    |ctx, g| Some(g.mul(&ctx.output()?.pow_scalar(3.0)?.mul_scalar(-0.5))?)
);
unary_op!(
    /// The sine.
    sin, Sin, "sin", Saves::INPUTS,
    |x| x.sin(),
    |ctx, g| Some(g.mul(&ctx.input(0)?.cos())?)
);
unary_op!(
    /// The cosine.
    cos, Cos, "cos", Saves::INPUTS,
    |x| x.cos(),
    |ctx, g| Some(g.mul(&ctx.input(0)?.sin().neg())?)
);
unary_op!(
    /// The hyperbolic tangent; the gradient is `1 - y^2`.
    tanh, Tanh, "tanh", Saves::OUTPUT,
    |x| x.tanh(),
    |ctx, g| Some(g.mul(&ctx.output()?.square().rsub_scalar(1.0))?)
);
unary_op!(
    /// The logistic function; the gradient is `y (1 - y)`.
    sigmoid, Sigmoid, "sigmoid", Saves::OUTPUT,
    |x| x.sigmoid(),
    |ctx, g| { let y = ctx.output()?; Some(g.mul(&y.mul(&y.rsub_scalar(1.0))?)?) }
);
unary_op!(
    /// GELU with the exact normal CDF: `x Phi(x)`; the gradient is `Phi(x) + x phi(x)`.
    gelu, Gelu, "gelu", Saves::INPUTS,
    |x| x.gelu(),
    |ctx, g| {
        let x = ctx.input(0)?;
        let cdf = x.mul_scalar(std::f64::consts::FRAC_1_SQRT_2).erf().add_scalar(1.0).mul_scalar(0.5);
        let pdf = x.square().mul_scalar(-0.5).exp().mul_scalar(1.0 / (2.0 * std::f64::consts::PI).sqrt());
        Some(g.mul(&cdf.add(&x.mul(&pdf)?)?)?)
    }
);
unary_op!(
    /// GELU with PyTorch's tanh approximation.
    gelu_tanh, GeluTanh, "gelu_tanh", Saves::INPUTS,
    |x| x.gelu_tanh(),
    |ctx, g| {
        let x = ctx.input(0)?;
        let k = (2.0 / std::f64::consts::PI).sqrt();
        let x2 = x.square();
        let t = x.add(&x.mul(&x2)?.mul_scalar(0.044715))?.mul_scalar(k).tanh();
        let dinner = x2.mul_scalar(3.0 * 0.044715).add_scalar(1.0).mul_scalar(k);
        let left = t.add_scalar(1.0).mul_scalar(0.5);
        let right = x.mul_scalar(0.5).mul(&t.square().rsub_scalar(1.0))?.mul(&dinner)?;
        Some(g.mul(&left.add(&right)?)?)
    }
);
unary_op!(
    /// SiLU: `x sigmoid(x)`; the gradient is `s (1 + x (1 - s))`.
    silu, Silu, "silu", Saves::INPUTS,
    |x| x.silu(),
    |ctx, g| {
        let x = ctx.input(0)?;
        let s = x.sigmoid();
        Some(g.mul(&s.mul(&x.mul(&s.rsub_scalar(1.0))?.add_scalar(1.0))?)?)
    }
);
unary_op!(
    /// The error function; the gradient is `2 / sqrt(pi) e^(-x^2)`.
    erf, Erf, "erf", Saves::INPUTS,
    |x| x.erf(),
    |ctx, g| Some(g.mul(&ctx.input(0)?.square().neg().exp().mul_scalar(2.0 / std::f64::consts::PI.sqrt()))?)
);
unary_op!(
    /// `ln(1 + x)`.
    log1p, Log1p, "log1p", Saves::INPUTS,
    |x| x.log1p(),
    |ctx, g| Some(g.div(&ctx.input(0)?.add_scalar(1.0))?)
);
unary_op!(
    /// `e^x - 1`.
    expm1, Expm1, "expm1", Saves::OUTPUT,
    |x| x.expm1(),
    |ctx, g| Some(g.mul(&ctx.output()?.add_scalar(1.0))?)
);
unary_op!(
    /// `1 / x`; the gradient is `-y^2`.
    recip, Recip, "recip", Saves::OUTPUT,
    |x| x.recip(),
    |ctx, g| Some(g.mul(&ctx.output()?.square().neg())?)
);
unary_op!(
    /// Rounds down; its gradient is zero.
    floor, Floor, "floor", Saves::NONE,
    |x| x.floor(),
    |ctx, g| Some(zero_gradient(g))
);
unary_op!(
    /// Rounds up; its gradient is zero.
    ceil, Ceil, "ceil", Saves::NONE,
    |x| x.ceil(),
    |ctx, g| Some(zero_gradient(g))
);
unary_op!(
    /// Rounds half to even; its gradient is zero.
    round, Round, "round", Saves::NONE,
    |x| x.round(),
    |ctx, g| Some(zero_gradient(g))
);

struct Softplus {
    beta: f64,
    threshold: f64,
}

impl Op for Softplus {
    fn name(&self) -> &str {
        "softplus"
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        Ok(inputs[0].softplus(self.beta, self.threshold))
    }
    fn backward(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        // sigmoid(beta x) below the threshold, 1 where the function is linear.
        let x = ctx.input(0)?;
        let bx = x.mul_scalar(self.beta);
        let linear = constant(bx.value().gt_scalar(self.threshold));
        let slope = linear.where_cond(&constant(bx.value().ones_like()), &bx.sigmoid())?;
        Ok(smallvec![Some(g.mul(&slope)?)])
    }
}

struct LeakyRelu {
    slope: f64,
}

impl Op for LeakyRelu {
    fn name(&self) -> &str {
        "leaky_relu"
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        Ok(inputs[0].leaky_relu(self.slope))
    }
    fn backward(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        let x = ctx.input(0)?.value();
        let pos = x.gt_scalar(0);
        let factor = pos.where_tensor_scalar(&x.ones_like(), self.slope)?;
        Ok(smallvec![Some(g.mul(&float_mask(factor, &x))?)])
    }
}

struct Elu {
    alpha: f64,
}

impl Op for Elu {
    fn name(&self) -> &str {
        "elu"
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        Ok(inputs[0].elu(self.alpha))
    }
    fn backward(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        // 1 for positive x; alpha e^x = y + alpha otherwise.
        let x = ctx.input(0)?;
        let pos = constant(x.value().gt_scalar(0));
        let neg_slope = x.exp().mul_scalar(self.alpha);
        let slope = pos.where_cond(&constant(x.value().ones_like()), &neg_slope)?;
        Ok(smallvec![Some(g.mul(&slope)?)])
    }
}

struct Clamp {
    min: Option<f64>,
    max: Option<f64>,
}

impl Op for Clamp {
    fn name(&self) -> &str {
        "clamp"
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        Ok(inputs[0].clamp(self.min, self.max))
    }
    fn backward(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        // The gradient passes strictly inside the bounds: at a bound PyTorch takes the
        // minimum-norm subgradient 0, like relu at 0 (the kinks_and_ties parity scenario).
        let x = ctx.input(0)?.value();
        let inside = match (self.min, self.max) {
            (Some(lo), Some(hi)) => x.gt_scalar(lo).mul(&x.lt_scalar(hi))?,
            (Some(lo), None) => x.gt_scalar(lo),
            (None, Some(hi)) => x.lt_scalar(hi),
            (None, None) => return Ok(smallvec![Some(g.clone())]),
        };
        Ok(smallvec![Some(g.mul(&float_mask(inside, &x))?)])
    }
}

impl Var {
    /// `ln(1 + e^(beta x)) / beta`, linear where `beta x > threshold`.
    pub fn softplus(&self, beta: f64, threshold: f64) -> Var {
        apply_infallible(Softplus { beta, threshold }, &[self])
    }

    /// `x` for positive `x`, `negative_slope * x` otherwise.
    pub fn leaky_relu(&self, negative_slope: f64) -> Var {
        apply_infallible(LeakyRelu { slope: negative_slope }, &[self])
    }

    /// `x` for positive `x`, `alpha (e^x - 1)` otherwise.
    pub fn elu(&self, alpha: f64) -> Var {
        apply_infallible(Elu { alpha }, &[self])
    }

    /// Values limited to `[min, max]`; the gradient passes strictly inside the bounds.
    pub fn clamp(&self, min: Option<f64>, max: Option<f64>) -> Var {
        apply_infallible(Clamp { min, max }, &[self])
    }
}
