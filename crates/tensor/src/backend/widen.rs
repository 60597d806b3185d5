//! The 16-bit floats in the kernels that have no 16-bit variant, on any backend: their
//! operands are widened to `f32` (the backend's own cast), the `f32` kernel runs, and its
//! `f32` results are rounded once to the operands' dtype.
//!
//! That is the semantics PyTorch gives `f16`/`bf16` (each value computed in `f32`, rounded
//! when stored; reductions accumulate in `f32`), so every kernel has it without a
//! low-precision twin. Each backend decides which of its kernels run on 16-bit elements
//! directly (the CPU's table kernels load each element into `f32` inside their loops; the
//! CUDA backend's elementwise kernels have 16-bit variants) and widens the others through
//! this module, so both devices compute a 16-bit op alike. Auxiliary results that the
//! backward reads to more than 8 bits (attention's log-sum-exp, batch norm's statistics)
//! stay `f32`: the callers round only the primary result.

use super::{Backend, Target, View};
use crate::dtype::Element;
use crate::layout::Layout;
use crate::ops::UnaryOp;
use crate::storage::Storage;
use crate::{DType, Error, Result, Scalar};

/// The 16-bit float dtype among `dtypes`, which the results of a widened kernel are
/// rounded to; `None` when there is none (the kernel runs as it is).
pub(crate) fn low(dtypes: impl IntoIterator<Item = DType>) -> Option<DType> {
    dtypes.into_iter().find(|d| d.is_half())
}

/// [`low`] of the storages of some views.
pub(crate) fn low_of<'a>(views: impl IntoIterator<Item = &'a Storage>) -> Option<DType> {
    low(views.into_iter().map(Storage::dtype))
}

/// `op` with its scalar as PyTorch's kernels read it beside `low` operands: `add`, `sub`,
/// `rsub`, `pow` and `rpow` convert the scalar to the tensor's dtype before computing in
/// `f32` (so `x - 0.7` subtracts `0.69921875` from a bf16 `x`), while `mul` and `div` keep it
/// in `f32`. Rounding the scalar where PyTorch does gives its results bit for bit; the
/// other scalar ops (`maximum`, `minimum`, `clamp`) give the same results either way.
pub(crate) fn scalar_as_pytorch(op: UnaryOp, low: DType) -> UnaryOp {
    // Through `f32`, as PyTorch converts a double scalar (and as `to_dtype` does).
    let round = |s: Scalar| {
        let v = s.to_f64();
        Scalar::Float(if low == DType::BF16 {
            <half::bf16 as Element>::from_f64(v).to_f64()
        } else {
            <half::f16 as Element>::from_f64(v).to_f64()
        })
    };
    match op {
        UnaryOp::AddScalar(s) => UnaryOp::AddScalar(round(s)),
        UnaryOp::SubScalar(s) => UnaryOp::SubScalar(round(s)),
        UnaryOp::RSubScalar(s) => UnaryOp::RSubScalar(round(s)),
        UnaryOp::PowScalar(e) => UnaryOp::PowScalar(round(e)),
        UnaryOp::RPowScalar(b) => UnaryOp::RPowScalar(round(b)),
        other => other,
    }
}

/// An operand as the `f32` kernel reads it: a widened copy of a 16-bit view, or the view
/// itself.
pub(crate) enum Operand<'a> {
    /// A contiguous `f32` copy on the backend's device, with its layout.
    Widened(Storage, Layout),
    /// An operand of another dtype, read as it is.
    Kept(View<'a>),
}

impl<'a> Operand<'a> {
    /// The operand for `backend`'s `f32` kernel (its cast checks the view).
    pub(crate) fn new<B: Backend + ?Sized>(backend: &B, (s, l): View<'a>) -> Result<Self> {
        if !s.dtype().is_half() {
            return Ok(Operand::Kept((s, l)));
        }
        let wide = backend.cast((s, l), DType::F32)?;
        Ok(Operand::Widened(wide, Layout::contiguous(l.shape().clone())))
    }

