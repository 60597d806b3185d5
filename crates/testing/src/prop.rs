//! Inputs of the API property tests (`prop_*.rs` in the tensor, autograd and nn crates):
//! deterministic tensors of any shape, the proptest strategies for shapes and dtypes, and
//! the checks every property shares (an error names its op; a `Var` op agrees with its
//! `Tensor` op) with the index arithmetic of their naive references.

use ember_autograd::Var;
use ember_tensor::{DType, Result, Scalar, Tensor};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// `shape.numel()` values in `[-2, 2]` in steps of 1/4, spread by `seed`: exactly
/// representable in every float dtype, with repeats (ties for arg-reductions and pools).
pub fn values(shape: &[usize], seed: u64) -> Vec<f64> {
    let n: usize = shape.iter().product();
    (0..n).map(|i| ((i as u64 * 2_654_435_761 + seed) % 17) as f64 / 4.0 - 2.0).collect()
}

/// A contiguous tensor of [`values`] in `dtype`.
pub fn tensor(shape: &[usize], seed: u64, dtype: DType) -> Tensor {
    Tensor::from_vec(values(shape, seed), shape.to_vec()).unwrap().to_dtype(dtype)
}

/// A parameter (a leaf that requires its gradient) holding [`tensor`].
pub fn param(shape: &[usize], seed: u64, dtype: DType) -> Var {
    Var::param(tensor(shape, seed, dtype))
}

/// The value of `v` as `f64`s.
pub fn var_f64s(v: &Var) -> Vec<f64> {
    v.value().to_vec_f64().unwrap()
}

/// Elementwise closeness for the float dtype `dt` (relative 2e-3 in `f32`, 1e-9 in `f64`),
/// NaN matching NaN and infinities matching exactly.
pub fn close(got: &[f64], want: &[f64], dt: DType) -> bool {
    let tol = if dt == DType::F32 { 2e-3 } else { 1e-9 };
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(g, w)| (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol * (1.0 + w.abs()))
}

/// Either float dtype.
pub fn dtype() -> impl Strategy<Value = DType> {
    prop_oneof![Just(DType::F32), Just(DType::F64)]
}

/// Every dtype ember has: `u8` (also the dtype of masks), `i64`, `f32` and `f64`.
pub fn any_dtype() -> impl Strategy<Value = DType> {
    prop_oneof![Just(DType::U8), Just(DType::I64), Just(DType::F32), Just(DType::F64)]
}

/// Shapes of rank up to `max_rank` with extents 0 to 4 (empty tensors included).
pub fn shape(max_rank: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..5, 0..=max_rank)
}

/// Whether an error message names `op`: ember's messages start with `op: `, or quote it
/// that way when one op reports on behalf of another.
pub fn names_op(msg: &str, op: &str) -> bool {
    msg.starts_with(op) || msg.contains(&format!("{op}:"))
}

/// `Ok(v)`, or `None` after checking that the error names `op` (a failed check panics,
/// which fails the property).
pub fn ok_or_names<T>(result: Result<T>, op: &str) -> Option<T> {
    match result {
        Ok(v) => Some(v),
        Err(e) => {
            let msg = e.to_string();
            assert!(names_op(&msg, op), "{op}: error {msg:?} does not name the op");
            None
        }
    }
}

/// A signed dimension resolved against `rank` as PyTorch does, or `None` when invalid.
pub fn resolve(dim: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let d = if dim < 0 { dim + r } else { dim };
    (0..r).contains(&d).then_some(d as usize)
}

/// Row-major strides of `shape`.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// Every multi-index of `shape` in row-major order.
pub fn indices(shape: &[usize]) -> Vec<Vec<usize>> {
    let n: usize = shape.iter().product();
    let st = strides(shape);
    (0..n).map(|flat| shape.iter().enumerate().map(|(d, &e)| (flat / st[d]) % e.max(1)).collect()).collect()
}

/// The element at multi-index `idx` of row-major `data` of `shape`.
pub fn at<T: Copy>(data: &[T], shape: &[usize], idx: &[usize]) -> T {
    data[idx.iter().zip(strides(shape)).map(|(i, s)| i * s).sum::<usize>()]
}

