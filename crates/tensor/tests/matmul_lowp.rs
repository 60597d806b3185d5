//! bf16 and f16 matrix products through `Tensor::matmul`: every output element is an `f32`
//! sum of the exact products, rounded once to the operands' dtype, for odd sizes,
//! transposed views, batches, broadcasts and empty products.
//!
//! The bound: products of two bf16 or f16 values are exact in `f32`, so an `f32` sum of
//! `k` of them in any order is within `g = gamma_k * sum|a_p b_p|` of the exact sum
//! (`gamma_k = k u / (1 - k u)`, `u = 2^-24`, below `1.0001 k u` here). Rounding to
//! nearest is monotonic, so the output must lie between the roundings of `exact - g` and
//! `exact + g`: for most elements both round to the same value and the output must equal
//! it.

use ember_tensor::{DType, Result, Tensor, bf16, f16};

/// `[rows, cols]` values in [-2, 2), distinct per `seed`.
fn values(rows: usize, cols: usize, seed: u64) -> Result<Tensor> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let data: Vec<f32> = (0..rows * cols)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0
        })
        .collect();
    Tensor::from_vec(data, [rows, cols])
}

/// The output element's dtype value nearest to `x` (monotonic in `x`).
fn round_to(dtype: DType, x: f64) -> f64 {
    match dtype {
        DType::BF16 => bf16::from_f64(x).to_f64(),
        DType::F16 => f16::from_f64(x).to_f64(),
        other => panic!("not a 16-bit float: {other}"),
    }
}

/// Checks `a @ b` (`[batch.., m, k] @ [batch.., k, n]`, batches of the same shape or one of
/// them 1) element by element against the bound in the file's header.
fn check(a: &Tensor, b: &Tensor) -> Result<()> {
    let dtype = a.dtype();
    let out = a.matmul(b)?;
    assert_eq!(out.dtype(), dtype);
    let (ra, rb) = (a.rank(), b.rank());
    let (m, k, n) = (a.shape()[ra - 2], a.shape()[ra - 1], b.shape()[rb - 1]);
    let (batch_a, batch_b) = (a.numel() / (m * k).max(1), b.numel() / (k * n).max(1));
    let batch = out.numel() / (m * n).max(1);
    let av = a.to_dtype(DType::F64).to_vec::<f64>()?;
    let bv = b.to_dtype(DType::F64).to_vec::<f64>()?;
    let ov = out.to_dtype(DType::F64).to_vec::<f64>()?;
    assert_eq!(ov.len(), batch * m * n);
    for t in 0..batch {
        let (ta, tb) = (if batch_a == 1 { 0 } else { t }, if batch_b == 1 { 0 } else { t });
        for i in 0..m {
            for j in 0..n {
                let (mut exact, mut magnitude) = (0f64, 0f64);
                for p in 0..k {
                    let term = av[(ta * m + i) * k + p] * bv[(tb * k + p) * n + j];
                    exact += term;
                    magnitude += term.abs();
                }
                let g = 1.0001 * k as f64 * 2f64.powi(-24) * magnitude;
                let got = ov[(t * m + i) * n + j];
                let (lo, hi) = (round_to(dtype, exact - g), round_to(dtype, exact + g));
                assert!(
                    lo <= got && got <= hi,
                    "{dtype} {:?} @ {:?}, batch {t} ({i}, {j}): {got} outside [{lo}, {hi}] (exact {exact})",
                    a.shape(),
                    b.shape()
                );
            }
        }
    }
    Ok(())
}

const SIZES: [usize; 6] = [1, 3, 17, 33, 100, 257];

#[test]
fn products_of_odd_sizes_and_transposed_views_are_f32_sums_rounded_once() -> Result<()> {
    for dtype in [DType::BF16, DType::F16] {
        for (case, &m) in SIZES.iter().enumerate() {
            for &k in &SIZES {
                // Every other pair of sizes runs with both operands transposed views, the
                // rest with one of them transposed: a product of 6^3 shapes would cost
                // seconds in the reference alone.
                let n = SIZES[(case + k) % SIZES.len()];
                let a = values(m, k, (m * 31 + k) as u64)?.to_dtype(dtype);
                let b = values(k, n, (k * 17 + n) as u64)?.to_dtype(dtype);
                check(&a, &b)?;
                let at = values(k, m, (m * 7 + k) as u64)?.to_dtype(dtype).t()?;
                let bt = values(n, k, (k * 5 + n) as u64)?.to_dtype(dtype).t()?;
                check(&at, &bt)?;
                if case % 2 == 0 {
                    check(&a, &bt)?;
                } else {
                    check(&at, &b)?;
                }
            }
        }
    }
    Ok(())
}

