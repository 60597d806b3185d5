//! Property tests of `bf16` and `f16` tensors under random shapes and layouts (contiguous,
//! transposed, strided by a slice step, broadcast from a size-1 dimension): every op on the
//! low dtype gives, within one ulp of that dtype, the same op computed in `f32` on the
//! widened operands and rounded back (`op(x) == round(op_f32(widen(x)))`), the definition of
//! a low-precision op on the CPU. That covers every elementwise case of the shared table
//! (every `UnaryOp` variant with its parameters, every binary op), the reductions with
//! softmax and log-softmax along a random dimension, and matmul with transposed operands.
//!
//! The promotion rules are checked with the values they imply: `bf16 + f16` and `f16 + f32`
//! compute in `f32`, an integer tensor with an `f16` one computes in `f16` (the integers
//! rounded to `f16` first, overflowing to infinity beyond its range, as PyTorch's common
//! dtype does), a float scalar or a 0-d `f32` tensor keeps the low dtype.
//!
//! Widening is exact and `to_dtype` rounds to nearest even (checked against PyTorch bit for
//! bit in `half_reference.rs`), so both sides start from the same values and the reference
//! is one rounding of an `f32` result. Inputs mix normal samples with zeros of both signs,
//! values beyond `f16`'s range, subnormals of both dtypes, infinities and NaN.

use ember_tensor::{DType, Result, Scalar, Tensor, UnaryOp};
use ember_testing::UNARY;
use ember_testing::elementwise::BINARY;
use proptest::prelude::*;

/// Cases per property; each case runs every op of its family in both low dtypes, within a
/// few seconds for the file in the dev profile.
const CASES: u32 = 48;

const LOWS: [DType; 2] = [DType::BF16, DType::F16];

/// SplitMix64: the input values follow from one seed.
fn mix(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Special values, a few per tensor: signed zeros, beyond `f16`'s range (70000), the edges
/// of both dtypes' subnormals, the infinities and NaN.
const SPECIAL: [f32; 10] = [0.0, -0.0, 70000.0, 65504.0, 1e-40, 6e-8, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 0.5];

/// `n` values from `seed`: mostly normal-ish samples of scale 3 (sums of uniforms), one in
/// eight special.
fn values(seed: u64, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let r = mix(seed, i as u64);
            if r.is_multiple_of(8) {
                SPECIAL[(r >> 8) as usize % SPECIAL.len()]
            } else {
                let u = |k: u32| ((r >> (16 * k)) & 0xffff) as f32 / 65536.0 - 0.5;
                3.0 * (u(1) + u(2) + u(3)) * 2.0
            }
        })
        .collect()
}

/// How a test tensor sits in memory.
#[derive(Clone, Copy, Debug)]
enum Layout {
    Contiguous,
    /// The dimensions stored in reverse order and permuted back.
    Transposed,
    /// Every other element of a last dimension twice as long.
    Stepped,
    /// The first dimension expanded from size 1.
    Broadcast,
}

const LAYOUTS: [Layout; 4] = [Layout::Contiguous, Layout::Transposed, Layout::Stepped, Layout::Broadcast];

/// A `low` tensor of `shape` in `layout`, its values from `seed` rounded to `low`.
fn low_tensor(shape: &[usize], layout: Layout, seed: u64, low: DType) -> Tensor {
    let n = |s: &[usize]| s.iter().product::<usize>();
    let made = |s: &[usize]| Tensor::from_vec(values(seed, n(s)), s).map(|t| t.to_dtype(low));
    let t = match layout {
        Layout::Contiguous => made(shape),
        Layout::Transposed => {
            let rev: Vec<usize> = shape.iter().rev().copied().collect();
            let back: Vec<usize> = (0..shape.len()).rev().collect();
            made(&rev).and_then(|t| t.permute(&back))
        }
        Layout::Stepped => {
            let mut wide = shape.to_vec();
            let last = wide.len() - 1;
            wide[last] *= 2;
            made(&wide).and_then(|t| t.slice(last, 0, wide[last], 2))
        }
        Layout::Broadcast => {
            let mut one = shape.to_vec();
            one[0] = 1;
            made(&one).and_then(|t| t.expand(shape))
        }
    };
    let t = t.expect("a test tensor");
    assert_eq!(t.shape().dims(), shape);
    t
}

