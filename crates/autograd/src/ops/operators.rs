//! Operator overloading for `Var`: `&a + &b` and `&a + &tensor` give `Result<Var>` (shapes
//! may not broadcast); `&a * 2.0`, `2.0 - &a` and `-&a` give `Var`.

use crate::var::Var;
use ember_tensor::{Result, Tensor};
use std::ops::{Add, Div, Mul, Neg, Sub};

macro_rules! var_ops {
    ($tr:ident, $m:ident, $scalar:ident, $rscalar:ident) => {
        impl $tr<&Var> for &Var {
            type Output = Result<Var>;
            #[track_caller]
            fn $m(self, rhs: &Var) -> Result<Var> {
                Var::$m(self, rhs)
            }
        }
        impl $tr<Var> for Var {
            type Output = Result<Var>;
            #[track_caller]
            fn $m(self, rhs: Var) -> Result<Var> {
                Var::$m(&self, &rhs)
            }
        }
        impl $tr<&Var> for Var {
            type Output = Result<Var>;
            #[track_caller]
            fn $m(self, rhs: &Var) -> Result<Var> {
                Var::$m(&self, rhs)
            }
        }
        impl $tr<Var> for &Var {
            type Output = Result<Var>;
            #[track_caller]
            fn $m(self, rhs: Var) -> Result<Var> {
                Var::$m(self, &rhs)
            }
        }
        impl $tr<&Tensor> for &Var {
            type Output = Result<Var>;
            #[track_caller]
            fn $m(self, rhs: &Tensor) -> Result<Var> {
                Var::$m(self, &Var::new(rhs.clone()))
            }
        }
        impl $tr<&Var> for &Tensor {
            type Output = Result<Var>;
            #[track_caller]
            fn $m(self, rhs: &Var) -> Result<Var> {
                Var::$m(&Var::new(self.clone()), rhs)
            }
        }
        // `f64` and `i64` only, so that bare literals are not ambiguous.
        var_ops!(@scalar $tr, $m, $scalar, $rscalar, f64, i64);
    };
    (@scalar $tr:ident, $m:ident, $scalar:ident, $rscalar:ident, $($t:ty),*) => {$(
        impl $tr<$t> for &Var {
            type Output = Var;
            #[track_caller]
            fn $m(self, rhs: $t) -> Var {
                self.$scalar(rhs)
            }
        }
        impl $tr<$t> for Var {
            type Output = Var;
            #[track_caller]
            fn $m(self, rhs: $t) -> Var {
                self.$scalar(rhs)
            }
        }
        impl $tr<&Var> for $t {
            type Output = Var;
            #[track_caller]
            fn $m(self, rhs: &Var) -> Var {
                rhs.$rscalar(self)
            }
        }
        impl $tr<Var> for $t {
            type Output = Var;
            #[track_caller]
            fn $m(self, rhs: Var) -> Var {
                rhs.$rscalar(self)
            }
        }
    )*};
}

var_ops!(Add, add, add_scalar, add_scalar);
var_ops!(Sub, sub, sub_scalar, rsub_scalar);
var_ops!(Mul, mul, mul_scalar, mul_scalar);
var_ops!(Div, div, div_scalar, rdiv_scalar);

impl Neg for &Var {
    type Output = Var;
    #[track_caller]
    fn neg(self) -> Var {
        Var::neg(self)
    }
}

impl Neg for Var {
    type Output = Var;
    #[track_caller]
    fn neg(self) -> Var {
        Var::neg(&self)
    }
}