/// The broadcast shape of `a` and `b` by NumPy's rule, or `None` when they do not broadcast.
pub fn broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let rank = a.len().max(b.len());
    let dim = |s: &[usize], d: usize| if d + s.len() >= rank { s[d + s.len() - rank] } else { 1 };
    (0..rank)
        .map(|d| match (dim(a, d), dim(b, d)) {
            (x, y) if x == y || y == 1 => Some(x),
            (1, y) => Some(y),
            _ => None,
        })
        .collect()
}

/// The element of row-major `data` of `shape` that the broadcast index `idx` (of a rank at
/// least `shape`'s) reads.
pub fn broadcast_at<T: Copy>(data: &[T], shape: &[usize], idx: &[usize]) -> T {
    let lead = idx.len() - shape.len();
    let own: Vec<usize> = shape.iter().enumerate().map(|(d, &e)| if e == 1 { 0 } else { idx[lead + d] }).collect();
    at(data, shape, &own)
}

/// The values of `t` as `f64` (exact for every float and `u8`; `i64` beyond 2^53 rounds).
pub fn f64s(t: &Tensor) -> Vec<f64> {
    t.to_vec_f64().unwrap()
}

/// Equal lengths and bitwise equal elements, any NaN matching any NaN.
pub fn same_bits(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits() || x.is_nan() && y.is_nan())
}

/// The Var op agrees with the Tensor op: both fail (the Var's error naming `op`), or both
/// succeed with the same dtype, shape and bits; then backward from a float result reaches
/// every input with a gradient of its shape and dtype.
pub fn agree(
    op: &str,
    var: Result<Var>,
    tensor: Result<Tensor>,
    inputs: &[&Var],
) -> std::result::Result<(), TestCaseError> {
    match (var, tensor) {
        (Err(e), Err(_)) => {
            let msg = e.to_string();
            prop_assert!(msg.contains(op), "{}: error {:?} does not name the op", op, msg);
        }
        (Ok(v), Ok(t)) => {
            prop_assert_eq!(v.shape(), t.shape().clone(), "{}", op);
            prop_assert_eq!(v.dtype(), t.dtype(), "{}", op);
            let (a, b) = (v.value().to_vec_f64().unwrap(), t.to_vec_f64().unwrap());
            prop_assert!(same_bits(&a, &b), "{}: {:?} vs {:?}", op, a, b);
            if v.requires_grad() && v.dtype().is_float() {
                v.sum_all().backward().unwrap();
                for x in inputs {
                    if let Some(g) = x.grad() {
                        prop_assert_eq!(g.shape(), &x.shape(), "{}: gradient shape", op);
                        prop_assert_eq!(g.dtype(), x.dtype(), "{}: gradient dtype", op);
                        x.zero_grad();
                    }
                }
            }
        }
        (Ok(_), Err(e)) => prop_assert!(false, "{}: Var accepted what Tensor refused ({})", op, e),
        (Err(e), Ok(_)) => prop_assert!(false, "{}: Var refused what Tensor accepted ({})", op, e),
    }
    Ok(())
}

// Elements of every dtype, held exactly, for the references of the dtype-aware properties.

/// One element as the reference holds it: integers exactly (`u8` in `0..=255`), floats as
/// `f64` (an `f32` value is exactly representable).
#[derive(Clone, Copy, Debug)]
pub enum Elem {
    /// An integer (`u8` or `i64`).
    I(i64),
    /// A float (`f32` or `f64`).
    F(f64),
}

impl Elem {
    /// The value as `f64` (an `i64` beyond 2^53 rounds).
    pub fn f(self) -> f64 {
        match self {
            Elem::I(i) => i as f64,
            Elem::F(f) => f,
        }
    }

    /// The value as `i64` (a float truncates, as `as` does).
    pub fn i(self) -> i64 {
        match self {
            Elem::I(i) => i,
            Elem::F(f) => f as i64,
        }
    }
}

