//! Element types and the rules for combining them.
//!
//! # Type promotion
//!
//! Binary operations between tensors of different dtypes compute in the *promoted* dtype,
//! following PyTorch: the dtypes are ordered `u8 < i64 < f16, bf16 < f32 < f64` and the
//! result takes the larger one (`u8 + i64 -> i64`, `i64 * f32 -> f32`, `f32 - f64 -> f64`,
//! `i64 + bf16 -> bf16`, `f16 * f32 -> f32`); `f16` and `bf16` together give `f32`, which
//! holds both (bf16's range, f16's precision).
//!
//! # 16-bit floats
//!
//! `f16` and `bf16` tensors store `half::f16` / `half::bf16` elements (re-exported as
//! [`f16`](crate::f16) and [`bf16`](crate::bf16)). Arithmetic on them is computed in `f32`
//! and each result rounded once to the tensor's dtype (round to nearest even), and
//! reductions accumulate in `f32`, as PyTorch computes them on the CPU. Conversions from
//! `f64` go through `f32` (PyTorch's `Half(float)` and `BFloat16(float)` take a float), so
//! a value can round twice.
//!
//! A 0-d tensor counts for less than a tensor with dimensions, as in PyTorch's
//! `result_type` ([`result_type`]): the dtypes are split into the categories integral
//! (`u8`, `i64`) and floating (`f16`, `bf16`, `f32`, `f64`), and a 0-d operand only changes the result when
//! its category is higher than that of the dimensioned operands. So `f32_tensor +
//! Tensor::scalar(1.0f64)` stays `f32` (a 0-d `f64` is just a float), `i64_tensor +
//! Tensor::scalar(1.5f64)` is `f64` (a float beside integers promotes, to its own dtype),
//! `u8_tensor + Tensor::scalar(300i64)` stays `u8`, and two 0-d operands promote normally.
//! This applies to arithmetic, comparisons and `where_cond`.
//!
//! # Tensor-scalar operations
//!
//! A Rust number in a tensor-scalar operation is a [`Scalar`]: integer literals are
//! [`Scalar::Int`] and float literals [`Scalar::Float`], and the category, not the value,
//! decides the result dtype, as for PyTorch's Python scalars:
//!
//! - a scalar never widens a tensor within its category: an `f32` tensor times `2.0` (or
//!   `2`) stays `f32`, a `u8` tensor plus `1` stays `u8`;
//! - an integer tensor with a float scalar gives `f32`, PyTorch's default float dtype:
//!   `i64_tensor * 0.5` and `u8_tensor + 2.0` are `f32`;
//! - an integer tensor with an integer scalar computes in the tensor's dtype with the
//!   scalar's exact value (never rounded through `f64`, so `i64` scalars beyond 2^53 are
//!   exact) and wrapping arithmetic: the scalar converts like an `as` cast, so for `u8`
//!   `x + (-1)` is `x - 1` and `x * (-1)` is `256 - x`, as in PyTorch;
//! - true division (`div_scalar`, `rdiv_scalar`) and `rpow_scalar` of integers give `f32`;
//!   `pow_scalar` of an integer tensor by an integer exponent stays integral, and a negative
//!   exponent is an error (PyTorch: "Integers to negative integer powers are not allowed.");
//! - `maximum_scalar`, `minimum_scalar` and `clamp` bounds beyond an integer dtype's range
//!   saturate instead of wrapping, so that a bound keeps its side of every value;
//! - comparisons with a scalar (`lt_scalar`, ...) on integer tensors use the scalar's exact
//!   value, `2.5` and `2^53 + 1` included; on float tensors the scalar is rounded to the
//!   tensor's dtype first, as PyTorch does;
//! - in place (`add_scalar_`, `mul_scalar_`, `clamp_`), a scalar whose result would be float
//!   is an error on an integer tensor.
//!
//! Comparisons return `u8` masks (`1` for true, `0` for false). Floating functions such as
//! `exp` or `sigmoid` applied to an integer tensor compute in `f32`.
//!
//! Conversions between dtypes happen only when asked for with `Tensor::to_dtype`, and
//! follow Rust's `as` casts (float to integer truncates toward zero and saturates).

mod kind;

pub use kind::{DType, result_type};

use crate::storage::HostElement;
use std::fmt;

