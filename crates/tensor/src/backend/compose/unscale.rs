//! The default body of gradient unscaling (`Backend::non_finite_check_and_unscale`): the
//! view widened to its computing dtype, the inf/NaN check as a sum read back to the host,
//! and the product copied back into the view. It allocates three full-size intermediates
//! where the fused kernel reads and writes each element once.

use crate::backend::kernels::Kernels;
use crate::backend::operands::Target;
use crate::backend::validate::unscale::{OP, check};
use crate::backend::{BinaryOp, ReduceOp};
use crate::layout::Layout;
use crate::shape::Shape;
use crate::storage::CpuStorage;
use crate::{DType, Error, Result, Scalar};

/// `grad *= inv_scale` in `f32` (`f64` for an `f64` view), rounded back to the view's dtype,
/// and whether an element was infinite or NaN before. The results are those of the fused
/// kernels bit for bit: each element is widened, multiplied once and rounded once to `f32`
/// (`f64`), then to its dtype. An inverse scale that is subnormal in `f32` (a scale above
/// 2^126), which the kernels' float mode reads as zero, multiplies in `f64`, where the
/// product is exact and rounds to the same `f32`.
pub(crate) fn non_finite_check_and_unscale<B: Kernels + ?Sized>(
    b: &B,
    (dst, layout): Target<'_>,
    inv_scale: f32,
) -> Result<bool> {
    let checked = check(dst, layout)?;
    let l: &Layout = &checked;
    let dtype = dst.dtype();
    let rounding = if dtype == DType::F64 { DType::F64 } else { DType::F32 };
    let product = if inv_scale.is_subnormal() { DType::F64 } else { rounding };
    let whole = Layout::contiguous(l.shape().clone());
    let wide = b.cast((&*dst, l), product)?;
    // `x - x` is 0 for a finite `x` and NaN for an infinite or NaN one, so the sum of the
    // differences is NaN exactly when the view holds a non-finite element.
    let diff = b.binary(BinaryOp::Sub, (&wide, &whole), (&wide, &whole))?;
    let every_dim: Vec<usize> = (0..l.rank()).collect();
    let sum = b.reduce(ReduceOp::Sum, (&diff, &whole), &every_dim)?;
    let one = Layout::contiguous(Shape::from(vec![1; l.rank()]));
    let found = is_nan(&b.download((&sum, &one))?)?;
    if inv_scale != 1.0 {
        // Converted here, outside the kernels' float mode, so a subnormal `f32` stays exact.
        let factor = b.full(1, Scalar::Float(f64::from(inv_scale)), product)?;
        let everywhere = Layout::contiguous(Shape::scalar()).broadcast_to(OP, l.shape())?;
        let mut scaled = b.binary(BinaryOp::Mul, (&wide, &whole), (&factor, &everywhere))?;
        if product != rounding {
            scaled = b.cast((&scaled, &whole), rounding)?;
        }
        b.copy_inplace(dst, l, (&scaled, &whole))?;
    }
    Ok(found)
}

/// Whether the one element of a downloaded sum is NaN.
fn is_nan(sum: &CpuStorage) -> Result<bool> {
    match (sum.as_slice::<f32>(), sum.as_slice::<f64>()) {
        (Some([v]), _) => Ok(v.is_nan()),
        (_, Some([v])) => Ok(v.is_nan()),
        _ => Err(Error::invalid(
            OP,
            format!("ember internal error: the check's sum came back as {} elements of {}", sum.len(), sum.dtype()),
        )),
    }
}
