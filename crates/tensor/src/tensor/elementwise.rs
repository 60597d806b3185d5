//! Elementwise operations of two tensors (with broadcasting and dtype promotion), their
//! tensor-scalar forms and comparisons.

use super::{Tensor, infallible};
use crate::Result;
use crate::backend::{BinaryOp, CmpOp, UnaryOp};
use crate::dtype::{DType, Scalar, result_type};
use crate::shape::{Shape, broadcast_shapes};

impl Tensor {
    /// Both operands converted to their promoted dtype and broadcast to a common shape.
    pub(crate) fn broadcast_pair(
        &self,
        op: &'static str,
        other: &Tensor,
        dtype: DType,
    ) -> Result<(Tensor, Tensor, Shape)> {
        self.same_device(op, other)?;
        let shape = broadcast_shapes(op, self.shape(), other.shape())?;
        let a = self.converted_for(op, dtype)?;
        let b = other.converted_for(op, dtype)?;
        let a = a.with_layout(a.layout.broadcast_to(op, &shape)?);
        let b = b.with_layout(b.layout.broadcast_to(op, &shape)?);
        Ok((a, b, shape))
    }

    /// `self` in `dtype` as an operand of `op`, each distinct element converted once: the
    /// dimensions a broadcast view repeats (stride 0) are converted at length 1 and then
    /// repeated again, so an `expand`ed operand costs no more to convert than what it was
    /// expanded from. A conversion that cannot be held is `op`'s failure.
    pub(crate) fn converted_for(&self, op: &'static str, dtype: DType) -> Result<Tensor> {
        if self.dtype == dtype {
            return Ok(self.clone());
        }
        let mut base = self.clone();
        for (d, (&size, &stride)) in self.shape().iter().zip(self.strides()).enumerate() {
            if stride == 0 && size > 1 {
                base = base.narrow(d, 0, 1)?;
            }
        }
        let c = base.try_to_dtype(dtype).map_err(|e| e.alloc_in(op))?;
        Ok(c.with_layout(c.layout.broadcast_to(op, self.shape())?))
    }

    /// The dtype `self` and `other` compute in: PyTorch's result type, where a 0-d tensor
    /// only counts when it brings a higher category (see [`crate::dtype::result_type`]).
    pub fn result_type(&self, other: &Tensor) -> DType {
        result_type(&[(self.dtype, self.rank()), (other.dtype, other.rank())])
    }

    /// `op` of `self` and `other`, broadcast and promoted; the methods that call it (`add`,
    /// `mul`, ...) are generated below from the op table in `ops/binary.rs`.
    pub(crate) fn binary_op(&self, op: BinaryOp, other: &Tensor) -> Result<Tensor> {
        let mut dtype = self.result_type(other);
        // Division of integers is true division, like PyTorch's `/`.
        if op == BinaryOp::Div && dtype.is_int() {
            dtype = DType::F32;
        }
        if self.same_shape_and_dtype(other, dtype) {
            // No broadcasting or conversion to prepare: hand the operands over as they are.
            let s = self.read2(other, |va, vb| self.backend().binary(op, va, vb))?;
            return Ok(Tensor::from_storage(s, self.shape().clone()));
        }
        let (a, b, shape) = self.broadcast_pair(op.name(), other, dtype)?;
        let s = a.read2(&b, |va, vb| a.backend().binary(op, va, vb))?;
        Ok(Tensor::from_storage(s, shape))
    }

    fn same_shape_and_dtype(&self, other: &Tensor, dtype: DType) -> bool {
        self.dtype == dtype && other.dtype == dtype && self.device == other.device && self.shape() == other.shape()
    }

    pub(crate) fn unary_op(&self, op: UnaryOp) -> Tensor {
        let want = if op.is_float_only() { self.dtype.float_or_default() } else { self.dtype };
        if want != self.dtype {
            return self.to_dtype(want).unary_op(op);
        }
        let s = infallible(self.read(|v| self.backend().unary(op, v)));
        Tensor::from_storage(s, self.shape().clone())
    }

