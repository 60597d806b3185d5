//! The 16-bit float dtypes through the tensor API: creation, casts (round to nearest even,
//! `f64` through `f32` as PyTorch), promotion, printing, and ops computed in `f32` with one
//! rounding of each result.

use ember_tensor::{DType, Result, Tensor, bf16, f16};

fn bf(v: f32) -> bf16 {
    bf16::from_f32(v)
}

#[test]
fn dtypes_have_names_sizes_and_categories() {
    assert_eq!(DType::F16.name(), "f16");
    assert_eq!(DType::BF16.name(), "bf16");
    assert_eq!(DType::F16.size_in_bytes(), 2);
    assert_eq!(DType::BF16.size_in_bytes(), 2);
    assert!(DType::F16.is_float() && DType::BF16.is_float());
    assert!(DType::F16.is_half() && !DType::F32.is_half());
    assert_eq!(DType::BF16.compute_dtype(), DType::F32);
}

#[test]
fn promotion_follows_pytorch() -> Result<()> {
    assert_eq!(DType::BF16.promote(DType::F16), DType::F32);
    assert_eq!(DType::F16.promote(DType::F32), DType::F32);
    assert_eq!(DType::I64.promote(DType::F16), DType::F16);
    assert_eq!(DType::U8.promote(DType::BF16), DType::BF16);
    assert_eq!(DType::F64.promote(DType::BF16), DType::F64);
    let h = Tensor::from_vec(vec![f16::from_f32(1.5); 3], [3])?;
    let b = Tensor::from_vec(vec![bf(2.0); 3], [3])?;
    assert_eq!(h.add(&b)?.dtype(), DType::F32);
    // A 0-d float of another dtype does not widen a dimensioned 16-bit tensor.
    assert_eq!(h.add(&Tensor::scalar(2.0f64))?.dtype(), DType::F16);
    // A Rust float scalar keeps the dtype.
    assert_eq!(b.mul_scalar(0.5).dtype(), DType::BF16);
    let ints = Tensor::from_vec(vec![1i64, 2, 3], [3])?;
    assert_eq!(ints.add(&h)?.dtype(), DType::F16);
    Ok(())
}

#[test]
fn casts_round_to_nearest_even() -> Result<()> {
    // 1 + 2^-8 lies halfway between bf16's 1 and 1 + 2^-7: ties go to the even mantissa.
    let halfway = 1.0f32 + 2f32.powi(-8);
    let just_above = f32::from_bits(halfway.to_bits() + 1);
    let x = Tensor::from_vec(vec![halfway, just_above, 1.0 + 3.0 * 2f32.powi(-8), f32::MAX], [4])?;
    let got = x.to_dtype(DType::BF16).to_vec::<bf16>()?;
    assert_eq!(got[0], bf(1.0));
    assert_eq!(got[1], bf(1.0 + 2f32.powi(-7)));
    assert_eq!(got[2], bf(1.0 + 2.0 * 2f32.powi(-7)));
    assert!(got[3].is_infinite(), "f32::MAX rounds up past bf16's largest finite value");
    // f16 overflows to infinity above 65520.
    let big = Tensor::from_vec(vec![65504.0f32, 65519.0, 65520.0], [3])?.to_dtype(DType::F16);
    let got = big.to_vec::<f16>()?;
    assert_eq!(got[0].to_f32(), 65504.0);
    assert_eq!(got[1].to_f32(), 65504.0);
    assert!(got[2].is_infinite());
    // From f64 the value rounds to f32 first, as PyTorch: 1 + 2^-8 + 2^-30 becomes f32's
    // 1 + 2^-8 (the 2^-30 is below f32's precision), a tie that goes to even.
    let d = Tensor::from_vec(vec![1.0f64 + 2f64.powi(-8) + 2f64.powi(-30)], [1])?;
    assert_eq!(d.to_dtype(DType::BF16).to_vec::<bf16>()?, vec![bf(1.0)]);
    // Back to f32 and f64 is exact.
    let back = x.to_dtype(DType::BF16).to_dtype(DType::F64).to_vec::<f64>()?;
    assert_eq!(back[1], 1.0 + 2f64.powi(-7));
    // To integers truncates toward zero.
    let t = Tensor::from_vec(vec![bf(-2.5), bf(3.75)], [2])?.to_dtype(DType::I64);
    assert_eq!(t.to_vec::<i64>()?, vec![-2, 3]);
    Ok(())
}

