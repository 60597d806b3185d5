//! Elementwise functions of two (or three) tensors: arithmetic, comparisons, `where`, and
//! the in-place and copying forms.
//!
//! The per-element functions come from the op tables (`ops/binary.rs`, `ops/compare.rs`):
//! their `cpu` sections expand here into [`binary_kernel`] and `with_cmp_fn!`, which hand
//! each op's closure to the loops below (see the module docs of `crate::ops`).

use super::contiguous::transposed_copy;
use super::unary::map;
use crate::backend::{BinaryOp, CmpOp};
use crate::cpu_dispatch;
use crate::dtype::{Element, HalfElement};
use crate::host::iter::{GRAIN_CHEAP, GRAIN_COSTLY, Runs, fill_chunks};
use crate::layout::Layout;
use crate::ops::compare::{IntCmp, int_cmp};
use crate::storage::{Buffer, CpuStorage};
use crate::{Error, Result, Scalar};
use multiversion::multiversion;

/// A loop that applies a per-element function of two operands, like `MapFn` in
/// `unary.rs`.
trait ZipFn<T> {
    /// What running the loop gives.
    type Output;
    /// Runs the loop with `f`.
    fn run<F: Fn(T, T) -> T + Sync + Copy>(self, grain: usize, f: F) -> Self::Output;
}

/// Turns the binary table's `cpu` sections into [`binary_kernel`].
macro_rules! binary_kernels {
    ($(
        $(#[$meta:meta])*
        $V:ident => $method:ident,
            cpu [$grain:ident |$x:ident, $y:ident| $body:expr],
            cuda $cuda:tt,
            tensor $tensor:tt,
            grad $grad:tt;
    )*) => {
        /// Runs `k` with the per-element function of `op` on the element type `T`.
        #[inline(always)]
        fn binary_kernel<T: Element, K: ZipFn<T>>(op: BinaryOp, k: K) -> K::Output {
            match op {
                $( BinaryOp::$V => k.run(binary_kernels!(@grain $grain), |$x: T, $y: T| $body), )*
            }
        }
    };

    (@grain cheap) => { GRAIN_CHEAP };
    (@grain costly) => { GRAIN_COSTLY };
}

crate::binary_table!(binary_kernels);

/// Turns the comparison table's `cpu` sections into the macro `with_cmp_fn!(op, T, |f|
/// body)`, which evaluates `body` with `f` the comparison `op` of two `T`s giving a `u8`: one
/// arm per op, with the element type written out, so that each comparison compiles to its
/// own loop of plain instructions. (The generated macro names its own arguments with `$d`,
/// a `$` passed in.)
macro_rules! compare_kernels {
    (@with ($d:tt) $(
        $(#[$meta:meta])*
        $V:ident => $method:ident, $scalar_method:ident, $symbol:literal,
            cpu [|$x:ident, $y:ident| $body:expr], cuda $cuda:tt;
    )*) => {
        macro_rules! with_cmp_fn {
            ($d op:expr, $d T:ty, |$d f:ident| $d run:expr) => {
                match $d op {
                    $(
                        CmpOp::$V => {
                            let $d f = |$x: $d T, $y: $d T| ($body) as u8;
                            $d run
                        }
                    )*
                }
            };
        }
    };
    ($($rows:tt)*) => {
        compare_kernels!(@with ($) $($rows)*);
    };
}

crate::compare_table!(compare_kernels);

#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn zip_contig<A: Copy, B: Copy, O: Copy, F: Fn(A, B) -> O>(a: &[A], b: &[B], dst: &mut [O], f: F) {
    for ((d, &x), &y) in dst.iter_mut().zip(a).zip(b) {
        *d = f(x, y);
    }
}

#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn zip_scalar_right<A: Copy, B: Copy, O: Copy, F: Fn(A, B) -> O>(a: &[A], y: B, dst: &mut [O], f: F) {
    for (d, &x) in dst.iter_mut().zip(a) {
        *d = f(x, y);
    }
}

