//! Elementwise functions of one tensor, out of place and in place.

use super::iter::{GRAIN_CHEAP, GRAIN_COSTLY, Runs, fill_chunks};
use crate::backend::UnaryOp;
use crate::dtype::{Element, FloatElement};
use crate::layout::Layout;
use crate::storage::{Buffer, CpuStorage};
use crate::{Error, Result, Scalar};
use multiversion::multiversion;

#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
pub(crate) fn map_contig<T: Copy, U: Copy, F: Fn(T) -> U>(src: &[T], dst: &mut [U], f: F) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = f(s);
    }
}

#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn map_in_place<T: Copy, F: Fn(T) -> T>(dst: &mut [T], f: F) {
    for d in dst.iter_mut() {
        *d = f(*d);
    }
}

/// `f` applied to every element of the view `(src, layout)`, into a new contiguous buffer.
pub(crate) fn map<T: Element, U: Element>(
    op: &'static str,
    src: &[T],
    layout: &Layout,
    grain: usize,
    f: impl Fn(T) -> U + Sync + Copy,
) -> Result<Buffer<U>> {
    let n = layout.numel();
    let mut out = Buffer::<U>::uninit(op, n)?;
    if let Some(r) = layout.contiguous_range() {
        let src = &src[r];
        fill_chunks(&mut out, grain, |start, chunk| map_contig(&src[start..start + chunk.len()], chunk, f));
        return Ok(out);
    }
    let runs = Runs::new([layout]);
    let s = runs.inner_stride(0);
    fill_chunks(&mut out, grain, |start, chunk| {
        runs.for_each(start, start + chunk.len(), |[o], len, pos| {
            let dst = &mut chunk[pos - start..pos - start + len];
            match s {
                1 => map_contig(&src[o..o + len], dst, f),
                0 => dst.fill(f(src[o])),
                _ => {
                    for (i, d) in dst.iter_mut().enumerate() {
                        *d = f(src[o + i * s]);
                    }
                }
            }
        });
    });
    Ok(out)
}

/// `f` applied in place to every element `layout` addresses. The layout must not address an
/// element twice (the tensor layer rejects in-place writes to expanded views).
pub(crate) fn map_inplace<T: Element>(dst: &mut [T], layout: &Layout, grain: usize, f: impl Fn(T) -> T + Sync + Copy) {
    if let Some(r) = layout.contiguous_range() {
        fill_chunks(&mut dst[r], grain, |_, chunk| map_in_place(chunk, f));
        return;
    }
    let runs = Runs::new([layout]);
    let s = runs.inner_stride(0);
    runs.for_each(0, layout.numel(), |[o], len, _| {
        if s == 1 {
            map_in_place(&mut dst[o..o + len], f);
        } else {
            for i in 0..len {
                let v = &mut dst[o + i * s];
                *v = f(*v);
            }
        }
    });
}

/// PyTorch's clamp, `min(max(x, lo), hi)`: the upper bound applies last, so with `lo > hi`
/// every element becomes `hi`; a NaN element stays NaN (both comparisons are false).
#[inline(always)]
fn clamp_elem<T: Element>(x: T, lo: T, hi: T) -> T {
    let y = if x < lo { lo } else { x };
    if y > hi { hi } else { y }
}

