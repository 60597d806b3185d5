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

use super::{AdamState, Backend, RmsPropState, Target, View};
use crate::dtype::Element;
use crate::layout::Layout;
use crate::ops::optim::{AdamStep, RmsPropStep, SgdStep};
use crate::ops::{BinaryOp, ReduceOp, UnaryOp};
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

/// [`Backend::channel_norm`] of operands among which a 16-bit one (`low`) is, on `backend`'s
/// `f32` kernel. The statistics stay `f32`, as PyTorch keeps a 16-bit batch norm's: the
/// backward and the running statistics need more than 8 bits of them.
pub(crate) fn channel_norm<B: Backend + ?Sized>(
    backend: &B,
    low: DType,
    x: View<'_>,
    weight: Option<View<'_>>,
    bias: Option<View<'_>>,
    eps: f64,
) -> Result<[Storage; 3]> {
    let [a] = operands(backend, [x])?;
    let (w, b) = (Operand::optional(backend, weight)?, Operand::optional(backend, bias)?);
    let [out, mean, var] =
        backend.channel_norm(a.view(), w.as_ref().map(Operand::view), b.as_ref().map(Operand::view), eps)?;
    Ok([out.narrow(backend, low)?, mean, var])
}

/// [`Backend::channel_norm_backward`] of operands among which a 16-bit one (`low`) is, on
/// `backend`'s `f32` kernel.
pub(crate) fn channel_norm_backward<B: Backend + ?Sized>(
    backend: &B,
    low: DType,
    [x, grad, mean, var]: [View<'_>; 4],
    weight: Option<View<'_>>,
    eps: f64,
) -> Result<[Storage; 3]> {
    let [a, g, m, v] = operands(backend, [x, grad, mean, var])?;
    let w = Operand::optional(backend, weight)?;
    let w = w.as_ref().map(Operand::view);
    backend.channel_norm_backward(a.view(), g.view(), m.view(), v.view(), w, eps)?.narrow(backend, low)
}

/// The widened bytes one block of images may take when a kernel over a batch is widened a
/// block at a time ([`conv2d_weight_grad`]): a few hundred KiB keeps the kernel's blocks
/// large enough to share between threads while the `f32` copies stay small beside the
/// 16-bit activations a training step holds.
const BLOCK_BYTES: usize = 1 << 18;

/// [`Backend::conv2d_weight_grad`] of operands among which a 16-bit one (`low`) is, on
/// `backend`'s `f32` kernel, widened a block of images at a time: each block's weight
/// gradient is computed in `f32`, the blocks' sums are added in batch order, and the total
/// is rounded once. Widening whole operands would hold `f32` copies of the input and of the
/// output gradient at once, the largest transient of a convolution's backward under
/// autocast. Batches of one block, and views that are not `[N, C, H, W]`, are widened whole.
pub(crate) fn conv2d_weight_grad<B: Backend + ?Sized>(
    backend: &B,
    low: DType,
    x: View<'_>,
    y: View<'_>,
    geom: &crate::ops::conv::ConvGeometry,
) -> Result<Storage> {
    let n = x.1.shape().dims().first().copied().unwrap_or(0);
    let batched = x.1.rank() == 4 && y.1.rank() == 4 && y.1.shape()[0] == n && n > 0;
    let per_image = if batched { (x.1.numel() + y.1.numel()) / n * DType::F32.size_in_bytes() } else { 0 };
    let images = BLOCK_BYTES.checked_div(per_image).unwrap_or(usize::MAX).max(1);
    if !batched || images >= n {
        let [a, b] = operands(backend, [x, y])?;
        return backend.conv2d_weight_grad(a.view(), b.view(), geom)?.narrow(backend, low);
    }
    let mut total: Option<Storage> = None;
    for start in (0..n).step_by(images) {
        let len = images.min(n - start);
        let (lx, ly) = (x.1.sliced(0, start, len, 1), y.1.sliced(0, start, len, 1));
        let [a, b] = operands(backend, [(x.0, &lx), (y.0, &ly)])?;
        total = Some(add_into(backend, total, backend.conv2d_weight_grad(a.view(), b.view(), geom)?)?);
    }
    total.ok_or_else(|| Error::invalid("conv2d_weight_grad", "an empty batch"))?.narrow(backend, low)
}

/// [`Backend::reduce`] of a 16-bit view (`low`) on `backend`'s `f32` kernel. A sum over the
/// first dimension (and others), the gradient of a bias, is widened a block of that
/// dimension at a time, the blocks' `f32` sums added in order and the total rounded once;
/// other reductions, and views small enough for one block, are widened whole.
pub(crate) fn reduce<B: Backend + ?Sized>(
    backend: &B,
    low: DType,
    op: ReduceOp,
    (s, l): View<'_>,
    dims: &[usize],
) -> Result<Storage> {
    let n = l.shape().dims().first().copied().unwrap_or(0);
    let per_row = l.numel().checked_div(n).unwrap_or(0) * DType::F32.size_in_bytes();
    let rows = BLOCK_BYTES.checked_div(per_row).unwrap_or(usize::MAX).max(1);
    if !matches!(op, ReduceOp::Sum) || dims.first() != Some(&0) || rows >= n {
        let [a] = operands(backend, [(s, l)])?;
        return backend.reduce(op, a.view(), dims)?.narrow(backend, low);
    }
    let mut total: Option<Storage> = None;
    for start in (0..n).step_by(rows) {
        let block = l.sliced(0, start, rows.min(n - start), 1);
        let [a] = operands(backend, [(s, &block)])?;
        total = Some(add_into(backend, total, backend.reduce(op, a.view(), dims)?)?);
    }
    total.ok_or_else(|| Error::invalid(op.name(), "an empty dimension"))?.narrow(backend, low)
}

/// `sum + part` (the first part when there is no sum yet), in place, in `f32`.
fn add_into<B: Backend + ?Sized>(backend: &B, sum: Option<Storage>, part: Storage) -> Result<Storage> {
    let Some(mut sum) = sum else { return Ok(part) };
    let layout = Layout::contiguous([sum.len()].into());
    backend.binary_inplace(BinaryOp::Add, &mut sum, &layout, (&part, &layout))?;
    Ok(sum)
}

/// Whether an optimizer step on these storages has a 16-bit one, and so runs through this
/// module's `*_step` functions.
pub(crate) fn any_low<'a>(storages: impl IntoIterator<Item = &'a Storage>) -> bool {
    low_of(storages).is_some()
}