#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn zip_scalar_left<A: Copy, B: Copy, O: Copy, F: Fn(A, B) -> O>(x: A, b: &[B], dst: &mut [O], f: F) {
    for (d, &y) in dst.iter_mut().zip(b) {
        *d = f(x, y);
    }
}

/// `f(a[i], block[(phase + i) % block.len()])` (or with the operands swapped when
/// `block_left`): one side is a contiguous block repeated along broadcast dims, like a bias
/// row added to every row of a matrix. One call covers many rows, so the per-row cost is a
/// loop iteration, not a dispatch.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn zip_cycle<A: Copy, B: Copy, O: Copy, F: Fn(A, B) -> O>(full: &[A], block: &[B], phase: usize, dst: &mut [O], f: F) {
    let m = block.len();
    let (mut pos, mut j) = (0, phase);
    while pos < dst.len() {
        let len = (m - j).min(dst.len() - pos);
        for ((d, &x), &y) in dst[pos..pos + len].iter_mut().zip(&full[pos..pos + len]).zip(&block[j..j + len]) {
            *d = f(x, y);
        }
        pos += len;
        j = 0;
    }
}

/// If `l` is a contiguous block repeated along leading broadcast (stride 0) dims, the
/// block's storage range.
fn repeated_block(l: &Layout) -> Option<std::ops::Range<usize>> {
    let (shape, strides) = (l.shape(), l.strides());
    let lead = strides.iter().zip(shape.iter()).take_while(|&(&st, &d)| st == 0 || d == 1).count();
    let mut expected = 1;
    for (&st, &d) in strides[lead..].iter().zip(shape[lead..].iter()).rev() {
        if d != 1 && st != expected {
            return None;
        }
        expected *= d;
    }
    (lead > 0 && expected > 0).then(|| l.offset()..l.offset() + expected)
}

/// `f(a, b)` for two views of one shape, into a new contiguous buffer.
pub(crate) fn zip<A: Element, B: Element, O: Element>(
    op: &'static str,
    (a, la): (&[A], &Layout),
    (b, lb): (&[B], &Layout),
    grain: usize,
    f: impl Fn(A, B) -> O + Sync + Copy,
) -> Result<Buffer<O>> {
    let n = la.numel();
    let mut out = Buffer::<O>::uninit(op, n)?;
    if let (Some(ra), Some(rb)) = (la.contiguous_range(), lb.contiguous_range()) {
        let (a, b) = (&a[ra], &b[rb]);
        fill_chunks(&mut out, grain, |s, chunk| {
            let e = s + chunk.len();
            zip_contig(&a[s..e], &b[s..e], chunk, f)
        });
        return Ok(out);
    }
    if let (Some(ra), Some(rb)) = (la.contiguous_range(), repeated_block(lb)) {
        let (a, block) = (&a[ra], &b[rb]);
        fill_chunks(&mut out, grain, |s, chunk| zip_cycle(&a[s..s + chunk.len()], block, s % block.len(), chunk, f));
        return Ok(out);
    }
    if let (Some(ra), Some(rb)) = (repeated_block(la), lb.contiguous_range()) {
        let (block, b) = (&a[ra], &b[rb]);
        fill_chunks(&mut out, grain, |s, chunk| {
            zip_cycle(&b[s..s + chunk.len()], block, s % block.len(), chunk, |y, x| f(x, y))
        });
        return Ok(out);
    }
    let runs = Runs::new([la, lb]);
    let (sa, sb) = (runs.inner_stride(0), runs.inner_stride(1));
    fill_chunks(&mut out, grain, |start, chunk| {
        runs.for_each(start, start + chunk.len(), |[oa, ob], len, pos| {
            let dst = &mut chunk[pos - start..pos - start + len];
            match (sa, sb) {
                (1, 1) => zip_contig(&a[oa..oa + len], &b[ob..ob + len], dst, f),
                (1, 0) => zip_scalar_right(&a[oa..oa + len], b[ob], dst, f),
                (0, 1) => zip_scalar_left(a[oa], &b[ob..ob + len], dst, f),
                _ => {
                    for (i, d) in dst.iter_mut().enumerate() {
                        *d = f(a[oa + i * sa], b[ob + i * sb]);
                    }
                }
            }
        });
    });
    Ok(out)
}

