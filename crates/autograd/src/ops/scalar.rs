//! Operations between a `Var` and a Rust number.

use super::unary::zero_gradient;
use super::{apply_infallible, constant};
use crate::backward_ctx::BackwardCtx;
use crate::op::{Grads, Op, Saves};
use crate::var::Var;
use ember_tensor::{Result, Scalar, Tensor};
use smallvec::smallvec;

/// Defines the op struct `$Op` and its `Op` impl; `scalar_op!` adds the `Var` method.
macro_rules! scalar_op_struct {
    ($Op:ident, $name:literal, $saves:expr,
     |$x:ident, $s:ident| $fwd:expr,
     |$ctx:ident, $g:ident, $sv:ident| $bwd:expr) => {
        struct $Op {
            s: Scalar,
        }
        impl Op for $Op {
            fn name(&self) -> &str {
                $name
            }
            fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
                let ($x, $s) = (&inputs[0], self.s);
                Ok($fwd)
            }
            #[allow(unused_variables)]
            fn backward(&self, $ctx: &BackwardCtx<'_>, $g: &Var) -> Result<Grads> {
                let $sv = self.s.to_f64();
                Ok(smallvec![$bwd])
            }
            fn saves(&self) -> Saves {
                $saves
            }
            fn export(&self) -> Result<crate::export::OpExport> {
                Ok(crate::export::OpExport::new($name).attr("value", crate::export::ExportAttr::Float(self.s.to_f64())))
            }
        }
    };
}

/// A scalar op whose forward cannot fail on any value: the `Var` method returns `Var`.
macro_rules! scalar_op {
    ($(#[$doc:meta])* $method:ident, $Op:ident, $name:literal, $saves:expr,
     |$x:ident, $s:ident| $fwd:expr,
     |$ctx:ident, $g:ident, $sv:ident| $bwd:expr) => {
        scalar_op_struct!($Op, $name, $saves, |$x, $s| $fwd, |$ctx, $g, $sv| $bwd);
        impl Var {
            $(#[$doc])*
            pub fn $method(&self, s: impl Into<Scalar>) -> Var {
                apply_infallible($Op { s: s.into() }, &[self])
            }
        }
    };
}

scalar_op!(
    /// `x + s`.
    add_scalar, AddScalar, "add_scalar", Saves::NONE,
    |x, s| x.add_scalar(s),
    |ctx, g, s| Some(g.clone())
);
scalar_op!(
    /// `x - s`.
    sub_scalar, SubScalar, "sub_scalar", Saves::NONE,
    |x, s| x.sub_scalar(s),
    |ctx, g, s| Some(g.clone())
);
scalar_op!(
    /// `s - x`.
    rsub_scalar, RSubScalar, "rsub_scalar", Saves::NONE,
    |x, s| x.rsub_scalar(s),
    |ctx, g, s| Some(g.neg())
);
scalar_op!(
    /// `x * s`.
    mul_scalar, MulScalar, "mul_scalar", Saves::NONE,
    |x, s| x.mul_scalar(s),
    |ctx, g, s| Some(g.mul_scalar(s))
);
scalar_op!(
    /// `x / s`.
    div_scalar, DivScalar, "div_scalar", Saves::NONE,
    |x, s| x.div_scalar(s),
    |ctx, g, s| Some(g.div_scalar(s))
);
scalar_op!(
    /// `s / x`; the gradient is `-s / x^2 = -y / x`.
    rdiv_scalar, RDivScalar, "rdiv_scalar", Saves { inputs: 1, output: true },
    |x, s| x.rdiv_scalar(s),
    |ctx, g, s| Some(g.mul(&ctx.output()?)?.div(&ctx.input(0)?)?.neg())
);
scalar_op_struct!(PowScalar, "pow_scalar", Saves::INPUTS, |x, e| x.pow_scalar(e)?, |ctx, g, e| Some(if e == 0.0 {
    zero_gradient(g)
} else {
    g.mul(&ctx.input(0)?.pow_scalar(e - 1.0)?.mul_scalar(e))?
}));

impl Var {
    /// `x ^ e`; the gradient is `e x^(e - 1)`, and zeros for `e = 0` (PyTorch's
    /// `pow_backward`: `x^0 = 1` is constant, even at `x = 0` where `0 * 0^-1` would be NaN).
    ///
    /// # Errors
    /// Integer values raised to a negative integer power, as in PyTorch (`Tensor::pow_scalar`).
    ///
    /// ```
    /// # use ember_autograd::Var;
    /// # use ember_tensor::Tensor;
    /// let x = Var::param(Tensor::from_slice(&[2.0f32, 3.0], &[2])?);
    /// let y = x.pow_scalar(2.0)?; // [4, 9]
    /// assert_eq!(y.value().to_vec::<f32>()?, vec![4.0, 9.0]);
    ///
    /// let ints = Var::new(Tensor::from_slice(&[2i64, 3], &[2])?);
    /// assert!(ints.pow_scalar(-1).is_err());
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn pow_scalar(&self, e: impl Into<Scalar>) -> Result<Var> {
        super::apply(PowScalar { s: e.into() }, &[self])
    }
}
scalar_op!(
    /// `b ^ x`; the gradient is `y ln b`. For `b = 0` it is 0 where `x >= 0` (PyTorch's
    /// `pow_backward_exponent`: there `0^x` is constant in `x`, and `0 * ln 0` would be NaN).
    rpow_scalar, RPowScalar, "rpow_scalar", Saves::OUTPUT,
    |x, b| x.rpow_scalar(b),
    |ctx, g, b| {
        let y = ctx.output()?;
        let d = g.mul(&y.mul_scalar(b.ln()))?;
        if b == 0.0 {
            // `0^x` is 0 for x > 0, 1 at 0 and inf below: x >= 0 exactly where y is finite,
            // which the saved output tells without saving the input too.
            let flat = constant(y.value().lt_scalar(f64::INFINITY));
            Some(flat.where_cond(&zero_gradient(&d), &d)?)
        } else {
            Some(d)
        }
    }
);
scalar_op!(
    /// `max(x, s)`; the gradient passes where `x > s` (PyTorch's `clamp_min`: 0 at the bound).
    maximum_scalar, MaximumScalar, "maximum_scalar", Saves::INPUTS,
    |x, s| x.maximum_scalar(s),
    |ctx, g, s| {
        let x = ctx.input(0)?.value();
        Some(g.mul(&constant(x.gt_scalar(s).to_dtype(x.dtype().float_or_default())))?)
    }
);
scalar_op!(
    /// `min(x, s)`; the gradient passes where `x < s` (PyTorch's `clamp_max`: 0 at the bound).
    minimum_scalar, MinimumScalar, "minimum_scalar", Saves::INPUTS,
    |x, s| x.minimum_scalar(s),
    |ctx, g, s| {
        let x = ctx.input(0)?.value();
        Some(g.mul(&constant(x.lt_scalar(s).to_dtype(x.dtype().float_or_default())))?)
    }
);