/// `v` converted to `dt` by Rust's `as` casts: the documented `to_dtype` rule (integers
/// wrap into `u8`, floats truncate toward zero and saturate, NaN becomes 0).
pub fn cast(v: Elem, dt: DType) -> Elem {
    match (v, dt) {
        (Elem::I(i), DType::U8) => Elem::I(i as u8 as i64),
        (Elem::I(i), DType::I64) => Elem::I(i),
        (Elem::I(i), DType::F32) => Elem::F(i as f32 as f64),
        (Elem::I(i), DType::F64) => Elem::F(i as f64),
        (Elem::I(i), DType::F16) => Elem::F(ember_tensor::f16::from_f32(i as f32).to_f64()),
        (Elem::I(i), DType::BF16) => Elem::F(ember_tensor::bf16::from_f32(i as f32).to_f64()),
        (Elem::F(f), DType::F16) => Elem::F(ember_tensor::f16::from_f32(f as f32).to_f64()),
        (Elem::F(f), DType::BF16) => Elem::F(ember_tensor::bf16::from_f32(f as f32).to_f64()),
        (Elem::F(f), DType::U8) => Elem::I(f as u8 as i64),
        (Elem::F(f), DType::I64) => Elem::I(f as i64),
        (Elem::F(f), DType::F32) => Elem::F(f as f32 as f64),
        (Elem::F(f), DType::F64) => Elem::F(f),
    }
}

/// A scalar as the kernels take it into element type `dt` (`Scalar::to_element`).
pub fn scalar_in(s: Scalar, dt: DType) -> Elem {
    match s {
        Scalar::Int(v) => cast(Elem::I(v), dt),
        Scalar::Float(v) => cast(Elem::F(v), dt),
    }
}

/// Whether a tensor of `dt` can hold `s` written as it is (`full`, `fill_`, `masked_fill`):
/// integers from -255 to 255 into `u8`, any into the others; non-negative floats whose
/// integer part is at most 255 into `u8`, floats whose integer part lies in `i64`'s range
/// into `i64`, finite floats within `f32`'s range and every non-finite one into `f32`, any
/// into `f64`.
pub fn scalar_fits(s: Scalar, dt: DType) -> bool {
    match (s, dt) {
        (Scalar::Int(v), DType::U8) => v.unsigned_abs() <= 255,
        (Scalar::Int(v), DType::F16) => v.unsigned_abs() <= 65504,
        (Scalar::Int(_), _) => true,
        (Scalar::Float(v), DType::U8) => v.is_finite() && !v.is_sign_negative() && v.trunc() <= 255.0 || v == 0.0,
        (Scalar::Float(v), DType::I64) => v.is_finite() && v.trunc() >= -(2f64.powi(63)) && v.trunc() < 2f64.powi(63),
        (Scalar::Float(v), DType::F32) => v.is_nan() || v.is_infinite() || v.abs() <= f32::MAX as f64,
        (Scalar::Float(v), DType::F16) => v.is_nan() || v.is_infinite() || v.abs() <= 65504.0,
        (Scalar::Float(v), DType::BF16) => v.is_nan() || v.is_infinite() || v.abs() <= ember_tensor::bf16::MAX.to_f64(),
        (Scalar::Float(_), DType::F64) => true,
    }
}

/// The float values the element pools draw from: signed zeros, tiny and huge values,
/// infinities and NaN among ordinary ones. No subnormals: ember's kernels flush them by
/// default (`set_flush_denormal`), which `crates/tensor/tests/flush_denormal.rs` covers.
pub const FLOATS: &[f64] = &[
    0.0,
    -0.0,
    0.25,
    -0.5,
    1.0,
    -1.5,
    2.0,
    3.75,
    -7.0,
    0.1,
    100.0,
    1e-30,
    -3e38,
    1e30,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
];
/// The `i64` values of the pools: the extremes and values beyond 2^53 among small ones.
pub const INTS: &[i64] = &[0, 1, -1, 2, -3, 7, 100, -128, 255, 256, 1 << 40, (1 << 53) + 1, i64::MAX, i64::MIN];
/// The `u8` values of the pools.
pub const BYTES: &[i64] = &[0, 1, 2, 3, 7, 100, 127, 128, 200, 255];