/// The out-of-place loop of a binary op: its function of two same-shape views.
struct Zip<'a, T> {
    name: &'static str,
    a: (&'a [T], &'a Layout),
    b: (&'a [T], &'a Layout),
}

impl<T: Element> ZipFn<T> for Zip<'_, T> {
    type Output = Result<Buffer<T>>;
    #[inline(always)]
    fn run<F: Fn(T, T) -> T + Sync + Copy>(self, grain: usize, f: F) -> Self::Output {
        zip(self.name, self.a, self.b, grain, f)
    }
}

/// The in-place loop of a binary op: `dst = f(dst, src)`. In-place updates run with
/// [`zip_into`]'s own grain.
struct ZipInto<'a, T> {
    dst: (&'a mut [T], &'a Layout),
    src: (&'a [T], &'a Layout),
}

impl<T: Element> ZipFn<T> for ZipInto<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run<F: Fn(T, T) -> T + Sync + Copy>(self, _grain: usize, f: F) {
        zip_into(self.dst.0, self.dst.1, self.src.0, self.src.1, f)
    }
}

/// The out-of-place loop of a binary op on 16-bit elements: the `f32` function of the two
/// elements loaded into `f32`, the result rounded once.
struct ZipHalf<'a, H> {
    name: &'static str,
    a: (&'a [H], &'a Layout),
    b: (&'a [H], &'a Layout),
}

impl<H: HalfElement> ZipFn<f32> for ZipHalf<'_, H> {
    type Output = Result<Buffer<H>>;
    #[inline(always)]
    fn run<F: Fn(f32, f32) -> f32 + Sync + Copy>(self, grain: usize, f: F) -> Self::Output {
        zip(self.name, self.a, self.b, grain, move |x: H, y: H| H::narrow(f(x.widen(), y.widen())))
    }
}

/// [`ZipHalf`] in place.
struct ZipHalfInto<'a, H> {
    dst: (&'a mut [H], &'a Layout),
    src: (&'a [H], &'a Layout),
}

impl<H: HalfElement> ZipFn<f32> for ZipHalfInto<'_, H> {
    type Output = ();
    #[inline(always)]
    fn run<F: Fn(f32, f32) -> f32 + Sync + Copy>(self, _grain: usize, f: F) {
        zip_into(self.dst.0, self.dst.1, self.src.0, self.src.1, move |d: H, s: H| H::narrow(f(d.widen(), s.widen())))
    }
}

fn same_dtype(op: &'static str, a: &CpuStorage, b: &CpuStorage) -> Error {
    Error::dtype(op, format!("expected operands of one dtype, got {} and {}", a.dtype(), b.dtype()))
}

/// `a op b` for two same-dtype views of one shape.
pub(crate) fn binary(op: BinaryOp, a: &CpuStorage, la: &Layout, b: &CpuStorage, lb: &Layout) -> Result<CpuStorage> {
    let name = op.name();
    match (a, b) {
        (CpuStorage::F32(x), CpuStorage::F32(y)) => Ok(binary_kernel(op, Zip { name, a: (x, la), b: (y, lb) })?.into()),
        (CpuStorage::F64(x), CpuStorage::F64(y)) => Ok(binary_kernel(op, Zip { name, a: (x, la), b: (y, lb) })?.into()),
        (CpuStorage::F16(x), CpuStorage::F16(y)) => {
            Ok(binary_kernel(op, ZipHalf { name, a: (x, la), b: (y, lb) })?.into())
        }
        (CpuStorage::BF16(x), CpuStorage::BF16(y)) => {
            Ok(binary_kernel(op, ZipHalf { name, a: (x, la), b: (y, lb) })?.into())
        }
        (CpuStorage::I64(x), CpuStorage::I64(y)) => Ok(binary_kernel(op, Zip { name, a: (x, la), b: (y, lb) })?.into()),
        (CpuStorage::U8(x), CpuStorage::U8(y)) => Ok(binary_kernel(op, Zip { name, a: (x, la), b: (y, lb) })?.into()),
        _ => Err(same_dtype(name, a, b)),
    }
}

