//! Property tests of the elementwise `Var` ops on every dtype: every unary function,
//! parametrised function, clamp, tensor-scalar op, binary op (broadcasting, mixed dtypes
//! and ranks), comparison and `where_cond` accepts exactly what the `Tensor` op accepts,
//! gives bitwise the same value in the same dtype, and its backward gives each float input a
//! gradient of the input's shape and dtype, and integer inputs none. Inputs are the pools of
//! `ember_testing::prop` (signed zeros, huge values, infinities, NaN, integer extremes) in
//! contiguous and strided layouts; the `Tensor` ops themselves are checked against naive
//! references in `crates/tensor/tests/prop_elementwise.rs`.

use ember_autograd::Var;
use ember_tensor::{DType, Result, Scalar, Tensor};
use ember_testing::prop::{agree, any_dtype, input, other_shape, shape};
use proptest::prelude::*;

/// Cases per property: each case runs every op of its family on one input.
const CASES: u32 = 1000;

/// A leaf holding `t`: a parameter when float (integer values cannot require grad).
fn leaf(t: Tensor) -> Var {
    Var::param(t)
}

/// After `agree`'s backward, integer inputs have no gradient.
fn no_integer_grads(op: &str, inputs: &[&Var]) -> std::result::Result<(), TestCaseError> {
    for x in inputs {
        if x.dtype().is_int() {
            prop_assert!(x.grad().is_none(), "{}: an integer input got a gradient", op);
        }
    }
    Ok(())
}

