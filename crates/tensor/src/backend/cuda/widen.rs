//! The 16-bit floats in the kernels that have no 16-bit variant: their operands are
//! widened to `f32` on the device (the cast kernel), the `f32` kernel runs, and its `f32`
//! results are rounded once to the operands' dtype.
//!
//! These are the CPU backend's rules (`backend/cpu/widen.rs`), so both devices compute a
//! 16-bit op the same way: reductions, softmax, the class losses, normalisation,
//! attention, the LSTM kernels, pooling, resampling, `unfold` / `fold`, `scatter_add` and
//! the optimizer steps compute in `f32` and round once. The elementwise kernels, fills,
//! casts, copies, comparisons, `where`, `index_select` and `gather` have 16-bit variants
//! (kernels.cu), and matrix products multiply 16-bit operands in cuBLAS (`matmul`).

use super::elementwise::{cast, copy_inplace};
use super::{storage_of, storage_of_mut, stored};
use crate::backend::{Target, View, validate};
use crate::layout::Layout;
use crate::storage::Storage;
use crate::{DType, Result};

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
    /// A contiguous `f32` copy on the device, with its layout.
    Widened(Storage, Layout),
    /// An operand of another dtype, read as it is.
    Kept(View<'a>),
}

impl<'a> Operand<'a> {
    /// The operand of `op` for the `f32` kernel (the view is checked against its storage
    /// before the cast kernel reads it).
    pub(super) fn new(op: &'static str, (s, l): View<'a>) -> Result<Self> {
        if !s.dtype().is_half() {
            return Ok(Operand::Kept((s, l)));
        }
        let checked = validate::view(op, s, l)?;
        let wide = cast(op, storage_of(s)?, &checked, DType::F32)?;
        Ok(Operand::Widened(stored(wide), Layout::contiguous(l.shape().clone())))
    }

    /// [`Operand::new`] of an optional operand.
    pub(super) fn optional(op: &'static str, v: Option<View<'a>>) -> Result<Option<Self>> {
        v.map(|v| Operand::new(op, v)).transpose()
    }

    /// The view the `f32` kernel reads.
    pub(super) fn view(&self) -> View<'_> {
        match self {
            Operand::Widened(s, l) => (s, l),
            Operand::Kept(v) => *v,
        }
    }
}

/// The operands of `op`'s `f32` kernel for `views`, in order.
pub(super) fn operands<'a, const N: usize>(op: &'static str, views: [View<'a>; N]) -> Result<[Operand<'a>; N]> {
    let mut out = Vec::with_capacity(N);
    for v in views {
        out.push(Operand::new(op, v)?);
    }
    out.try_into().map_err(|_| crate::Error::invalid(op, "widened operand count"))
}

/// A storage a kernel writes in place, as the `f32` kernel updates it: a widened copy of a
/// 16-bit target, which [`InPlace::finish`] rounds back into the original, or the target
/// itself.
pub(super) struct InPlace<'t> {
    op: &'static str,
    original: Target<'t>,
    wide: Option<(Storage, Layout)>,
}

impl<'t> InPlace<'t> {
    /// The target of `op` for the `f32` kernel.
    pub(super) fn new(op: &'static str, original: Target<'t>) -> Result<Self> {
        let wide = match Operand::new(op, (&*original.0, original.1))? {
            Operand::Widened(s, l) => Some((s, l)),
            Operand::Kept(_) => None,
        };
        Ok(InPlace { op, original, wide })
    }

    /// [`InPlace::new`] of an optional target.
    pub(super) fn optional(op: &'static str, t: Option<Target<'t>>) -> Result<Option<Self>> {
        t.map(|t| InPlace::new(op, t)).transpose()
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
        let (dst, layout) = self.original;
        let layout = validate::view(self.op, dst, layout)?.into_owned();
        copy_inplace(storage_of_mut(dst)?, &layout, storage_of(&wide)?, &wl)
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
        if self.dtype() != DType::F32 {
            return Ok(self);
        }
        let wide = storage_of(&self)?;
        let n = wide.len();
        Ok(stored(cast("to_dtype", wide, &Layout::contiguous([n].into()), low)?))
    }
}

impl<const N: usize> Narrow for [Storage; N] {
    fn narrow(self, low: DType) -> Result<Self> {
        let mut out = Vec::with_capacity(N);
        for s in self {
            out.push(s.narrow(low)?);
        }
        out.try_into().map_err(|_| crate::Error::invalid("to_dtype", "narrowed result count"))
    }
}

impl Narrow for (Storage, Storage) {
    fn narrow(self, low: DType) -> Result<Self> {
        Ok((self.0.narrow(low)?, self.1.narrow(low)?))
    }
}