/// ReLU's gradient, `grad` where `output > 0` and 0 where `output <= 0` (a NaN output passes
/// the gradient), for two same-dtype float views of one shape: one pass reading each once.
pub(crate) fn relu_backward(g: &CpuStorage, lg: &Layout, o: &CpuStorage, lo: &Layout) -> Result<CpuStorage> {
    const NAME: &str = "relu_backward";
    fn go<T: Element>(g: &[T], lg: &Layout, o: &[T], lo: &Layout) -> Result<Buffer<T>> {
        zip(NAME, (g, lg), (o, lo), GRAIN_CHEAP, |g, y| if y <= T::ZERO { T::ZERO } else { g })
    }
    match (g, o) {
        (CpuStorage::F32(x), CpuStorage::F32(y)) => Ok(go(x, lg, y, lo)?.into()),
        (CpuStorage::F64(x), CpuStorage::F64(y)) => Ok(go(x, lg, y, lo)?.into()),
        (CpuStorage::F16(x), CpuStorage::F16(y)) => Ok(go(x, lg, y, lo)?.into()),
        (CpuStorage::BF16(x), CpuStorage::BF16(y)) => Ok(go(x, lg, y, lo)?.into()),
        (a, b) if a.dtype() != b.dtype() => Err(same_dtype(NAME, a, b)),
        _ => Err(Error::dtype(NAME, format!("expected float views, got {}", g.dtype()))),
    }
}

/// `a op b` as a `u8` mask, for two same-dtype views of one shape.
pub(crate) fn compare(op: CmpOp, a: &CpuStorage, la: &Layout, b: &CpuStorage, lb: &Layout) -> Result<CpuStorage> {
    let name = op.name();
    macro_rules! arm {
        ($x:expr, $y:expr, $T:ty) => {
            with_cmp_fn!(op, $T, |f| Ok(zip(name, ($x, la), ($y, lb), GRAIN_CHEAP, f)?.into()))
        };
    }
    match (a, b) {
        (CpuStorage::F32(x), CpuStorage::F32(y)) => arm!(x, y, f32),
        (CpuStorage::F64(x), CpuStorage::F64(y)) => arm!(x, y, f64),
        (CpuStorage::F16(x), CpuStorage::F16(y)) => arm!(x, y, half::f16),
        (CpuStorage::BF16(x), CpuStorage::BF16(y)) => arm!(x, y, half::bf16),
        (CpuStorage::I64(x), CpuStorage::I64(y)) => arm!(x, y, i64),
        (CpuStorage::U8(x), CpuStorage::U8(y)) => arm!(x, y, u8),
        _ => Err(same_dtype(name, a, b)),
    }
}

/// `a op scalar` as a `u8` mask. Float elements compare with the scalar in their own dtype
/// (PyTorch converts the scalar); integer elements with its exact value ([`IntCmp`]).
pub(crate) fn compare_scalar(op: CmpOp, a: &CpuStorage, la: &Layout, s: Scalar) -> Result<CpuStorage> {
    let name = op.name();
    fn ints<T: Element>(name: &'static str, x: &[T], la: &Layout, cmp: IntCmp) -> Result<CpuStorage> {
        Ok(match cmp {
            IntCmp::Const(c) => Buffer::<u8>::full(name, la.numel(), c as u8)?.into(),
            IntCmp::Cmp(op, v) => {
                with_cmp_fn!(op, i64, |f| map(name, x, la, GRAIN_CHEAP, move |e: T| f(e.to_i64(), v))?.into())
            }
        })
    }
    match a {
        CpuStorage::F32(x) => {
            let s: f32 = s.to_element();
            Ok(with_cmp_fn!(op, f32, |f| map(name, x, la, GRAIN_CHEAP, move |v| f(v, s))?.into()))
        }
        CpuStorage::F64(x) => {
            let s: f64 = s.to_element();
            Ok(with_cmp_fn!(op, f64, |f| map(name, x, la, GRAIN_CHEAP, move |v| f(v, s))?.into()))
        }
        CpuStorage::F16(x) => {
            let s: half::f16 = s.to_element();
            Ok(with_cmp_fn!(op, half::f16, |f| map(name, x, la, GRAIN_CHEAP, move |v| f(v, s))?.into()))
        }
        CpuStorage::BF16(x) => {
            let s: half::bf16 = s.to_element();
            Ok(with_cmp_fn!(op, half::bf16, |f| map(name, x, la, GRAIN_CHEAP, move |v| f(v, s))?.into()))
        }
        CpuStorage::I64(x) => ints(name, x, la, int_cmp(op, s)),
        CpuStorage::U8(x) => ints(name, x, la, int_cmp(op, s)),
    }
}

