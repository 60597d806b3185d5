//! The table of elementwise functions of one tensor, [`unary_table!`](crate::unary_table):
//! one row per [`UnaryOp`] variant with its name, its CPU and CUDA per-element functions, its
//! `Tensor` method and its derivative (see the module docs of [`crate::ops`] for where each
//! section is expanded).
//!
//! `Tensor` methods that do more than call the op (dtype promotion of the scalar ops,
//! `clamp`'s optional bounds) are written by hand in `tensor/elementwise.rs` and
//! `tensor/unary.rs`; their rows say `tensor []`. `Var::clamp` is written by hand in
//! ember-autograd (its bounds are optional there too); its row says `grad []`.
//!
//! # Rows
//!
//! ```text
//! /// variant doc
//! Variant or Variant(param: Type, ...) or Variant { /// doc
//!                                                   field: Type, ... } => method,
//!     float [GRAIN FUNCTION],
//!     int [FUNCTION] or int [],
//!     cuda [float "EXPR", int "EXPR"; params |k| [P0, P1]] or cuda [],
//!     tensor ["method doc"] or tensor [],
//!     grad [/// Var method doc
//!           saves SAVES, returns Result, export(attr = VALUE), |ctx, g| GRADIENT] or grad [];
//! ```
//!
//! - `method` is the name of the op (`name()`, `NAMES`) and of its `Tensor` and `Var`
//!   methods. A parameter type is a single token (`f64`, `Scalar`).
//! - `float [GRAIN FUNCTION]`: the CPU function on floats, `T: FloatElement`. `GRAIN` is
//!   `cheap` (a few instructions per element) or `costly` (transcendentals); the CPU backend
//!   maps it to its parallel chunk size. A `FUNCTION` is `let a = ...; |x| expr` (any number
//!   of `let`s, which may use the parameters and run once per call, outside the loop) or,
//!   where one closure is not enough, `using |k, g| expr` with `k` the loop and `g` the
//!   grain, so that `expr` may call `k.run(g, closure)` on one of several branches (an `int`
//!   one returns `Result`). Call `exp`, `ln` and `tanh` as `FloatElement::exp(x)`: those are
//!   the vectorisable `f32` versions. `Element` and `FloatElement` are in scope; other
//!   helpers are named by path (`$crate::ops::unary::clamp_elem`).
//! - `int [FUNCTION]`: the CPU function on integers, `T: Element`, wrapping arithmetic.
//!   `int []` makes the op float-only: the tensor layer converts integer tensors to `f32`
//!   first, and the backends refuse them.
//! - `cuda [...]`: CUDA C++ expressions of `x` (the element, of type `T`), `p0` and `p1`
//!   (the parameters, in `T`), `one` and `zero`, with the helpers of `kernels.cu` (`wadd`,
//!   `max_nan`, ...). `float` is required; `int` is there exactly when the CPU has an `int`
//!   function. `params |k| [P0, P1]` computes the two kernel parameters on the host, with
//!   `k.float(f64)`, `k.exact(Scalar)` (converted like `Scalar::to_element`),
//!   `k.saturating(Scalar)`, `k.zero()` and `k.dtype()`, and may use `?`; without it both
//!   are zero. Each expression becomes one `case CODE: return EXPR;` of the generated
//!   `switch`, whose code is the row's position; a code without a case stops the kernel.
//!   An empty `cuda []` still builds, and the test `every_unary_op_has_a_cuda_kernel`
//!   fails.
//! - `tensor ["doc"]` generates `pub fn method(&self, params...) -> Tensor`; `tensor []`
//!   when the method needs more and is written by hand.
//! - `grad [...]` generates the `Var` op: a struct named like the variant with the
//!   parameters as fields, its `forward` (`x.method(params...)`), `saves()` (`SAVES` is
//!   `NONE`, `INPUTS`, `OUTPUT` or `{ inputs: .., output: .. }`), `backward` (`GRADIENT`,
//!   an `Option<Var>` written with `Var` ops, where the parameters are bound by name) and
//!   `export` (only with `export()`, or `export(attr = VALUE)` for one float attribute;
//!   without it the op has no export description), plus the method
//!   `Var::method(&self, params...) -> Var` (a `Scalar` parameter is taken as
//!   `impl Into<Scalar>`; `returns Result` when the forward can fail). `grad []` when the
//!   `Var` op is written by hand.