/// `shape.numel()` values of `dt` from its pool, spread by `seed`.
pub fn pool_values(shape: &[usize], seed: u64, dt: DType) -> Vec<Elem> {
    let n: usize = shape.iter().product();
    let pick = |i: usize, len: usize| ((i as u64).wrapping_mul(2_654_435_761).wrapping_add(seed) % len as u64) as usize;
    (0..n)
        .map(|i| match dt {
            DType::U8 => Elem::I(BYTES[pick(i, BYTES.len())]),
            DType::I64 => Elem::I(INTS[pick(i, INTS.len())]),
            _ => cast(Elem::F(FLOATS[pick(i, FLOATS.len())]), dt),
        })
        .collect()
}

/// A tensor of `vals` in `dt`; with `strided`, a non-contiguous view holding the same
/// logical values (a permuted copy permuted back).
pub fn make(shape: &[usize], vals: &[Elem], dt: DType, strided: bool) -> Tensor {
    let s = shape.to_vec();
    let t = match dt {
        DType::U8 => Tensor::from_vec(vals.iter().map(|v| v.i() as u8).collect::<Vec<_>>(), s),
        DType::I64 => Tensor::from_vec(vals.iter().map(|v| v.i()).collect::<Vec<_>>(), s),
        DType::F32 => Tensor::from_vec(vals.iter().map(|v| v.f() as f32).collect::<Vec<_>>(), s),
        DType::F64 => Tensor::from_vec(vals.iter().map(|v| v.f()).collect::<Vec<_>>(), s),
        DType::F16 => Tensor::from_vec(vals.iter().map(|v| ember_tensor::f16::from_f64(v.f())).collect::<Vec<_>>(), s),
        DType::BF16 => {
            Tensor::from_vec(vals.iter().map(|v| ember_tensor::bf16::from_f64(v.f())).collect::<Vec<_>>(), s)
        }
    }
    .unwrap();
    if strided && shape.len() > 1 {
        let rev: Vec<i64> = (0..shape.len() as i64).rev().collect();
        t.permute(&rev).unwrap().contiguous().permute(&rev).unwrap()
    } else {
        t
    }
}

/// [`pool_values`] of `dt` and their tensor (see [`make`]).
pub fn input(shape: &[usize], seed: u64, dt: DType, strided: bool) -> (Tensor, Vec<Elem>) {
    let v = pool_values(shape, seed, dt);
    (make(shape, &v, dt, strided), v)
}

/// The elements of `t` as the reference holds them.
pub fn read(t: &Tensor) -> Vec<Elem> {
    match t.dtype() {
        DType::U8 => t.to_vec::<u8>().unwrap().into_iter().map(|v| Elem::I(v as i64)).collect(),
        DType::I64 => t.to_vec::<i64>().unwrap().into_iter().map(Elem::I).collect(),
        _ => t.to_vec_f64().unwrap().into_iter().map(Elem::F).collect(),
    }
}

/// Whether `got` matches `want`: integers exactly; floats bitwise (any NaN for NaN) when
/// `tol` is 0, else within `tol` relative (infinities and NaN must match).
pub fn same_elems(got: &[Elem], want: &[Elem], tol: f64) -> bool {
    got.len() == want.len()
        && got.iter().zip(want).all(|(g, w)| match (g, w) {
            (Elem::I(a), Elem::I(b)) => a == b,
            (Elem::F(a), Elem::F(b)) => {
                a.to_bits() == b.to_bits()
                    || a.is_nan() && b.is_nan()
                    || tol > 0.0 && a.is_finite() && b.is_finite() && (a - b).abs() <= tol * (1.0 + b.abs())
            }
            _ => false,
        })
}

/// A second shape: independent (often incompatible), or the first with some extents set to
/// 1 and leading dimensions dropped (broadcastable).
pub fn other_shape(first: &[usize], mode: u8, mask: u8, drop: usize, independent: &[usize]) -> Vec<usize> {
    if mode == 0 {
        return independent.to_vec();
    }
    let kept = &first[drop.min(first.len())..];
    kept.iter().enumerate().map(|(d, &e)| if mask >> d & 1 == 1 { 1 } else { e }).collect()
}
