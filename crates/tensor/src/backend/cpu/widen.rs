//! The 16-bit floats in the CPU kernels that compute: their operands are widened to `f32`,
//! the `f32` kernel runs, and its `f32` results are rounded once to the operands' dtype.
//!
//! That is the semantics PyTorch gives `f16`/`bf16` on the CPU (each value computed in
//! `f32`, rounded when stored; reductions accumulate in `f32`), so every kernel has it
//! without a low-precision twin. Kernels that only move or select elements (indexing,
//! joins, fills, casts, comparisons) run on the 16-bit elements directly, and the matrix
//! product has its own low-precision kernels.

use super::binary;
use crate::backend::{Target, View};
use crate::layout::Layout;
use crate::storage::{CpuStorage, Storage};
use crate::{DType, Error, Result};

/// The error of an `f32`-only kernel handed 16-bit elements, which the backend widens
/// before calling it: a bug in the backend, not in the caller's program.
pub(super) fn not_widened(op: &'static str) -> Error {
    Error::invalid(op, "a 16-bit float reached an f32 kernel without being widened")
}

/// The 16-bit float dtype among `dtypes`, which the results of a widened kernel are
/// rounded to; `None` when there is none (the kernel runs as it is).
pub(super) fn low(dtypes: impl IntoIterator<Item = DType>) -> Option<DType> {
    dtypes.into_iter().find(|d| d.is_half())
}

/// [`low`] of the storages of some views.
pub(super) fn low_of<'a>(views: impl IntoIterator<Item = &'a Storage>) -> Option<DType> {
    low(views.into_iter().map(Storage::dtype))
}

/// An operand as the `f32` kernel reads it: a widened copy of a 16-bit view, or the view
/// itself.
pub(super) enum Operand<'a> {
    /// A contiguous `f32` copy, with its layout.
    Widened(Storage, Layout),
    /// An operand of another dtype, read as it is.
    Kept(View<'a>),
}

impl<'a> Operand<'a> {
    /// The operand for the `f32` kernel.
    pub(super) fn new((s, l): View<'a>) -> Result<Self> {
        if !s.dtype().is_half() {
            return Ok(Operand::Kept((s, l)));
        }
        let host = s.as_cpu().ok_or_else(|| Error::invalid("cpu", "expected a CPU storage"))?;
        let wide = binary::cast(host, l, DType::F32)?;
        Ok(Operand::Widened(Storage::Cpu(wide), Layout::contiguous(l.shape().clone())))
    }

    /// [`Operand::new`] of an optional operand.
    pub(super) fn optional(v: Option<View<'a>>) -> Result<Option<Self>> {
        v.map(Operand::new).transpose()
    }

    /// The view the `f32` kernel reads.
    pub(super) fn view(&self) -> View<'_> {
        match self {
            Operand::Widened(s, l) => (s, l),
            Operand::Kept(v) => *v,
        }
    }
}

/// The operands of an `f32` kernel for `views`, in order.
pub(super) fn operands<'a, const N: usize>(views: [View<'a>; N]) -> Result<[Operand<'a>; N]> {
    let mut out = Vec::with_capacity(N);
    for v in views {
        out.push(Operand::new(v)?);
    }
    out.try_into().map_err(|_| Error::invalid("cpu", "widened operand count"))
}

/// A storage a kernel writes in place, as the `f32` kernel updates it: a widened copy of a
/// 16-bit target, which [`InPlace::finish`] rounds back into the original, or the target
/// itself.
pub(super) struct InPlace<'t> {
    original: Target<'t>,
    wide: Option<(Storage, Layout)>,
}

impl<'t> InPlace<'t> {
    /// The target for the `f32` kernel.
    pub(super) fn new(original: Target<'t>) -> Result<Self> {
        let wide = match Operand::new((&*original.0, original.1))? {
            Operand::Widened(s, l) => Some((s, l)),
            Operand::Kept(_) => None,
        };
        Ok(InPlace { original, wide })
    }

    /// [`InPlace::new`] of an optional target.
    pub(super) fn optional(t: Option<Target<'t>>) -> Result<Option<Self>> {
        t.map(InPlace::new).transpose()
    }

    /// What the `f32` kernel updates.
    pub(super) fn target(&mut self) -> Target<'_> {
        match &mut self.wide {
            Some((s, l)) => (s, &*l),
            None => (&mut *self.original.0, self.original.1),
        }
    }

    /// Rounds the updated values back into the original target (nothing to do when it was
    /// updated directly).
    pub(super) fn finish(self) -> Result<()> {
        let Some((wide, wl)) = self.wide else { return Ok(()) };
        let wide = wide.as_cpu().ok_or_else(|| Error::invalid("cpu", "expected a CPU storage"))?;
        let (dst, layout) = self.original;
        let dst = dst.as_cpu_mut().ok_or_else(|| Error::invalid("cpu", "expected a CPU storage"))?;
        binary::copy_inplace(dst, layout, wide, &wl)
    }
}

/// A result of an `f32` kernel rounded to the operands' 16-bit dtype: every `f32` storage
/// in it is; storages of other dtypes (indices, masks) are kept.
pub(super) trait Narrow: Sized {
    /// The result with its `f32` storages rounded to `low`.
    fn narrow(self, low: DType) -> Result<Self>;
}

impl Narrow for Storage {
    fn narrow(self, low: DType) -> Result<Self> {
        match self {
            Storage::Cpu(CpuStorage::F32(b)) => {
                let n = b.len();
                let host = CpuStorage::F32(b);
                Ok(Storage::Cpu(binary::cast(&host, &Layout::contiguous([n].into()), low)?))
            }
            other => Ok(other),
        }
    }
}

impl<const N: usize> Narrow for [Storage; N] {
    fn narrow(self, low: DType) -> Result<Self> {
        let mut out = Vec::with_capacity(N);
        for s in self {
            out.push(s.narrow(low)?);
        }
        out.try_into().map_err(|_| Error::invalid("cpu", "narrowed result count"))
    }
}

impl Narrow for (Storage, Storage) {
    fn narrow(self, low: DType) -> Result<Self> {
        Ok((self.0.narrow(low)?, self.1.narrow(low)?))
    }
}

impl Narrow for f64 {
    fn narrow(self, _: DType) -> Result<Self> {
        Ok(self)
    }
}
