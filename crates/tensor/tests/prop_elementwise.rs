//! Property tests of the elementwise `Tensor` ops on every dtype (`u8`, `i64`, `f32`, `f64`)
//! under random shapes, layouts, operand dtypes, scalars and parameters: every unary op and
//! tensor-scalar form, every binary op with broadcasting (compatible and incompatible
//! shapes) and PyTorch's result-type promotion, comparisons, `logical_not` and the `where`
//! forms, and the in-place ops (also through narrow/transpose/select views of a base).
//!
//! Each call either gives the value of a naive per-element reference in this file, in the
//! dtype the documented rules give, or fails with an error naming the op. The reference
//! computes integers exactly (wrapping as Rust's `wrapping_*` and PyTorch do, integer
//! tensor `pow` by repeated squaring), converts by Rust's `as` casts (ember's `to_dtype`
//! rule), and computes floats in `f64` before rounding to the result dtype: exact for the
//! arithmetic ops (an `f64` result of two `f32` operands rounds to the `f32` result), within
//! a small tolerance for the transcendental ones. Inputs mix ordinary values with zeros of
//! both signs, subnormals, huge values, infinities and NaN, and the integer extremes.

use ember_tensor::{DType, Scalar, Tensor};
use ember_testing::elementwise::{erf_series, sign};
use ember_testing::prop::{
    Elem as V, any_dtype, broadcast, broadcast_at, cast, indices, input, names_op, ok_or_names, other_shape, read,
    same_elems as matches, scalar_fits, scalar_in, shape,
};
use proptest::prelude::*;
use std::cmp::Ordering;

/// Cases per property: each case runs every op of its family, so this hits every dtype
/// pair and error path while the file runs in a few seconds in debug.
const CASES: u32 = 1000;

/// An exact integer result wrapped into `dt`.
fn wrap(i: i128, dt: DType) -> V {
    match dt {
        DType::U8 => V::I(i as u8 as i64),
        _ => V::I(i as i64),
    }
}

/// A float result rounded into `dt`, flushed to a signed zero where it is subnormal and
/// the kernels flush (ember's default).
fn round(f: f64, dt: DType) -> V {
    let r = cast(V::F(f), dt).f();
    let subnormal = match dt {
        DType::F32 => (r as f32).is_subnormal(),
        _ => r.is_subnormal(),
    };
    if subnormal && ember_tensor::threading::flush_denormal() { V::F(0.0f64.copysign(r)) } else { V::F(r) }
}

/// `x^e` modulo 2^64 by repeated squaring, over the whole `u64` exponent range.
fn pow_mod(x: i64, mut e: u64) -> i64 {
    let (mut base, mut acc) = (x, 1i64);
    while e > 0 {
        if e & 1 == 1 {
            acc = acc.wrapping_mul(base);
        }
        base = base.wrapping_mul(base);
        e >>= 1;
    }
    acc
}

/// PyTorch's integer `pow` of two tensors: wrapping for a non-negative exponent; a negative
/// one gives `1 / x^|e|` truncated (1 for 1, +-1 for -1, 0 otherwise).
fn int_pow(x: i64, e: i64) -> i64 {
    match (e >= 0, x) {
        (true, _) => pow_mod(x, e as u64),
        (false, 1) => 1,
        (false, -1) => {
            if e % 2 == 0 {
                1
            } else {
                -1
            }
        }
        _ => 0,
    }
}

/// The kernels' NaN-propagating maximum: the first operand on ties (so `-0` against `0`).
fn max_nan(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if b > a {
        b
    } else {
        a
    }
}

fn min_nan(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if b < a {
        b
    } else {
        a
    }
}

/// PyTorch's clamp: `min(max(x, lo), hi)`, the upper bound last; NaN stays NaN.
fn clamp_f(x: f64, lo: f64, hi: f64) -> f64 {
    let y = if x < lo { lo } else { x };
    if y > hi { hi } else { y }
}

/// The exact order of an integer and a float (`None` for NaN).
fn cmp_int_float(x: i64, f: f64) -> Option<Ordering> {
    if f.is_nan() {
        return None;
    }
    if f >= 9.3e18 {
        return Some(Ordering::Less);
    }
    if f <= -9.3e18 {
        return Some(Ordering::Greater);
    }
    let fl = f.floor();
    Some((x as i128).cmp(&(fl as i128)).then(if f > fl { Ordering::Less } else { Ordering::Equal }))
}

/// What a reference expects: the result's dtype and values (and the tolerance of the
/// comparison), or an error naming the op.
enum Want {
    Value(DType, Vec<V>, f64),
    Error,
}

/// Checks `got` against `want`, naming `op` in the failure.
fn check(op: &str, got: ember_tensor::Result<Tensor>, want: Want) -> Result<(), TestCaseError> {
    match (got, want) {
        (Ok(t), Want::Value(dt, vals, tol)) => {
            prop_assert_eq!(t.dtype(), dt, "{}: dtype", op);
            let g = read(&t);
            prop_assert!(matches(&g, &vals, tol), "{}: got {:?}, want {:?}", op, g, vals);
        }
        (Err(e), Want::Error) => {
            prop_assert!(names_op(&e.to_string(), op), "{}: error {:?} does not name the op", op, e.to_string())
        }
        (Ok(t), Want::Error) => prop_assert!(false, "{}: expected an error, got {:?} of {}", op, read(&t), t.dtype()),
        (Err(e), Want::Value(..)) => prop_assert!(false, "{}: unexpected error {}", op, e),
    }
    Ok(())
}

/// The tolerance of the transcendental functions in `dt`.
fn approx(dt: DType) -> f64 {
    if dt == DType::F32 { 2e-5 } else { 1e-12 }
}

/// The dtype order of PyTorch's promotion.
fn promote(a: DType, b: DType) -> DType {
    let rank = |d: DType| [DType::U8, DType::I64, DType::F32, DType::F64].iter().position(|&x| x == d).unwrap();
    if rank(a) >= rank(b) { a } else { b }
}

