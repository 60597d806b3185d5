//! Checks that a backend runs on every view it receives before any kernel reads memory.
//!
//! [`Layout`] values can be built freely in safe code and the backend is public, so a
//! backend cannot trust that a layout fits its storage or that two operands agree: a kernel
//! handed a `[1000, 1000]` layout over a four-element buffer must answer with an error,
//! never read past the buffer (the matrix product hands raw pointers to `gemm`). The checks
//! cost O(rank) per operand, nothing next to the kernels they guard. The checks of one
//! family of kernels are in a submodule of their own.

pub(crate) mod conv;
pub(crate) mod layer_norm;
pub(crate) mod norm;
pub(crate) mod optim;
pub(crate) mod pool;
pub(crate) mod unscale;

use crate::layout::Layout;
use crate::ops::loss::{ClassLoss, LossReduction};
use crate::shape::{MAX_NUMEL, Shape};
use crate::storage::Storage;
use crate::{DType, Error, Result};
use std::borrow::Cow;

/// An error unless a result of `shape` may exist (the checks of kernels whose result shape
/// the views do not give directly).
pub(crate) fn check_numel(op: &'static str, shape: &Shape) -> Result<()> {
    if shape.checked_numel().is_none_or(|n| n > MAX_NUMEL) {
        return Err(Error::shape(op, format!("the result of shape {shape} has too many elements")));
    }
    Ok(())
}

/// An error unless every storage index `layout` can produce lies inside a storage of `len`
/// elements and its element count is representable. An empty layout reads nothing, so any
/// offset passes.
///
/// Checked one question at a time, so that each failure is worded for the user; kernels
/// reach it only for the layouts [`fits_nonempty`] does not accept.
pub(crate) fn layout_fits(op: &'static str, layout: &Layout, len: usize) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::invalid(
            op,
            format!(
                "layout with shape {}, strides {:?} and offset {} {why} a storage of {len} elements",
                layout.shape(),
                layout.strides(),
                layout.offset()
            ),
        ))
    };
    if layout.strides().len() != layout.rank() {
        return bad("has a stride count that does not match its rank, over");
    }
    if layout.shape().checked_numel().is_none_or(|n| n > MAX_NUMEL) {
        return bad("has too many elements for");
    }
    match layout.storage_extent() {
        Some(end) if end <= len => Ok(()),
        _ => bad("reaches outside"),
    }
}

/// Whether a layout with no empty dimension passes every check of [`layout_fits`], in one
/// pass over the dimensions instead of three (element count, emptiness, extent): this runs
/// for every operand of every kernel. `false` sends the layout through the full checks,
/// which also handle empty layouts and word the errors.
#[inline]
fn fits_nonempty(layout: &Layout, len: usize) -> bool {
    let (shape, strides) = (layout.shape(), layout.strides());
    if strides.len() != shape.len() {
        return false;
    }
    let mut numel = 1usize;
    let mut last = layout.offset();
    for (&d, &s) in shape.iter().zip(strides) {
        if d == 0 {
            return false;
        }
        let (Some(n), Some(l)) = (numel.checked_mul(d), (d - 1).checked_mul(s).and_then(|span| last.checked_add(span)))
        else {
            return false;
        };
        numel = n;
        last = l;
    }
    numel <= MAX_NUMEL && last < len
}

/// The layout to run a kernel with, after checking that `l` fits `s` ([`fits_nonempty`],
/// else [`layout_fits`]).
///
/// Views of nothing are re-anchored at offset 0: the tensor layer produces empty views
/// whose offset lies past the end of their (possibly empty) storage, and a kernel that
/// slices `offset..offset` must not trip over them.
///
/// Inlined into every kernel's entry, with everything but the accepting check kept out of
/// line: called, the function's frame and the error paths it carries were most of what
/// checking a small tensor's layout cost.
#[inline]
pub(crate) fn view<'l>(op: &'static str, s: &Storage, l: &'l Layout) -> Result<Cow<'l, Layout>> {
    if fits_nonempty(l, s.len()) {
        // Not empty: nothing to re-anchor.
        return Ok(Cow::Borrowed(l));
    }
    view_checked(op, s.len(), l)
}

