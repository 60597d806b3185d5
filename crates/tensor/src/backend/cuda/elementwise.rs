//! Elementwise kernels: fills, conversions and copies, functions of one and two tensors,
//! comparisons and selection, out of place and in place.

use super::device::Gpu;
use super::launch::{Strided, arg, launch_elems};
use super::memory::CudaStorage;
use super::sfx;
use crate::backend::cpu::binary::{IntCmp, int_cmp};
use crate::backend::cpu::unary::not_for_ints;
use crate::backend::{BinaryOp, CmpOp, UnaryOp};
use crate::dtype::DType;
use crate::layout::Layout;
use crate::ops::unary::int_exponent;
use crate::{Error, Result, Scalar};
use cudarc::driver::result;

/// One value of a tensor's element type, to pass to a kernel by value.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Elem {
    U8(u8),
    I64(i64),
    F32(f32),
    F64(f64),
}

impl Elem {
    /// `s` converted to `dtype` as the CPU kernels convert it ([`Scalar::to_element`]).
    pub(crate) fn of(s: Scalar, dtype: DType) -> Elem {
        match dtype {
            DType::U8 => Elem::U8(s.to_element()),
            DType::I64 => Elem::I64(s.to_element()),
            DType::F32 => Elem::F32(s.to_element()),
            DType::F64 => Elem::F64(s.to_element()),
        }
    }

    /// Like [`Elem::of`], saturating integers ([`Scalar::to_element_saturating`]).
    fn saturating(s: Scalar, dtype: DType) -> Elem {
        match dtype {
            DType::U8 => Elem::U8(s.to_element_saturating()),
            DType::I64 => Elem::I64(s.to_element_saturating()),
            DType::F32 => Elem::F32(s.to_element_saturating()),
            DType::F64 => Elem::F64(s.to_element_saturating()),
        }
    }

    pub(crate) fn arg(&self) -> *mut std::ffi::c_void {
        match self {
            Elem::U8(v) => arg(v),
            Elem::I64(v) => arg(v),
            Elem::F32(v) => arg(v),
            Elem::F64(v) => arg(v),
        }
    }

    fn is_zero_bits(&self) -> bool {
        match *self {
            Elem::U8(v) => v == 0,
            Elem::I64(v) => v == 0,
            Elem::F32(v) => v.to_bits() == 0,
            Elem::F64(v) => v.to_bits() == 0,
        }
    }
}

/// `value` at the elements of `(dst, layout)`.
pub(crate) fn fill(gpu: &Gpu, dst: &CudaStorage, layout: &Strided, n: usize, value: Elem) -> Result<()> {
    let f = gpu.func(("fill", sfx(dst.dtype()), ""))?;
    let (n64, p) = (n as i64, dst.ptr());
    launch_elems(gpu, f, n, &mut [arg(&n64), arg(&p), arg(layout), value.arg()])
}

/// A new storage of `numel` elements all `value`.
pub(crate) fn full(gpu: &'static Gpu, numel: usize, value: Scalar, dtype: DType) -> Result<CudaStorage> {
    let out = CudaStorage::alloc(gpu, "full", numel, dtype)?;
    let v = Elem::of(value, dtype);
    if v.is_zero_bits() {
        zero(gpu, &out)?;
    } else {
        fill(gpu, &out, &Strided::dense(0), numel, v)?;
    }
    Ok(out)
}

/// Sets every byte of `s` to zero.
pub(crate) fn zero(gpu: &Gpu, s: &CudaStorage) -> Result<()> {
    let bytes = s.len() * s.dtype().size_in_bytes();
    if bytes == 0 {
        return Ok(());
    }
    // SAFETY: the storage holds `bytes` bytes; the legacy stream orders the write.
    unsafe { result::memset_d8_async(s.ptr(), 0, bytes, std::ptr::null_mut()) }.map_err(|e| gpu.err("memset", e))
}