/// PyTorch's `result_type` of two operands of these ranks: a 0-d operand only counts when
/// it brings a float beside integers.
fn result_type2(a: (DType, usize), b: (DType, usize)) -> DType {
    match (a.1 == 0, b.1 == 0) {
        (false, true) if b.0.is_float() && !a.0.is_float() => promote(a.0, b.0),
        (false, true) => a.0,
        (true, false) if a.0.is_float() && !b.0.is_float() => promote(a.0, b.0),
        (true, false) => b.0,
        _ => promote(a.0, b.0),
    }
}

/// The dtype a tensor of `dt` takes with scalar `s` (a float scalar makes integers `f32`).
fn with_scalar(dt: DType, s: Scalar) -> DType {
    if s.is_float() && dt.is_int() { DType::F32 } else { dt }
}

fn float_of(dt: DType) -> DType {
    if dt.is_float() { dt } else { DType::F32 }
}

/// The float-only functions of one tensor: name, method, reference, whether the result is
/// exact (correctly rounded) rather than approximate.
type FloatFn = (&'static str, fn(&Tensor) -> Tensor, fn(f64) -> f64, bool);

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

const FLOAT_FNS: &[FloatFn] = &[
    ("exp", Tensor::exp, f64::exp, false),
    ("log", Tensor::log, f64::ln, false),
    ("sqrt", Tensor::sqrt, f64::sqrt, true),
    ("rsqrt", Tensor::rsqrt, |x| 1.0 / x.sqrt(), false),
    ("sin", Tensor::sin, f64::sin, false),
    ("cos", Tensor::cos, f64::cos, false),
    ("tanh", Tensor::tanh, f64::tanh, false),
    ("sigmoid", Tensor::sigmoid, sigmoid, false),
    ("gelu", Tensor::gelu, |x| 0.5 * x * (1.0 + erf_series(x * std::f64::consts::FRAC_1_SQRT_2)), false),
    (
        "gelu_tanh",
        Tensor::gelu_tanh,
        |x| 0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh()),
        false,
    ),
    ("silu", Tensor::silu, |x| x * sigmoid(x), false),
    ("erf", Tensor::erf, erf_series, false),
    ("log1p", Tensor::log1p, f64::ln_1p, false),
    ("expm1", Tensor::expm1, f64::exp_m1, false),
    ("recip", Tensor::recip, |x| 1.0 / x, true),
];