/// [`view`] of a layout [`fits_nonempty`] did not accept: the full checks, with their
/// errors, and the re-anchoring of empty views.
#[cold]
#[inline(never)]
fn view_checked<'l>(op: &'static str, len: usize, l: &'l Layout) -> Result<Cow<'l, Layout>> {
    layout_fits(op, l, len)?;
    if l.numel() == 0 && l.offset() != 0 {
        return Ok(Cow::Owned(Layout::contiguous(l.shape().clone())));
    }
    Ok(Cow::Borrowed(l))
}

/// Whether [`view`] would hand `l` back unchanged without an error (a layout with no
/// empty dimension that fits `s`), for a kernel that keeps the layout a plain reference in
/// that case.
#[inline]
pub(crate) fn fits(s: &Storage, l: &Layout) -> bool {
    fits_nonempty(l, s.len())
}

/// An error unless `a` and `b` have one shape (operands of elementwise kernels arrive
/// already broadcast).
pub(crate) fn same_shape(op: &'static str, a: &Layout, b: &Layout) -> Result<()> {
    if a.shape() != b.shape() {
        return Err(Error::shape(op, format!("expected operands of one shape, got {} and {}", a.shape(), b.shape())));
    }
    Ok(())
}

/// An error unless `dim` indexes a dimension of `l`.
pub(crate) fn dim(op: &'static str, l: &Layout, dim: usize) -> Result<()> {
    if dim >= l.rank() {
        return Err(Error::Dim { op, dim: dim as i64, rank: l.rank() });
    }
    Ok(())
}

/// An error unless `dims` are strictly increasing dimensions of `l`.
pub(crate) fn sorted_dims(op: &'static str, l: &Layout, dims: &[usize]) -> Result<()> {
    for (i, &d) in dims.iter().enumerate() {
        dim(op, l, d)?;
        if i > 0 && dims[i - 1] >= d {
            return Err(Error::invalid(op, format!("dimensions {dims:?} must be sorted and distinct")));
        }
    }
    Ok(())
}

/// An error unless `index` (for `gather`/`scatter_add` along `dim`) has the rank of `l` and
/// is no larger than it outside `dim`.
pub(crate) fn index_within(op: &'static str, index: &Layout, l: &Layout, dim: usize, what: &str) -> Result<()> {
    let fits = index.rank() == l.rank() && (0..l.rank()).all(|d| d == dim || index.shape()[d] <= l.shape()[d]);
    if !fits {
        return Err(Error::shape(
            op,
            format!("index of shape {} does not fit the {what} of shape {}", index.shape(), l.shape()),
        ));
    }
    Ok(())
}

/// An error unless the batched operands of a matrix product conform: the same rank of at
/// least 2, identical batch dimensions and matching inner extents.
pub(crate) fn matmul(la: &Layout, lb: &Layout) -> Result<()> {
    let r = la.rank();
    let conform = r >= 2
        && lb.rank() == r
        && la.shape()[..r - 2] == lb.shape()[..r - 2]
        && la.shape()[r - 1] == lb.shape()[r - 2];
    if !conform {
        return Err(Error::shape("matmul", format!("cannot multiply {} by {}", la.shape(), lb.shape())));
    }
    Ok(())
}

