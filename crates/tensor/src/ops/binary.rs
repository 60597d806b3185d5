//! The table of elementwise functions of two tensors, [`binary_table!`](crate::binary_table):
//! one row per [`BinaryOp`] variant with its name, its CPU per-element function (wrapping
//! arithmetic for integers), its CUDA expressions, its `Tensor` method and its derivative
//! (see the module docs of [`crate::ops`] for where each section is expanded).
//!
//! # Rows
//!
//! ```text
//! /// variant doc
//! Variant => method,
//!     cpu [GRAIN |x, y| expr],
//!     cuda [float "EXPR", int "EXPR"],
//!     tensor ["method doc"],
//!     grad [/// Var method doc
//!           saves SAVES, |ctx, g| [GRADIENT_A, GRADIENT_B]];
//! ```
//!
//! As in the unary table (`ops::unary`), except that the `cpu` function runs on every
//! dtype (`T: Element`), the CUDA expressions are of `x` and `y`, the `Tensor` and `Var`
//! methods broadcast and return `Result`, and each `GRADIENT` is a `Result<Var>` for one
//! operand, which the generated backward sums back to that operand's shape.

/// The binary op table: calls the macro `$m` with every row. Crate-internal machinery,
/// public only so that ember-autograd can expand the `grad` sections; the row format is
/// in the docs of ember-tensor's `ops::binary` module.
#[doc(hidden)]
#[macro_export]
macro_rules! binary_table {
    ($m:ident) => {
        $m! {
            /// `a + b`
            Add => add,
                cpu [cheap |x, y| x.wadd(y)],
                cuda [float "wadd(x, y)", int "wadd(x, y)"],
                tensor ["`self + other`, broadcasting."],
                grad [/// `a + b`, broadcasting.
                      saves NONE, |ctx, g| [Ok(g.clone()), Ok(g.clone())]];
            /// `a - b`
            Sub => sub,
                cpu [cheap |x, y| x.wsub(y)],
                cuda [float "wsub(x, y)", int "wsub(x, y)"],
                tensor ["`self - other`, broadcasting."],
                grad [/// `a - b`, broadcasting.
                      saves NONE, |ctx, g| [Ok(g.clone()), Ok(g.neg())]];
            /// `a * b`
            Mul => mul,
                cpu [cheap |x, y| x.wmul(y)],
                cuda [float "wmul(x, y)", int "wmul(x, y)"],
                tensor ["`self * other`, broadcasting."],
                grad [/// `a * b`, broadcasting.
                      saves INPUTS, |ctx, g| [g.mul(&ctx.input(1)?), g.mul(&ctx.input(0)?)]];
            /// `a / b` (integer division by zero gives 0)
            Div => div,
                cpu [cheap |x, y| Element::div(x, y)],
                cuda [float "x / y", int "int_div(x, y)"],
                tensor ["`self / other`, broadcasting; integers divide as floats."],
                grad [/// `a / b`, broadcasting; the gradients are `1 / b` and `-a / b^2`.
                      saves INPUTS,
                      |ctx, g| [g.div(&ctx.input(1)?), Ok(g.mul(&ctx.input(0)?)?.div(&ctx.input(1)?.square())?.neg())]];
            /// `a ^ b`
            Pow => pow,
                cpu [costly |x, y| x.pow_elem(y)],
                cuda [float "pow(x, y)", int "int_pow(x, y)"],
                tensor ["`self ^ other` elementwise, broadcasting."],
                grad [/// `a ^ b` elementwise, broadcasting; the gradients are `b a^(b-1)` (0 where `b = 0`)
                      /// and `a^b ln a` (0 where `a = 0` and `b >= 0`), PyTorch's `pow_backward_self` and
                      /// `pow_backward_exponent`: at a zero base the plain formulas give `0 * inf` and
                      /// `0 * ln 0`, both NaN.
                      saves INPUTS,
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
                      ]];
            /// `max(a, b)` propagating NaN
            Maximum => maximum,
                cpu [cheap |x, y| x.max_nan(y)],
                cuda [float "max_nan(x, y)", int "max_nan(x, y)"],
                tensor ["The elementwise maximum (NaN propagates), broadcasting."],
                grad [/// The elementwise maximum, broadcasting; ties split the gradient evenly, as in PyTorch.
                      saves INPUTS,
                      |ctx, g| [
                          g.mul(&tie_mask(&ctx.input(0)?.value(), &ctx.input(1)?.value(), true)?),
                          g.mul(&tie_mask(&ctx.input(1)?.value(), &ctx.input(0)?.value(), true)?)
                      ]];
            /// `min(a, b)` propagating NaN
            Minimum => minimum,
                cpu [cheap |x, y| x.min_nan(y)],
                cuda [float "min_nan(x, y)", int "min_nan(x, y)"],
                tensor ["The elementwise minimum (NaN propagates), broadcasting."],
                grad [/// The elementwise minimum, broadcasting; ties split the gradient evenly.
                      saves INPUTS,
                      |ctx, g| [
                          g.mul(&tie_mask(&ctx.input(0)?.value(), &ctx.input(1)?.value(), false)?),
                          g.mul(&tie_mask(&ctx.input(1)?.value(), &ctx.input(0)?.value(), false)?)
                      ]];
        }
    };
}

/// Turns the binary table into the `BinaryOp` enum with its `name()` and `inplace_name()`.
macro_rules! binary_op_enum {
    ($(
        $(#[$meta:meta])*
        $V:ident => $method:ident,
            cpu $cpu:tt,
            cuda $cuda:tt,
            tensor $tensor:tt,
            grad $grad:tt;
    )*) => {
        /// Elementwise functions of two tensors of the same dtype.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum BinaryOp {
            $( $(#[$meta])* $V, )*
        }

        impl BinaryOp {
            /// A lowercase name for messages and profiles.
            pub fn name(self) -> &'static str {
                match self {
                    $( BinaryOp::$V => stringify!($method), )*
                }
            }

            /// The name of the in-place form (`add_`), for messages about it.
            pub fn inplace_name(self) -> &'static str {
                match self {
                    $( BinaryOp::$V => concat!(stringify!($method), "_"), )*
                }
            }
        }
    };
}

binary_table!(binary_op_enum);