// Beside `Scalar` rather than with the rest of `DType`'s methods, which live below storage.
impl DType {
    /// The dtype of `self` combined with a scalar: floats keep their dtype, and a floating
    /// scalar turns an integer dtype into `f32`.
    #[inline]
    pub fn promote_scalar(self, scalar: Scalar) -> DType {
        match scalar {
            Scalar::Float(_) if self.is_int() => DType::F32,
            _ => self,
        }
    }
}

/// A Rust number used as the scalar side of a tensor-scalar operation.
///
/// Integer literals become [`Scalar::Int`] and float literals [`Scalar::Float`], which is
/// what decides the result dtype (see the module docs): `t.add_scalar(1)` keeps an `i64`
/// tensor `i64`, `t.add_scalar(1.5)` makes it `f32`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    /// An integral value.
    Int(i64),
    /// A floating value.
    Float(f64),
}

impl Scalar {
    /// The value as `f64` (an integer beyond 2^53 rounds).
    pub fn to_f64(self) -> f64 {
        match self {
            Scalar::Int(v) => v as f64,
            Scalar::Float(v) => v,
        }
    }

    /// Whether this is a [`Scalar::Float`].
    pub fn is_float(self) -> bool {
        matches!(self, Scalar::Float(_))
    }

    /// The value as element type `T`, with Rust's `as` semantics and no detour through
    /// `f64` for integers: an integer converts exactly into `i64` and wraps into `u8`
    /// (`-1` becomes 255, as PyTorch converts integer scalars), and rounds into a float; a
    /// float rounds into a float and truncates (saturating) into an integer.
    #[inline]
    pub fn to_element<T: Element>(self) -> T {
        match self {
            Scalar::Int(v) => T::from_i64(v),
            Scalar::Float(v) => T::from_f64(v),
        }
    }

    /// Like [`Scalar::to_element`], but an integer beyond the range of `T` saturates to
    /// its nearest end instead of wrapping: the bound of a `max`, `min` or `clamp` keeps
    /// its side of every value (`max(u8, 300)` is 255, not 44).
    #[inline]
    pub fn to_element_saturating<T: Element>(self) -> T {
        match self {
            Scalar::Int(v) if T::DTYPE == DType::U8 => T::from_i64(v.clamp(0, u8::MAX as i64)),
            s => s.to_element(),
        }
    }

    /// The value as element type `T`, or an error naming `op` when `T` cannot hold it: the
    /// rule for values written into a tensor as they are (`full`, `fill_`, `masked_fill`),
    /// which PyTorch shares.
    ///
    /// An integer goes into `i64` and the floats as [`Scalar::to_element`] converts it, and
    /// into `u8` from -255 to 255 (a negative one wraps: `-1` becomes 255). A float loses its
    /// fraction going into an integer dtype: into `u8` it must be at least 0 and below 256,
    /// into `i64` its integer part must lie within `i64`'s range; NaN and the infinities go
    /// into neither. A finite float beyond the range of `f32` is refused by `f32`;
    /// infinities and NaN go into floats as they are.
    ///
    /// ```
    /// use ember_tensor::{DType, Scalar};
    /// assert_eq!(Scalar::Int(-1).to_element_checked::<u8>("fill_")?, 255);
    /// assert_eq!(Scalar::Float(2.7).to_element_checked::<i64>("fill_")?, 2);
    /// assert!(Scalar::Int(300).to_element_checked::<u8>("fill_").is_err());
    /// assert!(Scalar::Float(1e300).to_element_checked::<f32>("fill_").is_err());
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn to_element_checked<T: Element>(self, op: &'static str) -> crate::Result<T> {
        let fits = match (self, T::DTYPE) {
            (Scalar::Int(v), DType::U8) => (-255..=255).contains(&v),
            // f16's largest finite value is 65504; an integer beyond it would become inf.
            (Scalar::Int(v), DType::F16) => v.unsigned_abs() <= 65504,
            (Scalar::Int(_), _) => true,
            // A negative float is refused whatever its integer part (PyTorch's rule).
            (Scalar::Float(v), DType::U8) => (0.0..256.0).contains(&v),
            // 2^63 is exact in f64; the truncated value must stay below it.
            (Scalar::Float(v), DType::I64) => v > -9_223_372_036_854_777_856.0 && v < 9_223_372_036_854_775_808.0,
            (Scalar::Float(v), DType::F32) => !v.is_finite() || v.abs() <= f32::MAX as f64,
            (Scalar::Float(v), DType::F16) => !v.is_finite() || v.abs() <= half::f16::MAX.to_f64(),
            (Scalar::Float(v), DType::BF16) => !v.is_finite() || v.abs() <= half::bf16::MAX.to_f64(),
            (Scalar::Float(_), DType::F64) => true,
        };
        if !fits {
            return Err(crate::Error::invalid(
                op,
                format!("{} cannot be written into a {} tensor: it is out of range", self.describe(), T::DTYPE),
            ));
        }
        Ok(self.to_element())
    }

