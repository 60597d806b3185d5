//! Elementwise kernels: fills, conversions and copies, functions of one and two tensors,
//! comparisons and selection, out of place and in place. Every kernel has `f16` and `bf16`
//! variants, which compute each element in `f32` and round it once.

use super::device::Gpu;
use super::kernel_source::{binary_code, compare_code, unary_code};
use super::launch::{Strided, arg, launch_elems};
use super::memory::CudaStorage;
use super::sfx;
use crate::backend::{BinaryOp, CmpOp, UnaryOp};
use crate::dtype::DType;
use crate::layout::Layout;
use crate::ops::compare::{IntCmp, int_cmp};
use crate::{Error, Result, Scalar};
use cudarc::driver::result;

/// One value of a tensor's element type, to pass to a kernel by value.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Elem {
    U8(u8),
    I64(i64),
    F32(f32),
    F64(f64),
    /// An `f16`'s bits, as the kernels' `__half` takes them.
    F16(u16),
    /// A `bf16`'s bits, as the kernels' `__nv_bfloat16` takes them.
    BF16(u16),
}

impl Elem {
    /// `s` converted to `dtype` as the CPU kernels convert it ([`Scalar::to_element`]).
    pub(crate) fn of(s: Scalar, dtype: DType) -> Elem {
        match dtype {
            DType::U8 => Elem::U8(s.to_element()),
            DType::I64 => Elem::I64(s.to_element()),
            DType::F32 => Elem::F32(s.to_element()),
            DType::F64 => Elem::F64(s.to_element()),
            DType::F16 => Elem::F16(s.to_element::<half::f16>().to_bits()),
            DType::BF16 => Elem::BF16(s.to_element::<half::bf16>().to_bits()),
        }
    }

    /// Like [`Elem::of`], saturating integers ([`Scalar::to_element_saturating`]).
    fn saturating(s: Scalar, dtype: DType) -> Elem {
        match dtype {
            DType::U8 => Elem::U8(s.to_element_saturating()),
            DType::I64 => Elem::I64(s.to_element_saturating()),
            DType::F32 => Elem::F32(s.to_element_saturating()),
            DType::F64 => Elem::F64(s.to_element_saturating()),
            DType::F16 => Elem::F16(s.to_element_saturating::<half::f16>().to_bits()),
            DType::BF16 => Elem::BF16(s.to_element_saturating::<half::bf16>().to_bits()),
        }
    }

    pub(crate) fn arg(&self) -> *mut std::ffi::c_void {
        match self {
            Elem::U8(v) => arg(v),
            Elem::I64(v) => arg(v),
            Elem::F32(v) => arg(v),
            Elem::F64(v) => arg(v),
            Elem::F16(v) | Elem::BF16(v) => arg(v),
        }
    }