/// Binds `$f` to the closure computing `op` on a float element type `$T` and `$g` to its
/// parallel grain, then evaluates `$body`. One definition serves every kernel shape.
///
/// `exp`, `ln` and `tanh` are called through [`FloatElement`] on purpose: on a concrete `f32`
/// the method syntax picks the inherent (libm, scalar) functions over the vectorisable ones.
macro_rules! with_float_fn {
    ($op:expr, $T:ty, |$f:ident, $g:ident| $body:expr) => {{
        use UnaryOp::*;
        #[allow(unused_variables)]
        let c = |v: f64| <$T as Element>::from_f64(v);
        let half = c(0.5);
        let one = <$T as Element>::ONE;
        let zero = <$T as Element>::ZERO;
        match $op {
            Neg => {
                let $g = GRAIN_CHEAP;
                let $f = |x: $T| -x;
                $body
            }
            Abs => {
                let $g = GRAIN_CHEAP;
                let $f = |x: $T| Element::abs(x);
                $body
            }
            Sign => {
                let $g = GRAIN_CHEAP;
                let $f = |x: $T| Element::signum(x);
                $body
            }
            Square => {
                let $g = GRAIN_CHEAP;
                let $f = |x: $T| x * x;
                $body
            }
            Relu => {
                let $g = GRAIN_CHEAP;
                let $f = move |x: $T| {
                    if x > zero {
                        x
                    } else if x.is_nan() {
                        x
                    } else {
                        zero
                    }
                };
                $body
            }
            Exp => {
                let $g = GRAIN_COSTLY;
                let $f = |x: $T| FloatElement::exp(x);
                $body
            }
            Log => {
                let $g = GRAIN_COSTLY;
                let $f = |x: $T| FloatElement::ln(x);
                $body
            }
            Sqrt => {
                let $g = GRAIN_COSTLY;
                let $f = |x: $T| x.sqrt();
                $body
            }
            Rsqrt => {
                let $g = GRAIN_COSTLY;
                let $f = move |x: $T| one / x.sqrt();
                $body
            }
            Sin => {
                let $g = GRAIN_COSTLY;
                let $f = |x: $T| x.sin();
                $body
            }
            Cos => {
                let $g = GRAIN_COSTLY;
                let $f = |x: $T| x.cos();
                $body
            }
            Tanh => {
                let $g = GRAIN_COSTLY;
                let $f = |x: $T| FloatElement::tanh(x);
                $body
            }
            Sigmoid => {
                let $g = GRAIN_COSTLY;
                let $f = move |x: $T| one / (one + FloatElement::exp(-x));
                $body
            }
            Gelu => {
                let $g = GRAIN_COSTLY;
                let k = c(std::f64::consts::FRAC_1_SQRT_2);
                let $f = move |x: $T| half * x * (one + (x * k).erf_fn());
                $body
            }
            GeluTanh => {
                let $g = GRAIN_COSTLY;
                let k = c((2.0 / std::f64::consts::PI).sqrt());
                let a = c(0.044715);
                let $f = move |x: $T| half * x * (one + FloatElement::tanh(k * (x + a * x * x * x)));
                $body
            }
            Silu => {
                let $g = GRAIN_COSTLY;
                let $f = move |x: $T| x / (one + FloatElement::exp(-x));
                $body
            }
            Erf => {
                let $g = GRAIN_COSTLY;
                let $f = |x: $T| x.erf_fn();
                $body
            }
            Log1p => {
                let $g = GRAIN_COSTLY;
                let $f = |x: $T| x.ln_1p();
                $body
            }
            Expm1 => {
                let $g = GRAIN_COSTLY;
                let $f = |x: $T| x.exp_m1();
                $body
            }
            Recip => {
                let $g = GRAIN_CHEAP;
                let $f = move |x: $T| one / x;
                $body
            }
            Floor => {
                let $g = GRAIN_CHEAP;
                let $f = |x: $T| x.floor();
                $body
            }
            Ceil => {
                let $g = GRAIN_CHEAP;
                let $f = |x: $T| x.ceil();
                $body
            }
            Round => {
                let $g = GRAIN_CHEAP;
                let $f = |x: $T| x.round_even();
                $body
            }
            Softplus { beta, threshold } => {
                let $g = GRAIN_COSTLY;
                let (b, t) = (c(beta), c(threshold));
                let $f = move |x: $T| if x * b > t { x } else { FloatElement::exp(x * b).ln_1p() / b };
                $body
            }
            LeakyRelu(slope) => {
                let $g = GRAIN_CHEAP;
                let s = c(slope);
                let $f = move |x: $T| if x > zero { x } else { x * s };
                $body
            }
            Elu(alpha) => {
                let $g = GRAIN_COSTLY;
                let a = c(alpha);
                let $f = move |x: $T| if x > zero { x } else { a * x.exp_m1() };
                $body
            }
            Clamp { min, max } => {
                let $g = GRAIN_CHEAP;
                let (lo, hi) = (c(min), c(max));
                let $f = move |x: $T| clamp_elem(x, lo, hi);
                $body
            }
            AddScalar(s) => {
                let $g = GRAIN_CHEAP;
                let s: $T = s.to_element();
                let $f = move |x: $T| x + s;
                $body
            }
            SubScalar(s) => {
                let $g = GRAIN_CHEAP;
                let s: $T = s.to_element();
                let $f = move |x: $T| x - s;
                $body
            }
            RSubScalar(s) => {
                let $g = GRAIN_CHEAP;
                let s: $T = s.to_element();
                let $f = move |x: $T| s - x;
                $body
            }
            MulScalar(s) => {
                let $g = GRAIN_CHEAP;
                let s: $T = s.to_element();
                let $f = move |x: $T| x * s;
                $body
            }
            DivScalar(s) => {
                let $g = GRAIN_CHEAP;
                let s: $T = s.to_element();
                let $f = move |x: $T| x / s;
                $body
            }
            RDivScalar(s) => {
                let $g = GRAIN_CHEAP;
                let s: $T = s.to_element();
                let $f = move |x: $T| s / x;
                $body
            }
            PowScalar(e) => {
                let $g = GRAIN_COSTLY;
                if e.to_f64() == 2.0 {
                    let $f = |x: $T| x * x;
                    $body
                } else if e.to_f64() == 0.5 {
                    let $f = |x: $T| x.sqrt();
                    $body
                } else {
                    let e: $T = e.to_element();
                    let $f = move |x: $T| x.powf(e);
                    $body
                }
            }
            RPowScalar(b) => {
                let $g = GRAIN_COSTLY;
                let b: $T = b.to_element();
                let $f = move |x: $T| b.powf(x);
                $body
            }
            MaximumScalar(s) => {
                let $g = GRAIN_CHEAP;
                let s: $T = s.to_element();
                let $f = move |x: $T| x.max_nan(s);
                $body
            }
            MinimumScalar(s) => {
                let $g = GRAIN_CHEAP;
                let s: $T = s.to_element();
                let $f = move |x: $T| x.min_nan(s);
                $body
            }
        }
    }};
}