/// `cond ? a : b` elementwise.
pub(crate) fn where_cond(
    cond: &CpuStorage,
    lc: &Layout,
    a: &CpuStorage,
    la: &Layout,
    b: &CpuStorage,
    lb: &Layout,
) -> Result<CpuStorage> {
    let c = cond
        .as_slice::<u8>()
        .ok_or_else(|| Error::dtype("where", format!("the condition must be a u8 mask, got {}", cond.dtype())))?;
    fn go<T: Element>(c: &[u8], lc: &Layout, a: &[T], la: &Layout, b: &[T], lb: &Layout) -> Result<Buffer<T>> {
        let n = lc.numel();
        let mut out = Buffer::<T>::uninit("where", n)?;
        let runs = Runs::new([lc, la, lb]);
        let (sc, sa, sb) = (runs.inner_stride(0), runs.inner_stride(1), runs.inner_stride(2));
        fill_chunks(&mut out, GRAIN_CHEAP, |start, chunk| {
            runs.for_each(start, start + chunk.len(), |[oc, oa, ob], len, pos| {
                let dst = &mut chunk[pos - start..pos - start + len];
                for (i, d) in dst.iter_mut().enumerate() {
                    *d = if c[oc + i * sc] != 0 { a[oa + i * sa] } else { b[ob + i * sb] };
                }
            });
        });
        Ok(out)
    }
    match (a, b) {
        (CpuStorage::F32(x), CpuStorage::F32(y)) => Ok(go(c, lc, x, la, y, lb)?.into()),
        (CpuStorage::F64(x), CpuStorage::F64(y)) => Ok(go(c, lc, x, la, y, lb)?.into()),
        (CpuStorage::I64(x), CpuStorage::I64(y)) => Ok(go(c, lc, x, la, y, lb)?.into()),
        (CpuStorage::U8(x), CpuStorage::U8(y)) => Ok(go(c, lc, x, la, y, lb)?.into()),
        // A selection moves elements without computing: the 16-bit ones move as they are.
        (CpuStorage::F16(x), CpuStorage::F16(y)) => Ok(go(c, lc, x, la, y, lb)?.into()),
        (CpuStorage::BF16(x), CpuStorage::BF16(y)) => Ok(go(c, lc, x, la, y, lb)?.into()),
        _ => Err(same_dtype("where", a, b)),
    }
}

/// `dst[i] = f(dst[i], block[(phase + i) % block.len()])`: the in-place [`zip_cycle`], for
/// a bias row added to every row of a matrix in place.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn cycle_into<T: Copy, S: Copy, F: Fn(T, S) -> T>(dst: &mut [T], block: &[S], phase: usize, f: F) {
    let m = block.len();
    let (mut pos, mut j) = (0, phase);
    while pos < dst.len() {
        let len = (m - j).min(dst.len() - pos);
        for (d, &y) in dst[pos..pos + len].iter_mut().zip(&block[j..j + len]) {
            *d = f(*d, y);
        }
        pos += len;
        j = 0;
    }
}

/// `dst[i] = f(dst[i], src[i])` over two slices of one length.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn contig_into<T: Copy, S: Copy, F: Fn(T, S) -> T>(dst: &mut [T], src: &[S], f: F) {
    for (d, &v) in dst.iter_mut().zip(src) {
        *d = f(*d, v);
    }
}

