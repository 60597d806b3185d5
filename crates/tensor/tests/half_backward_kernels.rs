//! The 16-bit backward kernels that do not widen whole operands to `f32` (max pooling's
//! gradient runs natively, a convolution's weight gradient widens a block of images at a
//! time) give what widening the whole operands gives: bit for bit where the `f32` sums run
//! in the same order, within a rounding of the 16-bit dtype where the blocks regroup them.

use ember_tensor::ops::conv::{ConvArgs, conv_geometry};
use ember_tensor::{DType, MaxPoolArgs, Result, Tensor, manual_seed};

/// The elements of `t` as `f64`.
fn values(t: &Tensor) -> Result<Vec<f64>> {
    t.to_dtype(DType::F64).to_vec::<f64>()
}

#[test]
fn max_pool_gradient_of_16_bit_values_is_the_widened_one_bit_for_bit() -> Result<()> {
    manual_seed(3);
    for dtype in [DType::BF16, DType::F16] {
        // Overlapping windows (kernel 3, stride 2), so several gradients add up at one
        // position and the order and width of the sum matter.
        let x = Tensor::randn([3, 5, 13, 11])?.to_dtype(dtype);
        let (y, index) = x.max_pool2d_with_indices(&MaxPoolArgs::new(3).stride(2).padding(1))?;
        let g = Tensor::randn(y.shape().clone())?.to_dtype(dtype);
        let got = g.scatter_planes(&index, [13, 11])?;
        let want = g.to_dtype(DType::F32).scatter_planes(&index, [13, 11])?.to_dtype(dtype);
        assert_eq!(got.dtype(), dtype);
        assert_eq!(got.shape(), want.shape());
        assert_eq!(values(&got)?, values(&want)?, "{dtype}");
        // A strided (transposed twice) gradient reads the same.
        let strided = g.transpose(2, 3)?.contiguous().transpose(2, 3)?;
        assert_eq!(values(&strided.scatter_planes(&index, [13, 11])?)?, values(&want)?, "{dtype}, strided");
    }
    Ok(())
}

#[test]
fn max_pool_gradient_refuses_an_index_outside_the_planes() -> Result<()> {
    let g = Tensor::ones([1, 1, 2, 2], DType::BF16)?;
    let index = Tensor::from_vec(vec![0i64, 1, 2, 99], [1, 1, 2, 2])?;
    let e = g.scatter_planes(&index, [3, 3]).unwrap_err().to_string();
    assert!(e.contains("max_pool2d_backward") && e.contains("outside planes of 9"), "{e}");
    Ok(())
}

#[test]
fn conv_weight_gradient_of_16_bit_operands_widened_by_blocks_matches_the_whole_batch() -> Result<()> {
    manual_seed(5);
    // 64 images of 3 x 20 x 20 and gradients of 8 x 18 x 18: about 15 KiB widened per
    // image, so the batch is widened in several blocks.
    let geom = conv_geometry("conv2d", &[64, 3, 20, 20], &[8, 3, 3, 3], None, &ConvArgs::<2>::default())?;
    for dtype in [DType::BF16, DType::F16] {
        let x = Tensor::randn([64, 3, 20, 20])?.to_dtype(dtype);
        let g = Tensor::randn([64, 8, 18, 18])?.to_dtype(dtype);
        let got = x.conv2d_weight_grad(&g, &geom)?;
        assert_eq!(got.dtype(), dtype);
        assert_eq!(got.shape().dims(), &[8, 3, 3, 3]);
        let exact = x.to_dtype(DType::F64).conv2d_weight_grad(&g.to_dtype(DType::F64), &geom)?;
        let whole = x.to_dtype(DType::F32).conv2d_weight_grad(&g.to_dtype(DType::F32), &geom)?.to_dtype(dtype);
        // Both are the f32 sum rounded once: the blocks only regroup the f32 additions, so
        // each result is within one 16-bit rounding (plus f32 noise) of the exact sum.
        let unit = if dtype == DType::BF16 { 2f64.powi(-8) } else { 2f64.powi(-11) };
        for ((a, w), e) in values(&got)?.iter().zip(values(&whole)?).zip(values(&exact)?) {
            let tol = e.abs() * unit * 1.01 + 1e-3;
            assert!((a - e).abs() <= tol, "{dtype}: blocked {a} against exact {e}");
            assert!((w - e).abs() <= tol, "{dtype}: whole {w} against exact {e}");
        }
    }
    Ok(())
}

#[test]
fn conv_weight_gradient_of_a_strided_16_bit_batch_reads_its_views() -> Result<()> {
    manual_seed(6);
    let geom = conv_geometry("conv2d", &[48, 2, 24, 24], &[4, 2, 5, 5], None, &ConvArgs::<2>::default())?;
    let x = Tensor::randn([48, 2, 24, 24])?.to_dtype(DType::BF16);
    // A batch read through a transposed view: the blocks are cut from the view.
    let xt = x.transpose(2, 3)?.contiguous().transpose(2, 3)?;
    let g = Tensor::randn([48, 4, 20, 20])?.to_dtype(DType::BF16);
    let got = xt.conv2d_weight_grad(&g, &geom)?;
    let contiguous = x.conv2d_weight_grad(&g, &geom)?;
    assert_eq!(values(&got)?, values(&contiguous)?);
    Ok(())
}

#[test]
fn a_16_bit_sum_over_the_batch_widened_by_blocks_is_the_f32_sum_rounded() -> Result<()> {
    manual_seed(7);
    // A bias gradient's sum: about 14 KiB widened per image, several blocks.
    for dtype in [DType::BF16, DType::F16] {
        let g = Tensor::randn([64, 6, 24, 24])?.to_dtype(dtype);
        let got = g.sum([0i64, 2, 3], false)?;
        assert_eq!((got.dtype(), got.shape().dims()), (dtype, &[6usize][..]));
        let exact = g.to_dtype(DType::F64).sum([0i64, 2, 3], false)?;
        let unit = if dtype == DType::BF16 { 2f64.powi(-8) } else { 2f64.powi(-11) };
        for (a, e) in values(&got)?.iter().zip(values(&exact)?) {
            assert!((a - e).abs() <= e.abs() * unit * 1.01 + 1e-3, "{dtype}: {a} against {e}");
        }
        // Sums that keep the batch, and other reductions, are unchanged by the blocks.
        let rows = g.sum([1i64, 2, 3], false)?;
        let want = g.to_dtype(DType::F32).sum([1i64, 2, 3], false)?.to_dtype(dtype);
        assert_eq!(values(&rows)?, values(&want)?);
        let max = g.max([0i64, 2, 3], false)?;
        assert_eq!(values(&max)?, values(&g.to_dtype(DType::F32).max([0i64, 2, 3], false)?.to_dtype(dtype))?);
    }
    Ok(())
}