use crate::dtype::{DType, Element};
use crate::{Error, Result, Scalar};

/// The unary op table: calls the macro `$m` with every row. Crate-internal machinery,
/// public only so that ember-autograd can expand the `grad` sections; the row format is
/// in the docs of ember-tensor's `ops::unary` module.
#[doc(hidden)]
#[macro_export]
macro_rules! unary_table {
    ($m:ident) => {
        $m! {
            /// `-x`
            Neg => neg,
                float [cheap |x| -x],
                int [|x| Element::neg(x)],
                cuda [float "-x", int "wsub(zero, x)"],
                tensor ["`-x` elementwise."],
                grad [/// `-x`.
                      saves NONE, export(), |ctx, g| Some(grad_in_place(ctx, g, UnaryOp::Neg, Var::neg)?)];
            /// `|x|`
            Abs => abs,
                float [cheap |x| Element::abs(x)],
                int [|x| Element::abs(x)],
                cuda [float "fabs(x)", int "int_abs(x)"],
                tensor ["`|x|` elementwise."],
                grad [/// `|x|`; the gradient is `sign(x)` (0 at 0).
                      saves INPUTS, export(),
                      |ctx, g| { let x = ctx.input(0)?; Some(g.mul(&constant(x.value().sign()))?) }];
            /// `-1`, `0` or `1`; NaN stays NaN (NumPy's convention; PyTorch gives 0)
            Sign => sign,
                float [cheap |x| Element::signum(x)],
                int [|x| Element::signum(x)],
                cuda [float "x > zero ? one : (x < zero ? -one : x)", int "int_sign(x)"],
                tensor ["`-1`, `0` or `1` elementwise; zeros keep their sign (`-0.0` gives `-0.0`) and NaN stays NaN, like NumPy's `sign`. (PyTorch's CPU kernel returns 0 for NaN, which its maintainers track as a divergence from NumPy, pytorch/pytorch#41245; ember propagates the NaN.)"],
                grad [/// `-1`, `0` or `1`; its gradient is zero.
                      saves NONE, export(), |ctx, g| Some(zero_gradient(g))];
            /// `x * x`
            Square => square,
                float [cheap |x| x * x],
                int [|x| x.wmul(x)],
                cuda [float "x * x", int "wmul(x, x)"],
                tensor ["`x * x` elementwise."],
                grad [/// `x * x`.
                      saves INPUTS, export(), |ctx, g| Some(g.mul(&ctx.input(0)?.mul_scalar(2.0))?)];
            /// `max(x, 0)`
            Relu => relu,
                // NaN stays NaN, like PyTorch's relu.
                float [cheap |x| if x > T::ZERO || x.is_nan() { x } else { T::ZERO }],
                int [|x| if x > T::ZERO { x } else { T::ZERO }],
                cuda [float "(x > zero || x != x) ? x : zero", int "x > zero ? x : zero"],
                tensor ["`max(x, 0)` elementwise."],
                grad [/// `max(x, 0)`.
                      saves OUTPUT, export(),
                      |ctx, g| Some(relu_gradient(g, &ctx.output()?.value())?)];
            /// `e^x`
            Exp => exp,
                float [costly |x| FloatElement::exp(x)],
                int [],
                cuda [float "exp(x)"],
                tensor ["`e^x` elementwise."],
                grad [/// `e^x`.
                      saves OUTPUT, export(), |ctx, g| Some(grad_times(ctx, g, &ctx.output()?)?)];
            /// `ln x`
            Log => log,
                float [costly |x| FloatElement::ln(x)],
                int [],
                cuda [float "log(x)"],
                tensor ["The natural logarithm elementwise."],
                grad [/// The natural logarithm.
                      saves INPUTS, export(), |ctx, g| Some(g.div(&ctx.input(0)?)?)];
            /// `sqrt x`
            Sqrt => sqrt,
                float [costly |x| x.sqrt()],
                int [],
                cuda [float "sqrt(x)"],
                tensor ["The square root elementwise."],
                grad [/// The square root.
                      saves OUTPUT, export(), |ctx, g| Some(g.div(&ctx.output()?.mul_scalar(2.0))?)];
            /// `1 / sqrt x`
            Rsqrt => rsqrt,
                float [costly |x| T::ONE / x.sqrt()],
                int [],
                cuda [float "one / sqrt(x)"],
                tensor ["`1 / sqrt(x)` elementwise."],
                grad [/// `1 / sqrt(x)`.
                      saves OUTPUT, export(),
                      |ctx, g| Some(g.mul(&ctx.output()?.pow_scalar(3.0)?.mul_scalar(-0.5))?)];
            /// `sin x`
            Sin => sin,
                float [costly |x| x.sin()],
                int [],
                cuda [float "sin(x)"],
                tensor ["The sine elementwise."],
                grad [/// The sine.
                      saves INPUTS, export(), |ctx, g| Some(g.mul(&ctx.input(0)?.cos())?)];
            /// `cos x`
            Cos => cos,
                float [costly |x| x.cos()],
                int [],
                cuda [float "cos(x)"],
                tensor ["The cosine elementwise."],
                grad [/// The cosine.
                      saves INPUTS, export(), |ctx, g| Some(g.mul(&ctx.input(0)?.sin().neg())?)];
            /// `tanh x`
            Tanh => tanh,
                float [costly |x| FloatElement::tanh(x)],
                int [],
                cuda [float "tanh(x)"],
                tensor ["The hyperbolic tangent elementwise."],
                grad [/// The hyperbolic tangent; the gradient is `1 - y^2`.
                      saves OUTPUT, export(),
                      |ctx, g| Some(grad_times(ctx, g, &ctx.output()?.square().rsub_scalar(1.0))?)];
            /// `1 / (1 + e^-x)`
            Sigmoid => sigmoid,
                float [costly |x| T::ONE / (T::ONE + FloatElement::exp(-x))],
                int [],
                cuda [float "one / (one + exp(-x))"],
                tensor ["The logistic function `1 / (1 + e^-x)` elementwise."],
                grad [/// The logistic function; the gradient is `y (1 - y)`.
                      saves OUTPUT, export(),
                      |ctx, g| { let y = ctx.output()?; Some(grad_times(ctx, g, &y.mul(&y.rsub_scalar(1.0))?)?) }];
            /// `x * Phi(x)` with the exact normal CDF (erf form)
            Gelu => gelu,
                float [costly
                    let half = T::from_f64(0.5);
                    let k = T::from_f64(std::f64::consts::FRAC_1_SQRT_2);
                    |x| half * x * (T::ONE + (x * k).erf_fn())],
                int [],
                cuda [float "(T)0.5 * x * (one + erf(x * (T)0.70710678118654752440))"],
                tensor ["GELU with the exact normal CDF: `x * Phi(x)`."],
                grad [/// GELU with the exact normal CDF: `x Phi(x)`; the gradient is `Phi(x) + x phi(x)`.
                      saves INPUTS, export(),
                      |ctx, g| {
                          let x = ctx.input(0)?;
                          let cdf = x.mul_scalar(std::f64::consts::FRAC_1_SQRT_2).erf().add_scalar(1.0).mul_scalar(0.5);
                          let pdf = x.square().mul_scalar(-0.5).exp().mul_scalar(1.0 / (2.0 * std::f64::consts::PI).sqrt());
                          Some(g.mul(&cdf.add(&x.mul(&pdf)?)?)?)
                      }];
            /// The tanh approximation of GELU
            GeluTanh => gelu_tanh,
                float [costly
                    let half = T::from_f64(0.5);
                    let k = T::from_f64((2.0 / std::f64::consts::PI).sqrt());
                    let a = T::from_f64(0.044715);
                    |x| half * x * (T::ONE + FloatElement::tanh(k * (x + a * x * x * x)))],
                int [],
                // 0.797... is sqrt(2 / pi).
                cuda [float "(T)0.5 * x * (one + tanh((T)0.79788456080286535588 * (x + (T)0.044715 * x * x * x)))"],
                tensor ["GELU with PyTorch's tanh approximation (`approximate='tanh'`)."],
                grad [/// GELU with PyTorch's tanh approximation.
                      saves INPUTS, export(),
                      |ctx, g| {
                          let x = ctx.input(0)?;
                          let k = (2.0 / std::f64::consts::PI).sqrt();
                          let x2 = x.square();
                          let t = x.add(&x.mul(&x2)?.mul_scalar(0.044715))?.mul_scalar(k).tanh();
                          let dinner = x2.mul_scalar(3.0 * 0.044715).add_scalar(1.0).mul_scalar(k);
                          let left = t.add_scalar(1.0).mul_scalar(0.5);
                          let right = x.mul_scalar(0.5).mul(&t.square().rsub_scalar(1.0))?.mul(&dinner)?;
                          Some(g.mul(&left.add(&right)?)?)
                      }];
            /// `x * sigmoid(x)`
            Silu => silu,
                float [costly |x| x / (T::ONE + FloatElement::exp(-x))],
                int [],
                cuda [float "x / (one + exp(-x))"],
                tensor ["SiLU (swish): `x * sigmoid(x)`."],
                grad [/// SiLU: `x sigmoid(x)`; the gradient is `s (1 + x (1 - s))`.
                      saves INPUTS, export(),
                      |ctx, g| {
                          let x = ctx.input(0)?;
                          let s = x.sigmoid();
                          Some(g.mul(&s.mul(&x.mul(&s.rsub_scalar(1.0))?.add_scalar(1.0))?)?)
                      }];
            /// The error function
            Erf => erf,
                float [costly |x| x.erf_fn()],
                int [],
                cuda [float "erf(x)"],
                tensor ["The error function elementwise."],
                grad [/// The error function; the gradient is `2 / sqrt(pi) e^(-x^2)`.
                      saves INPUTS, export(),
                      |ctx, g| Some(g.mul(&ctx.input(0)?.square().neg().exp().mul_scalar(2.0 / std::f64::consts::PI.sqrt()))?)];
            /// `ln(1 + x)`
            Log1p => log1p,
                float [costly |x| x.ln_1p()],
                int [],
                cuda [float "log1p(x)"],
                tensor ["`ln(1 + x)`, accurate for small `x`."],
                grad [/// `ln(1 + x)`.
                      saves INPUTS, export(), |ctx, g| Some(g.div(&ctx.input(0)?.add_scalar(1.0))?)];
            /// `e^x - 1`
            Expm1 => expm1,
                float [costly |x| x.exp_m1()],
                int [],
                cuda [float "expm1(x)"],
                tensor ["`e^x - 1`, accurate for small `x`."],
                grad [/// `e^x - 1`.
                      saves OUTPUT, export(), |ctx, g| Some(g.mul(&ctx.output()?.add_scalar(1.0))?)];
            /// `1 / x`
            Recip => recip,
                float [cheap |x| T::ONE / x],
                int [],
                cuda [float "one / x"],
                tensor ["`1 / x` elementwise."],
                grad [/// `1 / x`; the gradient is `-y^2`.
                      saves OUTPUT, export(), |ctx, g| Some(g.mul(&ctx.output()?.square().neg())?)];
            /// Round down
            Floor => floor,
                float [cheap |x| x.floor()],
                int [|x| x],
                cuda [float "floor(x)", int "x"],
                tensor ["Rounds down."],
                grad [/// Rounds down; its gradient is zero.
                      saves NONE, export(), |ctx, g| Some(zero_gradient(g))];
            /// Round up
            Ceil => ceil,
                float [cheap |x| x.ceil()],
                int [|x| x],
                cuda [float "ceil(x)", int "x"],
                tensor ["Rounds up."],
                grad [/// Rounds up; its gradient is zero.
                      saves NONE, export(), |ctx, g| Some(zero_gradient(g))];
            /// Round half to even
            Round => round,
                float [cheap |x| x.round_even()],
                int [|x| x],
                cuda [float "rint(x)", int "x"],
                tensor ["Rounds half to even, like `torch.round`."],
                grad [/// Rounds half to even; its gradient is zero.
                      saves NONE, export(), |ctx, g| Some(zero_gradient(g))];
            /// `ln(1 + e^(beta x)) / beta`, linear above `threshold`
            Softplus {
                /// Sharpness.
                beta: f64,
                /// `beta * x` above which the function is linear.
                threshold: f64
            } => softplus,
                float [costly
                    let b = T::from_f64(beta);
                    let t = T::from_f64(threshold);
                    |x| if x * b > t { x } else { FloatElement::exp(x * b).ln_1p() / b }],
                int [],
                cuda [float "x * p0 > p1 ? x : log1p(exp(x * p0)) / p0";
                      params |k| [k.float(beta), k.float(threshold)]],
                tensor ["`ln(1 + e^(beta x)) / beta`, linear where `beta * x > threshold` (PyTorch's \
                         defaults are `beta = 1`, `threshold = 20`)."],
                grad [/// `ln(1 + e^(beta x)) / beta`, linear where `beta x > threshold`.
                      saves INPUTS,
                      |ctx, g| {
                          // sigmoid(beta x) below the threshold, 1 where the function is linear.
                          let x = ctx.input(0)?;
                          let bx = x.mul_scalar(beta);
                          let linear = constant(bx.value().gt_scalar(threshold));
                          let slope = linear.where_cond(&constant(bx.value().ones_like()), &bx.sigmoid())?;
                          Some(g.mul(&slope)?)
                      }];
            /// `x` for positive `x`, `slope * x` otherwise
            LeakyRelu(negative_slope: f64) => leaky_relu,
                float [cheap
                    let s = T::from_f64(negative_slope);
                    |x| if x > T::ZERO { x } else { x * s }],
                int [],
                cuda [float "x > zero ? x : x * p0"; params |k| [k.float(negative_slope), k.zero()]],
                tensor ["`x` for positive `x`, `negative_slope * x` otherwise."],
                grad [/// `x` for positive `x`, `negative_slope * x` otherwise.
                      saves INPUTS, export(alpha = negative_slope),
                      |ctx, g| {
                          let x = ctx.input(0)?.value();
                          let pos = x.gt_scalar(0);
                          let factor = pos.where_tensor_scalar(&x.ones_like(), negative_slope)?;
                          Some(g.mul(&float_mask(factor, &x))?)
                      }];
            /// `x` for positive `x`, `alpha * (e^x - 1)` otherwise
            Elu(alpha: f64) => elu,
                float [costly
                    let a = T::from_f64(alpha);
                    |x| if x > T::ZERO { x } else { a * x.exp_m1() }],
                int [],
                cuda [float "x > zero ? x : p0 * expm1(x)"; params |k| [k.float(alpha), k.zero()]],
                tensor ["`x` for positive `x`, `alpha * (e^x - 1)` otherwise."],
                grad [/// `x` for positive `x`, `alpha (e^x - 1)` otherwise.
                      saves INPUTS,
                      |ctx, g| {
                          // 1 for positive x; alpha e^x = y + alpha otherwise.
                          let x = ctx.input(0)?;
                          let pos = constant(x.value().gt_scalar(0));
                          let neg_slope = x.exp().mul_scalar(alpha);
                          let slope = pos.where_cond(&constant(x.value().ones_like()), &neg_slope)?;
                          Some(g.mul(&slope)?)
                      }];
            /// `min(max(x, min), max)`; NaN stays NaN
            Clamp {
                /// Lower bound (may be `-inf`).
                min: f64,
                /// Upper bound (may be `inf`).
                max: f64
            } => clamp,
                float [cheap
                    let lo = T::from_f64(min);
                    let hi = T::from_f64(max);
                    |x| $crate::ops::unary::clamp_elem(x, lo, hi)],
                // `as` saturates, so a bound beyond the dtype's range keeps its side.
                int [let lo = T::from_f64(min); let hi = T::from_f64(max); |x| $crate::ops::unary::clamp_elem(x, lo, hi)],
                cuda [float "clamp_elem(x, p0, p1)", int "clamp_elem(x, p0, p1)";
                      params |k| [k.float(min), k.float(max)]],
                tensor [],
                grad [];
            /// `x + s`
            AddScalar(s: Scalar) => add_scalar,
                float [cheap let s: T = s.to_element(); |x| x + s],
                int [let s: T = s.to_element(); |x| x.wadd(s)],
                cuda [float "x + p0", int "wadd(x, p0)"; params |k| [k.exact(s), k.zero()]],
                tensor [],
                grad [/// `x + s`.
                      saves NONE, export(value = s.to_f64()), |ctx, g| Some(g.clone())];
            /// `x - s`
            SubScalar(s: Scalar) => sub_scalar,
                float [cheap let s: T = s.to_element(); |x| x - s],
                int [let s: T = s.to_element(); |x| x.wsub(s)],
                cuda [float "x - p0", int "wsub(x, p0)"; params |k| [k.exact(s), k.zero()]],
                tensor [],
                grad [/// `x - s`.
                      saves NONE, export(value = s.to_f64()), |ctx, g| Some(g.clone())];
            /// `s - x`
            RSubScalar(s: Scalar) => rsub_scalar,
                float [cheap let s: T = s.to_element(); |x| s - x],
                int [let s: T = s.to_element(); |x| s.wsub(x)],
                cuda [float "p0 - x", int "wsub(p0, x)"; params |k| [k.exact(s), k.zero()]],
                tensor [],
                grad [/// `s - x`.
                      saves NONE, export(value = s.to_f64()), |ctx, g| Some(grad_in_place(ctx, g, UnaryOp::Neg, Var::neg)?)];
            /// `x * s`
            MulScalar(s: Scalar) => mul_scalar,
                float [cheap let s: T = s.to_element(); |x| x * s],
                int [let s: T = s.to_element(); |x| x.wmul(s)],
                cuda [float "x * p0", int "wmul(x, p0)"; params |k| [k.exact(s), k.zero()]],
                tensor [],
                grad [/// `x * s`.
                      saves NONE, export(value = s.to_f64()), |ctx, g| {
                          let s = s.to_f64();
                          Some(grad_in_place(ctx, g, UnaryOp::MulScalar(s.into()), |g| g.mul_scalar(s))?)
                      }];
            /// `x / s`
            DivScalar(s: Scalar) => div_scalar,
                float [cheap let s: T = s.to_element(); |x| x / s],
                int [],
                cuda [float "x / p0"; params |k| [k.exact(s), k.zero()]],
                tensor [],
                grad [/// `x / s`.
                      saves NONE, export(value = s.to_f64()), |ctx, g| {
                          let s = s.to_f64();
                          Some(grad_in_place(ctx, g, UnaryOp::DivScalar(s.into()), |g| g.div_scalar(s))?)
                      }];
            /// `s / x`
            RDivScalar(s: Scalar) => rdiv_scalar,
                float [cheap let s: T = s.to_element(); |x| s / x],
                int [],
                cuda [float "p0 / x"; params |k| [k.exact(s), k.zero()]],
                tensor [],
                grad [/// `s / x`; the gradient is `-s / x^2 = -y / x`.
                      saves { inputs: 1, output: true }, export(value = s.to_f64()),
                      |ctx, g| Some(g.mul(&ctx.output()?)?.div(&ctx.input(0)?)?.neg())];
            /// `x ^ s`; on integers the exponent must be a non-negative integer
            PowScalar(e: Scalar) => pow_scalar,
                // Squares and square roots take the exact shortcuts PyTorch takes.
                float [costly using |k, g| {
                    if e.to_f64() == 2.0 {
                        k.run(g, |x: T| x * x)
                    } else if e.to_f64() == 0.5 {
                        k.run(g, |x: T| x.sqrt())
                    } else {
                        let e: T = e.to_element();
                        k.run(g, move |x: T| x.powf(e))
                    }
                }],
                int [using |k, g| $crate::ops::unary::int_exponent(e)
                    .map(|e| k.run(g, move |x: T| $crate::dtype::pow_wrapping(x, e)))],
                // On floats `p1` picks the shortcut: 1 for squares, 2 for square roots.
                cuda [float "p1 == one ? x * x : (p1 == (T)2 ? sqrt(x) : pow(x, p0))", int "ipow(x, (u64)p0)";
                      params |k| if k.dtype().is_float() {
                          let shortcut = if e.to_f64() == 2.0 { 1.0 } else if e.to_f64() == 0.5 { 2.0 } else { 0.0 };
                          [k.exact(e), k.float(shortcut)]
                      } else {
                          let e = $crate::ops::unary::int_exponent_in(e, k.dtype())?;
                          [k.exact($crate::Scalar::Int(e)), k.zero()]
                      }],
                tensor [],
                grad [/// `x ^ e`; the gradient is `e x^(e - 1)`, and zeros for `e = 0` (PyTorch's
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
                      saves INPUTS, returns Result, export(value = e.to_f64()),
                      |ctx, g| {
                          let e = e.to_f64();
                          Some(if e == 0.0 {
                              zero_gradient(g)
                          } else {
                              g.mul(&ctx.input(0)?.pow_scalar(e - 1.0)?.mul_scalar(e))?
                          })
                      }];
            /// `s ^ x`
            RPowScalar(base: Scalar) => rpow_scalar,
                float [costly let b: T = base.to_element(); |x| b.powf(x)],
                int [],
                cuda [float "pow(p0, x)"; params |k| [k.exact(base), k.zero()]],
                tensor [],
                grad [/// `b ^ x`; the gradient is `y ln b`. For `b = 0` it is 0 where `x >= 0` (PyTorch's
                      /// `pow_backward_exponent`: there `0^x` is constant in `x`, and `0 * ln 0` would be NaN).
                      saves OUTPUT, export(value = base.to_f64()),
                      |ctx, g| {
                          let b = base.to_f64();
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
                      }];
            /// `max(x, s)` propagating NaN
            MaximumScalar(s: Scalar) => maximum_scalar,
                float [cheap let s: T = s.to_element(); |x| x.max_nan(s)],
                int [let s: T = s.to_element_saturating(); |x| x.max_nan(s)],
                cuda [float "max_nan(x, p0)", int "max_nan(x, p0)"; params |k| [k.saturating(s), k.zero()]],
                tensor [],
                grad [/// `max(x, s)`; the gradient passes where `x > s` (PyTorch's `clamp_min`: 0 at the bound).
                      saves INPUTS, export(value = s.to_f64()),
                      |ctx, g| {
                          let x = ctx.input(0)?.value();
                          Some(g.mul(&constant(x.gt_scalar(s.to_f64()).to_dtype(x.dtype().float_or_default())))?)
                      }];
            /// `min(x, s)` propagating NaN
            MinimumScalar(s: Scalar) => minimum_scalar,
                float [cheap let s: T = s.to_element(); |x| x.min_nan(s)],
                int [let s: T = s.to_element_saturating(); |x| x.min_nan(s)],
                cuda [float "min_nan(x, p0)", int "min_nan(x, p0)"; params |k| [k.saturating(s), k.zero()]],
                tensor [],
                grad [/// `min(x, s)`; the gradient passes where `x < s` (PyTorch's `clamp_max`: 0 at the bound).
                      saves INPUTS, export(value = s.to_f64()),
                      |ctx, g| {
                          let x = ctx.input(0)?.value();
                          Some(g.mul(&constant(x.lt_scalar(s.to_f64()).to_dtype(x.dtype().float_or_default())))?)
                      }];
        }
    };
}