/// Writes `f(dst[i], src[i])` into the elements of `dst` that `ld` addresses; `src` is
/// broadcast to `ld`'s shape. Sequential unless the destination is contiguous, because a
/// strided destination may interleave with itself across chunks; the runs of a strided
/// one are still vector loops where both sides step by one.
fn zip_into<T: Element, S: Element>(
    dst: &mut [T],
    ld: &Layout,
    src: &[S],
    ls: &Layout,
    f: impl Fn(T, S) -> T + Sync + Copy,
) {
    if let (Some(rd), Some(rs)) = (ld.contiguous_range(), ls.contiguous_range()) {
        let src = &src[rs];
        fill_chunks(&mut dst[rd], GRAIN_CHEAP, |s, chunk| contig_into(chunk, &src[s..s + chunk.len()], f));
        return;
    }
    if let (Some(rd), Some(rs)) = (ld.contiguous_range(), repeated_block(ls)) {
        let block = &src[rs];
        fill_chunks(&mut dst[rd], GRAIN_CHEAP, |s, chunk| cycle_into(chunk, block, s % block.len(), f));
        return;
    }
    let runs = Runs::new([ld, ls]);
    let (sd, ss) = (runs.inner_stride(0), runs.inner_stride(1));
    runs.for_each(0, ld.numel(), |[od, os], len, _| match (sd, ss) {
        (1, 1) => contig_into(&mut dst[od..od + len], &src[os..os + len], f),
        _ => {
            for i in 0..len {
                let d = &mut dst[od + i * sd];
                *d = f(*d, src[os + i * ss]);
            }
        }
    });
}

/// `dst = dst op src` in place.
pub(crate) fn binary_inplace(
    op: BinaryOp,
    dst: &mut CpuStorage,
    ld: &Layout,
    src: &CpuStorage,
    ls: &Layout,
) -> Result<()> {
    let name = op.name();
    let err = same_dtype(name, dst, src);
    match (dst, src) {
        (CpuStorage::F32(d), CpuStorage::F32(s)) => binary_kernel(op, ZipInto { dst: (d, ld), src: (s, ls) }),
        (CpuStorage::F64(d), CpuStorage::F64(s)) => binary_kernel(op, ZipInto { dst: (d, ld), src: (s, ls) }),
        (CpuStorage::F16(d), CpuStorage::F16(s)) => binary_kernel(op, ZipHalfInto { dst: (d, ld), src: (s, ls) }),
        (CpuStorage::BF16(d), CpuStorage::BF16(s)) => binary_kernel(op, ZipHalfInto { dst: (d, ld), src: (s, ls) }),
        (CpuStorage::I64(d), CpuStorage::I64(s)) => binary_kernel(op, ZipInto { dst: (d, ld), src: (s, ls) }),
        (CpuStorage::U8(d), CpuStorage::U8(s)) => binary_kernel(op, ZipInto { dst: (d, ld), src: (s, ls) }),
        _ => return Err(err),
    }
    Ok(())
}

/// Copies `src` (any dtype, broadcast to `ld`'s shape) into `dst`, converting with `as`.
pub(crate) fn copy_inplace(dst: &mut CpuStorage, ld: &Layout, src: &CpuStorage, ls: &Layout) -> Result<()> {
    fn into<T: Element>(d: &mut [T], ld: &Layout, src: &CpuStorage, ls: &Layout) {
        cpu_dispatch!(src, s => zip_into(d, ld, s, ls, |_, v| convert::<_, T>(v)))
    }
    cpu_dispatch!(dst, d => into(d, ld, src, ls));
    Ok(())
}

/// Sets the elements `ld` addresses to `value`.
pub(crate) fn fill_inplace(dst: &mut CpuStorage, ld: &Layout, value: Scalar) -> Result<()> {
    fn go<T: Element>(d: &mut [T], ld: &Layout, v: T) {
        super::unary::map_inplace(d, ld, GRAIN_CHEAP, move |_| v)
    }
    cpu_dispatch!(dst, d => go(d, ld, value.to_element()));
    Ok(())
}