/// An error unless the operands of a [`ClassLoss`] agree: float scores of rank at least 1,
/// `i64` targets of the scores' shape without the class dimension, a smoothing in `[0, 1]`,
/// and (for a backward) an incoming gradient of the loss's shape and the scores' dtype.
pub(crate) fn class_loss(
    loss: &ClassLoss,
    scores: (DType, &Layout),
    target: (DType, &Layout),
    grad: Option<(DType, &Layout)>,
) -> Result<()> {
    let op = loss.name();
    let (dtype, l) = scores;
    if !dtype.is_float() {
        return Err(Error::dtype(op, format!("the input must be float, got {dtype}")));
    }
    if l.rank() == 0 {
        return Err(Error::shape(op, "the input must be [C], [N, C] or [N, C, d1, ..], got a 0-d value"));
    }
    let smoothing = loss.label_smoothing;
    if !(0.0..=1.0).contains(&smoothing) {
        return Err(Error::invalid(op, format!("label_smoothing must be in [0, 1], got {smoothing}")));
    }
    let (tdtype, lt) = target;
    if tdtype != DType::I64 {
        return Err(Error::dtype(
            op,
            format!(
                "class-index targets must be i64, got {tdtype} of shape {:?} (float targets are class probabilities, \
                 of the input's shape)",
                lt.shape()
            ),
        ));
    }
    let expected = class_loss_rows(l.shape());
    if *lt.shape() != expected {
        return Err(Error::shape(
            op,
            format!("an input of shape {:?} needs targets of shape {expected:?}, got {:?}", l.shape(), lt.shape()),
        ));
    }
    if let Some((gdtype, lg)) = grad {
        let out = match loss.reduction {
            LossReduction::None => expected,
            LossReduction::Sum | LossReduction::Mean => Shape::scalar(),
        };
        if *lg.shape() != out || gdtype != dtype {
            return Err(Error::shape(
                op,
                format!(
                    "the gradient of a loss of shape {out:?} and dtype {dtype} must match it, got {gdtype} of shape {:?}",
                    lg.shape()
                ),
            ));
        }
    }
    Ok(())
}

/// The shape of a [`ClassLoss`]'s rows (and of its targets) for scores of `shape`: the
/// shape without the class dimension.
pub(crate) fn class_loss_rows(shape: &Shape) -> Shape {
    let mut dims = shape.dims().to_vec();
    if !dims.is_empty() {
        dims.remove(ClassLoss::class_dim(dims.len()));
    }
    Shape::from(dims)
}

/// The number of rows that count (targets not ignored), or an error naming the first target
/// that is neither ignored nor a class in `0..classes`.
pub(crate) fn class_targets(loss: &ClassLoss, targets: &[i64], classes: usize) -> Result<usize> {
    let mut counted = 0;
    for (i, &t) in targets.iter().enumerate() {
        if loss.ignores(t) {
            continue;
        }
        if !(0..classes as i64).contains(&t) {
            // -100 is PyTorch's default ignore_index: a target of -100 with none set is
            // most likely a padding value the caller meant to ignore.
            let hint = if t == -100 && loss.ignore_index.is_none() {
                " (ignore_index is None; the default, Some(-100), ignores such targets)"
            } else {
                ""
            };
            return Err(Error::index(
                loss.name(),
                format!("target {t} (element {i}) is out of range for {classes} classes{hint}"),
            ));
        }
        counted += 1;
    }
    Ok(counted)
}

