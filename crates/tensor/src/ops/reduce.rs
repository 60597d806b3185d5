//! The table of reductions, [`reduce_table!`](crate::reduce_table): one row per
//! [`ReduceOp`] variant with its name, its kind (`value`: an associative combine with an
//! identity; `arg`: the index of the first extreme element, an `i64` result), its CPU kernel
//! and its CUDA pieces (see the module docs of [`crate::ops`] for where each section is
//! expanded).
//!
//! ```text
//! /// variant doc
//! Variant => method, value, cpu [Combine], cuda [combine "EXPR", identity "EXPR"(, widen)];
//! Variant => method, arg, cpu [max or min], cuda [prefer "EXPR"];
//! ```
//!
//! A `value` row names its CPU `Combine` and its CUDA `combine` of `a` and `b` (in the
//! accumulator type `A`) and identity; `widen` accumulates `f32` in `f64` on the GPU. An
//! `arg` row says which extreme the CPU looks for and when CUDA prefers `a` to `b`. The
//! `Tensor` and `Var` reductions take dimensions and are written by hand.

/// The reduction table: calls the macro `$m` with every row. Crate-internal machinery,
/// exported like the other op tables.
#[doc(hidden)]
#[macro_export]
macro_rules! reduce_table {
    ($m:ident) => {
        $m! {
            /// Sum.
            Sum => sum, value,
                cpu [SumC],
                // Sums of f32 accumulate in f64 on the GPU.
                cuda [combine "wadd(a, b)", identity "(A)0", widen];
            /// Product.
            Prod => prod, value,
                cpu [ProdC],
                cuda [combine "wmul(a, b)", identity "(A)1"];
            /// Maximum (NaN propagates).
            Max => max, value,
                cpu [MaxC],
                cuda [combine "(b > a || isnan_(b)) ? b : a", identity "(A)lowest<T>()"];
            /// Minimum (NaN propagates).
            Min => min, value,
                cpu [MinC],
                cuda [combine "(b < a || isnan_(b)) ? b : a", identity "(A)highest<T>()"];
            /// Index of the first maximum along one dimension (`i64` result).
            ArgMax => argmax, arg,
                cpu [max],
                cuda [prefer "a > b"];
            /// Index of the first minimum along one dimension (`i64` result).
            ArgMin => argmin, arg,
                cpu [min],
                cuda [prefer "a < b"];
        }
    };
}

/// Turns the reduction table into the `ReduceOp` enum, its `name()` and `is_arg()`.
macro_rules! reduce_op_enum {
    ($(
        $(#[$meta:meta])*
        $V:ident => $method:ident, $kind:ident, cpu $cpu:tt, cuda $cuda:tt;
    )*) => {
        /// Reductions over a set of dimensions.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum ReduceOp {
            $( $(#[$meta])* $V, )*
        }

        impl ReduceOp {
            /// A lowercase name for messages and profiles.
            pub fn name(self) -> &'static str {
                match self {
                    $( ReduceOp::$V => stringify!($method), )*
                }
            }

            /// Whether the result is the index of an element (`i64`, like `argmax`) rather
            /// than a value of the input's dtype.
            pub fn is_arg(self) -> bool {
                match self {
                    $( ReduceOp::$V => reduce_op_enum!(@is_arg $kind), )*
                }
            }
        }
    };

    (@is_arg value) => { false };
    (@is_arg arg) => { true };
}

reduce_table!(reduce_op_enum);