/// `as`-style conversion between element types, exact for integers whatever their size.
#[inline(always)]
pub(crate) fn convert<S: Element, T: Element>(v: S) -> T {
    if S::DTYPE.is_int() && T::DTYPE.is_int() {
        T::from_i64(v.to_i64())
    } else if S::DTYPE.is_half() || T::DTYPE.is_half() {
        // Through f32, as PyTorch converts into and out of the 16-bit floats (an f64
        // rounds to f32 first): exact for the values f32 holds, and one cheap step.
        T::from_f32(v.to_f32())
    } else {
        T::from_f64(v.to_f64())
    }
}

/// A contiguous copy of a view in `dtype`.
pub(crate) fn cast(src: &CpuStorage, l: &Layout, dtype: crate::DType) -> Result<CpuStorage> {
    fn to<S: Element>(s: &[S], l: &Layout, dtype: crate::DType) -> Result<CpuStorage> {
        // A copy (`contiguous()` of a transposed matrix) takes the register transpose.
        if S::DTYPE == dtype
            && let Some(copy) = transposed_copy("to_dtype", s, l)?
        {
            return Ok(S::into_storage(copy));
        }
        Ok(match dtype {
            crate::DType::U8 => map("to_dtype", s, l, GRAIN_CHEAP, convert::<S, u8>)?.into(),
            crate::DType::I64 => map("to_dtype", s, l, GRAIN_CHEAP, convert::<S, i64>)?.into(),
            crate::DType::F16 => map("to_dtype", s, l, GRAIN_CHEAP, convert::<S, half::f16>)?.into(),
            crate::DType::BF16 => map("to_dtype", s, l, GRAIN_CHEAP, convert::<S, half::bf16>)?.into(),
            crate::DType::F32 => map("to_dtype", s, l, GRAIN_CHEAP, convert::<S, f32>)?.into(),
            crate::DType::F64 => map("to_dtype", s, l, GRAIN_CHEAP, convert::<S, f64>)?.into(),
        })
    }
    cpu_dispatch!(src, s => to(s, l, dtype))
}

#[cfg(test)]
mod tests {
    use crate::Tensor;

    /// Integer tensors compare with the exact value of a scalar (see `ops::compare::int_cmp`,
    /// whose exactness its own test checks).
    #[test]
    fn integer_tensors_compare_with_the_exact_value_of_scalars() {
        // Integer scalars beyond 2^53 compare exactly (through f64 they would round).
        let big = Tensor::from_vec(vec![(1i64 << 53) + 1, 1 << 53], [2]).unwrap();
        assert_eq!(big.eq_scalar((1i64 << 53) + 1).to_vec::<u8>().unwrap(), vec![1, 0]);
        assert_eq!(big.lt_scalar((1i64 << 53) + 1).to_vec::<u8>().unwrap(), vec![0, 1]);
        let bytes = Tensor::from_vec(vec![0u8, 200, 255], [3]).unwrap();
        assert_eq!(bytes.lt_scalar(300).to_vec::<u8>().unwrap(), vec![1, 1, 1]);
        assert_eq!(bytes.gt_scalar(-1).to_vec::<u8>().unwrap(), vec![1, 1, 1]);
        assert_eq!(bytes.ge_scalar(199.5).to_vec::<u8>().unwrap(), vec![0, 1, 1]);
    }

