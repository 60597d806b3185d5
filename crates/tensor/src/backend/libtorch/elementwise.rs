//! Elementwise kernels on LibTorch: the rows of the unary, binary and comparison tables,
//! `where`, casts and the scalar conversions they share. Each op is PyTorch's kernel on the
//! views as they are; the few places where ember's rule differs from PyTorch's kernel
//! (integer division by zero, `sign(NaN)`, float-to-integer casts, 16-bit casts from
//! 64-bit types) add a selection or a detour, named where it is made.

use super::storage::{TORCH_DEVICE, kind, torch_err};
use crate::backend::{BinaryOp, CmpOp, UnaryOp};
use crate::dtype::{DType, Scalar};
use crate::error::Result;
use crate::ops::compare::{IntCmp, int_cmp};
use crate::ops::unary::int_exponent;
use half::{bf16, f16};
use tch::{Kind, Tensor};

type TScalar = tch::Scalar;

/// `s` converted to `dtype` as ember writes a value into a tensor ([`Scalar::to_element`]),
/// as the LibTorch scalar holding exactly that element.
pub(crate) fn element(s: Scalar, dtype: DType) -> TScalar {
    match dtype {
        DType::U8 => TScalar::int(s.to_element::<u8>() as i64),
        DType::I64 => TScalar::int(s.to_element::<i64>()),
        DType::F16 => TScalar::float(s.to_element::<f16>().to_f64()),
        DType::BF16 => TScalar::float(s.to_element::<bf16>().to_f64()),
        DType::F32 => TScalar::float(s.to_element::<f32>() as f64),
        DType::F64 => TScalar::float(s.to_element::<f64>()),
    }
}

/// [`element`] with the saturating conversion of bounds ([`Scalar::to_element_saturating`]).
fn bound(s: Scalar, dtype: DType) -> TScalar {
    match dtype {
        DType::U8 => TScalar::int(s.to_element_saturating::<u8>() as i64),
        _ => element(s, dtype),
    }
}

/// A 0-d tensor of `dtype` holding `s` converted to it.
pub(crate) fn scalar_tensor(op: &'static str, s: TScalar, dtype: DType) -> Result<Tensor> {
    Tensor::f_scalar_tensor(s, (kind(dtype), TORCH_DEVICE)).map_err(torch_err(op))
}

/// `x` converted to `dtype` in a tensor of its own (a copy even to its own dtype), with
/// ember's conversions: floats go
/// into integers as Rust's `as` does (truncating, saturating, NaN to 0; PyTorch's
/// conversion is undefined out of range), and `f64` and `i64` reach the 16-bit floats
/// through `f32`, as ember's casts do.
pub(crate) fn cast(op: &'static str, x: &Tensor, from: DType, to: DType) -> Result<Tensor> {
    let e = torch_err(op);
    // `copy`: a cast to the view's own dtype must not hand back the view.
    let to_kind = |t: &Tensor, d: DType| t.f_to_dtype(kind(d), false, true).map_err(torch_err(op));
    if from.is_float() && !to.is_float() {
        let wide = to_kind(x, DType::F64)?;
        let finite = wide.f_nan_to_num(0.0, f64::INFINITY, f64::NEG_INFINITY).map_err(&e)?;
        return match to {
            DType::U8 => to_kind(&finite.f_clamp(0.0, 255.0).map_err(&e)?.f_trunc().map_err(&e)?, to),
            _ => {
                // The largest f64 below 2^63; 2^63 and above saturate to i64::MAX.
                const BELOW_2_63: f64 = 9_223_372_036_854_774_784.0;
                let over = finite.f_ge(9_223_372_036_854_775_808.0).map_err(&e)?;
                let clamped = finite.f_clamp(-9_223_372_036_854_775_808.0, BELOW_2_63).map_err(&e)?;
                let ints = to_kind(&clamped.f_trunc().map_err(&e)?, to)?;
                let max = scalar_tensor(op, TScalar::int(i64::MAX), DType::I64)?;
                ints.f_where_self(&over.f_logical_not().map_err(&e)?, &max).map_err(&e)
            }
        };
    }
    if to.is_half() && matches!(from, DType::F64 | DType::I64) {
        return to_kind(&to_kind(x, DType::F32)?, to);
    }
    to_kind(x, to)
}