type Unary = (&'static str, fn(&Var) -> Var, fn(&Tensor) -> Tensor);

const UNARY: &[Unary] = &[
    ("neg", Var::neg, Tensor::neg),
    ("abs", Var::abs, Tensor::abs),
    ("sign", Var::sign, Tensor::sign),
    ("square", Var::square, Tensor::square),
    ("relu", Var::relu, Tensor::relu),
    ("exp", Var::exp, Tensor::exp),
    ("log", Var::log, Tensor::log),
    ("sqrt", Var::sqrt, Tensor::sqrt),
    ("rsqrt", Var::rsqrt, Tensor::rsqrt),
    ("sin", Var::sin, Tensor::sin),
    ("cos", Var::cos, Tensor::cos),
    ("tanh", Var::tanh, Tensor::tanh),
    ("sigmoid", Var::sigmoid, Tensor::sigmoid),
    ("gelu", Var::gelu, Tensor::gelu),
    ("gelu_tanh", Var::gelu_tanh, Tensor::gelu_tanh),
    ("silu", Var::silu, Tensor::silu),
    ("erf", Var::erf, Tensor::erf),
    ("log1p", Var::log1p, Tensor::log1p),
    ("expm1", Var::expm1, Tensor::expm1),
    ("recip", Var::recip, Tensor::recip),
    ("floor", Var::floor, Tensor::floor),
    ("ceil", Var::ceil, Tensor::ceil),
    ("round", Var::round, Tensor::round),
];

fn scalar() -> impl Strategy<Value = Scalar> {
    prop_oneof![
        prop::sample::select(vec![0i64, 1, -1, 2, 3, -3, 65, 300, (1 << 53) + 1, i64::MAX, i64::MIN, 1 << 33])
            .prop_map(Scalar::Int),
        prop::sample::select(vec![0.0, -0.0, 0.5, -1.25, 2.0, 2.5, 1e30, f64::NAN, f64::INFINITY, f64::NEG_INFINITY])
            .prop_map(Scalar::Float),
    ]
}

fn param() -> impl Strategy<Value = f64> {
    prop::sample::select(vec![
        0.0,
        0.01,
        0.5,
        1.0,
        -1.5,
        2.0,
        20.0,
        -7.0,
        1e30,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// Every function of one tensor, the parametrised ones and clamp.
    #[test]
    fn unary_ops_agree(s in shape(3), seed in any::<u64>(), dt in any_dtype(), strided in any::<bool>(), p in param(), q in param(), lo in prop::option::of(param()), hi in prop::option::of(param())) {
        let (t, _) = input(&s, seed, dt, strided);
        let x = leaf(t.clone());
        for &(name, v, f) in UNARY {
            agree(name, Ok(v(&x)), Ok(f(&t)), &[&x])?;
            no_integer_grads(name, &[&x])?;
        }
        agree("leaky_relu", Ok(x.leaky_relu(p)), Ok(t.leaky_relu(p)), &[&x])?;
        agree("elu", Ok(x.elu(p)), Ok(t.elu(p)), &[&x])?;
        if p != 0.0 {
            agree("softplus", Ok(x.softplus(p, q)), Ok(t.softplus(p, q)), &[&x])?;
        }
        agree("clamp", Ok(x.clamp(lo, hi)), Ok(t.clamp(lo, hi)), &[&x])?;
        agree("to_dtype", Ok(x.to_dtype(DType::F64)), Ok(t.to_dtype(DType::F64)), &[&x])?;
    }

    /// Every tensor-scalar op and comparison with a scalar.
    #[test]
    fn scalar_ops_agree(s in shape(3), seed in any::<u64>(), dt in any_dtype(), strided in any::<bool>(), sc in scalar()) {
        let (t, _) = input(&s, seed, dt, strided);
        let x = leaf(t.clone());
        type ScalarOp = (&'static str, fn(&Var, Scalar) -> Var, fn(&Tensor, Scalar) -> Tensor);
        let ops: [ScalarOp; 15] = [
            ("add_scalar", |v, s| v.add_scalar(s), |t, s| t.add_scalar(s)),
            ("sub_scalar", |v, s| v.sub_scalar(s), |t, s| t.sub_scalar(s)),
            ("rsub_scalar", |v, s| v.rsub_scalar(s), |t, s| t.rsub_scalar(s)),
            ("mul_scalar", |v, s| v.mul_scalar(s), |t, s| t.mul_scalar(s)),
            ("div_scalar", |v, s| v.div_scalar(s), |t, s| t.div_scalar(s)),
            ("rdiv_scalar", |v, s| v.rdiv_scalar(s), |t, s| t.rdiv_scalar(s)),
            ("rpow_scalar", |v, s| v.rpow_scalar(s), |t, s| t.rpow_scalar(s)),
            ("maximum_scalar", |v, s| v.maximum_scalar(s), |t, s| t.maximum_scalar(s)),
            ("minimum_scalar", |v, s| v.minimum_scalar(s), |t, s| t.minimum_scalar(s)),
            ("eq_scalar", |v, s| v.eq_scalar(s), |t, s| t.eq_scalar(s)),
            ("ne_scalar", |v, s| v.ne_scalar(s), |t, s| t.ne_scalar(s)),
            ("lt_scalar", |v, s| v.lt_scalar(s), |t, s| t.lt_scalar(s)),
            ("le_scalar", |v, s| v.le_scalar(s), |t, s| t.le_scalar(s)),
            ("gt_scalar", |v, s| v.gt_scalar(s), |t, s| t.gt_scalar(s)),
            ("ge_scalar", |v, s| v.ge_scalar(s), |t, s| t.ge_scalar(s)),
        ];
        for (name, v, f) in ops {
            let out = v(&x, sc);
            if ["eq_scalar", "ne_scalar", "lt_scalar", "le_scalar", "gt_scalar", "ge_scalar"].contains(&name) {
                prop_assert!(!out.requires_grad(), "{}: a mask requires grad", name);
            }
            agree(name, Ok(out), Ok(f(&t, sc)), &[&x])?;
            no_integer_grads(name, &[&x])?;
        }
        agree("pow_scalar", x.pow_scalar(sc), t.pow_scalar(sc), &[&x])?;
    }

    /// Binary ops and comparisons of two `Var`s of random dtypes, ranks and (often
    /// incompatible) shapes; `where_cond` with a condition of any dtype.
    #[test]
    fn binary_ops_agree(sa in shape(3), mode in 0u8..3, bits in any::<u8>(), drop in 0usize..3, free in shape(3), seed in any::<u64>(), da in any_dtype(), db in any_dtype(), dc in any_dtype(), strided in any::<bool>()) {
        let sb = other_shape(&sa, mode, bits, drop, &free);
        let (ta, _) = input(&sa, seed, da, strided);
        let (tb, _) = input(&sb, seed ^ 0x5eed, db, !strided);
        let (a, b) = (leaf(ta.clone()), leaf(tb.clone()));
        type BinaryOp = (&'static str, fn(&Var, &Var) -> Result<Var>, fn(&Tensor, &Tensor) -> Result<Tensor>);
        let ops: [BinaryOp; 13] = [
            ("add", Var::add, Tensor::add),
            ("sub", Var::sub, Tensor::sub),
            ("mul", Var::mul, Tensor::mul),
            ("div", Var::div, Tensor::div),
            ("pow", Var::pow, Tensor::pow),
            ("maximum", Var::maximum, Tensor::maximum),
            ("minimum", Var::minimum, Tensor::minimum),
            ("eq", Var::eq, Tensor::eq),
            ("ne", Var::ne, Tensor::ne),
            ("lt", Var::lt, Tensor::lt),
            ("le", Var::le, Tensor::le),
            ("gt", Var::gt, Tensor::gt),
            ("ge", Var::ge, Tensor::ge),
        ];
        for (name, v, f) in ops {
            agree(name, v(&a, &b), f(&ta, &tb), &[&a, &b])?;
            no_integer_grads(name, &[&a, &b])?;
        }
        let (tc, _) = input(&sa[..sa.len().min(1)], seed ^ 3, dc, false);
        let c = Var::new(tc.clone());
        agree("where", c.where_cond(&a, &b), tc.where_cond(&ta, &tb), &[&a, &b])?;
        no_integer_grads("where", &[&a, &b])?;
    }
}
