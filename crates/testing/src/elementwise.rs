//! The one table of elementwise-op test cases: [`UNARY`] for functions of one tensor and
//! [`BINARY`] for functions of two.
//!
//! Each case names a computation (an op with its parameters), how a `Tensor` and a `Var`
//! compute it (one expression, written once for both), its definition on one `f64` (and on
//! one `i64` where integer tensors keep their dtype), and how its gradient is checked. The
//! tensor crate's reference tests run every case against its definition, out of place and
//! in place, in `f64` and in `i64`; the autograd crate's gradcheck tests run every case with
//! a gradient on its input domain, to first and, where marked, second order.
//!
//! Adding an elementwise op adds its cases here (see docs/design.md, "How to add an
//! elementwise op"); every `UnaryOp` variant must have one (`reference.rs` checks).

use ember_autograd::Var;
use ember_tensor::Scalar::{Float, Int};
use ember_tensor::{Tensor, UnaryOp};
use std::f64::consts::{FRAC_1_SQRT_2, PI};

/// Maps a standard normal sample into the region where an operation is smooth.
pub type Domain = fn(f64) -> f64;

/// How a case's gradient is checked.
#[derive(Clone, Copy)]
pub enum Grad {
    /// Not gradchecked (a parameter only the reference tests need).
    No,
    /// Gradcheck on inputs from the domain.
    First(Domain),
    /// Gradcheck, and gradcheck of the first derivative (second order).
    Second(Domain),
    /// Gradcheck away from the jumps, and the gradient is exactly zero everywhere (PyTorch
    /// gives a zero gradient, not none, to an input reached only through such a function).
    Zero(Domain),
}

/// One elementwise computation and its definitions.
pub struct UnaryCase {
    /// The name in failure messages.
    pub name: &'static str,
    /// The kernel op (for in-place `apply_` and the check that every variant has a case).
    pub op: UnaryOp,
    /// The public `Tensor` method.
    pub tensor: fn(&Tensor) -> Tensor,
    /// The differentiable `Var` method.
    pub var: fn(&Var) -> Var,
    /// The definition on one `f64`, with PyTorch's conventions.
    pub reference: fn(f64) -> f64,
    /// The definition on one `i64` (wrapping, exact integer scalars), where `tensor` keeps
    /// an integer tensor's dtype.
    pub int_reference: Option<fn(i64) -> i64>,
    /// How the gradient is checked.
    pub grad: Grad,
}

/// Any value.
pub fn any(v: f64) -> f64 {
    v
}

/// At least 0.2 away from 0: clear of the kinks of abs, relu, leaky_relu, elu and sign.
pub fn off_zero(v: f64) -> f64 {
    v + 0.2 * v.signum()
}

/// At least 0.4 away from 0, for `1 / x`, whose derivatives grow like `1 / x^3`.
pub fn far_from_zero(v: f64) -> f64 {
    v + 0.4 * v.signum()
}

/// At least 0.3: inside the domain of log, sqrt, rsqrt and fractional powers.
pub fn positive(v: f64) -> f64 {
    v.abs() + 0.3
}

/// At least -0.5: inside the domain of log1p.
pub fn above_minus_half(v: f64) -> f64 {
    v.abs() - 0.5
}

/// Integers plus 0.25: 0.25 away from the jumps of floor, ceil and round.
pub fn between_jumps(v: f64) -> f64 {
    (2.0 * v).round() + 0.25
}

/// `v` moved at least 0.1 away from each of `points` (which are more than 0.2 apart).
pub fn away(v: f64, points: &[f64]) -> f64 {
    points.iter().fold(v, |v, &p| {
        if (v - p).abs() >= 0.1 {
            v
        } else if v >= p {
            p + 0.1
        } else {
            p - 0.1
        }
    })
}