/// One row of the unary table on `x` of `dtype` (a float for the float-only rows).
pub(crate) fn unary(op: UnaryOp, x: &Tensor, dtype: DType) -> Result<Tensor> {
    use UnaryOp::*;
    let name = op.name();
    if op.is_float_only() && !dtype.is_float() {
        return Err(op.not_for_ints(dtype));
    }
    if dtype.is_half() && matches!(op, Softplus { .. } | LeakyRelu(_) | Elu(_)) {
        // Composed of several kernels: computed in f32 and rounded once, as ember's
        // 16-bit functions are (each kernel on 16-bit values would round every step).
        let e = torch_err(name);
        let wide = x.f_to_dtype(Kind::Float, false, false).map_err(&e)?;
        return unary(op, &wide, DType::F32)?.f_to_dtype(kind(dtype), false, false).map_err(e);
    }
    let e = torch_err(name);
    let r = match op {
        Neg => x.f_neg(),
        Abs => x.f_abs(),
        // PyTorch's CPU `sign` gives 0 for NaN; ember keeps NaN (NumPy's convention).
        Sign if dtype.is_float() => x.f_sign().and_then(|s| s.f_where_self(&x.f_isnan()?.f_logical_not()?, x)),
        Sign => x.f_sign(),
        Square => x.f_mul(x),
        Relu => x.f_relu(),
        Exp => x.f_exp(),
        Log => x.f_log(),
        Sqrt => x.f_sqrt(),
        Rsqrt => x.f_rsqrt(),
        Sin => x.f_sin(),
        Cos => x.f_cos(),
        Tanh => x.f_tanh(),
        Sigmoid => x.f_sigmoid(),
        // ATen's vectorised GELU gives NaN at +inf; ember (and the formula) gives inf.
        Gelu => x.f_gelu("none").and_then(|g| x.f_where_self(&x.f_eq(f64::INFINITY)?, &g)),
        GeluTanh => x.f_gelu("tanh"),
        Silu => x.f_silu(),
        Erf => x.f_erf(),
        Log1p => x.f_log1p(),
        Expm1 => x.f_expm1(),
        Recip => x.f_reciprocal(),
        Floor => x.f_floor(),
        Ceil => x.f_ceil(),
        Round => x.f_round(),
        // tch binds these three without their parameters: PyTorch's kernel formulas, as
        // selections of PyTorch's elementwise kernels.
        Softplus { beta, threshold } => {
            let bx = x.f_mul_scalar(beta).map_err(&e)?;
            let soft = bx.f_exp().and_then(|t| t.f_log1p()).and_then(|t| t.f_div_scalar(beta)).map_err(&e)?;
            x.f_where_self(&bx.f_gt(threshold).map_err(&e)?, &soft)
        }
        LeakyRelu(slope) => x.f_where_self(&x.f_gt(0).map_err(&e)?, &x.f_mul_scalar(slope).map_err(&e)?),
        Elu(alpha) => {
            let neg = x.f_expm1().and_then(|t| t.f_mul_scalar(alpha)).map_err(&e)?;
            x.f_where_self(&x.f_gt(0).map_err(&e)?, &neg)
        }
        Clamp { min, max } => {
            // The bounds in the dtype, as ember's kernels take them (a bound beyond f16's
            // range is an infinity; ATen refuses it).
            let (lo, hi) = (bound(Scalar::Float(min), dtype), bound(Scalar::Float(max), dtype));
            // min(max(x, lo), hi) with NaN kept: PyTorch's clamp.
            x.f_clamp_min(lo).and_then(|t| t.f_clamp_max(hi))
        }
        AddScalar(s) => x.f_add_scalar(arith(s, dtype)),
        SubScalar(s) => x.f_sub_scalar(arith(s, dtype)),
        RSubScalar(s) => scalar_tensor(name, arith(s, dtype), dtype)?.f_sub(x),
        MulScalar(s) => x.f_mul_scalar(arith(s, dtype)),
        DivScalar(s) => x.f_div_scalar(arith(s, dtype)),
        RDivScalar(s) if dtype.is_half() => {
            // ember divides the f32 scalar by the widened element and rounds once.
            let wide = x.f_to_dtype(Kind::Float, false, false).map_err(&e)?;
            let s = scalar_tensor(name, TScalar::float(s.to_element::<f32>() as f64), DType::F32)?;
            s.f_div(&wide).and_then(|t| t.f_to_dtype(kind(dtype), false, false))
        }
        RDivScalar(s) => scalar_tensor(name, arith(s, dtype), dtype)?.f_div(x),
        PowScalar(p) if !dtype.is_float() => {
            let p = int_exponent(p)?;
            x.f_pow_tensor_scalar(TScalar::int(p.min(i64::MAX as u64) as i64))
        }
        // The shortcuts ember takes (and ATen's f32 kernel): squares and square roots.
        PowScalar(p) if p.to_f64() == 2.0 => x.f_mul(x),
        PowScalar(p) if p.to_f64() == 0.5 => x.f_sqrt(),
        PowScalar(p) => x.f_pow_tensor_scalar(arith(p, dtype)),
        RPowScalar(b) => scalar_tensor(name, arith(b, dtype), dtype)?.f_pow(x),
        MaximumScalar(s) => x.f_maximum(&scalar_tensor(name, bound(s, dtype), dtype)?),
        MinimumScalar(s) => x.f_minimum(&scalar_tensor(name, bound(s, dtype), dtype)?),
    };
    r.map_err(e)
}