/// [`Backend::sgd_step`] on 16-bit storages: computed by `backend`'s `f32` step, the
/// parameter and its buffer rounded once.
pub(crate) fn sgd_step<B: Backend + ?Sized>(
    backend: &B,
    param: Target<'_>,
    grad: View<'_>,
    buffer: Option<Target<'_>>,
    hp: &SgdStep,
) -> Result<()> {
    let (mut p, g, mut b) =
        (InPlace::new(backend, param)?, Operand::new(backend, grad)?, InPlace::optional(backend, buffer)?);
    backend.sgd_step(p.target(), g.view(), b.as_mut().map(InPlace::target), hp)?;
    b.map(InPlace::finish).transpose().and(p.finish())
}

/// [`Backend::adam_step`] on 16-bit storages: computed by `backend`'s `f32` step, the
/// parameter and its state rounded once.
pub(crate) fn adam_step<B: Backend + ?Sized>(
    backend: &B,
    param: Target<'_>,
    grad: View<'_>,
    state: AdamState<'_>,
    hp: &AdamStep,
) -> Result<()> {
    let (mut p, g) = (InPlace::new(backend, param)?, Operand::new(backend, grad)?);
    let (mut m, mut v) = (InPlace::new(backend, state.exp_avg)?, InPlace::new(backend, state.exp_avg_sq)?);
    let mut vmax = InPlace::optional(backend, state.max_exp_avg_sq)?;
    let wide =
        AdamState { exp_avg: m.target(), exp_avg_sq: v.target(), max_exp_avg_sq: vmax.as_mut().map(InPlace::target) };
    backend.adam_step(p.target(), g.view(), wide, hp)?;
    vmax.map(InPlace::finish).transpose()?;
    m.finish().and(v.finish()).and(p.finish())
}

/// [`Backend::rmsprop_step`] on 16-bit storages: computed by `backend`'s `f32` step, the
/// parameter and its state rounded once.
pub(crate) fn rmsprop_step<B: Backend + ?Sized>(
    backend: &B,
    param: Target<'_>,
    grad: View<'_>,
    state: RmsPropState<'_>,
    hp: &RmsPropStep,
) -> Result<()> {
    let (mut p, g) = (InPlace::new(backend, param)?, Operand::new(backend, grad)?);
    let mut sq = InPlace::new(backend, state.square_avg)?;
    let mut avg = InPlace::optional(backend, state.grad_avg)?;
    let mut mom = InPlace::optional(backend, state.momentum_buffer)?;
    let wide = RmsPropState {
        square_avg: sq.target(),
        grad_avg: avg.as_mut().map(InPlace::target),
        momentum_buffer: mom.as_mut().map(InPlace::target),
    };
    backend.rmsprop_step(p.target(), g.view(), wide, hp)?;
    avg.map(InPlace::finish).transpose()?;
    mom.map(InPlace::finish).transpose()?;
    sq.finish().and(p.finish())
}