/// The error function from its everywhere-convergent series of positive terms,
/// `erf x = 2/sqrt(pi) e^(-x^2) sum 2^n x^(2n+1) / (1 3 5 ... (2n+1))`, independent of the
/// implementation the kernel uses.
pub fn erf_series(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x.abs() >= 6.0 {
        // erfc(6) is 2e-17, below half an ulp of 1.
        return x.signum();
    }
    let (mut term, mut sum, mut n) = (x, x, 0.0);
    while term.abs() > sum.abs() * 1e-18 {
        n += 1.0;
        term *= 2.0 * x * x / (2.0 * n + 1.0);
        sum += term;
    }
    2.0 / PI.sqrt() * (-x * x).exp() * sum
}

/// `-1`, `0` or `1`; zeros keep their sign and NaN stays NaN.
pub fn sign(x: f64) -> f64 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        x
    }
}

/// The maximum, NaN if either is NaN.
pub fn max_nan(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() { f64::NAN } else { a.max(b) }
}

/// The minimum, NaN if either is NaN.
pub fn min_nan(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() { f64::NAN } else { a.min(b) }
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// PyTorch's clamp, `min(max(x, min), max)`: with `min > max` every value is `max`.
/// (`f64::max`/`min` ignore a NaN operand, so a NaN `x` is kept explicitly.)
fn clamp(x: f64, min: f64, max: f64) -> f64 {
    if x.is_nan() { x } else { x.max(min).min(max) }
}

/// The integer clamp: the bounds convert with `as` (saturating), the upper one applies last.
fn int_clamp(x: i64, min: f64, max: f64) -> i64 {
    x.max(min as i64).min(max as i64)
}

fn softplus(x: f64, beta: f64, threshold: f64) -> f64 {
    if x * beta > threshold { x } else { (x * beta).exp().ln_1p() / beta }
}

/// `x^e` for `e >= 0` with wrapping multiplication, computed with `i128` and reduced modulo
/// 2^64 at each step.
fn wrapping_pow(x: i64, e: i64) -> i64 {
    (0..e).fold(1i64, |acc, _| ((acc as i128 * x as i128) as u64) as i64)
}

/// One case: `$compute` is written once and becomes both the `Tensor` and the `Var` method
/// call (the two types share the method names).
macro_rules! case {
    ($name:literal, $op:expr, |$x:ident| $compute:expr, $reference:expr, int $int:expr, $grad:expr) => {
        UnaryCase {
            name: $name,
            op: $op,
            tensor: |$x: &Tensor| $compute,
            var: |$x: &Var| $compute,
            reference: $reference,
            int_reference: $int,
            grad: $grad,
        }
    };
}

/// Every elementwise function of one tensor, the parametrised ones with several parameters
/// (including the special cases the kernels take shortcuts for, and the regimes the
/// gradient checks need).
pub const UNARY: &[UnaryCase] = &[
    case!("neg", UnaryOp::Neg, |x| x.neg(), |x| -x, int Some(i64::wrapping_neg), Grad::First(any)),
    case!("abs", UnaryOp::Abs, |x| x.abs(), f64::abs, int Some(i64::wrapping_abs), Grad::First(off_zero)),
    case!("sign", UnaryOp::Sign, |x| x.sign(), sign, int Some(i64::signum), Grad::Zero(off_zero)),
    case!("square", UnaryOp::Square, |x| x.square(), |x| x * x, int Some(|x| x.wrapping_mul(x)), Grad::Second(any)),
    case!("relu", UnaryOp::Relu, |x| x.relu(), |x| if x > 0.0 || x.is_nan() { x } else { 0.0 }, int Some(|x| x.max(0)), Grad::First(off_zero)),
    case!("exp", UnaryOp::Exp, |x| x.exp(), f64::exp, int None, Grad::Second(any)),
    case!("log", UnaryOp::Log, |x| x.log(), f64::ln, int None, Grad::Second(positive)),
    case!("sqrt", UnaryOp::Sqrt, |x| x.sqrt(), f64::sqrt, int None, Grad::Second(positive)),
    case!("rsqrt", UnaryOp::Rsqrt, |x| x.rsqrt(), |x| 1.0 / x.sqrt(), int None, Grad::Second(positive)),
    case!("sin", UnaryOp::Sin, |x| x.sin(), f64::sin, int None, Grad::Second(any)),
    case!("cos", UnaryOp::Cos, |x| x.cos(), f64::cos, int None, Grad::Second(any)),
    case!("tanh", UnaryOp::Tanh, |x| x.tanh(), f64::tanh, int None, Grad::Second(any)),
    case!("sigmoid", UnaryOp::Sigmoid, |x| x.sigmoid(), sigmoid, int None, Grad::Second(any)),
    // 1 + erf(x / sqrt 2) cancels for negative x, so the reference forms it the same way as
    // the kernel; `erf` itself is checked against the independent series.
    case!("gelu", UnaryOp::Gelu, |x| x.gelu(), |x| 0.5 * x * (1.0 + libm::erf(x * FRAC_1_SQRT_2)), int None, Grad::Second(any)),
    case!("gelu_tanh", UnaryOp::GeluTanh, |x| x.gelu_tanh(), |x| 0.5 * x * (1.0 + ((2.0 / PI).sqrt() * (x + 0.044715 * x * x * x)).tanh()), int None, Grad::Second(any)),
    case!("silu", UnaryOp::Silu, |x| x.silu(), |x| x * sigmoid(x), int None, Grad::Second(any)),
    case!("erf", UnaryOp::Erf, |x| x.erf(), erf_series, int None, Grad::Second(any)),
    case!("log1p", UnaryOp::Log1p, |x| x.log1p(), f64::ln_1p, int None, Grad::Second(above_minus_half)),
    case!("expm1", UnaryOp::Expm1, |x| x.expm1(), f64::exp_m1, int None, Grad::Second(any)),
    case!("recip", UnaryOp::Recip, |x| x.recip(), |x| 1.0 / x, int None, Grad::Second(far_from_zero)),
    case!("floor", UnaryOp::Floor, |x| x.floor(), f64::floor, int Some(|x| x), Grad::Zero(between_jumps)),
    case!("ceil", UnaryOp::Ceil, |x| x.ceil(), f64::ceil, int Some(|x| x), Grad::Zero(between_jumps)),
    case!("round", UnaryOp::Round, |x| x.round(), f64::round_ties_even, int Some(|x| x), Grad::Zero(between_jumps)),
    case!("softplus(1, 20)", UnaryOp::Softplus { beta: 1.0, threshold: 20.0 }, |x| x.softplus(1.0, 20.0), |x| softplus(x, 1.0, 20.0), int None, Grad::Second(any)),
    case!("softplus(2.5, 3)", UnaryOp::Softplus { beta: 2.5, threshold: 3.0 }, |x| x.softplus(2.5, 3.0), |x| softplus(x, 2.5, 3.0), int None, Grad::No),
    // beta = 2, threshold = 1: linear above x = 0.5, where the function jumps slightly (as
    // PyTorch's does), so the gradient inputs stay clear of 0.5.
    case!("softplus(2, 1)", UnaryOp::Softplus { beta: 2.0, threshold: 1.0 }, |x| x.softplus(2.0, 1.0), |x| softplus(x, 2.0, 1.0), int None, Grad::First(|v| away(v, &[0.5]))),
    case!("leaky_relu(0.01)", UnaryOp::LeakyRelu(0.01), |x| x.leaky_relu(0.01), |x| if x > 0.0 { x } else { x * 0.01 }, int None, Grad::No),
    case!("leaky_relu(-1.5)", UnaryOp::LeakyRelu(-1.5), |x| x.leaky_relu(-1.5), |x| if x > 0.0 { x } else { x * -1.5 }, int None, Grad::No),
    case!("leaky_relu(0.1)", UnaryOp::LeakyRelu(0.1), |x| x.leaky_relu(0.1), |x| if x > 0.0 { x } else { x * 0.1 }, int None, Grad::First(off_zero)),
    case!("elu(1)", UnaryOp::Elu(1.0), |x| x.elu(1.0), |x| if x > 0.0 { x } else { x.exp_m1() }, int None, Grad::No),
    case!("elu(0.3)", UnaryOp::Elu(0.3), |x| x.elu(0.3), |x| if x > 0.0 { x } else { 0.3 * x.exp_m1() }, int None, Grad::No),
    case!("elu(1.5)", UnaryOp::Elu(1.5), |x| x.elu(1.5), |x| if x > 0.0 { x } else { 1.5 * x.exp_m1() }, int None, Grad::No),
    case!("elu(1.3)", UnaryOp::Elu(1.3), |x| x.elu(1.3), |x| if x > 0.0 { x } else { 1.3 * x.exp_m1() }, int None, Grad::Second(off_zero)),
    case!("clamp(-1.5, 2)", UnaryOp::Clamp { min: -1.5, max: 2.0 }, |x| x.clamp(Some(-1.5), Some(2.0)), |x| clamp(x, -1.5, 2.0), int None, Grad::No),
    case!("clamp(none, 0)", UnaryOp::Clamp { min: f64::NEG_INFINITY, max: 0.0 }, |x| x.clamp(None, Some(0.0)), |x| clamp(x, f64::NEG_INFINITY, 0.0), int None, Grad::No),
    case!("clamp(2, -1)", UnaryOp::Clamp { min: 2.0, max: -1.0 }, |x| x.clamp(Some(2.0), Some(-1.0)), |x| clamp(x, 2.0, -1.0), int None, Grad::No),
    case!("clamp(-0.5, 0.7)", UnaryOp::Clamp { min: -0.5, max: 0.7 }, |x| x.clamp(Some(-0.5), Some(0.7)), |x| clamp(x, -0.5, 0.7), int None, Grad::First(|v| away(v, &[-0.5, 0.7]))),
    case!("clamp(-0.3, none)", UnaryOp::Clamp { min: -0.3, max: f64::INFINITY }, |x| x.clamp(Some(-0.3), None), |x| clamp(x, -0.3, f64::INFINITY), int None, Grad::First(|v| away(v, &[-0.3]))),
    case!("clamp(none, 0.4)", UnaryOp::Clamp { min: f64::NEG_INFINITY, max: 0.4 }, |x| x.clamp(None, Some(0.4)), |x| clamp(x, f64::NEG_INFINITY, 0.4), int None, Grad::First(|v| away(v, &[0.4]))),
    case!("clamp(-300, 1e30)", UnaryOp::Clamp { min: -300.0, max: 1e30 }, |x| x.clamp(Some(-300.0), Some(1e30)), |x| clamp(x, -300.0, 1e30), int Some(|x| int_clamp(x, -300.0, 1e30)), Grad::No),
    case!("clamp(5, -7)", UnaryOp::Clamp { min: 5.0, max: -7.0 }, |x| x.clamp(Some(5.0), Some(-7.0)), |x| clamp(x, 5.0, -7.0), int Some(|x| int_clamp(x, 5.0, -7.0)), Grad::No),
    case!("add_scalar(2.75)", UnaryOp::AddScalar(Float(2.75)), |x| x.add_scalar(2.75), |x| x + 2.75, int None, Grad::No),
    case!("add_scalar(1.5)", UnaryOp::AddScalar(Float(1.5)), |x| x.add_scalar(1.5), |x| x + 1.5, int None, Grad::First(any)),
    case!("add_scalar(-3i64)", UnaryOp::AddScalar(Int(-3)), |x| x.add_scalar(-3), |x| x - 3.0, int Some(|x| x.wrapping_add(-3)), Grad::No),
    case!("add_scalar(17i64)", UnaryOp::AddScalar(Int(17)), |x| x.add_scalar(17), |x| x + 17.0, int Some(|x| x.wrapping_add(17)), Grad::No),
    case!("add_scalar(i64::MAX)", UnaryOp::AddScalar(Int(i64::MAX)), |x| x.add_scalar(i64::MAX), |x| x + i64::MAX as f64, int Some(|x| x.wrapping_add(i64::MAX)), Grad::No),
    case!("sub_scalar(-1.25)", UnaryOp::SubScalar(Float(-1.25)), |x| x.sub_scalar(-1.25), |x| x - -1.25, int None, Grad::No),
    case!("sub_scalar(0.7)", UnaryOp::SubScalar(Float(0.7)), |x| x.sub_scalar(0.7), |x| x - 0.7, int None, Grad::First(any)),
    case!("sub_scalar(-4i64)", UnaryOp::SubScalar(Int(-4)), |x| x.sub_scalar(-4), |x| x + 4.0, int Some(|x| x.wrapping_sub(-4)), Grad::No),
    case!("rsub_scalar(0.5)", UnaryOp::RSubScalar(Float(0.5)), |x| x.rsub_scalar(0.5), |x| 0.5 - x, int None, Grad::No),
    case!("rsub_scalar(2)", UnaryOp::RSubScalar(Float(2.0)), |x| x.rsub_scalar(2.0), |x| 2.0 - x, int None, Grad::First(any)),
    case!("rsub_scalar(9i64)", UnaryOp::RSubScalar(Int(9)), |x| x.rsub_scalar(9), |x| 9.0 - x, int Some(|x| 9i64.wrapping_sub(x)), Grad::No),
    case!("mul_scalar(-3.5)", UnaryOp::MulScalar(Float(-3.5)), |x| x.mul_scalar(-3.5), |x| x * -3.5, int None, Grad::No),
    case!("mul_scalar(0)", UnaryOp::MulScalar(Float(0.0)), |x| x.mul_scalar(0.0), |x| x * 0.0, int None, Grad::No),
    case!("mul_scalar(7i64)", UnaryOp::MulScalar(Int(7)), |x| x.mul_scalar(7), |x| x * 7.0, int Some(|x| x.wrapping_mul(7)), Grad::No),
    case!("mul_scalar(-1.3)", UnaryOp::MulScalar(Float(-1.3)), |x| x.mul_scalar(-1.3), |x| x * -1.3, int None, Grad::First(any)),
    case!("mul_scalar(3i64)", UnaryOp::MulScalar(Int(3)), |x| x.mul_scalar(3i64), |x| x * 3.0, int Some(|x| x.wrapping_mul(3)), Grad::First(any)),
    case!("mul_scalar(-6i64)", UnaryOp::MulScalar(Int(-6)), |x| x.mul_scalar(-6), |x| x * -6.0, int Some(|x| x.wrapping_mul(-6)), Grad::No),
    case!("mul_scalar(2^53 + 1)", UnaryOp::MulScalar(Int((1 << 53) + 1)), |x| x.mul_scalar((1i64 << 53) + 1), |x| x * ((1i64 << 53) + 1) as f64, int Some(|x| x.wrapping_mul((1 << 53) + 1)), Grad::No),
    case!("div_scalar(7)", UnaryOp::DivScalar(Float(7.0)), |x| x.div_scalar(7.0), |x| x / 7.0, int None, Grad::No),
    case!("div_scalar(0)", UnaryOp::DivScalar(Float(0.0)), |x| x.div_scalar(0.0), |x| x / 0.0, int None, Grad::No),
    case!("div_scalar(4i64)", UnaryOp::DivScalar(Int(4)), |x| x.div_scalar(4), |x| x / 4.0, int None, Grad::No),
    case!("div_scalar(0.8)", UnaryOp::DivScalar(Float(0.8)), |x| x.div_scalar(0.8), |x| x / 0.8, int None, Grad::First(any)),
    case!("rdiv_scalar(-2)", UnaryOp::RDivScalar(Float(-2.0)), |x| x.rdiv_scalar(-2.0), |x| -2.0 / x, int None, Grad::No),
    case!("rdiv_scalar(1.7)", UnaryOp::RDivScalar(Float(1.7)), |x| x.rdiv_scalar(1.7), |x| 1.7 / x, int None, Grad::Second(far_from_zero)),
    case!("pow_scalar(2)", UnaryOp::PowScalar(Float(2.0)), |x| x.pow_scalar(2.0).unwrap(), |x| x.powf(2.0), int None, Grad::First(any)),
    // `x ^ 0.5` is `sqrt x`, so `(-inf) ^ 0.5` is NaN.
    case!("pow_scalar(0.5)", UnaryOp::PowScalar(Float(0.5)), |x| x.pow_scalar(0.5).unwrap(), f64::sqrt, int None, Grad::First(positive)),
    case!("pow_scalar(3), negative bases", UnaryOp::PowScalar(Float(3.0)), |x| x.pow_scalar(3.0).unwrap(), |x| x.powf(3.0), int None, Grad::Second(any)),
    case!("pow_scalar(-1.5)", UnaryOp::PowScalar(Float(-1.5)), |x| x.pow_scalar(-1.5).unwrap(), |x| x.powf(-1.5), int None, Grad::Second(positive)),
    // x^0 = 1: the backward returns zeros, which must match the zero slope (at 0 too, where
    // `0 * 0^-1` would be NaN).
    case!("pow_scalar(0)", UnaryOp::PowScalar(Float(0.0)), |x| x.pow_scalar(0.0).unwrap(), |x| x.powf(0.0), int None, Grad::Zero(any)),
    case!("pow_scalar(3i64)", UnaryOp::PowScalar(Int(3)), |x| x.pow_scalar(3).unwrap(), |x| x.powf(3.0), int Some(|x| wrapping_pow(x, 3)), Grad::No),
    case!("pow_scalar(2i64)", UnaryOp::PowScalar(Int(2)), |x| x.pow_scalar(2i64).unwrap(), |x| x.powf(2.0), int Some(|x| wrapping_pow(x, 2)), Grad::First(any)),
    case!("pow_scalar(-2i64)", UnaryOp::PowScalar(Int(-2)), |x| x.pow_scalar(-2).unwrap(), |x| x.powf(-2.0), int None, Grad::No),
    case!("pow_scalar(0i64)", UnaryOp::PowScalar(Int(0)), |x| x.pow_scalar(0).unwrap(), |x| x.powf(0.0), int Some(|x| wrapping_pow(x, 0)), Grad::No),
    case!("pow_scalar(65i64)", UnaryOp::PowScalar(Int(65)), |x| x.pow_scalar(65).unwrap(), |x| x.powf(65.0), int Some(|x| wrapping_pow(x, 65)), Grad::No),
    case!("rpow_scalar(2)", UnaryOp::RPowScalar(Float(2.0)), |x| x.rpow_scalar(2.0), |x| 2f64.powf(x), int None, Grad::No),
    case!("rpow_scalar(0.5)", UnaryOp::RPowScalar(Float(0.5)), |x| x.rpow_scalar(0.5), |x| 0.5f64.powf(x), int None, Grad::First(any)),
    case!("rpow_scalar(2.5)", UnaryOp::RPowScalar(Float(2.5)), |x| x.rpow_scalar(2.5), |x| 2.5f64.powf(x), int None, Grad::Second(any)),
    case!("maximum_scalar(0.25)", UnaryOp::MaximumScalar(Float(0.25)), |x| x.maximum_scalar(0.25), |x| max_nan(x, 0.25), int None, Grad::No),
    case!("maximum_scalar(NaN)", UnaryOp::MaximumScalar(Float(f64::NAN)), |x| x.maximum_scalar(f64::NAN), |x| max_nan(x, f64::NAN), int None, Grad::No),
    case!("maximum_scalar(0.2)", UnaryOp::MaximumScalar(Float(0.2)), |x| x.maximum_scalar(0.2), |x| max_nan(x, 0.2), int None, Grad::First(|v| away(v, &[0.2]))),
    case!("maximum_scalar(-5i64)", UnaryOp::MaximumScalar(Int(-5)), |x| x.maximum_scalar(-5), |x| max_nan(x, -5.0), int Some(|x| x.max(-5)), Grad::No),
    case!("minimum_scalar(-0.75)", UnaryOp::MinimumScalar(Float(-0.75)), |x| x.minimum_scalar(-0.75), |x| min_nan(x, -0.75), int None, Grad::No),
    case!("minimum_scalar(-0.1)", UnaryOp::MinimumScalar(Float(-0.1)), |x| x.minimum_scalar(-0.1), |x| min_nan(x, -0.1), int None, Grad::First(|v| away(v, &[-0.1]))),
    case!("minimum_scalar(250i64)", UnaryOp::MinimumScalar(Int(250)), |x| x.minimum_scalar(250), |x| min_nan(x, 250.0), int Some(|x| x.min(250)), Grad::No),
    case!("minimum_scalar(i64::MIN + 1)", UnaryOp::MinimumScalar(Int(i64::MIN + 1)), |x| x.minimum_scalar(i64::MIN + 1), |x| min_nan(x, (i64::MIN + 1) as f64), int Some(|x| x.min(i64::MIN + 1)), Grad::No),
];

/// Where a binary case's gradcheck draws its operands.
#[derive(Clone, Copy)]
pub enum BinaryInputs {
    /// Normal samples passed through one domain per operand.
    Normal(Domain, Domain),
    /// Two grids offset from each other, so that no pair of operands is near a tie
    /// (maximum and minimum are not differentiable there).
    OffsetGrids,
}

/// One elementwise computation of two operands and its definitions.
pub struct BinaryCase {
    /// The name in failure messages.
    pub name: &'static str,
    /// The public `Tensor` method (broadcasting).
    pub tensor: fn(&Tensor, &Tensor) -> ember_tensor::Result<Tensor>,
    /// The differentiable `Var` method.
    pub var: fn(&Var, &Var) -> ember_tensor::Result<Var>,
    /// The definition on two `f64`.
    pub reference: fn(f64, f64) -> f64,
    /// The definition on two `i64` (wrapping), where integer operands keep their dtype.
    pub int_reference: Option<fn(i64, i64) -> i64>,
    /// The operands of the gradient check.
    pub grad: BinaryInputs,
}

/// One binary case; `$method` is the name of both the `Tensor` and the `Var` method.
macro_rules! binary_case {
    ($name:literal, $method:ident, $reference:expr, int $int:expr, $grad:expr) => {
        BinaryCase {
            name: $name,
            tensor: |a: &Tensor, b: &Tensor| a.$method(b),
            var: |a: &Var, b: &Var| a.$method(b),
            reference: $reference,
            int_reference: $int,
            grad: $grad,
        }
    };
}

/// Integer `pow`: wrapping for non-negative exponents; a negative one gives `1 / x^|e|`
/// truncated (1 for 1, +-1 for -1, 0 otherwise).
fn int_pow(x: i64, e: i64) -> i64 {
    if e >= 0 {
        (0..64).rev().fold(1i64, |acc, bit| {
            let acc = acc.wrapping_mul(acc);
            if e >> bit & 1 == 1 { acc.wrapping_mul(x) } else { acc }
        })
    } else if x == 1 {
        1
    } else if x == -1 {
        if e % 2 == 0 { 1 } else { -1 }
    } else {
        0
    }
}

/// Every elementwise function of two tensors.
pub const BINARY: &[BinaryCase] = &[
    binary_case!("add", add, |a, b| a + b, int Some(i64::wrapping_add), BinaryInputs::Normal(any, any)),
    binary_case!("sub", sub, |a, b| a - b, int Some(i64::wrapping_sub), BinaryInputs::Normal(any, any)),
    binary_case!("mul", mul, |a, b| a * b, int Some(i64::wrapping_mul), BinaryInputs::Normal(any, any)),
    // Integer division is true division, in f32 (checked on its own).
    binary_case!("div", div, |a, b| a / b, int None, BinaryInputs::Normal(any, far_from_zero)),
    // Positive bases keep a^b and ln a real.
    binary_case!("pow", pow, f64::powf, int Some(int_pow), BinaryInputs::Normal(positive, any)),
    binary_case!("maximum", maximum, max_nan, int Some(i64::max), BinaryInputs::OffsetGrids),
    binary_case!("minimum", minimum, min_nan, int Some(i64::min), BinaryInputs::OffsetGrids),
];