    /// [`Scalar::to_element_checked`]'s verdict for a tensor of `dtype`.
    pub(crate) fn check_fits(self, dtype: DType, op: &'static str) -> crate::Result<()> {
        match dtype {
            DType::U8 => self.to_element_checked::<u8>(op).map(drop),
            DType::I64 => self.to_element_checked::<i64>(op).map(drop),
            DType::F16 => self.to_element_checked::<half::f16>(op).map(drop),
            DType::BF16 => self.to_element_checked::<half::bf16>(op).map(drop),
            DType::F32 => self.to_element_checked::<f32>(op).map(drop),
            DType::F64 => self.to_element_checked::<f64>(op).map(drop),
        }
    }

    /// The value as written in a message.
    fn describe(self) -> String {
        match self {
            Scalar::Int(v) => v.to_string(),
            Scalar::Float(v) => format!("{v:?}"),
        }
    }

    /// Whether the value is zero (`-0.0` is not: its bits are not those of zero).
    pub fn is_zero_bits(self) -> bool {
        match self {
            Scalar::Int(v) => v == 0,
            Scalar::Float(v) => v.to_bits() == 0,
        }
    }
}

macro_rules! scalar_from {
    ($variant:ident, $as:ty: $($t:ty),*) => {
        $(impl From<$t> for Scalar {
            fn from(v: $t) -> Self {
                Scalar::$variant(v as $as)
            }
        })*
    };
}
scalar_from!(Int, i64: i8, i16, i32, i64, u8, u16, u32, usize, isize);
scalar_from!(Float, f64: f32, f64);