/// The integer counterpart of `with_float_fn`: `Ok(None)` for functions only floats have,
/// an error for an exponent integers cannot take. Integer scalars reach the closures exactly
/// (converted with wrapping, like PyTorch's), never through `f64`.
macro_rules! with_int_fn {
    ($op:expr, $T:ty, |$f:ident| $body:expr) => {{
        use UnaryOp::*;
        let c = |v: f64| <$T as Element>::from_f64(v);
        let zero = <$T as Element>::ZERO;
        match $op {
            Neg => {
                let $f = |x: $T| Element::neg(x);
                Ok(Some($body))
            }
            Abs => {
                let $f = |x: $T| Element::abs(x);
                Ok(Some($body))
            }
            Sign => {
                let $f = |x: $T| Element::signum(x);
                Ok(Some($body))
            }
            Square => {
                let $f = |x: $T| x.wmul(x);
                Ok(Some($body))
            }
            Relu => {
                let $f = move |x: $T| if x > zero { x } else { zero };
                Ok(Some($body))
            }
            Floor | Ceil | Round => {
                let $f = |x: $T| x;
                Ok(Some($body))
            }
            Clamp { min, max } => {
                // `as` saturates, so a bound beyond the dtype's range keeps its side.
                let (lo, hi) = (c(min), c(max));
                let $f = move |x: $T| clamp_elem(x, lo, hi);
                Ok(Some($body))
            }
            AddScalar(s) => {
                let s: $T = s.to_element();
                let $f = move |x: $T| x.wadd(s);
                Ok(Some($body))
            }
            SubScalar(s) => {
                let s: $T = s.to_element();
                let $f = move |x: $T| x.wsub(s);
                Ok(Some($body))
            }
            RSubScalar(s) => {
                let s: $T = s.to_element();
                let $f = move |x: $T| s.wsub(x);
                Ok(Some($body))
            }
            MulScalar(s) => {
                let s: $T = s.to_element();
                let $f = move |x: $T| x.wmul(s);
                Ok(Some($body))
            }
            PowScalar(e) => match int_exponent(e) {
                Ok(e) => {
                    let $f = move |x: $T| pow_wrapping(x, e);
                    Ok(Some($body))
                }
                Err(e) => Err(e),
            },
            MaximumScalar(s) => {
                let s: $T = s.to_element_saturating();
                let $f = move |x: $T| x.max_nan(s);
                Ok(Some($body))
            }
            MinimumScalar(s) => {
                let s: $T = s.to_element_saturating();
                let $f = move |x: $T| x.min_nan(s);
                Ok(Some($body))
            }
            _ => Ok(None),
        }
    }};
}