/// `dst[ld] = convert(src[ls])` over `n` elements.
pub(crate) fn convert(
    gpu: &Gpu,
    n: usize,
    dst: &CudaStorage,
    ld: &Strided,
    src: &CudaStorage,
    ls: &Strided,
) -> Result<()> {
    let f = gpu.func(("convert", sfx(src.dtype()), sfx(dst.dtype())))?;
    let (n64, pd, ps) = (n as i64, dst.ptr(), src.ptr());
    launch_elems(gpu, f, n, &mut [arg(&n64), arg(&pd), arg(ld), arg(&ps), arg(ls)])
}

/// A contiguous copy of a view, converted to `dtype`.
pub(crate) fn cast(op: &'static str, src: &CudaStorage, l: &Layout, dtype: DType) -> Result<CudaStorage> {
    let gpu = src.gpu();
    let n = l.numel();
    let out = CudaStorage::alloc(gpu, op, n, dtype)?;
    convert(gpu, n, &out, &Strided::dense(0), src, &Strided::of(op, l)?)?;
    Ok(out)
}

/// The kernel's code for `op` and its two parameters in `dtype` (an error where integers
/// cannot take the op or its parameter).
fn unary_code(op: UnaryOp, dtype: DType) -> Result<(i32, Elem, Elem)> {
    use UnaryOp::*;
    let int = !dtype.is_float();
    let zero = Elem::of(Scalar::Int(0), dtype);
    let f = |v: f64| Elem::of(Scalar::Float(v), dtype);
    if int && op.is_float_only() {
        return Err(not_for_ints(op, dtype));
    }
    Ok(match op {
        Neg => (0, zero, zero),
        Abs => (1, zero, zero),
        Sign => (2, zero, zero),
        Square => (3, zero, zero),
        Relu => (4, zero, zero),
        Exp => (5, zero, zero),
        Log => (6, zero, zero),
        Sqrt => (7, zero, zero),
        Rsqrt => (8, zero, zero),
        Sin => (9, zero, zero),
        Cos => (10, zero, zero),
        Tanh => (11, zero, zero),
        Sigmoid => (12, zero, zero),
        Gelu => (13, zero, zero),
        GeluTanh => (14, zero, zero),
        Silu => (15, zero, zero),
        Erf => (16, zero, zero),
        Log1p => (17, zero, zero),
        Expm1 => (18, zero, zero),
        Recip => (19, zero, zero),
        Floor => (20, zero, zero),
        Ceil => (21, zero, zero),
        Round => (22, zero, zero),
        Softplus { beta, threshold } => (23, f(beta), f(threshold)),
        LeakyRelu(s) => (24, f(s), zero),
        Elu(a) => (25, f(a), zero),
        Clamp { min, max } => (26, f(min), f(max)),
        AddScalar(s) => (27, Elem::of(s, dtype), zero),
        SubScalar(s) => (28, Elem::of(s, dtype), zero),
        RSubScalar(s) => (29, Elem::of(s, dtype), zero),
        MulScalar(s) => (30, Elem::of(s, dtype), zero),
        DivScalar(s) => (31, Elem::of(s, dtype), zero),
        RDivScalar(s) => (32, Elem::of(s, dtype), zero),
        PowScalar(e) if int => {
            let e = int_exponent(e)?;
            // The kernel takes the exponent in the element type. Wrapping powers of bytes
            // repeat: even bases are 0 from the 8th power on, odd ones have period 64.
            let e = if dtype == DType::U8 && e >= 8 { 8 + (e - 8) % 64 } else { e.min(i64::MAX as u64) };
            (35, Elem::of(Scalar::Int(e as i64), dtype), zero)
        }
        PowScalar(e) if e.to_f64() == 2.0 => (33, zero, zero),
        PowScalar(e) if e.to_f64() == 0.5 => (34, zero, zero),
        PowScalar(e) => (35, Elem::of(e, dtype), zero),
        RPowScalar(b) => (36, Elem::of(b, dtype), zero),
        MaximumScalar(s) => (37, Elem::saturating(s, dtype), zero),
        MinimumScalar(s) => (38, Elem::saturating(s, dtype), zero),
    })
}