    /// A scalar operation, in the dtype that the scalar promotes `self` to (see
    /// [`crate::dtype`]): the scalar reaches the kernel as it is, so an integer scalar on an
    /// integer tensor computes exactly, with wrapping.
    fn scalar_op(&self, s: Scalar, make: impl FnOnce(Scalar) -> UnaryOp) -> Tensor {
        let dtype = self.dtype.promote_scalar(s);
        if dtype == self.dtype {
            return self.unary_op(make(s));
        }
        self.to_dtype(dtype).unary_op(make(s))
    }

    /// `self + s`. An integer tensor plus an integer scalar stays integral and wraps
    /// (`u8` 3 plus -1 is 2); plus a float scalar it is `f32`.
    ///
    /// ```
    /// use ember_tensor::{DType, Tensor};
    /// let b = Tensor::from_vec(vec![0u8, 3, 255], [3])?;
    /// assert_eq!(b.add_scalar(-1).to_vec::<u8>()?, vec![255, 2, 254]);
    /// assert_eq!(b.add_scalar(0.5).dtype(), DType::F32);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn add_scalar(&self, s: impl Into<Scalar>) -> Tensor {
        self.scalar_op(s.into(), UnaryOp::AddScalar)
    }

    /// `self - s`.
    pub fn sub_scalar(&self, s: impl Into<Scalar>) -> Tensor {
        self.scalar_op(s.into(), UnaryOp::SubScalar)
    }

    /// `s - self`.
    pub fn rsub_scalar(&self, s: impl Into<Scalar>) -> Tensor {
        self.scalar_op(s.into(), UnaryOp::RSubScalar)
    }

    /// `self * s`.
    pub fn mul_scalar(&self, s: impl Into<Scalar>) -> Tensor {
        self.scalar_op(s.into(), UnaryOp::MulScalar)
    }

    /// `self / s` (true division: integers give `f32`).
    pub fn div_scalar(&self, s: impl Into<Scalar>) -> Tensor {
        self.to_dtype(self.dtype.float_or_default()).unary_op(UnaryOp::DivScalar(s.into()))
    }

    /// `s / self` (true division).
    pub fn rdiv_scalar(&self, s: impl Into<Scalar>) -> Tensor {
        self.to_dtype(self.dtype.float_or_default()).unary_op(UnaryOp::RDivScalar(s.into()))
    }

    /// `self ^ e`. On an integer tensor an integer exponent keeps the dtype (wrapping like
    /// PyTorch) and must not be negative: PyTorch refuses that ("Integers to negative
    /// integer powers are not allowed."), and so does this; a float exponent gives `f32`.
    ///
    /// ```
    /// use ember_tensor::Tensor;
    /// let i = Tensor::from_vec(vec![2i64, 3], [2])?;
    /// assert_eq!(i.pow_scalar(3)?.to_vec::<i64>()?, vec![8, 27]);
    /// assert!(i.pow_scalar(-1).is_err());
    /// assert_eq!(i.pow_scalar(-1.0)?.to_vec::<f32>()?, vec![0.5, 1.0 / 3.0]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn pow_scalar(&self, e: impl Into<Scalar>) -> Result<Tensor> {
        let e = e.into();
        let dtype = self.dtype.promote_scalar(e);
        // A fallible op: a conversion that cannot be held is an error, not an abort.
        let x = self.try_to_dtype(dtype).map_err(|e| e.alloc_in("pow_scalar"))?;
        let s = x.read(|v| x.backend().unary(UnaryOp::PowScalar(e), v))?;
        Ok(Tensor::from_storage(s, x.shape().clone()))
    }

    /// `base ^ self`.
    pub fn rpow_scalar(&self, base: impl Into<Scalar>) -> Tensor {
        self.to_dtype(self.dtype.float_or_default()).unary_op(UnaryOp::RPowScalar(base.into()))
    }

    /// `max(self, s)` elementwise. On an integer tensor an integer bound beyond the dtype's
    /// range saturates (`u8` against 300 gives 255).
    pub fn maximum_scalar(&self, s: impl Into<Scalar>) -> Tensor {
        self.scalar_op(s.into(), UnaryOp::MaximumScalar)
    }

    /// `min(self, s)` elementwise (an integer bound saturates as in `maximum_scalar`).
    pub fn minimum_scalar(&self, s: impl Into<Scalar>) -> Tensor {
        self.scalar_op(s.into(), UnaryOp::MinimumScalar)
    }

    fn compare_op(&self, op: CmpOp, other: &Tensor) -> Result<Tensor> {
        let dtype = self.result_type(other);
        if self.same_shape_and_dtype(other, dtype) {
            let s = self.read2(other, |va, vb| self.backend().compare(op, va, vb))?;
            return Ok(Tensor::from_storage(s, self.shape().clone()));
        }
        let (a, b, shape) = self.broadcast_pair(op.name(), other, dtype)?;
        let s = a.read2(&b, |va, vb| a.backend().compare(op, va, vb))?;
        Ok(Tensor::from_storage(s, shape))
    }

    fn compare_scalar_op(&self, op: CmpOp, s: Scalar) -> Tensor {
        let st = infallible(self.read(|v| self.backend().compare_scalar(op, v, s)));
        Tensor::from_storage(st, self.shape().clone())
    }
}