#[test]
fn elementwise_ops_compute_in_f32_and_round_once() -> Result<()> {
    let vals = [0.1f32, -1.7, 3.3, 250.0, 1e-3];
    let x = Tensor::from_vec(vals.iter().map(|&v| bf(v)).collect::<Vec<_>>(), [5])?;
    let wide: Vec<f32> = vals.iter().map(|&v| bf(v).to_f32()).collect();
    let e = x.exp().to_vec::<bf16>()?;
    for (g, w) in e.iter().zip(&wide) {
        assert_eq!(*g, bf(w.exp()), "exp({w})");
    }
    let y = x.mul(&x)?.add_scalar(1.0);
    assert_eq!(y.dtype(), DType::BF16);
    let got = y.to_vec::<bf16>()?;
    for (g, w) in got.iter().zip(&wide) {
        // Two ops, two roundings: x*x rounded, then + 1 rounded.
        assert_eq!(*g, bf(bf(w * w).to_f32() + 1.0));
    }
    // In place keeps the storage's dtype.
    let z = x.clone();
    z.mul_scalar_(2.0)?;
    assert_eq!(z.to_vec::<bf16>()?[0], bf(wide[0] * 2.0));
    Ok(())
}

#[test]
fn reductions_accumulate_in_f32() -> Result<()> {
    // 4096 ones: a bf16 accumulator would stop at 256 (256 + 1 rounds back to 256).
    let x = Tensor::full([4096], 1.0, DType::BF16)?;
    assert_eq!(x.sum_all().to_vec::<bf16>()?, vec![bf(4096.0)]);
    let m = Tensor::full([3, 1000], 0.1, DType::F16)?.mean(-1, false)?;
    assert_eq!(m.dtype(), DType::F16);
    for v in m.to_vec::<f16>()? {
        assert_eq!(v, f16::from_f32(f16::from_f32(0.1).to_f32()));
    }
    Ok(())
}

#[test]
fn matmul_softmax_and_comparisons_work_on_bf16() -> Result<()> {
    let a: Vec<f32> = (0..12).map(|i| (i as f32 - 6.0) * 0.37).collect();
    let b: Vec<f32> = (0..8).map(|i| (i as f32) * 0.21 - 0.5).collect();
    let (ta, tb) = (
        Tensor::from_vec(a.iter().map(|&v| bf(v)).collect::<Vec<_>>(), [3, 4])?,
        Tensor::from_vec(b.iter().map(|&v| bf(v)).collect::<Vec<_>>(), [4, 2])?,
    );
    let want = ta.to_dtype(DType::F32).matmul(&tb.to_dtype(DType::F32))?.to_dtype(DType::BF16);
    let got = ta.matmul(&tb)?;
    assert_eq!(got.dtype(), DType::BF16);
    let diff = got.to_dtype(DType::F32).sub(&want.to_dtype(DType::F32))?.abs().max_all()?.item()?;
    assert!(diff == 0.0, "bf16 matmul is the f32 product rounded once, off by {diff}");
    let p = got.softmax(-1)?;
    assert_eq!(p.dtype(), DType::BF16);
    for s in p.sum(-1, false)?.to_vec::<bf16>()? {
        assert!((s.to_f32() - 1.0).abs() <= 2f32.powi(-7));
    }
    // The scalar is rounded to bf16 before comparing (1.001 becomes 1.0), as PyTorch.
    let ones = Tensor::full([2], 1.0, DType::BF16)?;
    assert_eq!(ones.lt_scalar(1.001).to_vec::<u8>()?, vec![0, 0]);
    assert_eq!(ones.le_scalar(1.001).to_vec::<u8>()?, vec![1, 1]);
    Ok(())
}

#[test]
fn indexing_joins_and_printing() -> Result<()> {
    let x = Tensor::from_vec((0..6).map(|i| f16::from_f32(i as f32 * 0.5)).collect::<Vec<_>>(), [2, 3])?;
    let cat = Tensor::cat(&[&x, &x], 0)?;
    assert_eq!(cat.dtype(), DType::F16);
    assert_eq!(cat.shape(), &[4, 3]);
    let col = x.narrow(1, 1, 1)?.contiguous().to_vec::<f16>()?;
    assert_eq!(col, vec![f16::from_f32(0.5), f16::from_f32(2.0)]);
    let printed = format!("{:?}", Tensor::from_vec(vec![bf(1.5), bf(-2.0)], [2])?);
    assert_eq!(printed, "[1.5000, -2.0000]\nTensor(shape=[2], dtype=bf16, device=cpu)");
    Ok(())
}

#[test]
fn full_refuses_values_beyond_f16() {
    assert!(Tensor::full([2], 70000.0, DType::F16).is_err());
    assert!(Tensor::full([2], 65504.0, DType::F16).is_ok());
    assert!(Tensor::full([2], f64::INFINITY, DType::F16).is_ok());
    assert!(Tensor::full([2], 1e38, DType::BF16).is_ok());
}