/// `op` of the view `(src, ls)` written to `(out, lo)`, `n` elements.
fn unary_into(op: UnaryOp, n: usize, out: &CudaStorage, lo: &Strided, src: &CudaStorage, ls: &Strided) -> Result<()> {
    let gpu = src.gpu();
    let (code, p0, p1) = unary_code(op, src.dtype())?;
    let f = gpu.func(("unary", sfx(src.dtype()), ""))?;
    let (n64, po, ps) = (n as i64, out.ptr(), src.ptr());
    launch_elems(gpu, f, n, &mut [arg(&n64), arg(&code), p0.arg(), p1.arg(), arg(&po), arg(lo), arg(&ps), arg(ls)])
}

pub(crate) fn unary(op: UnaryOp, src: &CudaStorage, l: &Layout) -> Result<CudaStorage> {
    unary_code(op, src.dtype())?;
    let n = l.numel();
    let out = CudaStorage::alloc(src.gpu(), op.name(), n, src.dtype())?;
    unary_into(op, n, &out, &Strided::dense(0), src, &Strided::of(op.name(), l)?)?;
    Ok(out)
}

pub(crate) fn unary_inplace(op: UnaryOp, dst: &CudaStorage, l: &Layout) -> Result<()> {
    let s = Strided::of(op.name(), l)?;
    unary_into(op, l.numel(), dst, &s, dst, &s)
}

fn binary_code(op: BinaryOp) -> i32 {
    match op {
        BinaryOp::Add => 0,
        BinaryOp::Sub => 1,
        BinaryOp::Mul => 2,
        BinaryOp::Div => 3,
        BinaryOp::Pow => 4,
        BinaryOp::Maximum => 5,
        BinaryOp::Minimum => 6,
    }
}