impl From<bool> for Scalar {
    fn from(v: bool) -> Self {
        Scalar::Int(v as i64)
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for u8 {}
    impl Sealed for i64 {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// A Rust type that can be the element of a tensor: `u8`, `i64`, `half::f16`,
/// `half::bf16`, `f32` or `f64`.
///
/// Its dtype (`T::DTYPE`) and its place in host storage come from [`HostElement`].
pub trait Element:
    sealed::Sealed
    + HostElement
    + Copy
    + Send
    + Sync
    + PartialOrd
    + PartialEq
    + Default
    + fmt::Debug
    + fmt::Display
    + 'static
{
    /// Zero.
    const ZERO: Self;
    /// One.
    const ONE: Self;
    /// The smallest value (negative infinity for floats), the identity of `max`.
    const LOWEST: Self;
    /// The largest value (infinity for floats), the identity of `min`.
    const HIGHEST: Self;
    /// Conversion from `f64` with `as` semantics (saturating, truncating toward zero).
    fn from_f64(v: f64) -> Self;
    /// Conversion to `f64`.
    fn to_f64(self) -> f64;
    /// Conversion from `i64` with `as` semantics.
    fn from_i64(v: i64) -> Self;
    /// Conversion from `f32` with `as` semantics (round to nearest even into the 16-bit
    /// floats): the fast path of conversions between the 16-bit floats and the others.
    fn from_f32(v: f32) -> Self;
    /// Conversion to `f32` with `as` semantics.
    fn to_f32(self) -> f32;
    /// Conversion to `i64` with `as` semantics.
    fn to_i64(self) -> i64;
    /// Whether the value is NaN (always false for integers).
    fn is_nan(self) -> bool;
    /// Addition, wrapping for integers.
    fn wadd(self, rhs: Self) -> Self;
    /// Subtraction, wrapping for integers.
    fn wsub(self, rhs: Self) -> Self;
    /// Multiplication, wrapping for integers.
    fn wmul(self, rhs: Self) -> Self;
    /// `self ^ e` (integers: wrapping; a negative exponent gives `1 / self^|e|` truncated).
    fn pow_elem(self, e: Self) -> Self;
    /// Division; integer division by zero gives zero instead of a panic.
    fn div(self, rhs: Self) -> Self;
    /// Absolute value (identity for `u8`).
    fn abs(self) -> Self;
    /// Negation (wrapping for `u8`, like PyTorch).
    fn neg(self) -> Self;
    /// `-1`, `0` or `1`; NaN stays NaN.
    fn signum(self) -> Self;
    /// Maximum that propagates NaN, like `torch.maximum`.
    #[inline(always)]
    fn max_nan(self, other: Self) -> Self {
        if self.is_nan() || self > other {
            self
        } else if other.is_nan() || other > self {
            other
        } else {
            self
        }
    }
    /// Minimum that propagates NaN, like `torch.minimum`.
    #[inline(always)]
    fn min_nan(self, other: Self) -> Self {
        if self.is_nan() || self < other {
            self
        } else if other.is_nan() || other < self {
            other
        } else {
            self
        }
    }
}

/// The [`Element`] items every dtype spells the same way: the `as` casts to and from
/// f64/i64.
macro_rules! element_casts {
    ($t:ty) => {
        #[inline(always)]
        fn from_f64(v: f64) -> Self {
            v as $t
        }
        #[inline(always)]
        fn to_f64(self) -> f64 {
            self as f64
        }
        #[inline(always)]
        fn from_i64(v: i64) -> Self {
            v as $t
        }
        #[inline(always)]
        fn from_f32(v: f32) -> Self {
            v as $t
        }
        #[inline(always)]
        fn to_f32(self) -> f32 {
            self as f32
        }
        #[inline(always)]
        fn to_i64(self) -> i64 {
            self as i64
        }
    };
}

/// `x^e` with wrapping multiplication (PyTorch's integer `pow`), by repeated squaring.
#[inline(always)]
pub(crate) fn pow_wrapping<T: Element>(x: T, mut e: u64) -> T {
    let (mut base, mut acc) = (x, T::ONE);
    while e > 0 {
        if e & 1 == 1 {
            acc = acc.wmul(base);
        }
        base = base.wmul(base);
        e >>= 1;
    }
    acc
}

macro_rules! int_element {
    ($t:ty, $abs:expr, $neg:expr, $sign:expr) => {
        impl Element for $t {
            element_casts!($t);
            const ZERO: Self = 0;
            const ONE: Self = 1;
            const LOWEST: Self = <$t>::MIN;
            const HIGHEST: Self = <$t>::MAX;
            #[inline(always)]
            fn is_nan(self) -> bool {
                false
            }
            #[inline(always)]
            fn wadd(self, rhs: Self) -> Self {
                self.wrapping_add(rhs)
            }
            #[inline(always)]
            fn wsub(self, rhs: Self) -> Self {
                self.wrapping_sub(rhs)
            }
            #[inline(always)]
            fn wmul(self, rhs: Self) -> Self {
                self.wrapping_mul(rhs)
            }
            #[inline(always)]
            fn pow_elem(self, e: Self) -> Self {
                let e = e as i64;
                if e >= 0 {
                    // Over the whole exponent: `wrapping_pow` takes a `u32`, and a larger
                    // exponent must not be cut to it.
                    pow_wrapping(self, e as u64)
                } else if self == 1 {
                    1
                } else if (self as i64) == -1 {
                    if e % 2 == 0 { 1 } else { self }
                } else {
                    0
                }
            }
            #[inline(always)]
            fn div(self, rhs: Self) -> Self {
                self.checked_div(rhs).unwrap_or(0)
            }
            #[inline(always)]
            fn abs(self) -> Self {
                ($abs)(self)
            }
            #[inline(always)]
            fn neg(self) -> Self {
                ($neg)(self)
            }
            #[inline(always)]
            fn signum(self) -> Self {
                ($sign)(self)
            }
        }
    };
}
int_element!(u8, |v: u8| v, |v: u8| v.wrapping_neg(), |v: u8| (v > 0) as u8);
int_element!(i64, |v: i64| v.wrapping_abs(), |v: i64| v.wrapping_neg(), |v: i64| v.signum());

macro_rules! float_element {
    ($t:ty) => {
        impl Element for $t {
            element_casts!($t);
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const LOWEST: Self = <$t>::NEG_INFINITY;
            const HIGHEST: Self = <$t>::INFINITY;
            #[inline(always)]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            #[inline(always)]
            fn wadd(self, rhs: Self) -> Self {
                self + rhs
            }
            #[inline(always)]
            fn wsub(self, rhs: Self) -> Self {
                self - rhs
            }
            #[inline(always)]
            fn wmul(self, rhs: Self) -> Self {
                self * rhs
            }
            #[inline(always)]
            fn pow_elem(self, e: Self) -> Self {
                self.powf(e)
            }
            #[inline(always)]
            fn div(self, rhs: Self) -> Self {
                self / rhs
            }
            #[inline(always)]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            #[inline(always)]
            fn neg(self) -> Self {
                -self
            }
            #[inline(always)]
            fn signum(self) -> Self {
                if self > 0.0 {
                    1.0
                } else if self < 0.0 {
                    -1.0
                } else {
                    self
                }
            }
        }
    };
}
float_element!(f32);
float_element!(f64);

/// The 16-bit floats as elements: every operation computes in `f32` and rounds its result
/// once, which is what PyTorch's CPU kernels do with them. Conversions from `f64` and `i64`
/// go through `f32`, as PyTorch's `Half(float)` and `BFloat16(float)` constructors make them
/// (so `f64` values can round twice, exactly as there).
macro_rules! half_element {
    ($t:ty) => {
        impl Element for $t {
            const ZERO: Self = <$t>::ZERO;
            const ONE: Self = <$t>::ONE;
            const LOWEST: Self = <$t>::NEG_INFINITY;
            const HIGHEST: Self = <$t>::INFINITY;
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                HalfElement::narrow(v as f32)
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self.widen() as f64
            }
            #[inline(always)]
            fn from_i64(v: i64) -> Self {
                HalfElement::narrow(v as f32)
            }
            #[inline(always)]
            fn to_i64(self) -> i64 {
                self.widen() as i64
            }
            #[inline(always)]
            fn from_f32(v: f32) -> Self {
                HalfElement::narrow(v)
            }
            #[inline(always)]
            fn to_f32(self) -> f32 {
                self.widen()
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            #[inline(always)]
            fn wadd(self, rhs: Self) -> Self {
                <$t as HalfElement>::narrow(self.widen() + rhs.widen())
            }
            #[inline(always)]
            fn wsub(self, rhs: Self) -> Self {
                <$t as HalfElement>::narrow(self.widen() - rhs.widen())
            }
            #[inline(always)]
            fn wmul(self, rhs: Self) -> Self {
                <$t as HalfElement>::narrow(self.widen() * rhs.widen())
            }
            #[inline(always)]
            fn pow_elem(self, e: Self) -> Self {
                <$t as HalfElement>::narrow(self.widen().powf(e.widen()))
            }
            #[inline(always)]
            fn div(self, rhs: Self) -> Self {
                <$t as HalfElement>::narrow(self.widen() / rhs.widen())
            }
            #[inline(always)]
            fn abs(self) -> Self {
                <$t>::from_bits(self.to_bits() & 0x7fff)
            }
            #[inline(always)]
            fn neg(self) -> Self {
                -self
            }
            #[inline(always)]
            fn signum(self) -> Self {
                <$t as HalfElement>::narrow(Element::signum(self.widen()))
            }
        }
    };
}
half_element!(half::f16);
half_element!(half::bf16);

/// A 16-bit float element (`half::f16`, `half::bf16`): the kernels that run on such
/// elements directly load each one into `f32`, compute there, and round the result once.
pub trait HalfElement: Element {
    /// The value as `f32` (exact).
    fn widen(self) -> f32;
    /// `v` rounded to this type, to nearest with ties to even.
    fn narrow(v: f32) -> Self;
}

// Branch-free conversions, which the kernels' loops vectorise: `f16::from_f32` asks the
// CPU for F16C at every call and the `half` crate's portable fallback branches on the
// exponent, either of which keeps a loop scalar (17 ns an element for an `f16` add).
impl HalfElement for half::f16 {
    #[inline(always)]
    fn widen(self) -> f32 {
        f16_bits_to_f32(self.to_bits())
    }
    #[inline(always)]
    fn narrow(v: f32) -> Self {
        half::f16::from_bits(f32_to_f16_bits(v))
    }
}

/// The `f32` of an `f16`'s bits: exact, subnormals included; NaN stays NaN.
#[inline(always)]
fn f16_bits_to_f32(h: u16) -> f32 {
    let h = h as u32;
    let sign = (h & 0x8000) << 16;
    let rest = h & 0x7fff;
    // Rebias the exponent (15 -> 127) and move the 10 mantissa bits to f32's 23.
    let normal = (rest << 13) + ((127 - 15) << 23);
    let special = (rest << 13) | 0x7f80_0000;
    // A subnormal is its mantissa times 2^-24, exact in f32.
    let subnormal = (rest as f32 * (1.0 / 16_777_216.0)).to_bits();
    let bits = if rest >= 0x7c00 {
        special
    } else if rest < 0x0400 {
        subnormal
    } else {
        normal
    };
    f32::from_bits(bits | sign)
}

/// `v` rounded to the nearest `f16` (ties to even), as bits: overflow gives infinity and NaN
/// a quiet NaN.
#[inline(always)]
fn f32_to_f16_bits(v: f32) -> u16 {
    let bits = v.to_bits();
    let sign = (bits >> 16) & 0x8000;
    let x = bits & 0x7fff_ffff;
    // At or above 65520 (the midpoint past f16's largest finite value) it overflows.
    let overflow = if x > 0x7f80_0000 { 0x7e00 } else { 0x7c00 };
    // Below f16's smallest normal (2^-14): adding 0.5 puts the f16 subnormal's mantissa in
    // the low bits of the sum's, rounded to nearest even by the addition itself.
    let magic = 126u32 << 23;
    let subnormal = (f32::from_bits(x) + f32::from_bits(magic)).to_bits().wrapping_sub(magic);
    // Normal: rebias the exponent, round the 13 dropped bits to nearest even.
    let odd = (x >> 13) & 1;
    let normal = x.wrapping_sub((127 - 15) << 23).wrapping_add(0xfff + odd) >> 13;
    let h = if x >= 0x4780_0000 {
        overflow
    } else if x < 0x3880_0000 {
        subnormal
    } else {
        normal
    };
    (h | sign) as u16
}

impl HalfElement for half::bf16 {
    #[inline(always)]
    fn widen(self) -> f32 {
        self.to_f32_const()
    }
    #[inline(always)]
    fn narrow(v: f32) -> Self {
        half::bf16::from_f32_const(v)
    }
}

/// A floating element type (`f32` or `f64`) with the math the kernels need.
pub trait FloatElement:
    Element
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::Neg<Output = Self>
{
    /// `e^x`; vectorisable for `f32`.
    fn exp(self) -> Self;
    /// `e^self` for `self` in `[EXP_NORMAL_MIN, 0]`, where the result is a normal number:
    /// for `f32` a cheaper scaling than [`FloatElement::exp`]'s (same polynomial, same
    /// result); other inputs give garbage. Softmax uses it on blocks that stay in range.
    #[inline(always)]
    fn exp_normal(self) -> Self {
        self.exp()
    }
    /// [`FloatElement::exp_normal`] in fused multiply-adds for kernels compiled for FMA:
    /// as accurate, not the same bits (see `host::fastmath::exp_normal_fused_f32`).
    #[inline(always)]
    fn exp_normal_fused(self) -> Self {
        self.exp_normal()
    }
    /// [`FloatElement::exp_normal_fused`] where `fused`, else [`FloatElement::exp_normal`]:
    /// for kernels that decide per compiled clone.
    #[inline(always)]
    fn exp_normal_where(self, fused: bool) -> Self {
        if fused { self.exp_normal_fused() } else { self.exp_normal() }
    }
    /// The lower end of [`FloatElement::exp_normal`]'s range.
    const EXP_NORMAL_MIN: Self;
    /// Natural logarithm; vectorisable for `f32`.
    fn ln(self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// Sine.
    fn sin(self) -> Self;
    /// Cosine.
    fn cos(self) -> Self;
    /// Hyperbolic tangent.
    fn tanh(self) -> Self;
    /// The error function.
    fn erf_fn(self) -> Self;
    /// `ln(1 + x)`, accurate near zero.
    fn ln_1p(self) -> Self;
    /// `e^x - 1`, accurate near zero.
    fn exp_m1(self) -> Self;
    /// `self^e`.
    fn powf(self, e: Self) -> Self;
    /// Round toward negative infinity.
    fn floor(self) -> Self;
    /// Round toward positive infinity.
    fn ceil(self) -> Self;
    /// Round half to even, like `torch.round`.
    fn round_even(self) -> Self;
    /// Whether the value is finite.
    fn is_finite(self) -> bool;
    /// `for_f32(self)` or `for_f64(self)`, whichever takes this type: lets an op-table entry
    /// use a standard-library function this trait does not wrap, as in
    /// `|x| x.by_type(f32::asinh, f64::asinh)`. The function is known at compile time in
    /// every kernel instance, so it inlines like a method of this trait.
    fn by_type(self, for_f32: fn(f32) -> f32, for_f64: fn(f64) -> f64) -> Self;
    /// `self * a + b` with one rounding: one instruction in kernels compiled for a target
    /// with fused multiply-add (AVX2+FMA, AVX-512, AArch64), a library call elsewhere.
    fn fused_mul_add(self, a: Self, b: Self) -> Self;
}

impl FloatElement for f32 {
    #[inline(always)]
    fn exp(self) -> Self {
        crate::host::fastmath::exp_f32(self)
    }
    #[inline(always)]
    fn exp_normal(self) -> Self {
        crate::host::fastmath::exp_normal_f32(self)
    }
    #[inline(always)]
    fn exp_normal_fused(self) -> Self {
        crate::host::fastmath::exp_normal_fused_f32(self)
    }
    const EXP_NORMAL_MIN: Self = crate::host::fastmath::EXP_NORMAL_MIN_F32;
    #[inline(always)]
    fn ln(self) -> Self {
        crate::host::fastmath::ln_f32(self)
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        f32::sqrt(self)
    }
    #[inline(always)]
    fn sin(self) -> Self {
        f32::sin(self)
    }
    #[inline(always)]
    fn cos(self) -> Self {
        f32::cos(self)
    }
    #[inline(always)]
    fn tanh(self) -> Self {
        crate::host::fastmath::tanh_f32(self)
    }
    #[inline(always)]
    fn erf_fn(self) -> Self {
        libm::erff(self)
    }
    #[inline(always)]
    fn ln_1p(self) -> Self {
        f32::ln_1p(self)
    }
    #[inline(always)]
    fn exp_m1(self) -> Self {
        f32::exp_m1(self)
    }
    #[inline(always)]
    fn powf(self, e: Self) -> Self {
        f32::powf(self, e)
    }
    #[inline(always)]
    fn floor(self) -> Self {
        f32::floor(self)
    }
    #[inline(always)]
    fn ceil(self) -> Self {
        f32::ceil(self)
    }
    #[inline(always)]
    fn round_even(self) -> Self {
        f32::round_ties_even(self)
    }
    #[inline(always)]
    fn is_finite(self) -> bool {
        f32::is_finite(self)
    }
    #[inline(always)]
    fn by_type(self, for_f32: fn(f32) -> f32, _: fn(f64) -> f64) -> Self {
        for_f32(self)
    }
    #[inline(always)]
    fn fused_mul_add(self, a: Self, b: Self) -> Self {
        f32::mul_add(self, a, b)
    }
}

impl FloatElement for f64 {
    #[inline(always)]
    fn exp(self) -> Self {
        f64::exp(self)
    }
    const EXP_NORMAL_MIN: Self = f64::NEG_INFINITY;
    #[inline(always)]
    fn ln(self) -> Self {
        f64::ln(self)
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        f64::sqrt(self)
    }
    #[inline(always)]
    fn sin(self) -> Self {
        f64::sin(self)
    }
    #[inline(always)]
    fn cos(self) -> Self {
        f64::cos(self)
    }
    #[inline(always)]
    fn tanh(self) -> Self {
        f64::tanh(self)
    }
    #[inline(always)]
    fn erf_fn(self) -> Self {
        libm::erf(self)
    }
    #[inline(always)]
    fn ln_1p(self) -> Self {
        f64::ln_1p(self)
    }
    #[inline(always)]
    fn exp_m1(self) -> Self {
        f64::exp_m1(self)
    }
    #[inline(always)]
    fn powf(self, e: Self) -> Self {
        f64::powf(self, e)
    }
    #[inline(always)]
    fn floor(self) -> Self {
        f64::floor(self)
    }
    #[inline(always)]
    fn ceil(self) -> Self {
        f64::ceil(self)
    }
    #[inline(always)]
    fn round_even(self) -> Self {
        f64::round_ties_even(self)
    }
    #[inline(always)]
    fn is_finite(self) -> bool {
        f64::is_finite(self)
    }
    #[inline(always)]
    fn by_type(self, _: fn(f32) -> f32, for_f64: fn(f64) -> f64) -> Self {
        for_f64(self)
    }
    #[inline(always)]
    fn fused_mul_add(self, a: Self, b: Self) -> Self {
        f64::mul_add(self, a, b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promotion_follows_pytorch() {
        assert_eq!(DType::U8.promote(DType::F64), DType::F64);
        assert_eq!(DType::I64.promote(DType::U8), DType::I64);
        assert_eq!(DType::I64.promote_scalar(Scalar::Float(0.5)), DType::F32);
        assert_eq!(DType::I64.promote_scalar(Scalar::Int(2)), DType::I64);
        assert_eq!(DType::F64.promote_scalar(Scalar::Float(0.5)), DType::F64);
        assert_eq!(DType::U8.float_or_default(), DType::F32);
    }

    #[test]
    fn zero_dim_operands_count_by_category() {
        use DType::*;
        // (dimensioned, 0-d, result), against PyTorch's torch.result_type.
        let cases = [
            (F32, F64, F32),
            (F64, F32, F64),
            (F32, I64, F32),
            (F32, U8, F32),
            (I64, F32, F32),
            (I64, F64, F64),
            (U8, F32, F32),
            (U8, F64, F64),
            (U8, I64, U8),
            (I64, U8, I64),
            (I64, I64, I64),
        ];
        for (dims, zero, want) in cases {
            assert_eq!(result_type(&[(dims, 1), (zero, 0)]), want, "{dims} with a 0-d {zero}");
            assert_eq!(result_type(&[(zero, 0), (dims, 3)]), want, "0-d {zero} with {dims}");
            // Both dimensioned, or both 0-d: plain promotion.
            assert_eq!(result_type(&[(dims, 2), (zero, 1)]), dims.promote(zero));
            assert_eq!(result_type(&[(dims, 0), (zero, 0)]), dims.promote(zero));
        }
        assert_eq!(result_type(&[(U8, 1), (I64, 0), (F64, 0)]), F64);
        assert_eq!(result_type(&[]), F32);
    }

    #[test]
    fn nan_propagating_extrema() {
        assert!(f32::NAN.max_nan(1.0).is_nan());
        assert!(1.0f32.max_nan(f32::NAN).is_nan());
        assert_eq!(2.0f64.min_nan(3.0), 2.0);
        assert_eq!(3i64.max_nan(-1), 3);
    }

    #[test]
    fn by_type_calls_the_function_for_the_type() {
        assert_eq!(FloatElement::by_type(0.5f32, f32::asinh, |_| f64::NAN), 0.5f32.asinh());
        assert_eq!(FloatElement::by_type(0.5f64, |_| f32::NAN, f64::asinh), 0.5f64.asinh());
    }

    #[test]
    fn integer_division_by_zero_is_zero() {
        assert_eq!(Element::div(7i64, 0), 0);
        assert_eq!(Element::div(7u8, 2), 3);
    }
}

#[cfg(test)]
mod f16_bits_tests {
    use super::{f16_bits_to_f32, f32_to_f16_bits};

    #[test]
    fn f16_widening_is_exact_for_every_value() {
        for h in 0..=u16::MAX {
            let (got, want) = (f16_bits_to_f32(h), half::f16::from_bits(h).to_f32());
            assert!(got.to_bits() == want.to_bits() || got.is_nan() && want.is_nan(), "{h:#06x}");
        }
    }

    #[test]
    fn f16_narrowing_rounds_like_the_reference() {
        // Every 257th f32 bit pattern plus the neighbourhoods of f16's boundaries.
        let edges = [0x3880_0000u32, 0x3380_0000, 0x4780_0000, 0x477f_f000, 0x7f80_0000, 0x3f80_1000];
        let near = edges.iter().flat_map(|&e| (e.saturating_sub(4096)..e.saturating_add(4096)).step_by(1));
        for bits in (0..=u32::MAX).step_by(257).chain(near) {
            let v = f32::from_bits(bits);
            let (got, want) = (f32_to_f16_bits(v), half::f16::from_f32(v).to_bits());
            let nan = half::f16::from_bits(got).is_nan() && half::f16::from_bits(want).is_nan();
            assert!(got == want || nan, "{bits:#010x}: {got:#06x} vs {want:#06x}");
        }
    }
}
