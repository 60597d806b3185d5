//! Operator overloading: `&a + &b` (a `Result`, since shapes may not broadcast),
//! `&a * 2.0`, `2.0 - &a`, `-&a` (plain tensors, since they cannot fail).

use super::Tensor;
use crate::Result;
use std::ops::{Add, Div, Mul, Neg, Sub};

macro_rules! tensor_ops {
    ($tr:ident, $m:ident, $scalar:ident, $rscalar:ident) => {
        impl $tr<&Tensor> for &Tensor {
            type Output = Result<Tensor>;
            fn $m(self, rhs: &Tensor) -> Result<Tensor> {
                Tensor::$m(self, rhs)
            }
        }
        impl $tr<Tensor> for Tensor {
            type Output = Result<Tensor>;
            fn $m(self, rhs: Tensor) -> Result<Tensor> {
                Tensor::$m(&self, &rhs)
            }
        }
        impl $tr<&Tensor> for Tensor {
            type Output = Result<Tensor>;
            fn $m(self, rhs: &Tensor) -> Result<Tensor> {
                Tensor::$m(&self, rhs)
            }
        }
        impl $tr<Tensor> for &Tensor {
            type Output = Result<Tensor>;
            fn $m(self, rhs: Tensor) -> Result<Tensor> {
                Tensor::$m(self, &rhs)
            }
        }
        // Only `f64` and `i64`: with more float (or integer) types a bare literal like `2.0`
        // would be ambiguous. `mul_scalar` and friends accept any Rust number.
        tensor_ops!(@scalar $tr, $m, $scalar, $rscalar, f64, i64);
    };
    (@scalar $tr:ident, $m:ident, $scalar:ident, $rscalar:ident, $($t:ty),*) => {$(
        impl $tr<$t> for &Tensor {
            type Output = Tensor;
            fn $m(self, rhs: $t) -> Tensor {
                self.$scalar(rhs)
            }
        }
        impl $tr<$t> for Tensor {
            type Output = Tensor;
            fn $m(self, rhs: $t) -> Tensor {
                self.$scalar(rhs)
            }
        }
        impl $tr<&Tensor> for $t {
            type Output = Tensor;
            fn $m(self, rhs: &Tensor) -> Tensor {
                rhs.$rscalar(self)
            }
        }
        impl $tr<Tensor> for $t {
            type Output = Tensor;
            fn $m(self, rhs: Tensor) -> Tensor {
                rhs.$rscalar(self)
            }
        }
    )*};
}

tensor_ops!(Add, add, add_scalar, add_scalar);
tensor_ops!(Sub, sub, sub_scalar, rsub_scalar);
tensor_ops!(Mul, mul, mul_scalar, mul_scalar);
tensor_ops!(Div, div, div_scalar, rdiv_scalar);

impl Neg for &Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        Tensor::neg(self)
    }
}

impl Neg for Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        Tensor::neg(&self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operators() {
        let a = Tensor::from_vec(vec![1.0f32, 2.0], [2]).unwrap();
        let b = (&a * 3.0 - 1.0) + 0.5;
        assert_eq!(b.to_vec::<f32>().unwrap(), vec![2.5, 5.5]);
        assert_eq!((2.0 / &a).to_vec::<f32>().unwrap(), vec![2.0, 1.0]);
        assert_eq!((10.0 - &a).to_vec::<f32>().unwrap(), vec![9.0, 8.0]);
        assert_eq!((-&a).to_vec::<f32>().unwrap(), vec![-1.0, -2.0]);
        let c = (&a + &b).unwrap();
        assert_eq!(c.to_vec::<f32>().unwrap(), vec![3.5, 7.5]);
        assert!((&a + &Tensor::ones([3], crate::DType::F32).unwrap()).is_err());
    }
}