pub(crate) fn same_dtype(op: &'static str, a: DType, b: DType) -> Result<()> {
    if a != b {
        return Err(Error::dtype(op, format!("expected operands of one dtype, got {a} and {b}")));
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn binary_into(
    op: BinaryOp,
    n: usize,
    out: &CudaStorage,
    lo: &Strided,
    a: &CudaStorage,
    la: &Strided,
    b: &CudaStorage,
    lb: &Strided,
) -> Result<()> {
    let gpu = a.gpu();
    let f = gpu.func(("binary", sfx(a.dtype()), ""))?;
    let (n64, code, po, pa, pb) = (n as i64, binary_code(op), out.ptr(), a.ptr(), b.ptr());
    launch_elems(gpu, f, n, &mut [arg(&n64), arg(&code), arg(&po), arg(lo), arg(&pa), arg(la), arg(&pb), arg(lb)])
}

pub(crate) fn binary(op: BinaryOp, a: &CudaStorage, la: &Layout, b: &CudaStorage, lb: &Layout) -> Result<CudaStorage> {
    same_dtype(op.name(), a.dtype(), b.dtype())?;
    let n = la.numel();
    let out = CudaStorage::alloc(a.gpu(), op.name(), n, a.dtype())?;
    binary_into(op, n, &out, &Strided::dense(0), a, &Strided::of(op.name(), la)?, b, &Strided::of(op.name(), lb)?)?;
    Ok(out)
}

pub(crate) fn binary_inplace(
    op: BinaryOp,
    dst: &CudaStorage,
    ld: &Layout,
    src: &CudaStorage,
    ls: &Layout,
) -> Result<()> {
    same_dtype(op.name(), dst.dtype(), src.dtype())?;
    let d = Strided::of(op.name(), ld)?;
    binary_into(op, ld.numel(), dst, &d, dst, &d, src, &Strided::of(op.name(), ls)?)
}

fn cmp_code(op: CmpOp) -> i32 {
    match op {
        CmpOp::Eq => 0,
        CmpOp::Ne => 1,
        CmpOp::Lt => 2,
        CmpOp::Le => 3,
        CmpOp::Gt => 4,
        CmpOp::Ge => 5,
    }
}

pub(crate) fn compare(op: CmpOp, a: &CudaStorage, la: &Layout, b: &CudaStorage, lb: &Layout) -> Result<CudaStorage> {
    same_dtype(op.name(), a.dtype(), b.dtype())?;
    let gpu = a.gpu();
    let n = la.numel();
    let out = CudaStorage::alloc(gpu, op.name(), n, DType::U8)?;
    let f = gpu.func(("compare", sfx(a.dtype()), ""))?;
    let (sa, sb) = (Strided::of(op.name(), la)?, Strided::of(op.name(), lb)?);
    let (n64, code, po, pa, pb) = (n as i64, cmp_code(op), out.ptr(), a.ptr(), b.ptr());
    launch_elems(gpu, f, n, &mut [arg(&n64), arg(&code), arg(&po), arg(&pa), arg(&sa), arg(&pb), arg(&sb)])?;
    Ok(out)
}

/// `a op scalar`: float elements against the scalar in their dtype, integer elements
/// against its exact value (see [`IntCmp`]).
pub(crate) fn compare_scalar(op: CmpOp, a: &CudaStorage, la: &Layout, s: Scalar) -> Result<CudaStorage> {
    let gpu = a.gpu();
    let n = la.numel();
    let out = CudaStorage::alloc(gpu, op.name(), n, DType::U8)?;
    let sa = Strided::of(op.name(), la)?;
    let (n64, po, pa) = (n as i64, out.ptr(), a.ptr());
    if a.dtype().is_float() {
        let f = gpu.func(("compare_scalar", sfx(a.dtype()), ""))?;
        let (code, v) = (cmp_code(op), Elem::of(s, a.dtype()));
        launch_elems(gpu, f, n, &mut [arg(&n64), arg(&code), arg(&po), arg(&pa), arg(&sa), v.arg()])?;
        return Ok(out);
    }
    match int_cmp(op, s) {
        IntCmp::Const(c) => fill(gpu, &out, &Strided::dense(0), n, Elem::U8(c as u8))?,
        IntCmp::Cmp(op, v) => {
            let f = gpu.func(("compare_int", sfx(a.dtype()), ""))?;
            let code = cmp_code(op);
            launch_elems(gpu, f, n, &mut [arg(&n64), arg(&code), arg(&po), arg(&pa), arg(&sa), arg(&v)])?;
        }
    }
    Ok(out)
}

pub(crate) fn where_cond(
    c: &CudaStorage,
    lc: &Layout,
    a: &CudaStorage,
    la: &Layout,
    b: &CudaStorage,
    lb: &Layout,
) -> Result<CudaStorage> {
    if c.dtype() != DType::U8 {
        return Err(Error::dtype("where", format!("the condition must be a u8 mask, got {}", c.dtype())));
    }
    same_dtype("where", a.dtype(), b.dtype())?;
    let gpu = a.gpu();
    let n = lc.numel();
    let out = CudaStorage::alloc(gpu, "where", n, a.dtype())?;
    let f = gpu.func(("where", sfx(a.dtype()), ""))?;
    let (sc, sa, sb) = (Strided::of("where", lc)?, Strided::of("where", la)?, Strided::of("where", lb)?);
    let (n64, po, pc, pa, pb) = (n as i64, out.ptr(), c.ptr(), a.ptr(), b.ptr());
    launch_elems(gpu, f, n, &mut [arg(&n64), arg(&po), arg(&pc), arg(&sc), arg(&pa), arg(&sa), arg(&pb), arg(&sb)])?;
    Ok(out)
}

pub(crate) fn copy_inplace(dst: &CudaStorage, ld: &Layout, src: &CudaStorage, ls: &Layout) -> Result<()> {
    convert(dst.gpu(), ld.numel(), dst, &Strided::of("copy_", ld)?, src, &Strided::of("copy_", ls)?)
}

pub(crate) fn fill_inplace(dst: &CudaStorage, l: &Layout, value: Scalar) -> Result<()> {
    fill(dst.gpu(), dst, &Strided::of("fill_", l)?, l.numel(), Elem::of(value, dst.dtype()))
}

/// A contiguous host copy of a view.
pub(crate) fn download(src: &CudaStorage, l: &Layout) -> Result<crate::storage::CpuStorage> {
    if l.contiguous_range().is_some_and(|r| r.start == 0 && r.len() == src.len()) {
        return super::memory::download(src);
    }
    super::memory::download(&cast("download", src, l, src.dtype())?)
}