/// Turns the binary table's `tensor` sections into the broadcasting `Tensor` methods.
macro_rules! binary_methods {
    ($(
        $(#[$meta:meta])*
        $V:ident => $method:ident,
            cpu $cpu:tt,
            cuda $cuda:tt,
            tensor [$doc:literal],
            grad $grad:tt;
    )*) => {
        impl Tensor {
            $(
                #[doc = $doc]
                pub fn $method(&self, other: &Tensor) -> Result<Tensor> {
                    self.binary_op(BinaryOp::$V, other)
                }
            )*
        }
    };
}

crate::binary_table!(binary_methods);

/// Turns the comparison table into the `Tensor` comparisons with a tensor and with a
/// scalar.
macro_rules! comparison_methods {
    ($(
        $(#[$meta:meta])*
        $V:ident => $method:ident, $scalar_method:ident, $symbol:literal, cpu $cpu:tt, cuda $cuda:tt;
    )*) => {
        impl Tensor {
            $(
                #[doc = concat!("`self ", $symbol, " other` as a `u8` mask, broadcasting.")]
                pub fn $method(&self, other: &Tensor) -> Result<Tensor> {
                    self.compare_op(CmpOp::$V, other)
                }
                #[doc = concat!("`self ", $symbol, " s` as a `u8` mask. Integer tensors compare with the exact value of `s` (an `i64` beyond 2^53, a fraction); float tensors with `s` rounded to their dtype.")]
                pub fn $scalar_method(&self, s: impl Into<Scalar>) -> Tensor {
                    self.compare_scalar_op(CmpOp::$V, s.into())
                }
            )*
        }
    };
}

crate::compare_table!(comparison_methods);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expanded_operands_convert_each_element_once() {
        let row = Tensor::from_vec(vec![1.5f64, -2.0, 3.0], [1, 3]).unwrap();
        let wide = row.expand([4, 3]).unwrap();
        let c = wide.converted_for("add", DType::F32).unwrap();
        // Still a view repeating one converted row, not a materialised [4, 3] copy.
        assert_eq!((c.dtype(), c.shape().dims(), c.strides()), (DType::F32, &[4, 3][..], &[0, 1][..]));
        assert_eq!(c.storage().read().len(), 3);
        let x = Tensor::from_vec(vec![1.0f32; 12], [4, 3]).unwrap();
        assert_eq!(x.add(&wide).unwrap().to_vec::<f64>().unwrap(), [2.5, -1.0, 4.0].repeat(4));
        // A column repeated along the last dimension too, and in place.
        let col = Tensor::from_vec(vec![1i64, 2], [2, 1]).unwrap().expand([2, 5]).unwrap();
        let y = Tensor::zeros([2, 5], DType::F32).unwrap();
        y.add_(&col).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), [[1.0f32; 5], [2.0; 5]].concat());
    }

    #[test]
    fn promotion_and_broadcasting() {
        let a = Tensor::from_vec(vec![1u8, 2, 3], [3, 1]).unwrap();
        let b = Tensor::from_vec(vec![0.5f32, 1.5], [2]).unwrap();
        let c = a.add(&b).unwrap();
        assert_eq!(c.dtype(), DType::F32);
        assert_eq!(c.shape(), &[3, 2]);
        assert_eq!(c.to_vec::<f32>().unwrap(), vec![1.5, 2.5, 2.5, 3.5, 3.5, 4.5]);
        let i = Tensor::from_vec(vec![7i64, 8], [2]).unwrap();
        assert_eq!(i.div(&Tensor::from_vec(vec![2i64, 0], [2]).unwrap()).unwrap().dtype(), DType::F32);
        assert_eq!(i.mul_scalar(2).dtype(), DType::I64);
        assert_eq!(i.mul_scalar(0.5).to_vec::<f32>().unwrap(), vec![3.5, 4.0]);
    }

    /// A 0-d tensor does not widen a dimensioned one of its category (PyTorch's
    /// result_type): `f32_tensor + tensor(1.0, f64)` is `f32`.
    #[test]
    fn zero_dim_operands_promote_by_category() {
        let x = Tensor::from_vec(vec![0.1f32, 2.0], [2]).unwrap();
        let one = Tensor::scalar(1.0f64);
        for r in [x.add(&one), one.add(&x), x.mul(&one), x.div(&one), x.pow(&one), x.maximum(&one)] {
            assert_eq!(r.unwrap().dtype(), DType::F32);
        }
        assert_eq!(x.add(&one).unwrap().to_vec::<f32>().unwrap(), vec![1.1, 3.0]);
        // Comparisons happen in the result type too: 0.1 rounded to f32 equals 0.1f32.
        assert_eq!(x.eq(&Tensor::scalar(0.1f64)).unwrap().to_vec::<u8>().unwrap(), vec![1, 0]);
        let i = Tensor::from_vec(vec![1i64, 2], [2]).unwrap();
        assert_eq!(i.add(&Tensor::scalar(0.5f64)).unwrap().dtype(), DType::F64);
        assert_eq!(i.add(&Tensor::scalar(0.5f32)).unwrap().dtype(), DType::F32);
        assert_eq!(i.div(&Tensor::scalar(2i64)).unwrap().dtype(), DType::F32);
        let b = Tensor::from_vec(vec![250u8, 3], [2]).unwrap();
        let w = b.add(&Tensor::scalar(10i64)).unwrap();
        assert_eq!((w.dtype(), w.to_vec::<u8>().unwrap()), (DType::U8, vec![4, 13]));
        // Two 0-d operands, or two dimensioned ones, promote as usual.
        assert_eq!(Tensor::scalar(1.0f32).add(&one).unwrap().dtype(), DType::F64);
        assert_eq!(x.add(&Tensor::from_vec(vec![1.0f64], [1]).unwrap()).unwrap().dtype(), DType::F64);
        let m = Tensor::from_vec(vec![1u8, 0], [2]).unwrap();
        assert_eq!(m.where_cond(&x, &Tensor::scalar(0.0f64)).unwrap().dtype(), DType::F32);
        assert_eq!(x.result_type(&one), DType::F32);
    }

    #[test]
    fn aliased_operands_take_one_lock() {
        let a = Tensor::arange(0.0, 6.0).unwrap().reshape([2, 3]).unwrap();
        let s = a.add(&a.t().unwrap().t().unwrap()).unwrap();
        assert_eq!(s.to_vec::<f32>().unwrap(), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        let w = a.gt_scalar(2.0).where_cond(&a, &a.mul_scalar(-1.0)).unwrap();
        assert_eq!(w.to_vec::<f32>().unwrap(), vec![-0.0, -1.0, -2.0, 3.0, 4.0, 5.0]);
    }

    #[test]
    fn comparisons_give_masks() {
        let a = Tensor::from_vec(vec![1.0f64, f64::NAN, 3.0], [3]).unwrap();
        assert_eq!(a.eq(&a).unwrap().to_vec::<u8>().unwrap(), vec![1, 0, 1]);
        assert_eq!(a.ge_scalar(2).to_vec::<u8>().unwrap(), vec![0, 0, 1]);
        let i = Tensor::from_vec(vec![1i64, 2, 3], [3]).unwrap();
        assert_eq!(i.lt_scalar(2.5).to_vec::<u8>().unwrap(), vec![1, 1, 0]);
    }
}