/// The spacing of `low`'s values at `w`: `2^(e - 7)` (bf16) or `2^(e - 10)` (f16).
fn ulp(w: f64, low: DType) -> f64 {
    let (mantissa, min_exp) = if low == DType::BF16 { (7, -126) } else { (10, -14) };
    let e = if w == 0.0 { min_exp } else { (w.abs().log2().floor() as i32).max(min_exp) };
    2f64.powi(e - mantissa)
}

/// The exact values of a `bf16` or `f16` tensor, converted in this thread (outside the
/// kernels' float mode, so subnormals stay).
fn exact(t: &Tensor) -> Vec<f64> {
    match t.dtype() {
        DType::BF16 => t.to_vec::<ember_tensor::bf16>().expect("bf16").iter().map(|v| v.to_f64()).collect(),
        _ => t.to_vec::<ember_tensor::f16>().expect("f16").iter().map(|v| v.to_f64()).collect(),
    }
}

fn f64s(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).to_vec::<f64>().expect("f64 values")
}

/// `got` is a `low` tensor within one ulp of `want` (the `f32` result) rounded to `low`,
/// element by element (NaN for NaN, infinities exactly).
fn within_one_ulp(op: &str, got: &Tensor, want_f32: &Tensor, low: DType) -> std::result::Result<(), TestCaseError> {
    prop_assert_eq!(got.dtype(), low, "{}: dtype", op);
    prop_assert_eq!(got.shape(), want_f32.shape(), "{}: shape", op);
    let (g, w) = (f64s(got), f64s(&want_f32.to_dtype(low)));
    for (i, (&g, &w)) in g.iter().zip(&w).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (w.is_finite() && (g - w).abs() <= ulp(w, low));
        prop_assert!(ok, "{} ({}): element {} is {:e}, round(f32 result) {:e}", op, low, i, g, w);
    }
    Ok(())
}

/// `op` with its scalar as PyTorch reads it beside a `low` tensor: `add`, `sub`, `rsub`,
/// `pow` and `rpow` round it to the tensor's dtype (through `f32`), `mul` and `div` keep it
/// (half_reference.rs checks ember against PyTorch's results).
fn scalar_as_pytorch(op: UnaryOp, low: DType) -> UnaryOp {
    let round = |s: Scalar| {
        let t = Tensor::scalar(s.to_f64() as f32).to_dtype(low);
        Scalar::Float(t.to_dtype(DType::F64).to_scalar::<f64>().expect("a 0-d value"))
    };
    match op {
        UnaryOp::AddScalar(s) => UnaryOp::AddScalar(round(s)),
        UnaryOp::SubScalar(s) => UnaryOp::SubScalar(round(s)),
        UnaryOp::RSubScalar(s) => UnaryOp::RSubScalar(round(s)),
        UnaryOp::PowScalar(e) => UnaryOp::PowScalar(round(e)),
        UnaryOp::RPowScalar(b) => UnaryOp::RPowScalar(round(b)),
        other => other,
    }
}

