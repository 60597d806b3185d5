//! The table of elementwise functions of one tensor: one entry per [`UnaryOp`] variant with
//! its name, its per-element functions for float and integer elements, and its `Tensor`
//! method (see the module docs of [`crate::ops`] for the entry format).
//!
//! `Tensor` methods that do more than call the op (dtype promotion of the scalar ops,
//! `clamp`'s optional bounds) are written by hand in `tensor/elementwise.rs` and
//! `tensor/unary.rs`; their entries say `tensor []`.

use crate::dtype::{Element, FloatElement};
use crate::{Error, Result, Scalar};
use std::f64::consts::{FRAC_1_SQRT_2, PI};

define_unary_ops! {
    /// `-x`
    Neg => "neg",
        float [cheap |x| -x],
        int [|x| Element::neg(x)],
        tensor [/// `-x` elementwise.
                neg];
    /// `|x|`
    Abs => "abs",
        float [cheap |x| Element::abs(x)],
        int [|x| Element::abs(x)],
        tensor [/// `|x|` elementwise.
                abs];
    /// `-1`, `0` or `1`; NaN stays NaN (NumPy's convention; PyTorch gives 0)
    Sign => "sign",
        float [cheap |x| Element::signum(x)],
        int [|x| Element::signum(x)],
        tensor [/// `-1`, `0` or `1` elementwise; zeros keep their sign (`-0.0` gives `-0.0`) and NaN stays NaN, like NumPy's `sign`. (PyTorch's CPU kernel returns 0 for NaN, which its maintainers track as a divergence from NumPy, pytorch/pytorch#41245; ember propagates the NaN.)
                sign];
    /// `x * x`
    Square => "square",
        float [cheap |x| x * x],
        int [|x| x.wmul(x)],
        tensor [/// `x * x` elementwise.
                square];
    /// `max(x, 0)`
    Relu => "relu",
        // NaN stays NaN, like PyTorch's relu.
        float [cheap |x| if x > T::ZERO || x.is_nan() { x } else { T::ZERO }],
        int [|x| if x > T::ZERO { x } else { T::ZERO }],
        tensor [/// `max(x, 0)` elementwise.
                relu];
    /// `e^x`
    Exp => "exp",
        float [costly |x| FloatElement::exp(x)],
        int [],
        tensor [/// `e^x` elementwise.
                exp];
    /// `ln x`
    Log => "log",
        float [costly |x| FloatElement::ln(x)],
        int [],
        tensor [/// The natural logarithm elementwise.
                log];
    /// `sqrt x`
    Sqrt => "sqrt",
        float [costly |x| x.sqrt()],
        int [],
        tensor [/// The square root elementwise.
                sqrt];
    /// `1 / sqrt x`
    Rsqrt => "rsqrt",
        float [costly |x| T::ONE / x.sqrt()],
        int [],
        tensor [/// `1 / sqrt(x)` elementwise.
                rsqrt];
    /// `sin x`
    Sin => "sin",
        float [costly |x| x.sin()],
        int [],
        tensor [/// The sine elementwise.
                sin];
    /// `cos x`
    Cos => "cos",
        float [costly |x| x.cos()],
        int [],
        tensor [/// The cosine elementwise.
                cos];
    /// `tanh x`
    Tanh => "tanh",
        float [costly |x| FloatElement::tanh(x)],
        int [],
        tensor [/// The hyperbolic tangent elementwise.
                tanh];
    /// `1 / (1 + e^-x)`
    Sigmoid => "sigmoid",
        float [costly |x| T::ONE / (T::ONE + FloatElement::exp(-x))],
        int [],
        tensor [/// The logistic function `1 / (1 + e^-x)` elementwise.
                sigmoid];
    /// `x * Phi(x)` with the exact normal CDF (erf form)
    Gelu => "gelu",
        float [costly
            let half = T::from_f64(0.5);
            let k = T::from_f64(FRAC_1_SQRT_2);
            |x| half * x * (T::ONE + (x * k).erf_fn())],
        int [],
        tensor [/// GELU with the exact normal CDF: `x * Phi(x)`.
                gelu];
    /// The tanh approximation of GELU
    GeluTanh => "gelu_tanh",
        float [costly
            let half = T::from_f64(0.5);
            let k = T::from_f64((2.0 / PI).sqrt());
            let a = T::from_f64(0.044715);
            |x| half * x * (T::ONE + FloatElement::tanh(k * (x + a * x * x * x)))],
        int [],
        tensor [/// GELU with PyTorch's tanh approximation (`approximate='tanh'`).
                gelu_tanh];
    /// `x * sigmoid(x)`
    Silu => "silu",
        float [costly |x| x / (T::ONE + FloatElement::exp(-x))],
        int [],
        tensor [/// SiLU (swish): `x * sigmoid(x)`.
                silu];
    /// The error function
    Erf => "erf",
        float [costly |x| x.erf_fn()],
        int [],
        tensor [/// The error function elementwise.
                erf];
    /// `ln(1 + x)`
    Log1p => "log1p",
        float [costly |x| x.ln_1p()],
        int [],
        tensor [/// `ln(1 + x)`, accurate for small `x`.
                log1p];
    /// `e^x - 1`
    Expm1 => "expm1",
        float [costly |x| x.exp_m1()],
        int [],
        tensor [/// `e^x - 1`, accurate for small `x`.
                expm1];
    /// `1 / x`
    Recip => "recip",
        float [cheap |x| T::ONE / x],
        int [],
        tensor [/// `1 / x` elementwise.
                recip];
    /// Round down
    Floor => "floor",
        float [cheap |x| x.floor()],
        int [|x| x],
        tensor [/// Rounds down.
                floor];
    /// Round up
    Ceil => "ceil",
        float [cheap |x| x.ceil()],
        int [|x| x],
        tensor [/// Rounds up.
                ceil];
    /// Round half to even
    Round => "round",
        float [cheap |x| x.round_even()],
        int [|x| x],
        tensor [/// Rounds half to even, like `torch.round`.
                round];
    /// `ln(1 + e^(beta x)) / beta`, linear above `threshold`
    Softplus {
        /// Sharpness.
        beta: f64,
        /// `beta * x` above which the function is linear.
        threshold: f64
    } => "softplus",
        float [costly
            let b = T::from_f64(beta);
            let t = T::from_f64(threshold);
            |x| if x * b > t { x } else { FloatElement::exp(x * b).ln_1p() / b }],
        int [],
        tensor [/// `ln(1 + e^(beta x)) / beta`, linear where `beta * x > threshold` (PyTorch's
                /// defaults are `beta = 1`, `threshold = 20`).
                softplus];
    /// `x` for positive `x`, `slope * x` otherwise
    LeakyRelu(negative_slope: f64) => "leaky_relu",
        float [cheap
            let s = T::from_f64(negative_slope);
            |x| if x > T::ZERO { x } else { x * s }],
        int [],
        tensor [/// `x` for positive `x`, `negative_slope * x` otherwise.
                leaky_relu];
    /// `x` for positive `x`, `alpha * (e^x - 1)` otherwise
    Elu(alpha: f64) => "elu",
        float [costly
            let a = T::from_f64(alpha);
            |x| if x > T::ZERO { x } else { a * x.exp_m1() }],
        int [],
        tensor [/// `x` for positive `x`, `alpha * (e^x - 1)` otherwise.
                elu];
    /// `min(max(x, min), max)`; NaN stays NaN
    Clamp {
        /// Lower bound (may be `-inf`).
        min: f64,
        /// Upper bound (may be `inf`).
        max: f64
    } => "clamp",
        float [cheap
            let lo = T::from_f64(min);
            let hi = T::from_f64(max);
            |x| clamp_elem(x, lo, hi)],
        // `as` saturates, so a bound beyond the dtype's range keeps its side.
        int [let lo = T::from_f64(min); let hi = T::from_f64(max); |x| clamp_elem(x, lo, hi)],
        tensor [];
    /// `x + s`
    AddScalar(s: Scalar) => "add_scalar",
        float [cheap let s: T = s.to_element(); |x| x + s],
        int [let s: T = s.to_element(); |x| x.wadd(s)],
        tensor [];
    /// `x - s`
    SubScalar(s: Scalar) => "sub_scalar",
        float [cheap let s: T = s.to_element(); |x| x - s],
        int [let s: T = s.to_element(); |x| x.wsub(s)],
        tensor [];
    /// `s - x`
    RSubScalar(s: Scalar) => "rsub_scalar",
        float [cheap let s: T = s.to_element(); |x| s - x],
        int [let s: T = s.to_element(); |x| s.wsub(x)],
        tensor [];
    /// `x * s`
    MulScalar(s: Scalar) => "mul_scalar",
        float [cheap let s: T = s.to_element(); |x| x * s],
        int [let s: T = s.to_element(); |x| x.wmul(s)],
        tensor [];
    /// `x / s`
    DivScalar(s: Scalar) => "div_scalar",
        float [cheap let s: T = s.to_element(); |x| x / s],
        int [],
        tensor [];
    /// `s / x`
    RDivScalar(s: Scalar) => "rdiv_scalar",
        float [cheap let s: T = s.to_element(); |x| s / x],
        int [],
        tensor [];
    /// `x ^ s`; on integers the exponent must be a non-negative integer
    PowScalar(e: Scalar) => "pow_scalar",
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
        int [using |k, g| int_exponent(e).map(|e| k.run(g, move |x: T| pow_wrapping(x, e)))],
        tensor [];
    /// `s ^ x`
    RPowScalar(base: Scalar) => "rpow_scalar",
        float [costly let b: T = base.to_element(); |x| b.powf(x)],
        int [],
        tensor [];
    /// `max(x, s)` propagating NaN
    MaximumScalar(s: Scalar) => "maximum_scalar",
        float [cheap let s: T = s.to_element(); |x| x.max_nan(s)],
        int [let s: T = s.to_element_saturating(); |x| x.max_nan(s)],
        tensor [];
    /// `min(x, s)` propagating NaN
    MinimumScalar(s: Scalar) => "minimum_scalar",
        float [cheap let s: T = s.to_element(); |x| x.min_nan(s)],
        int [let s: T = s.to_element_saturating(); |x| x.min_nan(s)],
        tensor [];
}

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
}

/// PyTorch's clamp, `min(max(x, lo), hi)`: the upper bound applies last, so with `lo > hi`
/// every element becomes `hi`; a NaN element stays NaN (both comparisons are false).
#[inline(always)]
fn clamp_elem<T: Element>(x: T, lo: T, hi: T) -> T {
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

/// `x^e` with wrapping multiplication (PyTorch's integer `pow`), by repeated squaring.
#[inline(always)]
pub(crate) fn pow_wrapping<T: Element>(x: T, mut e: u64) -> T {
    let (mut base, mut acc) = (x, T::ONE);
    while e > 0 {
        if e & 1 == 1 {
            acc = acc.wmul(base);
        }
        base = base.wmul(base);
        e >>= 1;
    }
    acc
}