/// The exponent of an integer `pow_scalar`: a non-negative integer. A negative one is
/// PyTorch's error (the result is not an integer), and a fraction needs a float tensor.
fn int_exponent(e: Scalar) -> Result<u64> {
    match e {
        Scalar::Int(e) if e >= 0 => Ok(e as u64),
        Scalar::Int(e) => Err(Error::invalid(
            "pow_scalar",
            format!(
                "Integers to negative integer powers are not allowed (exponent {e}); use a float tensor or exponent"
            ),
        )),
        Scalar::Float(v) if v >= 0.0 && v.fract() == 0.0 && v < 18_446_744_073_709_551_616.0 => Ok(v as u64),
        Scalar::Float(v) => Err(Error::dtype(
            "pow_scalar",
            format!("the exponent {v} needs a float tensor; this one is an integer tensor"),
        )),
    }
}

/// `x^e` with wrapping multiplication (PyTorch's integer `pow`), by repeated squaring.
#[inline(always)]
fn pow_wrapping<T: Element>(x: T, mut e: u64) -> T {
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

fn not_for_ints(op: UnaryOp, dtype: crate::DType) -> Error {
    Error::dtype(op.name(), format!("{} is only defined for float tensors, got {dtype}", op.name()))
}

/// `op` applied to the view `(src, layout)`.
pub(crate) fn unary(op: UnaryOp, src: &CpuStorage, layout: &Layout) -> Result<CpuStorage> {
    let name = op.name();
    match src {
        CpuStorage::F32(b) => with_float_fn!(op, f32, |f, g| Ok(map(name, b, layout, g, f)?.into())),
        CpuStorage::F64(b) => with_float_fn!(op, f64, |f, g| Ok(map(name, b, layout, g, f)?.into())),
        CpuStorage::I64(b) => with_int_fn!(op, i64, |f| map(name, b, layout, GRAIN_CHEAP, f).map(Into::into))?
            .unwrap_or_else(|| Err(not_for_ints(op, src.dtype()))),
        CpuStorage::U8(b) => with_int_fn!(op, u8, |f| map(name, b, layout, GRAIN_CHEAP, f).map(Into::into))?
            .unwrap_or_else(|| Err(not_for_ints(op, src.dtype()))),
    }
}

/// `op` applied in place to the elements of `dst` that `layout` addresses.
pub(crate) fn unary_inplace(op: UnaryOp, dst: &mut CpuStorage, layout: &Layout) -> Result<()> {
    let dtype = dst.dtype();
    match dst {
        CpuStorage::F32(b) => with_float_fn!(op, f32, |f, g| map_inplace(b, layout, g, f)),
        CpuStorage::F64(b) => with_float_fn!(op, f64, |f, g| map_inplace(b, layout, g, f)),
        CpuStorage::I64(b) => {
            with_int_fn!(op, i64, |f| map_inplace(b, layout, GRAIN_CHEAP, f))?.ok_or_else(|| not_for_ints(op, dtype))?
        }
        CpuStorage::U8(b) => {
            with_int_fn!(op, u8, |f| map_inplace(b, layout, GRAIN_CHEAP, f))?.ok_or_else(|| not_for_ints(op, dtype))?
        }
    }
    Ok(())
}