    /// The one-pass ReLU gradient is the default composition's `masked_fill(grad, output <=
    /// 0, 0)` in every float dtype, on contiguous and transposed views alike, with the NaN,
    /// signed-zero and infinite-gradient cases PyTorch's `threshold_backward` defines.
    #[test]
    fn relu_backward_is_the_masked_gradient() {
        use crate::DType;
        let special = [0.0, -0.0, f64::NAN, 1e-30, -1e-30, f64::INFINITY, f64::NEG_INFINITY];
        let n = 40 * 30;
        let ys: Vec<f64> =
            (0..n).map(|i| if i < special.len() { special[i] } else { (i as f64 * 0.37).sin() }).collect();
        let gs: Vec<f64> = (0..n).map(|i| if i % 7 == 0 { f64::INFINITY } else { (i as f64 * 0.11).cos() }).collect();
        for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
            let y = Tensor::from_vec(ys.clone(), [40, 30]).unwrap().to_dtype(dtype);
            let g = Tensor::from_vec(gs.clone(), [40, 30]).unwrap().to_dtype(dtype);
            for (g, y) in [(g.clone(), y.clone()), (g.transpose(0, 1).unwrap(), y.transpose(0, 1).unwrap())] {
                let fused = g.relu_backward(&y).unwrap().to_vec_f64().unwrap();
                let composed = g.masked_fill(&y.le_scalar(0), 0.0).unwrap().to_vec_f64().unwrap();
                let same = fused.iter().zip(&composed).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{dtype}: {fused:?} vs {composed:?}");
            }
            // An infinite gradient at a zero output, a negative zero, a NaN output.
            let want = [0.0, 0.0, g.to_vec_f64().unwrap()[2]];
            assert_eq!(g.relu_backward(&y).unwrap().to_vec_f64().unwrap()[..3], want);
        }
        let y = Tensor::from_vec(ys, [40, 30]).unwrap();
        assert!(y.relu_backward(&y.to_dtype(DType::F32)).is_err());
        assert!(y.relu_backward(&y.reshape([30, 40]).unwrap()).is_err());
        assert!(y.to_dtype(DType::I64).relu_backward(&y.to_dtype(DType::I64)).is_err());
    }

    /// Large enough to be split into chunks that start mid-row, on both operand orders (sub
    /// is not symmetric), with a size-1 dim inside the repeated block.
    #[test]
    fn repeated_blocks_match_elementwise_indexing() {
        let (rows, cols) = (1001, 997);
        let a = Tensor::from_vec((0..rows * cols).map(|i| i as f64).collect(), [rows, 1, cols]).unwrap();
        let row = Tensor::from_vec((0..cols).map(|j| (j * j) as f64).collect(), [1, cols]).unwrap();
        let right = a.sub(&row).unwrap().to_vec::<f64>().unwrap();
        let left = row.sub(&a).unwrap().to_vec::<f64>().unwrap();
        for i in 0..rows {
            for j in 0..cols {
                let want = (i * cols + j) as f64 - (j * j) as f64;
                assert_eq!(right[i * cols + j], want, "a - row at ({i}, {j})");
                assert_eq!(left[i * cols + j], -want, "row - a at ({i}, {j})");
            }
        }
    }

    /// In place: a row repeated over a contiguous destination (a bias added to a product,
    /// split over threads mid-row), and a copy into a strided destination.
    #[test]
    fn in_place_repeated_blocks_and_strided_destinations_match_elementwise_indexing() {
        let (rows, cols) = (1001, 97);
        let a = Tensor::from_vec((0..rows * cols).map(|i| i as f64).collect(), [rows, cols]).unwrap();
        let row = Tensor::from_vec((0..cols).map(|j| (j * j) as f64).collect(), [cols]).unwrap();
        a.sub_(&row).unwrap();
        let got = a.to_vec::<f64>().unwrap();
        for i in 0..rows {
            for j in 0..cols {
                assert_eq!(got[i * cols + j], (i * cols + j) as f64 - (j * j) as f64, "a -= row at ({i}, {j})");
            }
        }
        let wide = Tensor::zeros([rows, 3, cols], crate::DType::F64).unwrap();
        wide.select(1, 1).unwrap().copy_(&a).unwrap();
        let w = wide.to_vec::<f64>().unwrap();
        for i in 0..rows {
            for k in 0..3 {
                for j in 0..cols {
                    let want = if k == 1 { got[i * cols + j] } else { 0.0 };
                    assert_eq!(w[(i * 3 + k) * cols + j], want, "copy into slot 1 at ({i}, {k}, {j})");
                }
            }
        }
    }
}