/// The scalar of a tensor-scalar op as PyTorch's kernels take it: an integer tensor's
/// scalar converted to its dtype first (a float scalar truncates, an integer wraps), a
/// float tensor's as it is, which PyTorch converts where ember's emulation of it does.
fn arith(s: Scalar, dtype: DType) -> TScalar {
    match (dtype, s) {
        (DType::U8 | DType::I64, _) => element(s, dtype),
        (_, Scalar::Int(v)) => TScalar::int(v),
        (_, Scalar::Float(v)) => TScalar::float(v),
    }
}

/// One row of the binary table on `a` and `b` of `dtype` and one shape.
pub(crate) fn binary(op: BinaryOp, a: &Tensor, b: &Tensor, dtype: DType) -> Result<Tensor> {
    use BinaryOp::*;
    let name = op.name();
    let e = torch_err(name);
    let r = match op {
        Add => a.f_add(b),
        Sub => a.f_sub(b),
        Mul => a.f_mul(b),
        Div if dtype.is_float() => a.f_div(b),
        Div => return int_div(a, b, dtype),
        Pow => a.f_pow(b),
        Maximum => a.f_maximum(b),
        Minimum => a.f_minimum(b),
    };
    r.map_err(e)
}

/// Integer division truncating toward zero, where dividing by zero gives 0 (ember's rule;
/// PyTorch raises) and `i64::MIN / -1` wraps (it traps in C++).
fn int_div(a: &Tensor, b: &Tensor, dtype: DType) -> Result<Tensor> {
    let e = torch_err("div");
    let zero = b.f_eq(0).map_err(&e)?;
    if dtype == DType::U8 {
        let one = scalar_tensor("div", TScalar::int(1), dtype)?;
        let q = a.f_div_tensor_mode(&one.f_where_self(&zero, b).map_err(&e)?, "trunc").map_err(&e)?;
        return scalar_tensor("div", TScalar::int(0), dtype)?.f_where_self(&zero, &q).map_err(e);
    }
    let minus_one = b.f_eq(-1).map_err(&e)?;
    let special = zero.f_logical_or(&minus_one).map_err(&e)?;
    let one = scalar_tensor("div", TScalar::int(1), dtype)?;
    let safe = one.f_where_self(&special, b).map_err(&e)?;
    let q = a.f_div_tensor_mode(&safe, "trunc").map_err(&e)?;
    let q = a.f_neg().and_then(|n| n.f_where_self(&minus_one, &q)).map_err(&e)?;
    scalar_tensor("div", TScalar::int(0), dtype)?.f_where_self(&zero, &q).map_err(e)
}

/// A comparison as PyTorch's boolean mask, for `compare` and `compare_scalar`.
fn mask(op: CmpOp, a: &Tensor, b: &Tensor) -> std::result::Result<Tensor, tch::TchError> {
    match op {
        CmpOp::Eq => a.f_eq_tensor(b),
        CmpOp::Ne => a.f_ne_tensor(b),
        CmpOp::Lt => a.f_lt_tensor(b),
        CmpOp::Le => a.f_le_tensor(b),
        CmpOp::Gt => a.f_gt_tensor(b),
        CmpOp::Ge => a.f_ge_tensor(b),
    }
}

/// A boolean mask as ember's `u8` mask.
pub(crate) fn as_u8(op: &'static str, m: Tensor) -> Result<Tensor> {
    m.f_to_dtype(Kind::Uint8, false, false).map_err(torch_err(op))
}

/// `a op b` as a `u8` mask.
pub(crate) fn compare(op: CmpOp, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    as_u8(op.name(), mask(op, a, b).map_err(torch_err(op.name()))?)
}

/// `a op s` as a `u8` mask: a float view compares with the scalar rounded to its dtype,
/// an integer view with the scalar's exact value ([`int_cmp`]).
pub(crate) fn compare_scalar(op: CmpOp, a: &Tensor, dtype: DType, s: Scalar) -> Result<Tensor> {
    let name = op.name();
    let e = torch_err(name);
    if dtype.is_float() {
        let s = scalar_tensor(name, element(s, dtype), dtype)?;
        return compare(op, a, &s);
    }
    match int_cmp(op, s) {
        IntCmp::Const(v) => {
            a.f_full_like(i64::from(v)).and_then(|t| t.f_to_dtype(Kind::Uint8, false, false)).map_err(e)
        }
        IntCmp::Cmp(op, v) => {
            let wide = a.f_to_dtype(Kind::Int64, false, false).map_err(&e)?;
            compare(op, &wide, &scalar_tensor(name, TScalar::int(v), DType::I64)?)
        }
    }
}

/// `cond ? a : b` for a `u8` condition.
pub(crate) fn where_cond(c: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let e = torch_err("where");
    a.f_where_self(&c.f_ne(0).map_err(&e)?, b).map_err(e)
}