    fn is_zero_bits(&self) -> bool {
        match *self {
            Elem::U8(v) => v == 0,
            Elem::I64(v) => v == 0,
            Elem::F32(v) => v.to_bits() == 0,
            Elem::F64(v) => v.to_bits() == 0,
            Elem::F16(v) | Elem::BF16(v) => v == 0,
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

/// The parameters of a kernel in its element type, for the `params` of a unary row's
/// `cuda` section (see the module docs of `crate::ops::unary`).
struct Params {
    dtype: DType,
}

impl Params {
    /// A float parameter.
    fn float(&self, v: f64) -> Elem {
        Elem::of(Scalar::Float(v), self.dtype)
    }

    /// A scalar converted like [`Scalar::to_element`].
    fn exact(&self, s: Scalar) -> Elem {
        Elem::of(s, self.dtype)
    }

    /// A scalar converted like [`Scalar::to_element_saturating`].
    fn saturating(&self, s: Scalar) -> Elem {
        Elem::saturating(s, self.dtype)
    }

    /// An unused parameter.
    fn zero(&self) -> Elem {
        Elem::of(Scalar::Int(0), self.dtype)
    }

    /// The element type.
    fn dtype(&self) -> DType {
        self.dtype
    }
}

/// Turns the unary table's `cuda` sections into [`unary_params`].
macro_rules! unary_params {
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
        /// The two parameters of `op`'s kernel in `dtype` (an error where integers cannot
        /// take the op or its parameter).
        #[allow(unused_variables)]
        fn unary_params(op: UnaryOp, dtype: DType) -> Result<[Elem; 2]> {
            if !dtype.is_float() && op.is_float_only() {
                return Err(op.not_for_ints(dtype));
            }
            let params = Params { dtype };
            Ok(match op {
                $( UnaryOp::$V $(( $($tp),* ))? $({ $($f),* })? => unary_params!(@params params, $cuda), )*
            })
        }
    };

    (@params $p:ident, [$($kind:ident $e:literal),* ; params |$k:ident| $body:expr]) => {{
        let $k = &$p;
        $body
    }};
    (@params $p:ident, [$($t:tt)*]) => {
        [$p.zero(), $p.zero()]
    };
}

crate::unary_table!(unary_params);

/// `op` of the view `(src, ls)` written to `(out, lo)`, `n` elements.
fn unary_into(op: UnaryOp, n: usize, out: &CudaStorage, lo: &Strided, src: &CudaStorage, ls: &Strided) -> Result<()> {
    let gpu = src.gpu();
    // The 16-bit kernels compute in f32 and take the parameters as the CPU's f32 kernel does.
    let (code, [p0, p1]) = (unary_code(op), unary_params(op, src.dtype().compute_dtype())?);
    let f = gpu.func(("unary", sfx(src.dtype()), ""))?;
    let (n64, po, ps) = (n as i64, out.ptr(), src.ptr());
    launch_elems(gpu, f, n, &mut [arg(&n64), arg(&code), p0.arg(), p1.arg(), arg(&po), arg(lo), arg(&ps), arg(ls)])
}

pub(crate) fn unary(op: UnaryOp, src: &CudaStorage, l: &Layout) -> Result<CudaStorage> {
    unary_params(op, src.dtype().compute_dtype())?;
    let n = l.numel();
    let out = CudaStorage::alloc(src.gpu(), op.name(), n, src.dtype())?;
    unary_into(op, n, &out, &Strided::dense(0), src, &Strided::of(op.name(), l)?)?;
    Ok(out)
}

pub(crate) fn unary_inplace(op: UnaryOp, dst: &CudaStorage, l: &Layout) -> Result<()> {
    let s = Strided::of(op.name(), l)?;
    unary_into(op, l.numel(), dst, &s, dst, &s)
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

pub(crate) fn compare(op: CmpOp, a: &CudaStorage, la: &Layout, b: &CudaStorage, lb: &Layout) -> Result<CudaStorage> {
    same_dtype(op.name(), a.dtype(), b.dtype())?;
    let gpu = a.gpu();
    let n = la.numel();
    let out = CudaStorage::alloc(gpu, op.name(), n, DType::U8)?;
    let f = gpu.func(("compare", sfx(a.dtype()), ""))?;
    let (sa, sb) = (Strided::of(op.name(), la)?, Strided::of(op.name(), lb)?);
    let (n64, code, po, pa, pb) = (n as i64, compare_code(op), out.ptr(), a.ptr(), b.ptr());
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
        let (code, v) = (compare_code(op), Elem::of(s, a.dtype()));
        launch_elems(gpu, f, n, &mut [arg(&n64), arg(&code), arg(&po), arg(&pa), arg(&sa), v.arg()])?;
        return Ok(out);
    }
    match int_cmp(op, s) {
        IntCmp::Const(c) => fill(gpu, &out, &Strided::dense(0), n, Elem::U8(c as u8))?,
        IntCmp::Cmp(op, v) => {
            let f = gpu.func(("compare_int", sfx(a.dtype()), ""))?;
            let code = compare_code(op);
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
