//! Elementwise functions of one tensor. They cannot fail, so they return the tensor
//! directly. Floating functions of integer tensors compute in `f32`.
//!
//! The methods that only call their op (`exp`, `relu`, `softplus`, ...) are generated here
//! from the `tensor` sections of the op table in `ops/unary.rs`; this file also holds
//! `clamp`, whose optional bounds and integer-to-float rule need more than the op.

use super::Tensor;
use crate::backend::UnaryOp;
use crate::{DType, Error, Result};

/// Turns the unary table's `tensor` sections into `Tensor` methods that take the op's
/// parameters and call it.
macro_rules! unary_methods {
    ($(
        $(#[$meta:meta])*
        $V:ident $(( $($tp:ident: $tty:tt),* ))? $({ $($(#[$fmeta:meta])* $f:ident: $fty:tt),* })?
            => $method:ident,
            float $float:tt,
            int $int:tt,
            cuda $cuda:tt,
            tensor $tensor:tt,
            grad $grad:tt;
    )*) => {
        impl Tensor {
            $(
                unary_methods!(
                    @method $method, $tensor,
                    [$( $($tp: $tty),* )? $( $($f: $fty),* )?],
                    (UnaryOp::$V $(( $($tp),* ))? $({ $($f),* })?)
                );
            )*
        }
    };

    (@method $method:ident, [], [$($arg:ident: $aty:tt),*], ($($op:tt)*)) => {};
    (@method $method:ident, [$doc:literal], [$($arg:ident: $aty:tt),*], ($($op:tt)*)) => {
        #[doc = $doc]
        pub fn $method(&self $(, $arg: unary_methods!(@type $aty))*) -> Tensor {
            self.unary_op($($op)*)
        }
    };

    (@type Scalar) => { crate::Scalar };
    (@type $t:tt) => { $t };
}

crate::unary_table!(unary_methods);

/// Whether a clamp bound has no integer value (a fraction, an infinity or NaN), which makes
/// the clamp of an integer tensor a float result.
pub(crate) fn clamp_needs_float(min: Option<f64>, max: Option<f64>) -> bool {
    [min, max].into_iter().flatten().any(|b| !b.is_finite() || b.fract() != 0.0)
}

impl Tensor {
    /// Values limited to `[min, max]`; either bound may be `None`. NaN stays NaN.
    ///
    /// Like PyTorch this computes `min(max(x, min), max)`, so when `min > max` every element
    /// becomes `max`. An integer tensor keeps its dtype when the bounds are integral
    /// (a bound beyond the dtype's range saturates); a bound with a fractional part, or an
    /// infinite or NaN one, makes the result `f32`, as PyTorch's float bounds do (it promotes
    /// for any float bound; an `f64` argument cannot say whether `2.0` was meant as an
    /// integer, so integral values keep the integer dtype here).
    ///
    /// ```
    /// use ember_tensor::{DType, Tensor};
    /// let t = Tensor::from_vec(vec![-2.0f32, 0.5, 3.0], [3])?;
    /// assert_eq!(t.clamp(Some(-1.0), Some(1.0)).to_vec::<f32>()?, vec![-1.0, 0.5, 1.0]);
    /// assert_eq!(t.clamp(None, Some(0.0)).to_vec::<f32>()?, vec![-2.0, 0.0, 0.0]);
    /// assert_eq!(t.clamp(Some(1.0), Some(0.0)).to_vec::<f32>()?, vec![0.0, 0.0, 0.0]);
    /// let i = Tensor::from_vec(vec![-2i64, 0, 3], [3])?;
    /// assert_eq!(i.clamp(Some(-1.0), Some(1.0)).to_vec::<i64>()?, vec![-1, 0, 1]);
    /// assert_eq!(i.clamp(Some(0.5), None).to_vec::<f32>()?, vec![0.5, 0.5, 3.0]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn clamp(&self, min: Option<f64>, max: Option<f64>) -> Tensor {
        let op = UnaryOp::Clamp { min: min.unwrap_or(f64::NEG_INFINITY), max: max.unwrap_or(f64::INFINITY) };
        if self.dtype.is_int() && clamp_needs_float(min, max) {
            return self.to_dtype(DType::F32).unary_op(op);
        }
        self.unary_op(op)
    }

    /// The gradient of [`Tensor::relu`] from its `output`: this incoming gradient where
    /// `output > 0`, 0 where `output <= 0`, in one pass; PyTorch's `threshold_backward(grad,
    /// output, 0)`, so a NaN output passes the gradient and a clamped entry gives exactly 0
    /// even for an infinite or NaN gradient. Both must be float tensors of one shape, dtype
    /// and device.
    ///
    /// ```
    /// use ember_tensor::Tensor;
    /// let y = Tensor::from_vec(vec![0.0f32, 2.0, f32::NAN], [3])?;
    /// let g = Tensor::from_vec(vec![f32::INFINITY, 3.0, 4.0], [3])?;
    /// assert_eq!(g.relu_backward(&y)?.to_vec::<f32>()?, vec![0.0, 3.0, 4.0]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn relu_backward(&self, output: &Tensor) -> Result<Tensor> {
        let op = "relu_backward";
        self.same_device(op, output)?;
        if !self.dtype.is_float() || output.dtype != self.dtype {
            return Err(Error::dtype(
                op,
                format!("expected float gradient and output of one dtype, got {} and {}", self.dtype, output.dtype),
            ));
        }
        if self.shape() != output.shape() {
            return Err(Error::shape(
                op,
                format!("the gradient {:?} and the output {:?} must have one shape", self.shape(), output.shape()),
            ));
        }
        let s = self.read2(output, |g, o| self.backend().relu_backward(g, o))?;
        Ok(Tensor::from_storage(s, self.shape().clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_functions_are_close_to_f64() {
        let xs: Vec<f32> = (-200..=200).map(|i| i as f32 * 0.05).collect();
        let t32 = Tensor::from_vec(xs.clone(), [xs.len()]).unwrap();
        let t64 = t32.to_dtype(DType::F64);
        for (a, b) in [(t32.exp(), t64.exp()), (t32.tanh(), t64.tanh()), (t32.sigmoid(), t64.sigmoid())] {
            for (x, y) in a.to_vec::<f32>().unwrap().iter().zip(b.to_vec::<f64>().unwrap()) {
                assert!(((*x as f64) - y).abs() <= 1e-6 * y.abs().max(1.0), "{x} vs {y}");
            }
        }
    }

    #[test]
    fn integer_inputs() {
        let i = Tensor::from_vec(vec![-2i64, 0, 3], [3]).unwrap();
        assert_eq!(i.abs().to_vec::<i64>().unwrap(), vec![2, 0, 3]);
        assert_eq!(i.relu().dtype(), DType::I64);
        assert_eq!(i.exp().dtype(), DType::F32);
        assert_eq!(i.clamp(Some(-1.0), Some(1.0)).to_vec::<i64>().unwrap(), vec![-1, 0, 1]);
    }

    #[test]
    fn sign_keeps_nan_and_signed_zeros() {
        let t = Tensor::from_vec(vec![-2.5f32, -0.0, 0.0, 3.0, f32::NAN, f32::NEG_INFINITY], [6]).unwrap();
        let s = t.sign().to_vec::<f32>().unwrap();
        assert_eq!(s[..4].iter().map(|v| v.to_bits()).collect::<Vec<_>>(), [-1.0f32, -0.0, 0.0, 1.0].map(f32::to_bits));
        assert!(s[4].is_nan());
        assert_eq!(s[5], -1.0);
    }

    #[test]
    fn clamp_follows_pytorch() {
        // min > max: every element is max, including those below min.
        let f = Tensor::from_vec(vec![-5.0f32, 0.0, 5.0, f32::NAN], [4]).unwrap();
        let c = f.clamp(Some(2.0), Some(-1.0)).to_vec::<f32>().unwrap();
        assert_eq!(&c[..3], &[-1.0, -1.0, -1.0]);
        assert!(c[3].is_nan());
        let i = Tensor::from_vec(vec![-5i64, 0, 5], [3]).unwrap();
        assert_eq!(i.clamp(Some(2.0), Some(-1.0)).to_vec::<i64>().unwrap(), vec![-1, -1, -1]);
        let b = Tensor::from_vec(vec![0u8, 100, 255], [3]).unwrap();
        assert_eq!(b.clamp(Some(300.0), None).to_vec::<u8>().unwrap(), vec![255, 255, 255]);
        assert_eq!(b.clamp(Some(-3.0), Some(100.0)).to_vec::<u8>().unwrap(), vec![0, 100, 100]);
        // Bounds without an integer value make an integer clamp a float one.
        let h = i.clamp(Some(-0.5), Some(2.5));
        assert_eq!((h.dtype(), h.to_vec::<f32>().unwrap()), (DType::F32, vec![-0.5, 0.0, 2.5]));
        assert_eq!(i.clamp(None, Some(f64::INFINITY)).dtype(), DType::F32);
        assert_eq!(b.clamp(Some(1.0), None).dtype(), DType::U8);
        // ...which cannot be written back in place.
        assert!(i.clamp_(Some(0.5), None).is_err());
        i.clamp_(Some(2.0), Some(-1.0)).unwrap();
        assert_eq!(i.to_vec::<i64>().unwrap(), vec![-1, -1, -1]);
        f.clamp_(Some(2.0), Some(-1.0)).unwrap();
        assert_eq!(f.to_vec::<f32>().unwrap()[..3], [-1.0, -1.0, -1.0]);
    }
}