/// A shape of rank 1 to 3 with dimensions 1 to 6, a layout and a seed.
fn operand() -> impl Strategy<Value = (Vec<usize>, usize, u64)> {
    (prop::collection::vec(1usize..=6, 1..=3), 0..LAYOUTS.len(), any::<u64>())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    /// Every case of the shared unary table (every `UnaryOp` variant, with its parameters),
    /// out of place and in place (the same bits).
    #[test]
    fn unary_ops_round_the_f32_result((shape, layout, seed) in operand()) {
        let fail = |e: ember_tensor::Error| TestCaseError::fail(e.to_string());
        for low in LOWS {
            let x = low_tensor(&shape, LAYOUTS[layout], seed, low);
            for case in UNARY {
                let got = (case.tensor)(&x);
                let want = x.to_dtype(DType::F32);
                want.apply_(scalar_as_pytorch(case.op, low)).map_err(fail)?;
                within_one_ulp(case.name, &got, &want, low)?;
                let inplace = x.contiguous().copy();
                inplace.apply_(case.op).map_err(fail)?;
                let (a, b) = (f64s(&inplace), f64s(&got));
                let same = a.iter().zip(&b).all(|(a, b)| a == b || (a.is_nan() && b.is_nan()));
                prop_assert!(same, "{} ({}) in place: {:?}, out of place {:?}", case.name, low, a, b);
            }
        }
    }

    /// Every binary op, the second operand broadcast along the first's leading dimensions.
    #[test]
    fn binary_ops_round_the_f32_result((shape, layout, seed) in operand(), tail in 1usize..=3, other in 0..LAYOUTS.len()) {
        for low in LOWS {
            let a = low_tensor(&shape, LAYOUTS[layout], seed, low);
            let keep = tail.min(shape.len());
            let b = low_tensor(&shape[shape.len() - keep..], LAYOUTS[other], seed ^ 0x5eed, low);
            let (wa, wb) = (a.to_dtype(DType::F32), b.to_dtype(DType::F32));
            for case in BINARY {
                let got = (case.tensor)(&a, &b).map_err(|e| TestCaseError::fail(format!("{}: {e}", case.name)))?;
                let want = (case.tensor)(&wa, &wb).map_err(|e| TestCaseError::fail(e.to_string()))?;
                within_one_ulp(case.name, &got, &want, low)?;
            }
            // Comparisons move no value through f32: they compare the exact values (IEEE, so
            // a subnormal is not zero, as in PyTorch; widening to f32 would flush it).
            let whole = b.broadcast_to(a.shape().clone()).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let (xa, xb) = (exact(&a), exact(&whole));
            type Cmp = fn(&Tensor, &Tensor) -> Result<Tensor>;
            type Exact = fn(f64, f64) -> bool;
            let cmps: [(&str, Cmp, Exact); 3] = [
                ("lt", |a, b| a.lt(b), |x, y| x < y),
                ("eq", |a, b| a.eq(b), |x, y| x == y),
                ("ge", |a, b| a.ge(b), |x, y| x >= y),
            ];
            for (name, f, cmp) in cmps {
                let got = f(&a, &b).map_err(|e| TestCaseError::fail(e.to_string()))?;
                let want: Vec<u8> = xa.iter().zip(&xb).map(|(&x, &y)| u8::from(cmp(x, y))).collect();
                prop_assert_eq!(got.to_vec::<u8>().ok(), Some(want), "{} ({})", name, low);
            }
        }
    }

    /// The reductions, softmax and log-softmax along a random dimension.
    #[test]
    fn reductions_round_the_f32_result((shape, layout, seed) in operand(), pick in 0usize..3) {
        let d = pick % shape.len();
        type Red = fn(&Tensor, usize) -> Result<Tensor>;
        let ops: [(&str, Red); 10] = [
            ("sum", |x, d| x.sum(d, false)),
            ("mean", |x, d| x.mean(d, true)),
            ("prod", |x, d| x.prod(d, false)),
            ("max", |x, d| x.max(d, false)),
            ("min", |x, d| x.min(d, false)),
            ("var", |x, d| x.var(d, true, false)),
            ("std", |x, d| x.std(d, false, false)),
            ("logsumexp", |x, d| x.logsumexp(d, false)),
            ("softmax", |x, d| x.softmax(d)),
            ("log_softmax", |x, d| x.log_softmax(d)),
        ];
        for low in LOWS {
            let x = low_tensor(&shape, LAYOUTS[layout], seed, low);
            let wide = x.to_dtype(DType::F32);
            for (name, f) in ops {
                let got = f(&x, d).map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
                within_one_ulp(name, &got, &f(&wide, d).map_err(|e| TestCaseError::fail(e.to_string()))?, low)?;
            }
            within_one_ulp("sum_all", &x.sum_all(), &wide.sum_all(), low)?;
            // The index of the first extreme: the same elements, so exactly the same index.
            for (name, got, want) in [("argmax", x.argmax(d, false), wide.argmax(d, false)), ("argmin", x.argmin(d, false), wide.argmin(d, false))] {
                let (got, want) = (got.map_err(|e| TestCaseError::fail(e.to_string()))?, want.map_err(|e| TestCaseError::fail(e.to_string()))?);
                prop_assert_eq!(got.to_vec::<i64>().ok(), want.to_vec::<i64>().ok(), "{} ({})", name, low);
            }
        }
    }

    /// Matrix products, 2-d and batched, with either operand transposed or strided.
    #[test]
    fn matmul_rounds_the_f32_result(m in 1usize..=6, k in 1usize..=40, n in 1usize..=6, batch in 0usize..=2, la in 0..LAYOUTS.len(), lb in 0..LAYOUTS.len(), seed in any::<u64>()) {
        for low in LOWS {
            let lead: Vec<usize> = if batch == 0 { vec![] } else { vec![batch] };
            let sa: Vec<usize> = lead.iter().copied().chain([m, k]).collect();
            let sb: Vec<usize> = lead.iter().copied().chain([k, n]).collect();
            // Broadcasting only where a leading dimension exists to expand.
            let pick = |l: usize| if batch == 0 && l == 3 { Layout::Contiguous } else { LAYOUTS[l] };
            let a = low_tensor(&sa, pick(la), seed, low);
            let b = low_tensor(&sb, pick(lb), seed ^ 0xb, low);
            let got = a.matmul(&b).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let want = a.to_dtype(DType::F32).matmul(&b.to_dtype(DType::F32)).map_err(|e| TestCaseError::fail(e.to_string()))?;
            within_one_ulp("matmul", &got, &want, low)?;
        }
    }

    /// PyTorch's promotion with the low dtypes, and the values it implies.
    #[test]
    fn promotion_follows_pytorch((shape, layout, seed) in operand(), int_scale in prop::sample::select(vec![1i64, 100, 70000])) {
        let l = LAYOUTS[layout];
        let b = low_tensor(&shape, l, seed, DType::BF16);
        let h = low_tensor(&shape, l, seed ^ 1, DType::F16);
        let f = Tensor::from_vec(values(seed ^ 2, shape.iter().product()), shape.as_slice()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let fail = |e: ember_tensor::Error| TestCaseError::fail(e.to_string());
        let same = |got: &Tensor, want: &Tensor, what: &str| -> std::result::Result<(), TestCaseError> {
            prop_assert_eq!(got.dtype(), want.dtype(), "{}: dtype", what);
            let (g, w) = (f64s(got), f64s(want));
            prop_assert!(g.iter().zip(&w).all(|(g, w)| g == w || (g.is_nan() && w.is_nan())), "{}: {:?} != {:?}", what, g, w);
            Ok(())
        };
        let wide = |t: &Tensor| t.to_dtype(DType::F32);
        // bf16 + f16: neither holds the other, so f32, from the exact widened values.
        same(&b.add(&h).map_err(fail)?, &wide(&b).add(&wide(&h)).map_err(fail)?, "bf16 + f16")?;
        same(&h.mul(&b).map_err(fail)?, &wide(&h).mul(&wide(&b)).map_err(fail)?, "f16 * bf16")?;
        // f16 + f32 and bf16 + f32: f32.
        same(&h.add(&f).map_err(fail)?, &wide(&h).add(&f).map_err(fail)?, "f16 + f32")?;
        same(&f.sub(&b).map_err(fail)?, &f.sub(&wide(&b)).map_err(fail)?, "f32 - bf16")?;
        // f64 with a low dtype: f64.
        let d = f.to_dtype(DType::F64);
        same(&h.add(&d).map_err(fail)?, &h.to_dtype(DType::F64).add(&d).map_err(fail)?, "f16 + f64")?;
        // i64 + f16: f16, the integers rounded to f16 first (beyond 65504, infinity).
        let ints: Vec<i64> = (0..shape.iter().product::<usize>() as u64).map(|i| (mix(seed, i) % 2001) as i64 * int_scale / 1000 - int_scale).collect();
        let i = Tensor::from_vec(ints, shape.as_slice()).map_err(fail)?;
        same(&i.add(&h).map_err(fail)?, &i.to_dtype(DType::F16).add(&h).map_err(fail)?, "i64 + f16")?;
        same(&b.mul(&i).map_err(fail)?, &b.mul(&i.to_dtype(DType::BF16)).map_err(fail)?, "bf16 * i64")?;
        let bytes = Tensor::from_vec((0..shape.iter().product::<usize>() as u64).map(|k| mix(seed, k) as u8).collect::<Vec<u8>>(), shape.as_slice()).map_err(fail)?;
        same(&bytes.sub(&h).map_err(fail)?, &bytes.to_dtype(DType::F16).sub(&h).map_err(fail)?, "u8 - f16")?;
        // A float scalar, an integer scalar and a 0-d f32 tensor keep the low dtype.
        for x in [&b, &h] {
            let low = x.dtype();
            prop_assert_eq!(x.add_scalar(2.5).dtype(), low);
            prop_assert_eq!(x.mul_scalar(3).dtype(), low);
            prop_assert_eq!(x.lt_scalar(0.1).dtype(), DType::U8);
            let zero_d = Tensor::scalar(1.5f32);
            same(&x.add(&zero_d).map_err(fail)?, &x.add_scalar(1.5), "low + 0-d f32")?;
            prop_assert_eq!(x.add(&zero_d.to_dtype(DType::F64)).map_err(fail)?.dtype(), low);
        }
        // Comparisons across the two low dtypes compare the exact values.
        let lt = b.lt(&h).map_err(fail)?;
        prop_assert_eq!(lt.to_vec::<u8>().ok(), wide(&b).lt(&wide(&h)).map_err(fail)?.to_vec::<u8>().ok());
    }
}
