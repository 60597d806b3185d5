//! The table of elementwise comparisons, [`compare_table!`](crate::compare_table): one row
//! per [`CmpOp`] variant with its `Tensor` and `Var` method names (with another tensor and
//! with a scalar), the operator its docs show, and its CPU and CUDA per-element functions.
//! The result of a comparison is a `u8` mask.
//!
//! ```text
//! /// variant doc
//! Variant => method, scalar_method, "operator", cpu [|x, y| bool expr], cuda ["EXPR"];
//! ```
//!
//! The CUDA expression compares `x` and `y` (an empty `cuda []` fails the test
//! `every_compare_op_has_a_cuda_kernel`).
//!
//! Also here: how an integer tensor compares with a scalar ([`int_cmp`]), which every
//! backend follows.

use crate::Scalar;

/// The comparison table: calls the macro `$m` with every row. Crate-internal machinery,
/// public only so that ember-autograd can expand it into the `Var` comparisons; the row
/// format is in the docs of ember-tensor's `ops::compare` module.
#[doc(hidden)]
#[macro_export]
macro_rules! compare_table {
    ($m:ident) => {
        $m! {
            /// `a == b`
            Eq => eq, eq_scalar, "==", cpu [|x, y| x == y], cuda ["x == y"];
            /// `a != b`
            Ne => ne, ne_scalar, "!=", cpu [|x, y| x != y], cuda ["x != y"];
            /// `a < b`
            Lt => lt, lt_scalar, "<", cpu [|x, y| x < y], cuda ["x < y"];
            /// `a <= b`
            Le => le, le_scalar, "<=", cpu [|x, y| x <= y], cuda ["x <= y"];
            /// `a > b`
            Gt => gt, gt_scalar, ">", cpu [|x, y| x > y], cuda ["x > y"];
            /// `a >= b`
            Ge => ge, ge_scalar, ">=", cpu [|x, y| x >= y], cuda ["x >= y"];
        }
    };
}

/// Turns the comparison table into the `CmpOp` enum and its `name()`.
macro_rules! compare_op_enum {
    ($(
        $(#[$meta:meta])*
        $V:ident => $method:ident, $scalar_method:ident, $symbol:literal, cpu $cpu:tt, cuda $cuda:tt;
    )*) => {
        /// Elementwise comparisons; the result is a `u8` mask.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum CmpOp {
            $( $(#[$meta])* $V, )*
        }

        impl CmpOp {
            /// A lowercase name for messages and profiles.
            pub fn name(self) -> &'static str {
                match self {
                    $( CmpOp::$V => stringify!($method), )*
                }
            }
        }
    };
}

compare_table!(compare_op_enum);

/// `x op s` for every integer `x` (widened to `i64`), as one integer comparison or a
/// constant: integer tensors compare with the exact value of the scalar, whatever its type
/// and magnitude (`i64` values beyond 2^53, fractions, infinities, NaN).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum IntCmp {
    /// Every element gives this result.
    Const(bool),
    /// Every element `x` gives `x op v`.
    Cmp(CmpOp, i64),
}

/// The integer comparison that `x op s` is for every integer `x` (see [`IntCmp`]).
pub(crate) fn int_cmp(op: CmpOp, s: Scalar) -> IntCmp {
    use CmpOp::*;
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    let f = match s {
        Scalar::Int(v) => return IntCmp::Cmp(op, v),
        Scalar::Float(f) => f,
    };
    if f.is_nan() {
        return IntCmp::Const(op == Ne);
    }
    if f >= TWO_63 {
        // Above every i64.
        return IntCmp::Const(matches!(op, Lt | Le | Ne));
    }
    if f < -TWO_63 {
        return IntCmp::Const(matches!(op, Gt | Ge | Ne));
    }
    if f.fract() == 0.0 {
        return IntCmp::Cmp(op, f as i64);
    }
    // A fraction strictly between two integers: x < f exactly when x <= floor(f).
    let floor = f.floor() as i64;
    match op {
        Eq => IntCmp::Const(false),
        Ne => IntCmp::Const(true),
        Lt | Le => IntCmp::Cmp(Le, floor),
        Gt | Ge => IntCmp::Cmp(Gt, floor),
    }
}

#[cfg(test)]
mod tests {
    use super::{CmpOp, IntCmp, int_cmp};
    use crate::Scalar;

    /// The integer form of every comparison agrees with exact rational comparison, for
    /// integers around the scalar and at the ends of the `i64` range.
    #[test]
    fn integer_comparisons_with_scalars_are_exact() {
        let eval = |c: IntCmp, x: i64| match c {
            IntCmp::Const(b) => b,
            IntCmp::Cmp(op, v) => match op {
                CmpOp::Eq => x == v,
                CmpOp::Ne => x != v,
                CmpOp::Lt => x < v,
                CmpOp::Le => x <= v,
                CmpOp::Gt => x > v,
                CmpOp::Ge => x >= v,
            },
        };
        // Exact reference: compare x with s as rationals, through i128 and halves.
        let cmp_exact = |x: i64, s: f64| -> Option<std::cmp::Ordering> {
            if s.is_nan() {
                return None;
            }
            if s.is_infinite() {
                return Some(if s > 0.0 { std::cmp::Ordering::Less } else { std::cmp::Ordering::Greater });
            }
            let twice = (x as i128) * 2;
            let s2 = s * 2.0; // exact: doubling a finite float
            if s2.abs() >= 1.8e19 * 2.0 {
                return Some(if s2 > 0.0 { std::cmp::Ordering::Less } else { std::cmp::Ordering::Greater });
            }
            let floor2 = s2.floor() as i128;
            Some(if twice < floor2 {
                std::cmp::Ordering::Less
            } else if twice > floor2 {
                std::cmp::Ordering::Greater
            } else if s2.fract() != 0.0 {
                std::cmp::Ordering::Less
            } else {
                std::cmp::Ordering::Equal
            })
        };
        let scalars = [0.0, 2.5, -2.5, 3.0, -0.0, i64::MAX as f64, i64::MIN as f64, (1u64 << 62) as f64, 1e30, -1e30];
        let specials = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY];
        for &s in scalars.iter().chain(&specials) {
            for x in [-4, -3, -2, 0, 2, 3, 4, i64::MIN, i64::MAX, i64::MAX - 1] {
                for op in [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge] {
                    let want = match cmp_exact(x, s) {
                        None => op == CmpOp::Ne,
                        Some(o) => match op {
                            CmpOp::Eq => o.is_eq(),
                            CmpOp::Ne => o.is_ne(),
                            CmpOp::Lt => o.is_lt(),
                            CmpOp::Le => o.is_le(),
                            CmpOp::Gt => o.is_gt(),
                            CmpOp::Ge => o.is_ge(),
                        },
                    };
                    assert_eq!(eval(int_cmp(op, Scalar::Float(s)), x), want, "{x} {op:?} {s}");
                }
            }
        }
    }
}
