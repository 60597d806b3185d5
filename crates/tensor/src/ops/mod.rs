//! The elementwise ops, each defined once in a table.
//!
//! [`unary`] and [`binary`] each hold one macro invocation with one entry per op. An entry
//! gives the enum variant (with its parameters and doc), the op's name, its per-element
//! function for the CPU kernels and the `Tensor` method that computes it; the macros below
//! turn the table into the [`UnaryOp`] / [`BinaryOp`] enums with their `name()` (and, for
//! unary ops, `is_float_only()`), the CPU dispatch functions and the `Tensor` methods. So an
//! elementwise op lives in one place (see docs/design.md, "How to add an elementwise op").
//!
//! # What the CPU dispatch keeps
//!
//! The dispatch functions ([`unary::float_kernel`], [`unary::int_kernel`],
//! [`binary::binary_kernel`]) match the op once and hand its per-element closure to a
//! [`MapFn`] / [`ZipFn`], which runs the backend's loop (contiguous fast path, strided runs,
//! multiversioned AVX-512/AVX2 inner loops). Every op arm passes its own closure, so every
//! op still gets its own monomorphised, inlined loop; nothing is called through a pointer
//! per element. The dispatch functions are always inlined: each caller's closure and
//! dtype are known there, and a call into a many-armed function costs a measurable share of
//! an operation on a small tensor.
//!
//! Inside the table the element type is `T` (`T: FloatElement` in `float` sections, `T:
//! Element` in `int` and binary sections). Call `exp`, `ln` and `tanh` through
//! [`FloatElement`](crate::FloatElement) (`FloatElement::exp(x)`): those are the
//! vectorisable `f32` versions.

/// A loop that applies a per-element function of one operand to a view: the CPU backend's
/// out-of-place and in-place maps implement it. `grain` is the parallel chunk size the op
/// asks for (cheap or costly per element).
pub(crate) trait MapFn<T> {
    /// What running the loop gives.
    type Output;
    /// Runs the loop with `f`.
    fn run<F: Fn(T) -> T + Sync + Copy>(self, grain: usize, f: F) -> Self::Output;
}

/// A loop that applies a per-element function of two operands, like [`MapFn`].
pub(crate) trait ZipFn<T> {
    /// What running the loop gives.
    type Output;
    /// Runs the loop with `f`.
    fn run<F: Fn(T, T) -> T + Sync + Copy>(self, grain: usize, f: F) -> Self::Output;
}

/// The parallel grain of a table entry: `cheap` for a few instructions per element,
/// `costly` for transcendental functions (smaller chunks pay off sooner).
macro_rules! grain {
    (cheap) => {
        $crate::backend::cpu::iter::GRAIN_CHEAP
    };
    (costly) => {
        $crate::backend::cpu::iter::GRAIN_COSTLY
    };
}

