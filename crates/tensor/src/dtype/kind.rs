//! The dtypes themselves and how they promote (see the parent module's docs for the
//! rules): below storage, which records the dtype of its buffers, and below the element
//! traits, which map Rust types to dtypes.

use std::fmt;

/// The dtype of a tensor's elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// Unsigned bytes; also the dtype of boolean masks.
    U8,
    /// 64-bit signed integers; the dtype of indices.
    I64,
    /// IEEE half-precision floats (`half::f16`: 5 exponent bits, 10 mantissa bits), stored
    /// as such and computed in `f32`.
    F16,
    /// bfloat16 (`half::bf16`: `f32`'s 8 exponent bits, 7 mantissa bits), stored as such and
    /// computed in `f32`.
    BF16,
    /// 32-bit floats; the default dtype.
    F32,
    /// 64-bit floats; used by `gradcheck` and wherever precision matters.
    F64,
}

impl DType {
    /// The name used in messages and printing: `u8`, `i64`, `f16`, `bf16`, `f32`, `f64`.
    pub fn name(self) -> &'static str {
        match self {
            DType::U8 => "u8",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    /// Bytes per element.
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::U8 => 1,
            DType::I64 | DType::F64 => 8,
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
        }
    }

    /// Whether this is a floating-point dtype.
    #[inline]
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }

    /// Whether this is one of the 16-bit floats (`f16`, `bf16`), which are stored as such
    /// and computed in `f32`.
    #[inline]
    pub fn is_half(self) -> bool {
        matches!(self, DType::F16 | DType::BF16)
    }

    /// The dtype values of this dtype are computed in: `f32` for the 16-bit floats, the
    /// dtype itself otherwise.
    #[inline]
    pub fn compute_dtype(self) -> DType {
        if self.is_half() { DType::F32 } else { self }
    }

    /// Whether this is an integer dtype (`u8` or `i64`).
    #[inline]
    pub fn is_int(self) -> bool {
        !self.is_float()
    }

    /// The dtype in which `self` and `other` combine (see the module docs).
    ///
    /// ```
    /// use ember_tensor::DType;
    /// assert_eq!(DType::U8.promote(DType::I64), DType::I64);
    /// assert_eq!(DType::I64.promote(DType::F32), DType::F32);
    /// assert_eq!(DType::F32.promote(DType::F64), DType::F64);
    /// assert_eq!(DType::I64.promote(DType::BF16), DType::BF16);
    /// assert_eq!(DType::F16.promote(DType::F32), DType::F32);
    /// assert_eq!(DType::BF16.promote(DType::F16), DType::F32);
    /// ```
    #[inline]
    pub fn promote(self, other: DType) -> DType {
        // The two 16-bit floats hold values neither can represent (f16's precision, bf16's
        // range): PyTorch meets them in f32.
        if self.is_half() && other.is_half() && self != other { DType::F32 } else { self.max(other) }
    }

    /// The dtype a floating function (`exp`, `sigmoid`...) computes in: floats keep theirs,
    /// integers compute in `f32`.
    #[inline]
    pub fn float_or_default(self) -> DType {
        if self.is_float() { self } else { DType::F32 }
    }
}

/// The dtype an operation on tensors of these `(dtype, rank)` pairs computes in: PyTorch's
/// `torch.result_type` (see the module docs). Tensors with dimensions promote among
/// themselves; 0-d tensors promote among themselves and change that result only when they
/// bring a higher category (a float beside integers), in which case the two promote. With
/// no operands the answer is `f32`, the default dtype.
///
/// ```
/// use ember_tensor::DType;
/// use ember_tensor::dtype::result_type;
/// assert_eq!(result_type(&[(DType::F32, 2), (DType::F64, 0)]), DType::F32);
/// assert_eq!(result_type(&[(DType::I64, 1), (DType::F64, 0)]), DType::F64);
/// assert_eq!(result_type(&[(DType::U8, 1), (DType::I64, 0)]), DType::U8);
/// assert_eq!(result_type(&[(DType::F32, 0), (DType::F64, 0)]), DType::F64);
/// assert_eq!(result_type(&[(DType::F32, 1), (DType::F64, 3)]), DType::F64);
/// ```
pub fn result_type(operands: &[(DType, usize)]) -> DType {
    let promote_all = |zero_d: bool| {
        operands.iter().filter(|&&(_, rank)| (rank == 0) == zero_d).map(|&(d, _)| d).reduce(DType::promote)
    };
    match (promote_all(false), promote_all(true)) {
        (Some(dims), Some(zero)) if zero.is_float() && !dims.is_float() => dims.promote(zero),
        (Some(dims), _) => dims,
        (None, Some(zero)) => zero,
        (None, None) => DType::F32,
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