/// The functions of one tensor that integers keep: name, method, float reference, integer
/// reference (exact, wrapped into the dtype afterwards).
type IntFn = (&'static str, fn(&Tensor) -> Tensor, fn(f64) -> f64, fn(i128) -> i128);

const INT_FNS: &[IntFn] = &[
    ("neg", Tensor::neg, |x| -x, |x| -x),
    ("abs", Tensor::abs, f64::abs, i128::abs),
    ("sign", Tensor::sign, sign, i128::signum),
    ("square", Tensor::square, |x| x * x, |x| x * x),
    ("relu", Tensor::relu, |x| if x > 0.0 || x.is_nan() { x } else { 0.0 }, |x| x.max(0)),
    ("floor", Tensor::floor, f64::floor, |x| x),
    ("ceil", Tensor::ceil, f64::ceil, |x| x),
    ("round", Tensor::round, f64::round_ties_even, |x| x),
];

/// Scalars: integers (wrapping into `u8`, beyond 2^53, the extremes) and floats (fractions,
/// signed zeros, huge, infinite, NaN).
fn scalar() -> impl Strategy<Value = Scalar> {
    prop_oneof![
        prop::sample::select(vec![0i64, 1, -1, 2, 3, -3, 7, 65, 300, -256, (1 << 53) + 1, i64::MAX, i64::MIN, 1 << 33])
            .prop_map(Scalar::Int),
        prop::sample::select(vec![
            0.0,
            -0.0,
            0.5,
            -1.25,
            2.0,
            2.5,
            3.0,
            1e30,
            -1e300,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            0.1
        ])
        .prop_map(Scalar::Float),
    ]
}

/// Float parameters of the parametrised functions and clamp bounds.
fn param() -> impl Strategy<Value = f64> {
    prop::sample::select(vec![
        0.0,
        -0.0,
        0.01,
        0.5,
        1.0,
        -1.5,
        2.0,
        3.0,
        20.0,
        -7.0,
        1e30,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ])
}

/// The reference of a scalar op on `x` of `dt`, with the result dtype `out`.
fn scalar_ref(name: &str, x: V, s: Scalar, dt: DType, out: DType) -> V {
    if out.is_int() {
        let (a, b) = (x.i() as i128, scalar_in(s, dt).i() as i128);
        // A bound beyond the dtype saturates instead of wrapping.
        let bound = match (s, dt) {
            (Scalar::Int(v), DType::U8) => v.clamp(0, 255) as i128,
            (Scalar::Int(v), _) => v as i128,
            _ => b,
        };
        return match name {
            "add_scalar" => wrap(a + b, out),
            "sub_scalar" => wrap(a - b, out),
            "rsub_scalar" => wrap(b - a, out),
            "mul_scalar" => wrap(a * b, out),
            "maximum_scalar" => wrap(a.max(bound), out),
            "minimum_scalar" => wrap(a.min(bound), out),
            _ => unreachable!("{name}"),
        };
    }
    let (a, b) = (cast(x, out).f(), scalar_in(s, out).f());
    let r = match name {
        "add_scalar" => a + b,
        "sub_scalar" => a - b,
        "rsub_scalar" => b - a,
        "mul_scalar" => a * b,
        "div_scalar" => a / b,
        "rdiv_scalar" => b / a,
        "maximum_scalar" => max_nan(a, b),
        "minimum_scalar" => min_nan(a, b),
        _ => unreachable!("{name}"),
    };
    round(r, out)
}

/// The reference of `op` on two elements already converted to `dt`.
fn binary_ref(op: &str, a: V, b: V, dt: DType) -> V {
    if dt.is_int() {
        let (x, y) = (a.i() as i128, b.i() as i128);
        return match op {
            "add" => wrap(x + y, dt),
            "sub" => wrap(x - y, dt),
            "mul" => wrap(x * y, dt),
            "pow" => wrap(int_pow(x as i64, y as i64) as i128, dt),
            "maximum" => V::I(x.max(y) as i64),
            "minimum" => V::I(x.min(y) as i64),
            _ => unreachable!("{op}"),
        };
    }
    let (x, y) = (a.f(), b.f());
    round(
        match op {
            "add" => x + y,
            "sub" => x - y,
            "mul" => x * y,
            "div" => x / y,
            "pow" => x.powf(y),
            "maximum" => max_nan(x, y),
            "minimum" => min_nan(x, y),
            _ => unreachable!("{op}"),
        },
        dt,
    )
}

/// The order of two elements of the same dtype.
fn compare(a: V, b: V) -> Option<Ordering> {
    match (a, b) {
        (V::I(x), V::I(y)) => Some(x.cmp(&y)),
        _ => a.f().partial_cmp(&b.f()),
    }
}

/// A binary op: its name and method.
type BinaryFn = (&'static str, fn(&Tensor, &Tensor) -> ember_tensor::Result<Tensor>);

/// A scalar op: its name, method and result dtype.
type ScalarOp = (&'static str, fn(&Tensor, Scalar) -> Tensor, DType);

/// A comparison: its name and whether an order satisfies it.
type Cmp = (&'static str, fn(Option<Ordering>) -> bool);

const CMP: &[Cmp] = &[
    ("eq", |o| o == Some(Ordering::Equal)),
    ("ne", |o| o != Some(Ordering::Equal)),
    ("lt", |o| o == Some(Ordering::Less)),
    ("le", |o| matches!(o, Some(Ordering::Less | Ordering::Equal))),
    ("gt", |o| o == Some(Ordering::Greater)),
    ("ge", |o| matches!(o, Some(Ordering::Greater | Ordering::Equal))),
];

fn cmp_tensor(t: &Tensor, name: &str, o: &Tensor) -> ember_tensor::Result<Tensor> {
    match name {
        "eq" => t.eq(o),
        "ne" => t.ne(o),
        "lt" => t.lt(o),
        "le" => t.le(o),
        "gt" => t.gt(o),
        _ => t.ge(o),
    }
}

fn cmp_scalar(t: &Tensor, name: &str, s: Scalar) -> Tensor {
    match name {
        "eq" => t.eq_scalar(s),
        "ne" => t.ne_scalar(s),
        "lt" => t.lt_scalar(s),
        "le" => t.le_scalar(s),
        "gt" => t.gt_scalar(s),
        _ => t.ge_scalar(s),
    }
}

fn mask(b: bool) -> V {
    V::I(b as i64)
}

/// Values of `vals` (of `shape`) broadcast to `out`.
fn spread(vals: &[V], shape: &[usize], out: &[usize]) -> Vec<V> {
    indices(out).iter().map(|i| broadcast_at(vals, shape, i)).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// Every function of one tensor on every dtype: float-only functions compute integers
    /// in `f32`; the rest keep integer dtypes with wrapping (`neg`/`abs`/`square` of the
    /// extremes) and identity rounding.
    #[test]
    fn unary_functions_match_the_reference(s in shape(3), seed in any::<u64>(), dt in any_dtype(), strided in any::<bool>()) {
        let (t, xs) = input(&s, seed, dt, strided);
        let out = float_of(dt);
        for &(name, f, r, exact) in FLOAT_FNS {
            let want = xs.iter().map(|&x| round(r(cast(x, out).f()), out)).collect();
            check(name, Ok(f(&t)), Want::Value(out, want, if exact { 0.0 } else { approx(out) }))?;
        }
        for &(name, f, r, ri) in INT_FNS {
            let want = xs.iter().map(|&x| if dt.is_int() { wrap(ri(x.i() as i128), dt) } else { round(r(x.f()), dt) }).collect();
            check(name, Ok(f(&t)), Want::Value(dt, want, 0.0))?;
        }
        let want = xs.iter().map(|&x| mask(x.f() == 0.0)).collect();
        check("logical_not", Ok(t.logical_not()), Want::Value(DType::U8, want, 0.0))?;
        prop_assert_eq!(t.shape().dims(), &s[..]);
    }

    /// The parametrised functions (softplus, leaky_relu, elu) and clamp with random, often
    /// odd, parameters: NaN, infinite and crossed bounds, integral bounds that keep an
    /// integer dtype and fractional ones that make it `f32`.
    #[test]
    fn parametrised_functions_match_the_reference(s in shape(3), seed in any::<u64>(), dt in any_dtype(), strided in any::<bool>(), p in param(), q in param(), lo in prop::option::of(param()), hi in prop::option::of(param())) {
        let (t, xs) = input(&s, seed, dt, strided);
        let out = float_of(dt);
        let x_of = |x: V| cast(x, out).f();
        let rp = round(p, out).f();
        let want = xs.iter().map(|&x| round(if x_of(x) > 0.0 { x_of(x) } else { x_of(x) * rp }, out)).collect();
        check("leaky_relu", Ok(t.leaky_relu(p)), Want::Value(out, want, 0.0))?;
        let want = xs.iter().map(|&x| round(if x_of(x) > 0.0 { x_of(x) } else { rp * x_of(x).exp_m1() }, out)).collect();
        check("elu", Ok(t.elu(p)), Want::Value(out, want, approx(out)))?;
        if p != 0.0 && p.is_finite() && q.is_finite() && p.abs() < 1e3 {
            let (b, th) = (rp, round(q, out).f());
            // `e^(beta x)` overflows in the dtype, as the kernel's (and PyTorch's) does.
            let want = xs.iter().map(|&x| {
                let x = x_of(x);
                let xb = round(x * b, out).f();
                round(if xb > th { x } else { round(xb.exp(), out).f().ln_1p() / b }, out)
            }).collect();
            check("softplus", Ok(t.softplus(p, q)), Want::Value(out, want, approx(out)))?;
        }
        let needs_float = [lo, hi].into_iter().flatten().any(|b| !b.is_finite() || b.fract() != 0.0);
        let cdt = if dt.is_int() && needs_float { DType::F32 } else { dt };
        let (l, h) = (lo.unwrap_or(f64::NEG_INFINITY), hi.unwrap_or(f64::INFINITY));
        let want = xs.iter().map(|&x| {
            if cdt.is_int() {
                // The bounds convert with `as`, saturating into the dtype.
                let (l, h) = (cast(V::F(l), cdt).i(), cast(V::F(h), cdt).i());
                let y = if x.i() < l { l } else { x.i() };
                V::I(if y > h { h } else { y })
            } else {
                round(clamp_f(cast(x, cdt).f(), round(l, cdt).f(), round(h, cdt).f()), cdt)
            }
        }).collect();
        check("clamp", Ok(t.clamp(lo, hi)), Want::Value(cdt, want, 0.0))?;
    }

    /// Every tensor-scalar op with integer and float scalars on every dtype: the dtype
    /// rules of `ember_tensor::dtype` (a float scalar makes integers `f32`; true division
    /// and `rpow` are float; integer `pow` wraps and refuses negative exponents), wrapping
    /// integer scalars, saturating bounds, and comparisons with the scalar's exact value.
    #[test]
    fn scalar_ops_match_the_reference(s in shape(3), seed in any::<u64>(), dt in any_dtype(), strided in any::<bool>(), sc in scalar()) {
        let (t, xs) = input(&s, seed, dt, strided);
        let ops: [ScalarOp; 8] = [
            ("add_scalar", |t, s| t.add_scalar(s), with_scalar(dt, sc)),
            ("sub_scalar", |t, s| t.sub_scalar(s), with_scalar(dt, sc)),
            ("rsub_scalar", |t, s| t.rsub_scalar(s), with_scalar(dt, sc)),
            ("mul_scalar", |t, s| t.mul_scalar(s), with_scalar(dt, sc)),
            ("div_scalar", |t, s| t.div_scalar(s), float_of(dt)),
            ("rdiv_scalar", |t, s| t.rdiv_scalar(s), float_of(dt)),
            ("maximum_scalar", |t, s| t.maximum_scalar(s), with_scalar(dt, sc)),
            ("minimum_scalar", |t, s| t.minimum_scalar(s), with_scalar(dt, sc)),
        ];
        for (name, f, out) in ops {
            let want = xs.iter().map(|&x| scalar_ref(name, x, sc, dt, out)).collect();
            check(name, Ok(f(&t, sc)), Want::Value(out, want, 0.0))?;
        }
        let out = with_scalar(dt, sc);
        let want = match sc {
            Scalar::Int(e) if out.is_int() && e < 0 => Want::Error,
            Scalar::Int(e) if out.is_int() => Want::Value(out, xs.iter().map(|&x| wrap(pow_mod(x.i(), e as u64) as i128, out)).collect(), 0.0),
            _ => {
                let e = scalar_in(sc, out).f();
                let exact = sc.to_f64() == 2.0 || sc.to_f64() == 0.5 || out == DType::F64;
                Want::Value(out, xs.iter().map(|&x| {
                    let x = cast(x, out).f();
                    round(if sc.to_f64() == 2.0 { x * x } else if sc.to_f64() == 0.5 { x.sqrt() } else { x.powf(e) }, out)
                }).collect(), if exact { 0.0 } else { approx(out) })
            }
        };
        check("pow_scalar", t.pow_scalar(sc), want)?;
        let out = float_of(dt);
        let b = scalar_in(sc, out).f();
        let want = xs.iter().map(|&x| round(b.powf(cast(x, out).f()), out)).collect();
        check("rpow_scalar", Ok(t.rpow_scalar(sc)), Want::Value(out, want, if out == DType::F64 { 0.0 } else { approx(out) }))?;
        for &(name, holds) in CMP {
            let want = xs.iter().map(|&x| mask(holds(match (dt.is_int(), sc) {
                (true, Scalar::Int(v)) => Some(x.i().cmp(&v)),
                (true, Scalar::Float(f)) => cmp_int_float(x.i(), f),
                (false, _) => x.f().partial_cmp(&scalar_in(sc, dt).f()),
            }))).collect();
            check(&format!("{name}_scalar"), Ok(cmp_scalar(&t, name, sc)), Want::Value(DType::U8, want, 0.0))?;
        }
    }

    /// Binary ops and comparisons of two tensors of random dtypes and ranks: NumPy
    /// broadcasting (shapes that do not broadcast are errors naming the op) and PyTorch's
    /// `result_type` (a 0-d operand counts only by category); integer division is true
    /// division in `f32`; integer `pow` wraps, with PyTorch's negative-exponent rule.
    #[test]
    fn binary_ops_broadcast_promote_and_match(sa in shape(3), mode in 0u8..3, bits in any::<u8>(), drop in 0usize..3, sb_free in shape(3), seed in any::<u64>(), da in any_dtype(), db in any_dtype(), strided in any::<bool>()) {
        let sb = other_shape(&sa, mode, bits, drop, &sb_free);
        let (a, xa) = input(&sa, seed, da, strided);
        let (b, xb) = input(&sb, seed ^ 0x5eed, db, !strided);
        let rt = result_type2((da, sa.len()), (db, sb.len()));
        prop_assert_eq!(a.result_type(&b), rt);
        let shape = broadcast(&sa, &sb);
        let ops: [BinaryFn; 7] = [
            ("add", Tensor::add), ("sub", Tensor::sub), ("mul", Tensor::mul), ("div", Tensor::div),
            ("pow", Tensor::pow), ("maximum", Tensor::maximum), ("minimum", Tensor::minimum),
        ];
        for (name, f) in ops {
            let out = if name == "div" { float_of(rt) } else { rt };
            let want = match &shape {
                None => Want::Error,
                Some(shape) => {
                    let (va, vb) = (spread(&xa, &sa, shape), spread(&xb, &sb, shape));
                    let tol = if name == "pow" && out == DType::F32 { approx(out) } else { 0.0 };
                    Want::Value(out, va.iter().zip(&vb).map(|(&x, &y)| binary_ref(name, cast(x, out), cast(y, out), out)).collect(), tol)
                }
            };
            check(name, f(&a, &b), want)?;
        }
        for &(name, holds) in CMP {
            let want = match &shape {
                None => Want::Error,
                Some(shape) => {
                    let (va, vb) = (spread(&xa, &sa, shape), spread(&xb, &sb, shape));
                    Want::Value(DType::U8, va.iter().zip(&vb).map(|(&x, &y)| mask(holds(compare(cast(x, rt), cast(y, rt))))).collect(), 0.0)
                }
            };
            check(name, cmp_tensor(&a, name, &b), want)?;
        }
    }

    /// `where_cond` and its scalar forms: the condition must be `u8` (any non-zero byte is
    /// true), the three operands broadcast together, the values promote by `result_type`,
    /// and a scalar promotes like a tensor-scalar op.
    #[test]
    fn where_forms_match_the_reference(sc_shape in shape(3), mode in 0u8..3, bits in any::<u8>(), drop in 0usize..3, free in shape(3), seed in any::<u64>(), dc in any_dtype(), da in any_dtype(), db in any_dtype(), x in scalar(), y in scalar()) {
        let sa = other_shape(&sc_shape, mode, bits, drop, &free);
        let sb = other_shape(&sc_shape, mode.saturating_sub(1), bits >> 2, drop / 2, &free);
        let (c, xc) = input(&sc_shape, seed, dc, false);
        let (a, xa) = input(&sa, seed ^ 1, da, true);
        let (b, xb) = input(&sb, seed ^ 2, db, false);
        let shape = broadcast(&sc_shape, &sa).and_then(|s| broadcast(&s, &sb));
        let pick = |out: DType, shape: &[usize], (ta, sa): (&[V], &[usize]), (tb, sb): (&[V], &[usize])| -> Vec<V> {
            indices(shape).iter().map(|i| {
                let chosen = if broadcast_at(&xc, &sc_shape, i).f() != 0.0 { broadcast_at(ta, sa, i) } else { broadcast_at(tb, sb, i) };
                cast(chosen, out)
            }).collect()
        };
        let rt = result_type2((da, sa.len()), (db, sb.len()));
        let want = match &shape {
            Some(shape) if dc == DType::U8 => Want::Value(rt, pick(rt, shape, (&xa, &sa), (&xb, &sb)), 0.0),
            _ => Want::Error,
        };
        check("where", c.where_cond(&a, &b), want)?;
        // A scalar branch: a 0-d tensor of the scalar in the tensor's dtype promoted by it.
        let sx = [scalar_in(x, with_scalar(da, x))];
        let shape2 = broadcast(&sc_shape, &sa);
        let out = with_scalar(da, x);
        let want = match &shape2 {
            Some(shape) if dc == DType::U8 => Want::Value(out, pick(out, shape, (&xa, &sa), (&sx, &[])), 0.0),
            _ => Want::Error,
        };
        check("where", c.where_tensor_scalar(&a, x), want)?;
        let want = match &shape2 {
            Some(shape) if dc == DType::U8 => Want::Value(out, pick(out, shape, (&sx, &[]), (&xa, &sa)), 0.0),
            _ => Want::Error,
        };
        check("where", c.where_scalar_tensor(x, &a), want)?;
        let out = if x.is_float() || y.is_float() { DType::F32 } else { DType::I64 };
        let (vx, vy) = ([scalar_in(x, out)], [scalar_in(y, out)]);
        let want = if dc == DType::U8 { Want::Value(out, pick(out, &sc_shape, (&vx, &[]), (&vy, &[])), 0.0) } else { Want::Error };
        check("where", c.where_scalars(x, y), want)?;
    }
}

/// The in-place ops the in-place property draws from.
const INPLACE: &[&str] = &[
    "add_",
    "sub_",
    "mul_",
    "div_",
    "add_scaled_",
    "add_scalar_",
    "mul_scalar_",
    "clamp_",
    "copy_",
    "fill_",
    "zero_",
    "masked_fill_",
];

/// The target of an in-place op: the base itself or a view of it (narrow, transpose,
/// select), chosen by `view`, and the same view of `positions` (the flat index into the
/// base of each element of the view).
fn view_of(t: &Tensor, view: usize, dim: usize, start: usize) -> Tensor {
    let rank = t.rank();
    if rank == 0 {
        return t.clone();
    }
    let d = dim % rank;
    let e = t.shape()[d];
    match view {
        1 => t.narrow(d as i64, start.min(e), e - start.min(e)).unwrap(),
        2 => t.transpose(0, rank as i64 - 1).unwrap(),
        3 if start < e => t.select(d as i64, start).unwrap(),
        _ => t.clone(),
    }
}

/// The reference of an in-place op on the target's values `tv` (of `ds`, shape `ts`) with
/// an operand `xo` (of `d_o`, shape `so`): the new values, or `None` for an error.
#[allow(clippy::too_many_arguments)]
fn inplace_ref(
    op: &str,
    tv: &[V],
    ts: &[usize],
    ds: DType,
    xo: &[V],
    so: &[usize],
    d_o: DType,
    sc: Scalar,
    alpha: f64,
    lo: Option<f64>,
    hi: Option<f64>,
) -> Option<Vec<V>> {
    // The operand must broadcast to the target's shape: an in-place result cannot grow.
    let fits = broadcast(ts, so).is_some_and(|s| s == ts);
    let operand = || spread(xo, so, ts);
    match op {
        "add_" | "sub_" | "mul_" | "div_" => {
            if (op == "div_" && ds.is_int()) || (d_o.is_float() && ds.is_int()) || !fits {
                return None;
            }
            let name = &op[..op.len() - 1];
            Some(tv.iter().zip(operand()).map(|(&x, y)| binary_ref(name, x, cast(y, ds), ds)).collect())
        }
        "add_scaled_" if alpha == 1.0 => inplace_ref("add_", tv, ts, ds, xo, so, d_o, sc, alpha, lo, hi),
        "add_scaled_" => {
            // `other * alpha` first, in the dtype a float scalar gives `other`.
            let od = float_of(d_o);
            let scaled: Vec<V> = xo.iter().map(|&y| round(cast(y, od).f() * round(alpha, od).f(), od)).collect();
            inplace_ref("add_", tv, ts, ds, &scaled, so, od, sc, 1.0, lo, hi)
        }
        "add_scalar_" | "mul_scalar_" => {
            if ds.is_int() && sc.is_float() {
                return None;
            }
            let name = &op[..op.len() - 1];
            Some(tv.iter().map(|&x| scalar_ref(name, x, sc, ds, ds)).collect())
        }
        "clamp_" => {
            if ds.is_int() && [lo, hi].into_iter().flatten().any(|b| !b.is_finite() || b.fract() != 0.0) {
                return None;
            }
            let (l, h) = (lo.unwrap_or(f64::NEG_INFINITY), hi.unwrap_or(f64::INFINITY));
            Some(
                tv.iter()
                    .map(|&x| {
                        if ds.is_int() {
                            let (l, h) = (cast(V::F(l), ds).i(), cast(V::F(h), ds).i());
                            let y = if x.i() < l { l } else { x.i() };
                            V::I(if y > h { h } else { y })
                        } else {
                            round(clamp_f(x.f(), round(l, ds).f(), round(h, ds).f()), ds)
                        }
                    })
                    .collect(),
            )
        }
        "copy_" => fits.then(|| operand().into_iter().map(|y| cast(y, ds)).collect()),
        "fill_" => scalar_fits(sc, ds).then(|| vec![scalar_in(sc, ds); tv.len()]),
        "zero_" => Some(vec![cast(V::I(0), ds); tv.len()]),
        "masked_fill_" => {
            if d_o != DType::U8 || !fits || !scalar_fits(sc, ds) {
                return None;
            }
            // The value converts into the tensor's dtype (as `fill_` converts it); the other
            // elements keep theirs.
            let value = scalar_in(sc, ds);
            Some(tv.iter().zip(operand()).map(|(&x, m)| if m.i() != 0 { value } else { x }).collect())
        }
        _ => unreachable!("{op}"),
    }
}

/// Runs in-place op `op` on `t`.
fn run_inplace(
    op: &str,
    t: &Tensor,
    o: &Tensor,
    sc: Scalar,
    alpha: f64,
    lo: Option<f64>,
    hi: Option<f64>,
) -> ember_tensor::Result<()> {
    match op {
        "add_" => t.add_(o),
        "sub_" => t.sub_(o),
        "mul_" => t.mul_(o),
        "div_" => t.div_(o),
        "add_scaled_" => t.add_scaled_(o, alpha),
        "add_scalar_" => t.add_scalar_(sc),
        "mul_scalar_" => t.mul_scalar_(sc),
        "clamp_" => t.clamp_(lo, hi),
        "copy_" => t.copy_(o),
        "fill_" => t.fill_(sc),
        "zero_" => t.zero_(),
        _ => t.masked_fill_(o, sc),
    }
}

/// The op name an in-place op's error gives: the out-of-place name or the in-place one.
fn inplace_names(op: &str) -> [&str; 3] {
    let base = op.trim_end_matches('_');
    let inner = match op {
        "add_scaled_" => "add_",
        "masked_fill_" => "masked_fill",
        _ => base,
    };
    [op, base, inner]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// Every in-place op on a random base or a narrow/transpose/select view of it, with an
    /// operand of random dtype and shape: the out-of-place reference in the target's dtype;
    /// broadcasting only from the operand (a result that would need a bigger shape is an
    /// error naming the op); a float result into an integer tensor is an error; exactly the
    /// viewed elements of the base change, the version counter bumps on success, and a
    /// refused op leaves the base as it was. A broadcast (expanded) target is refused.
    #[test]
    fn inplace_ops_match_out_of_place(ss in shape(3), op in prop::sample::select(INPLACE.to_vec()), view in 0usize..4, vdim in 0usize..3, start in 0usize..3, mode in 0u8..3, bits in any::<u8>(), drop in 0usize..3, free in shape(3), seed in any::<u64>(), ds in any_dtype(), d_o in any_dtype(), sc in scalar(), alpha in prop::sample::select(vec![1.0, -0.5, 2.0, 0.0, f64::NAN]), lo in prop::option::of(param()), hi in prop::option::of(param())) {
        let (base, xs) = input(&ss, seed, ds, false);
        let n = xs.len() as i64;
        let positions = Tensor::arange(0i64, n).unwrap().reshape(ss.clone()).unwrap();
        let target = view_of(&base, view, vdim, start);
        let pos: Vec<usize> = view_of(&positions, view, vdim, start).to_vec::<i64>().unwrap().into_iter().map(|p| p as usize).collect();
        let ts = target.shape().dims().to_vec();
        let tv: Vec<V> = pos.iter().map(|&p| xs[p]).collect();
        let so = other_shape(&ts, mode, bits, drop, &free);
        let (o, xo) = input(&so, seed ^ 9, d_o, true);
        let before = base.version();
        let result = run_inplace(op, &target, &o, sc, alpha, lo, hi);
        match (inplace_ref(op, &tv, &ts, ds, &xo, &so, d_o, sc, alpha, lo, hi), result) {
            (Some(new), Ok(())) => {
                let mut want = xs.clone();
                for (&p, v) in pos.iter().zip(new) {
                    want[p] = v;
                }
                let got = read(&base);
                prop_assert!(matches(&got, &want, 0.0), "{} on {:?} of {} (view {}): got {:?}, want {:?}", op, ts, ds, view, got, want);
                prop_assert!(base.version() > before, "{}: the version did not move", op);
            }
            (None, Err(e)) => {
                let msg = e.to_string();
                prop_assert!(inplace_names(op).iter().any(|name| names_op(&msg, name)), "{}: error {:?} does not name the op", op, msg);
                prop_assert!(matches(&read(&base), &xs, 0.0), "{}: a refused op changed the base", op);
            }
            (Some(_), Err(e)) => prop_assert!(false, "{} on {:?} of {} with {:?} of {}: unexpected error {}", op, ts, ds, so, d_o, e),
            (None, Ok(())) => prop_assert!(false, "{} on {:?} of {} with {:?} of {}: accepted", op, ts, ds, so, d_o),
        }
        // A broadcast view has elements that alias: every in-place op refuses it.
        if !xs.is_empty() {
            let wide = base.unsqueeze(0).unwrap().expand([2].into_iter().chain(ss.iter().copied()).collect::<Vec<_>>()).unwrap();
            let before = read(&base);
            let r = run_inplace(op, &wide, &o.contiguous(), sc, alpha, lo, hi);
            prop_assert!(r.is_err(), "{}: wrote to a broadcast view", op);
            prop_assert!(matches(&read(&base), &before, 0.0));
        }
    }

    /// `update_` and `with_slice`, the CPU escape hatches: the closure sees the elements in
    /// order (a strided tensor through a contiguous copy); the wrong element type, a
    /// non-contiguous target or operand, a shape mismatch or an aliased operand are errors
    /// naming the op.
    #[test]
    fn update_and_with_slice(s in shape(3), seed in any::<u64>(), dt in any_dtype(), strided in any::<bool>(), other in shape(3)) {
        let (t, xs) = input(&s, seed, dt, strided);
        let seen = ok_or_names(t.with_slice::<f64, _>(|v| v.to_vec()), "with_slice");
        prop_assert_eq!(seen.is_some(), dt == DType::F64);
        if let Some(seen) = seen {
            prop_assert!(matches(&seen.into_iter().map(V::F).collect::<Vec<_>>(), &xs, 0.0));
        }
        let (o, xo) = input(&other, seed ^ 3, dt, false);
        let r = ok_or_names(t.update_::<f64, 1>([&o], |x, [y]| *x += y), "update_");
        prop_assert_eq!(r.is_some(), dt == DType::F64 && t.is_contiguous() && s == other);
        if r.is_some() {
            let want: Vec<V> = xs.iter().zip(&xo).map(|(x, y)| V::F(x.f() + y.f())).collect();
            prop_assert!(matches(&read(&t), &want, 0.0));
        }
        prop_assert!(ok_or_names(t.update_::<f64, 1>([&t], |x, [y]| *x += y), "update_").is_none());
    }
}

/// Integer `pow` of two tensors once cut exponents to `u32::MAX`, so `3^(2^32 + 1)` was
/// `3^(2^32 - 1)`; it now squares over the whole exponent, as `pow_scalar` and PyTorch do.
#[test]
fn integer_pow_takes_exponents_beyond_u32() -> ember_tensor::Result<()> {
    let e = (1i64 << 32) + 1;
    let base = Tensor::from_vec(vec![3i64, -1, 2, 7], [4])?;
    let got = base.pow(&Tensor::full([4], e, DType::I64)?)?.to_vec::<i64>()?;
    assert_eq!(got, base.pow_scalar(e)?.to_vec::<i64>()?);
    assert_eq!(got, vec![pow_mod(3, e as u64), -1, 0, pow_mod(7, e as u64)]);
    let bytes = Tensor::from_vec(vec![3u8], [1])?.pow(&Tensor::scalar(e))?;
    assert_eq!(bytes.to_vec::<u8>()?, vec![pow_mod(3, e as u64) as u8]);
    Ok(())
}

/// `masked_fill_` of an `i64` tensor with a float value once filled through the promoted
/// `f32` result, rounding every unmasked element beyond 2^24; the value now converts into
/// the tensor's dtype and the other elements keep theirs.
#[test]
fn masked_fill_in_place_keeps_the_other_integers() -> ember_tensor::Result<()> {
    let big = (1i64 << 53) + 1;
    let t = Tensor::from_vec(vec![big, big, -big], [3])?;
    t.masked_fill_(&Tensor::from_vec(vec![0u8, 1, 0], [3])?, 2.9)?;
    assert_eq!(t.to_vec::<i64>()?, vec![big, 2, -big]);
    let b = Tensor::from_vec(vec![7u8, 9], [2])?;
    b.masked_fill_(&Tensor::from_vec(vec![1u8, 0], [2])?, 255.5)?;
    assert_eq!(b.to_vec::<u8>()?, vec![255, 9]);
    // A value the dtype cannot hold is refused, as PyTorch refuses it.
    assert!(b.masked_fill_(&Tensor::from_vec(vec![1u8, 0], [2])?, 300.5).is_err());
    assert_eq!(b.to_vec::<u8>()?, vec![255, 9]);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// Broadcasting views of countable but unholdable size (2^48 elements and more) through
    /// the fallible elementwise ops: an error naming the op, never an attempt to allocate
    /// the output (which would abort the process, not fail the property).
    #[test]
    fn huge_broadcasts_are_refused(a in 1usize << 24..1usize << 30, b in 1usize << 24..1usize << 30, da in any_dtype(), db in any_dtype(), sc in scalar()) {
        let (x, _) = input(&[1, 1], 1, da, false);
        let (y, _) = input(&[1], 2, db, false);
        let huge = x.expand([a, b]).unwrap();
        let ops: [BinaryFn; 8] = [
            ("add", Tensor::add), ("sub", Tensor::sub), ("mul", Tensor::mul), ("div", Tensor::div),
            ("pow", Tensor::pow), ("maximum", Tensor::maximum), ("minimum", Tensor::minimum), ("eq", Tensor::eq),
        ];
        for (name, f) in ops {
            prop_assert!(ok_or_names(f(&huge, &y), name).is_none(), "{}", name);
            prop_assert!(ok_or_names(f(&y, &huge), name).is_none(), "{}", name);
        }
        let mask = Tensor::ones([1], DType::U8).unwrap();
        prop_assert!(ok_or_names(mask.where_cond(&huge, &y), "where").is_none());
        prop_assert!(ok_or_names(huge.masked_fill(&mask, sc), "masked_fill").is_none());
        prop_assert!(ok_or_names(huge.pow_scalar(sc), "pow_scalar").is_none() || huge.dtype().is_int() && matches!(sc, Scalar::Int(e) if e < 0));
    }
}

/// Binary ops between dtypes converted a huge broadcast operand first and reported the
/// failed allocation as `to_dtype`'s; `pow_scalar` of one converted it infallibly and would
/// abort. Both are errors naming the op called.
#[test]
fn huge_conversions_are_the_callers_errors() -> ember_tensor::Result<()> {
    let huge = Tensor::ones([1, 1], DType::U8)?.expand([1 << 25, 1 << 25])?;
    let one = Tensor::ones([1], DType::F32)?;
    let e = huge.add(&one).unwrap_err().to_string();
    assert!(e.starts_with("add:"), "{e}");
    let e = huge.pow_scalar(0.5).unwrap_err().to_string();
    assert!(e.starts_with("pow_scalar:"), "{e}");
    Ok(())
}

proptest! {
    // Large tensors are slow to check element by element: fewer cases.
    #![proptest_config(ProptestConfig::with_cases(CASES / 16))]

    /// Tensors of up to 90,000 elements take the kernels' parallel, vectorised and strided
    /// paths (chunks, remainders, a transposed layout and broadcast operands): the same
    /// references as the small properties.
    #[test]
    fn large_tensors_take_the_parallel_paths(rows in 1usize..300, cols in 1usize..300, row_operand in any::<bool>(), seed in any::<u64>(), da in any_dtype(), db in any_dtype(), strided in any::<bool>(), sc in scalar()) {
        let sa = vec![rows, cols];
        let sb = if row_operand { vec![rows, 1] } else { vec![cols] };
        let (a, xa) = input(&sa, seed, da, strided);
        let (b, xb) = input(&sb, seed ^ 1, db, false);
        let rt = result_type2((da, 2), (db, sb.len()));
        let vb = spread(&xb, &sb, &sa);
        let ops: [BinaryFn; 4] =
            [("add", Tensor::add), ("mul", Tensor::mul), ("maximum", Tensor::maximum), ("div", Tensor::div)];
        for (name, f) in ops {
            let out = if name == "div" { float_of(rt) } else { rt };
            let want = xa.iter().zip(&vb).map(|(&x, &y)| binary_ref(name, cast(x, out), cast(y, out), out)).collect();
            check(name, f(&a, &b), Want::Value(out, want, 0.0))?;
        }
        let want = xa.iter().zip(&vb).map(|(&x, &y)| mask(compare(cast(x, rt), cast(y, rt)) == Some(Ordering::Less))).collect();
        check("lt", a.lt(&b), Want::Value(DType::U8, want, 0.0))?;
        let out = with_scalar(da, sc);
        let want = xa.iter().map(|&x| scalar_ref("add_scalar", x, sc, da, out)).collect();
        check("add_scalar", Ok(a.add_scalar(sc)), Want::Value(out, want, 0.0))?;
        let want = xa.iter().map(|&x| if da.is_int() { wrap(-(x.i() as i128), da) } else { round(-x.f(), da) }).collect();
        check("neg", Ok(a.neg()), Want::Value(da, want, 0.0))?;
        let out = float_of(da);
        let want = xa.iter().map(|&x| round(cast(x, out).f().tanh(), out)).collect();
        check("tanh", Ok(a.tanh()), Want::Value(out, want, approx(out)))?;
        // In place into the (possibly transposed) tensor, from the broadcast operand.
        let want = inplace_ref("sub_", &xa, &sa, da, &xb, &sb, db, sc, 1.0, None, None);
        match (want, a.sub_(&b)) {
            (Some(w), Ok(())) => prop_assert!(matches(&read(&a), &w, 0.0), "sub_"),
            (None, Err(e)) => prop_assert!(names_op(&e.to_string(), "sub"), "{}", e),
            (w, r) => prop_assert!(false, "sub_: expected {:?}, got {:?}", w.is_some(), r),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// In-place ops whose operand is a view of the tensor written (itself, or its
    /// transpose when square): the operand's values are read as they were before the
    /// write, as if it had been copied first.
    #[test]
    fn inplace_ops_with_an_aliased_operand(n in 0usize..5, op in prop::sample::select(vec!["add_", "sub_", "mul_", "div_", "copy_", "add_scaled_"]), transpose in any::<bool>(), seed in any::<u64>(), ds in any_dtype()) {
        let s = [n, n];
        let (base, xs) = input(&s, seed, ds, false);
        let (operand, xo) = if transpose {
            let t = base.t().unwrap();
            let idx = indices(&s);
            let vals: Vec<V> = idx.iter().map(|i| xs[i[1] * n + i[0]]).collect();
            (t, vals)
        } else {
            (base.clone(), xs.clone())
        };
        let want = inplace_ref(op, &xs, &s, ds, &xo, &s, ds, Scalar::Int(0), 2.0, None, None);
        let got = run_inplace(op, &base, &operand, Scalar::Int(0), 2.0, None, None);
        match (want, got) {
            (Some(w), Ok(())) => prop_assert!(matches(&read(&base), &w, 0.0), "{} of {}: {:?} vs {:?}", op, ds, read(&base), w),
            (None, Err(e)) => prop_assert!(inplace_names(op).iter().any(|name| names_op(&e.to_string(), name)), "{}", e),
            (w, r) => prop_assert!(false, "{} of {}: expected {:?}, got {:?}", op, ds, w.is_some(), r),
        }
    }
}