/// Turns the unary table into the `UnaryOp` enum with its `NAMES`, `name()`,
/// `inplace_name()` and `is_float_only()`.
macro_rules! unary_op_enum {
    ($(
        $(#[$meta:meta])*
        $V:ident $(( $($tp:ident: $tty:tt),* ))? $({ $($(#[$fmeta:meta])* $f:ident: $fty:tt),* })?
            => $method:ident,
            float $float:tt,
            int $int:tt,
            cuda $cuda:tt,
            tensor $tensor:tt,
            grad $grad:tt;
    )*) => {
        /// Elementwise functions of one tensor, with their parameters.
        #[derive(Clone, Copy, Debug, PartialEq)]
        pub enum UnaryOp {
            $(
                $(#[$meta])*
                $V $(( $($tty),* ))? $({ $($(#[$fmeta])* $f: $fty),* })?,
            )*
        }

        impl UnaryOp {
            /// The name of every variant, in the table's order.
            pub const NAMES: &'static [&'static str] = &[$(stringify!($method)),*];

            /// Whether the function is only defined on floats (integer inputs are computed in
            /// `f32`, like PyTorch).
            pub fn is_float_only(self) -> bool {
                match self {
                    $( UnaryOp::$V { .. } => unary_op_enum!(@float_only $int), )*
                }
            }

            /// A lowercase name for messages and profiles.
            pub fn name(self) -> &'static str {
                match self {
                    $( UnaryOp::$V { .. } => stringify!($method), )*
                }
            }

            /// The name of the in-place form (`exp_`), for messages about it.
            pub fn inplace_name(self) -> &'static str {
                match self {
                    $( UnaryOp::$V { .. } => concat!(stringify!($method), "_"), )*
                }
            }
        }
    };

    (@float_only []) => { true };
    (@float_only [$($t:tt)*]) => { false };
}

unary_table!(unary_op_enum);

impl UnaryOp {
    /// The scalar operand of a tensor-scalar operation.
    pub fn scalar(self) -> Option<Scalar> {
        use UnaryOp::*;
        match self {
            AddScalar(s) | SubScalar(s) | RSubScalar(s) | MulScalar(s) | DivScalar(s) | RDivScalar(s)
            | PowScalar(s) | RPowScalar(s) | MaximumScalar(s) | MinimumScalar(s) => Some(s),
            _ => None,
        }
    }

    /// The error for a float-only op on an integer tensor of `dtype`, which a backend asked
    /// to compute it directly gives (the tensor layer converts such tensors to `f32` first).
    pub(crate) fn not_for_ints(self, dtype: DType) -> Error {
        Error::dtype(self.name(), format!("{} is only defined for float tensors, got {dtype}", self.name()))
    }
}

/// PyTorch's clamp, `min(max(x, lo), hi)`: the upper bound applies last, so with `lo > hi`
/// every element becomes `hi`; a NaN element stays NaN (both comparisons are false).
#[inline(always)]
pub(crate) fn clamp_elem<T: Element>(x: T, lo: T, hi: T) -> T {
    let y = if x < lo { lo } else { x };
    if y > hi { hi } else { y }
}

/// The exponent of an integer `pow_scalar`: a non-negative integer. A negative one is
/// PyTorch's error (the result is not an integer), and a fraction needs a float tensor.
pub(crate) fn int_exponent(e: Scalar) -> Result<u64> {
    match e {
        Scalar::Int(e) if e >= 0 => Ok(e as u64),
        Scalar::Int(e) => Err(Error::invalid(
            "pow_scalar",
            format!(
                "Integers to negative integer powers are not allowed (exponent {e}); use a float tensor or exponent"
            ),
        )),
        Scalar::Float(v) if v >= 0.0 && v.fract() == 0.0 && v < 18_446_744_073_709_551_616.0 => Ok(v as u64),
        Scalar::Float(v) => Err(Error::dtype(
            "pow_scalar",
            format!("the exponent {v} needs a float tensor; this one is an integer tensor"),
        )),
    }
}

/// [`int_exponent`] for a kernel that takes the exponent in the element type `dtype`: the
/// same powers, with an exponent that fits. Wrapping powers of bytes repeat (even bases are
/// 0 from the 8th power on, odd ones have period 64), and an `i64` exponent beyond
/// `i64::MAX` is cut to it.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))] // the CUDA kernels' parameter
pub(crate) fn int_exponent_in(e: Scalar, dtype: DType) -> Result<i64> {
    let e = int_exponent(e)?;
    let e = if dtype == DType::U8 && e >= 8 { 8 + (e - 8) % 64 } else { e.min(i64::MAX as u64) };
    Ok(e as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::pow_wrapping;

    /// The exponent a byte kernel gets gives the same wrapping power as the full one.
    #[test]
    fn byte_exponents_keep_their_powers() {
        for e in [0u64, 1, 7, 8, 9, 63, 64, 71, 72, 1000, 1 << 40] {
            let small = int_exponent_in(Scalar::Int(e as i64), DType::U8).unwrap();
            assert!((0..72).contains(&small), "{e} -> {small}");
            for x in 0..=255u8 {
                assert_eq!(pow_wrapping(x, small as u64), pow_wrapping(x, e), "{x}^{e}");
            }
        }
        assert_eq!(int_exponent_in(Scalar::Float(1e19), DType::I64).unwrap(), i64::MAX);
        assert_eq!(int_exponent_in(Scalar::Int(5), DType::I64).unwrap(), 5);
        assert!(int_exponent_in(Scalar::Int(-1), DType::U8).is_err());
    }

    #[test]
    fn scalar_operands() {
        assert_eq!(UnaryOp::AddScalar(Scalar::Int(3)).scalar(), Some(Scalar::Int(3)));
        assert_eq!(UnaryOp::PowScalar(Scalar::Float(0.5)).scalar(), Some(Scalar::Float(0.5)));
        assert_eq!(UnaryOp::LeakyRelu(0.1).scalar(), None);
        assert_eq!(UnaryOp::Exp.scalar(), None);
    }
}
