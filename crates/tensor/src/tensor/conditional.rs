//! Selection by a mask: `where_cond` and its scalar forms (PyTorch's `torch.where`), and
//! `logical_not`.

use super::Tensor;
use crate::dtype::{DType, Scalar};
use crate::shape::broadcast_shapes;
use crate::{Error, Result};

impl Tensor {
    /// `self ? on_true : on_false` elementwise, where `self` is a `u8` mask; all three
    /// broadcast together and the values promote to their result type (a 0-d value only
    /// counts by category, as in [`Tensor::result_type`]).
    ///
    /// ```
    /// use ember_tensor::Tensor;
    /// let x = Tensor::from_vec(vec![-1.0f32, 2.0, -3.0], [3])?;
    /// let y = x.gt_scalar(0.0).where_cond(&x, &x.zeros_like())?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![0.0, 2.0, 0.0]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn where_cond(&self, on_true: &Tensor, on_false: &Tensor) -> Result<Tensor> {
        if self.dtype != DType::U8 {
            return Err(Error::dtype("where", format!("the condition must be a u8 mask, got {}", self.dtype)));
        }
        self.same_device("where", on_true)?;
        self.same_device("where", on_false)?;
        let shape = broadcast_shapes("where", self.shape(), on_true.shape())?;
        let shape = broadcast_shapes("where", &shape, on_false.shape())?;
        let dtype = on_true.result_type(on_false);
        let c = self.with_layout(self.layout.broadcast_to("where", &shape)?);
        let a = on_true.converted_for("where", dtype)?;
        let a = a.with_layout(a.layout.broadcast_to("where", &shape)?);
        let b = on_false.converted_for("where", dtype)?;
        let b = b.with_layout(b.layout.broadcast_to("where", &shape)?);
        let s = c.read3(&a, &b, |vc, va, vb| c.backend().where_cond(vc, va, vb))?;
        Ok(Tensor::from_storage(s, shape))
    }

    /// `self ? on_true : s` for a `u8` mask `self`: PyTorch's `torch.where(cond, x, 0.0)`.
    /// The scalar promotes with `on_true` like a tensor-scalar operation (see
    /// [`crate::dtype`]): an `f32` tensor with `0.0` gives `f32`, an `i64` tensor with `0.5`
    /// gives `f32`.
    ///
    /// ```
    /// use ember_tensor::Tensor;
    /// let x = Tensor::from_vec(vec![-1.0f32, 2.0, -3.0], [3])?;
    /// let relu = x.gt_scalar(0.0).where_tensor_scalar(&x, 0.0)?;
    /// assert_eq!(relu.to_vec::<f32>()?, vec![0.0, 2.0, 0.0]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn where_tensor_scalar(&self, on_true: &Tensor, on_false: impl Into<Scalar>) -> Result<Tensor> {
        let s = on_false.into();
        let other = Tensor::scalar_operand(s, on_true.dtype.promote_scalar(s), on_true.device)?;
        self.where_cond(on_true, &other)
    }

    /// `self ? s : on_false` for a `u8` mask `self`: PyTorch's `torch.where(cond, 1.0, y)`,
    /// with the promotion of [`Tensor::where_tensor_scalar`].
    pub fn where_scalar_tensor(&self, on_true: impl Into<Scalar>, on_false: &Tensor) -> Result<Tensor> {
        let s = on_true.into();
        let other = Tensor::scalar_operand(s, on_false.dtype.promote_scalar(s), on_false.device)?;
        self.where_cond(&other, on_false)
    }

    /// `self ? a : b` for a `u8` mask `self` and two scalars, shaped like the mask:
    /// PyTorch's `torch.where(cond, 1.0, 0.0)`. Two integer scalars give `i64`; a float
    /// scalar gives `f32` (PyTorch's default dtype).
    ///
    /// ```
    /// use ember_tensor::{DType, Tensor};
    /// let m = Tensor::from_vec(vec![1u8, 0, 1], [3])?;
    /// assert_eq!(m.where_scalars(1.0, 0.0)?.to_vec::<f32>()?, vec![1.0, 0.0, 1.0]);
    /// assert_eq!(m.where_scalars(7, -1)?.to_vec::<i64>()?, vec![7, -1, 7]);
    /// assert_eq!(m.where_scalars(1, 0.5)?.dtype(), DType::F32);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn where_scalars(&self, on_true: impl Into<Scalar>, on_false: impl Into<Scalar>) -> Result<Tensor> {
        let (a, b) = (on_true.into(), on_false.into());
        let dtype = if a.is_float() || b.is_float() { DType::F32 } else { DType::I64 };
        let a = Tensor::scalar_operand(a, dtype, self.device)?;
        let b = Tensor::scalar_operand(b, dtype, self.device)?;
        self.where_cond(&a, &b)
    }

    /// The 0-d operand `s` of a `where` in `dtype`, converted as kernels convert scalars.
    fn scalar_operand(s: Scalar, dtype: DType, device: crate::Device) -> Result<Tensor> {
        Tensor::converted_fill("where", crate::shape::Shape::scalar(), s, dtype, device)
    }

    /// `1` where an element is zero and `0` elsewhere, as a `u8` mask: PyTorch's
    /// `logical_not` (NaN counts as true, so its negation is 0). On a mask it flips the mask.
    ///
    /// ```
    /// use ember_tensor::Tensor;
    /// let m = Tensor::from_vec(vec![1u8, 0, 2], [3])?;
    /// assert_eq!(m.logical_not().to_vec::<u8>()?, vec![0, 1, 0]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn logical_not(&self) -> Tensor {
        self.eq_scalar(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn where_with_scalars() {
        let m = Tensor::from_vec(vec![1u8, 0, 1, 0], [2, 2]).unwrap();
        let x = Tensor::from_vec(vec![1.5f64, 2.5], [2]).unwrap();
        let a = m.where_tensor_scalar(&x, -1).unwrap();
        assert_eq!((a.dtype(), a.shape().dims()), (DType::F64, &[2usize, 2][..]));
        assert_eq!(a.to_vec::<f64>().unwrap(), vec![1.5, -1.0, 1.5, -1.0]);
        let b = m.where_scalar_tensor(0.25, &x).unwrap();
        assert_eq!(b.to_vec::<f64>().unwrap(), vec![0.25, 2.5, 0.25, 2.5]);
        // Promotion as for tensor-scalar operations.
        let i = Tensor::from_vec(vec![4i64, 5], [2]).unwrap();
        assert_eq!(m.where_tensor_scalar(&i, 0).unwrap().to_vec::<i64>().unwrap(), vec![4, 0, 4, 0]);
        assert_eq!(m.where_tensor_scalar(&i, 0.5).unwrap().to_vec::<f32>().unwrap(), vec![4.0, 0.5, 4.0, 0.5]);
        let u = Tensor::from_vec(vec![9u8, 9], [2]).unwrap();
        assert_eq!(m.where_scalar_tensor(-1, &u).unwrap().to_vec::<u8>().unwrap(), vec![255, 9, 255, 9]);
        let f = Tensor::from_vec(vec![1.0f32], [1]).unwrap();
        assert_eq!(m.where_tensor_scalar(&f, 0.0).unwrap().dtype(), DType::F32);
        // Two scalars: i64 for integers, f32 as soon as one is a float; the mask's shape.
        let s = m.where_scalars(1.0, 0.0).unwrap();
        assert_eq!((s.dtype(), s.to_vec::<f32>().unwrap()), (DType::F32, vec![1.0, 0.0, 1.0, 0.0]));
        assert_eq!(m.where_scalars(3, 4).unwrap().to_vec::<i64>().unwrap(), vec![3, 4, 3, 4]);
        assert_eq!(Tensor::scalar(0u8).where_scalars(3, 4).unwrap().rank(), 0);
        // The mask must still be u8 and the shapes must broadcast.
        assert!(x.where_scalars(1, 0).is_err());
        assert!(m.where_tensor_scalar(&Tensor::zeros([3], DType::F32).unwrap(), 0).is_err());
    }

    #[test]
    fn logical_not_flips_masks() {
        let f = Tensor::from_vec(vec![0.0f32, -0.0, 1.5, f32::NAN], [4]).unwrap();
        assert_eq!(f.logical_not().to_vec::<u8>().unwrap(), vec![1, 1, 0, 0]);
        let m = Tensor::from_vec(vec![0u8, 1, 255], [3]).unwrap().t().unwrap();
        let n = m.logical_not();
        assert_eq!((n.dtype(), n.to_vec::<u8>().unwrap()), (DType::U8, vec![1, 0, 0]));
        assert_eq!(n.logical_not().to_vec::<u8>().unwrap(), vec![0, 1, 1]);
        assert_eq!(Tensor::from_vec(vec![0i64, -3], [2]).unwrap().logical_not().to_vec::<u8>().unwrap(), vec![1, 0]);
    }
}