#[test]
fn products_large_enough_to_split_over_threads_keep_the_bound() -> Result<()> {
    for dtype in [DType::BF16, DType::F16] {
        // Rows split (m > n) and columns split, each deeper than one packed slice.
        check(&values(300, 600, 1)?.to_dtype(dtype), &values(600, 130, 2)?.to_dtype(dtype))?;
        check(&values(130, 600, 3)?.to_dtype(dtype), &values(290, 600, 4)?.to_dtype(dtype).t()?)?;
    }
    Ok(())
}

#[test]
fn batched_and_broadcast_products_keep_the_bound() -> Result<()> {
    for dtype in [DType::BF16, DType::F16] {
        let batched = |b: usize, r: usize, c: usize, seed: u64| -> Result<Tensor> {
            values(b * r, c, seed)?.to_dtype(dtype).reshape([b, r, c])
        };
        // One product per batch element.
        check(&batched(3, 17, 33, 1)?, &batched(3, 33, 5, 2)?)?;
        // A batch times one shared matrix (folded into one tall product).
        check(&batched(4, 33, 17, 3)?, &values(17, 100, 4)?.to_dtype(dtype).unsqueeze(0)?.expand([4, 17, 100])?)?;
        // A shared left operand against a batch, and transposed matrices inside a batch.
        check(&batched(1, 9, 33, 5)?.expand([3, 9, 33])?, &batched(3, 33, 17, 6)?)?;
        check(&batched(2, 33, 9, 7)?.transpose(1, 2)?, &batched(2, 17, 33, 8)?.transpose(1, 2)?)?;
        // Broadcasting through `matmul` itself: [2, 1, m, k] @ [3, k, n].
        let a = values(2 * 5, 33, 9)?.to_dtype(dtype).reshape([2, 1, 5, 33])?;
        let b = batched(3, 33, 7, 10)?;
        let out = a.matmul(&b)?;
        assert_eq!(out.shape().dims(), &[2, 3, 5, 7]);
        for i in 0..2 {
            for j in 0..3 {
                let want = a.narrow(0, i, 1)?.squeeze(0)?.squeeze(0)?.matmul(&b.narrow(0, j, 1)?.squeeze(0)?)?;
                let got = out.narrow(0, i, 1)?.narrow(1, j, 1)?.squeeze(0)?.squeeze(0)?;
                assert_eq!(got.to_dtype(DType::F32).to_vec::<f32>()?, want.to_dtype(DType::F32).to_vec::<f32>()?);
            }
        }
    }
    Ok(())
}

#[test]
fn empty_products_are_zeros_of_the_dtype() -> Result<()> {
    for dtype in [DType::BF16, DType::F16] {
        let out = values(3, 0, 1)?.to_dtype(dtype).matmul(&values(0, 4, 2)?.to_dtype(dtype))?;
        assert_eq!(out.dtype(), dtype);
        assert_eq!(out.shape().dims(), &[3, 4]);
        assert_eq!(out.to_dtype(DType::F32).to_vec::<f32>()?, vec![0.0; 12]);
        let none = values(0, 5, 3)?.to_dtype(dtype).matmul(&values(5, 4, 4)?.to_dtype(dtype))?;
        assert_eq!(none.shape().dims(), &[0, 4]);
    }
    Ok(())
}

#[test]
fn vector_products_and_special_values_follow_f32() -> Result<()> {
    // A NaN or an infinity in a row reaches exactly the outputs it feeds, as in f32.
    for dtype in [DType::BF16, DType::F16] {
        let a = Tensor::from_vec(vec![1.0f32, f32::NAN, 2.0, 0.5, f32::INFINITY, 1.0], [2, 3])?.to_dtype(dtype);
        let b = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3])?.to_dtype(dtype);
        let out = a.matmul(&b)?.to_dtype(DType::F32).to_vec::<f32>()?;
        assert!(out[0].is_nan() && out[1] == f32::INFINITY, "{dtype}: {out:?}");
        let v = values(1, 33, 5)?.to_dtype(dtype).squeeze(0)?;
        check(&v.unsqueeze(0)?, &values(33, 17, 6)?.to_dtype(dtype))?;
        assert_eq!(v.matmul(&v)?.rank(), 0);
    }
    Ok(())
}