/// Turns the unary table into the `UnaryOp` enum, its `name()` and `is_float_only()`, the
/// CPU dispatch functions `float_kernel` and `int_kernel`, and the `Tensor` methods.
///
/// An entry reads
///
/// ```text
/// /// variant doc
/// Variant(param: Type, ...) or Variant { field: Type, ... } or Variant => "name",
///     float [GRAIN FUNCTION],
///     int [FUNCTION] or int [],
///     tensor [/// method doc
///             method] or tensor [];
/// ```
///
/// where `GRAIN` is `cheap` or `costly` and a `FUNCTION` is `let a = ...; |x| expr` (any
/// number of `let`s, which may use the variant's parameters) or, where one closure is not
/// enough, `using |k, g| expr` with `k` the loop ([`MapFn`]) and `g` the grain, so that
/// `expr` may call `k.run(g, closure)` on one of several branches (an `int` one returns
/// `Result`). `int []` makes the op float-only: integer tensors compute it in `f32`. A
/// generated `Tensor` method takes the variant's parameters as its arguments.
macro_rules! define_unary_ops {
    ($(
        $(#[$meta:meta])*
        $V:ident $(( $($tp:ident: $tty:ty),* ))? $({ $($(#[$fmeta:meta])* $f:ident: $fty:ty),* })?
            => $name:literal,
            float $float:tt,
            int $int:tt,
            tensor $tensor:tt;
    )*) => {
        /// Elementwise functions of one tensor, with their parameters.
        #[derive(Clone, Copy, Debug, PartialEq)]
        pub enum UnaryOp {
            $(
                $(#[$meta])*
                $V $(( $($tty),* ))? $({ $($(#[$fmeta])* $f: $fty),* })?,
            )*
        }

        impl UnaryOp {
            /// The name of every variant, in the table's order.
            pub const NAMES: &'static [&'static str] = &[$($name),*];

            /// Whether the function is only defined on floats (integer inputs are computed in
            /// `f32`, like PyTorch).
            pub fn is_float_only(self) -> bool {
                match self {
                    $( UnaryOp::$V { .. } => define_unary_ops!(@float_only $int), )*
                }
            }

            /// A lowercase name for messages and profiles.
            pub fn name(self) -> &'static str {
                match self {
                    $( UnaryOp::$V { .. } => $name, )*
                }
            }

            /// The name of the in-place form (`exp_`), for messages about it.
            pub fn inplace_name(self) -> &'static str {
                match self {
                    $( UnaryOp::$V { .. } => concat!($name, "_"), )*
                }
            }
        }

        /// Runs `k` with the per-element function of `op` on the float type `T`.
        #[inline(always)]
        pub(crate) fn float_kernel<T: $crate::FloatElement, K: $crate::ops::MapFn<T>>(op: UnaryOp, k: K) -> K::Output {
            match op {
                $( UnaryOp::$V $(( $($tp),* ))? $({ $($f),* })? => define_unary_ops!(@float k, $float), )*
            }
        }

        /// Runs `k` with the per-element function of `op` on the integer type `T`: `None`
        /// for a float-only op, an error for parameters integers cannot take.
        #[allow(unused_variables)]
        #[inline(always)]
        pub(crate) fn int_kernel<T: $crate::Element, K: $crate::ops::MapFn<T>>(
            op: UnaryOp,
            k: K,
        ) -> $crate::Result<Option<K::Output>> {
            match op {
                $( UnaryOp::$V $(( $($tp),* ))? $({ $($f),* })? => define_unary_ops!(@int k, $int), )*
            }
        }

        impl $crate::Tensor {
            $(
                define_unary_ops!(
                    @tensor $tensor,
                    [$( $($tp: $tty),* )? $( $($f: $fty),* )?],
                    (UnaryOp::$V $(( $($tp),* ))? $({ $($f),* })?)
                );
            )*
        }
    };

    (@float_only []) => { true };
    (@float_only [$($t:tt)*]) => { false };

    (@float $k:ident, [$grain:ident using |$kk:ident, $g:ident| $body:expr]) => {{
        let $kk = $k;
        let $g = grain!($grain);
        $body
    }};
    (@float $k:ident, [$grain:ident $(let $l:ident $(: $lt:ty)? = $le:expr;)* |$x:ident| $body:expr]) => {{
        $(let $l $(: $lt)? = $le;)*
        $k.run(grain!($grain), move |$x: T| $body)
    }};

    (@int $k:ident, []) => {
        Ok(None)
    };
    (@int $k:ident, [using |$kk:ident, $g:ident| $body:expr]) => {{
        let $kk = $k;
        let $g = grain!(cheap);
        $body.map(Some)
    }};
    (@int $k:ident, [$(let $l:ident $(: $lt:ty)? = $le:expr;)* |$x:ident| $body:expr]) => {{
        $(let $l $(: $lt)? = $le;)*
        Ok(Some($k.run(grain!(cheap), move |$x: T| $body)))
    }};

    (@tensor [], [$($arg:ident: $aty:ty),*], ($($ctor:tt)*)) => {};
    (@tensor [$(#[$m:meta])* $method:ident], [$($arg:ident: $aty:ty),*], ($($ctor:tt)*)) => {
        $(#[$m])*
        pub fn $method(&self $(, $arg: $aty)*) -> $crate::Tensor {
            self.unary_op($($ctor)*)
        }
    };
}

/// Turns the binary table into the `BinaryOp` enum and its `name()`, the CPU dispatch
/// function `binary_kernel` and the `Tensor` methods. An entry reads
///
/// ```text
/// /// variant doc
/// Variant => "name", GRAIN |x, y| expr,
///     tensor [/// method doc
///             method];
/// ```
///
/// with `T: Element` the element type (wrapping arithmetic for integers) and `GRAIN`
/// `cheap` or `costly`. The method broadcasts and promotes, and returns a `Result`.
macro_rules! define_binary_ops {
    ($(
        $(#[$meta:meta])*
        $V:ident => $name:literal, $grain:ident |$x:ident, $y:ident| $body:expr,
            tensor [$(#[$m:meta])* $method:ident];
    )*) => {
        /// Elementwise functions of two tensors of the same dtype.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum BinaryOp {
            $( $(#[$meta])* $V, )*
        }

        impl BinaryOp {
            /// A lowercase name for messages and profiles.
            pub fn name(self) -> &'static str {
                match self {
                    $( BinaryOp::$V => $name, )*
                }
            }

            /// The name of the in-place form (`add_`), for messages about it.
            pub fn inplace_name(self) -> &'static str {
                match self {
                    $( BinaryOp::$V => concat!($name, "_"), )*
                }
            }
        }

        /// Runs `k` with the per-element function of `op` on the element type `T`.
        #[inline(always)]
        pub(crate) fn binary_kernel<T: $crate::Element, K: $crate::ops::ZipFn<T>>(op: BinaryOp, k: K) -> K::Output {
            match op {
                $( BinaryOp::$V => k.run(grain!($grain), |$x: T, $y: T| $body), )*
            }
        }

        impl $crate::Tensor {
            $(
                $(#[$m])*
                pub fn $method(&self, other: &$crate::Tensor) -> $crate::Result<$crate::Tensor> {
                    self.binary_op(BinaryOp::$V, other)
                }
            )*
        }
    };
}

// After the macros: `macro_rules!` definitions are in scope only below them.
pub(crate) mod binary;
pub(crate) mod unary;

pub mod attention;
pub mod conv;
pub mod loss;
pub mod lstm;
pub mod norm;
pub mod optim;
pub mod pool;

pub use binary::BinaryOp;
pub use unary::UnaryOp;