/// The checked views of a join along `dim` and the joined shape: at least one view, one
/// dtype, shapes that agree outside `dim`, and a result small enough to address.
pub(crate) fn cat<'l>(srcs: &[(&Storage, &'l Layout)], dim: usize) -> Result<(Vec<Cow<'l, Layout>>, Shape)> {
    let op = "cat";
    let Some(&(first, first_layout)) = srcs.first() else {
        return Err(Error::invalid(op, "expected at least one tensor"));
    };
    self::dim(op, first_layout, dim)?;
    let layouts = srcs.iter().map(|(s, l)| view(op, s, l)).collect::<Result<Vec<_>>>()?;
    let mut total = 0usize;
    for ((s, _), l) in srcs.iter().zip(&layouts) {
        if s.dtype() != first.dtype() {
            return Err(Error::dtype(
                op,
                format!("expected views of one dtype, got {} and {}", first.dtype(), s.dtype()),
            ));
        }
        let rank = first_layout.rank();
        let fits = l.rank() == rank && (0..rank).all(|i| i == dim || l.shape()[i] == first_layout.shape()[i]);
        if !fits {
            return Err(Error::shape(
                op,
                format!("cannot join {} and {} along dimension {dim}", first_layout.shape(), l.shape()),
            ));
        }
        total = total.checked_add(l.shape()[dim]).ok_or_else(|| Error::shape(op, "the joined extent overflows"))?;
    }
    let mut shape = first_layout.shape().to_vec();
    shape[dim] = total;
    let shape = Shape::from(shape);
    crate::shape::checked_numel(op, &shape)?;
    Ok((layouts, shape))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::CpuBackend;
    use crate::backend::{Backend, UnaryOp};
    use crate::layout::Strides;
    use crate::shape::Shape;
    use crate::{Scalar, Tensor};

    /// `fits` accepts exactly the layouts `view` hands back unchanged; a kernel that skips
    /// `view` for them (the CPU `unary`) still refuses one reaching outside its storage and
    /// re-anchors an empty one whose offset lies past the end.
    #[test]
    fn fits_is_views_unchanged_case() -> Result<()> {
        let t = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [4])?;
        let s = t.storage().read();
        let ok = Layout::new(Shape::from([2]), Strides::from_slice(&[2]), 1)?;
        let outside = Layout::new(Shape::from([2]), Strides::from_slice(&[2]), 2)?;
        let empty_past_end = Layout::new(Shape::from([0]), Strides::from_slice(&[1]), 9)?;
        assert!(fits(&s, &ok) && matches!(view("t", &s, &ok)?, Cow::Borrowed(l) if std::ptr::eq(l, &ok)));
        assert!(!fits(&s, &outside) && view("t", &s, &outside).is_err());
        assert!(!fits(&s, &empty_past_end) && matches!(view("t", &s, &empty_past_end)?, Cow::Owned(_)));
        let double = UnaryOp::MulScalar(Scalar::Float(2.0));
        let out = CpuBackend.unary(double, (&s, &ok))?;
        assert_eq!(out.as_cpu().and_then(|c| c.as_slice::<f32>()), Some(&[4.0f32, 8.0][..]));
        assert!(CpuBackend.unary(double, (&s, &outside)).is_err());
        assert_eq!(CpuBackend.unary(double, (&s, &empty_past_end))?.len(), 0);
        Ok(())
    }

    #[test]
    fn extents_are_checked_without_overflow() {
        let l = Layout::contiguous(Shape::from([2, 3]));
        assert!(layout_fits("t", &l, 6).is_ok());
        assert!(layout_fits("t", &l, 5).is_err());
        let huge = Layout::new(Shape::from([3, 2]), Strides::from_slice(&[usize::MAX / 2, 1]), 0).unwrap();
        assert!(layout_fits("t", &huge, 10).is_err());
        let empty = Layout::new(Shape::from([0, 4]), Strides::from_slice(&[4, 1]), 3).unwrap();
        assert!(layout_fits("t", &empty, 0).is_ok());
        // A stride count that does not match the rank can only come from inside the crate.
        let ragged = Layout { shape: Shape::from([2, 2]), strides: Strides::from_slice(&[1]), offset: 0 };
        assert!(layout_fits("t", &ragged, 100).is_err());
    }

    /// The one-pass check accepts exactly the non-empty layouts that the full checks accept.
    #[test]
    fn the_fast_check_agrees_with_the_full_checks() {
        let extents = [0, 1, 2, 3, 7];
        let strides = [0, 1, 2, 5, usize::MAX / 2, usize::MAX];
        let mut checked = 0;
        for &a in &extents {
            for &b in &extents {
                for &sa in &strides {
                    for &sb in &strides {
                        for offset in [0, 1, 4, usize::MAX - 1] {
                            for len in [0, 1, 6, 12, 40, usize::MAX] {
                                let l =
                                    Layout::new(Shape::from([a, b]), Strides::from_slice(&[sa, sb]), offset).unwrap();
                                let full = layout_fits("t", &l, len).is_ok();
                                let fast = fits_nonempty(&l, len);
                                assert!(!fast || full, "the fast check accepted {l:?} over {len}");
                                assert_eq!(fast, full && a * b != 0, "{l:?} over {len}");
                                checked += 1;
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(checked, 5 * 5 * 6 * 6 * 4 * 6);
        // More elements than a tensor may hold, with an extent that fits.
        let wide = Layout::new(Shape::from([MAX_NUMEL + 1]), Strides::from_slice(&[0]), 0).unwrap();
        assert!(!fits_nonempty(&wide, 1) && layout_fits("t", &wide, 1).is_err());
        let rank0 = Layout::contiguous(Shape::scalar());
        assert!(fits_nonempty(&rank0, 1) && !fits_nonempty(&rank0, 0));
    }
}