    /// [`Operand::new`] of an optional operand.
    pub(crate) fn optional<B: Backend + ?Sized>(backend: &B, v: Option<View<'a>>) -> Result<Option<Self>> {
        v.map(|v| Operand::new(backend, v)).transpose()
    }

    /// The view the `f32` kernel reads.
    pub(crate) fn view(&self) -> View<'_> {
        match self {
            Operand::Widened(s, l) => (s, l),
            Operand::Kept(v) => *v,
        }
    }
}

/// The operands of `backend`'s `f32` kernel for `views`, in order.
pub(crate) fn operands<'a, B: Backend + ?Sized, const N: usize>(
    backend: &B,
    views: [View<'a>; N],
) -> Result<[Operand<'a>; N]> {
    let mut out = Vec::with_capacity(N);
    for v in views {
        out.push(Operand::new(backend, v)?);
    }
    out.try_into().map_err(|_| Error::invalid("to_dtype", "widened operand count"))
}

/// A storage a kernel writes in place, as the `f32` kernel updates it: a widened copy of a
/// 16-bit target, which [`InPlace::finish`] rounds back into the original, or the target
/// itself.
pub(crate) struct InPlace<'t, 'b, B: ?Sized> {
    backend: &'b B,
    original: Target<'t>,
    wide: Option<(Storage, Layout)>,
}

impl<'t, 'b, B: Backend + ?Sized> InPlace<'t, 'b, B> {
    /// The target for `backend`'s `f32` kernel.
    pub(crate) fn new(backend: &'b B, original: Target<'t>) -> Result<Self> {
        let wide = match Operand::new(backend, (&*original.0, original.1))? {
            Operand::Widened(s, l) => Some((s, l)),
            Operand::Kept(_) => None,
        };
        Ok(InPlace { backend, original, wide })
    }

    /// [`InPlace::new`] of an optional target.
    pub(crate) fn optional(backend: &'b B, t: Option<Target<'t>>) -> Result<Option<Self>> {
        t.map(|t| InPlace::new(backend, t)).transpose()
    }

    /// What the `f32` kernel updates.
    pub(crate) fn target(&mut self) -> Target<'_> {
        match &mut self.wide {
            Some((s, l)) => (s, &*l),
            None => (&mut *self.original.0, self.original.1),
        }
    }

    /// Rounds the updated values back into the original target (nothing to do when it was
    /// updated directly).
    pub(crate) fn finish(self) -> Result<()> {
        let Some((wide, wl)) = self.wide else { return Ok(()) };
        let (dst, layout) = self.original;
        self.backend.copy_inplace(dst, layout, (&wide, &wl))
    }
}

/// A result of an `f32` kernel rounded to the operands' 16-bit dtype: every `f32` storage
/// in it is; storages of other dtypes (indices, masks) are kept.
pub(crate) trait Narrow: Sized {
    /// The result with its `f32` storages rounded to `low` by `backend`'s cast.
    fn narrow<B: Backend + ?Sized>(self, backend: &B, low: DType) -> Result<Self>;
}

impl Narrow for Storage {
    fn narrow<B: Backend + ?Sized>(self, backend: &B, low: DType) -> Result<Self> {
        if self.dtype() != DType::F32 {
            return Ok(self);
        }
        let layout = Layout::contiguous([self.len()].into());
        backend.cast((&self, &layout), low)
    }
}

impl<const N: usize> Narrow for [Storage; N] {
    fn narrow<B: Backend + ?Sized>(self, backend: &B, low: DType) -> Result<Self> {
        let mut out = Vec::with_capacity(N);
        for s in self {
            out.push(s.narrow(backend, low)?);
        }
        out.try_into().map_err(|_| Error::invalid("to_dtype", "narrowed result count"))
    }
}

impl Narrow for (Storage, Storage) {
    fn narrow<B: Backend + ?Sized>(self, backend: &B, low: DType) -> Result<Self> {
        Ok((self.0.narrow(backend, low)?, self.1.narrow(backend, low)?))
    }
}

impl Narrow for f64 {
    fn narrow<B: Backend + ?Sized>(self, _: &B, _: DType) -> Result<Self> {
        Ok(self)
    }
}
