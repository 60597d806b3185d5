//! How a tensor's logical elements map onto its storage: shape, strides and offset.
//!
//! Every view (transpose, narrow, expand, ...) is a new `Layout` over the same storage, so
//! views cost O(rank) and never copy.

use crate::shape::Shape;
use crate::{Error, Result};
use smallvec::SmallVec;

/// Strides in elements, one per dimension. A stride of 0 repeats an element (broadcast).
pub type Strides = SmallVec<[usize; 4]>;

/// Shape, strides and storage offset of a tensor.
#[derive(Debug, PartialEq, Eq)]
pub struct Layout {
    pub(crate) shape: Shape,
    pub(crate) strides: Strides,
    pub(crate) offset: usize,
}

impl Clone for Layout {
    #[inline]
    fn clone(&self) -> Self {
        Layout { shape: self.shape.clone(), strides: SmallVec::from_slice(&self.strides), offset: self.offset }
    }
}

impl Layout {
    /// A row-major layout starting at offset 0.
    #[inline(always)]
    pub fn contiguous(shape: Shape) -> Self {
        let strides = match shape.rank() {
            // The common ranks without the general loop.
            0 => SmallVec::new(),
            1 => SmallVec::from_buf_and_len([1, 0, 0, 0], 1),
            2 => SmallVec::from_buf_and_len([shape[1], 1, 0, 0], 2),
            _ => shape.contiguous_strides(),
        };
        Layout { shape, strides, offset: 0 }
    }

    /// A layout from explicit parts; an error when there is not one stride per dimension.
    ///
    /// Nothing ties a layout to a storage: the backend checks that every index a layout
    /// maps lies inside the storage it is applied to before reading (see
    /// [`crate::backend::Backend`]).
    pub fn new(shape: Shape, strides: Strides, offset: usize) -> Result<Self> {
        if strides.len() != shape.rank() {
            return Err(Error::shape(
                "Layout::new",
                format!("{} strides for shape {shape} of rank {}", strides.len(), shape.rank()),
            ));
        }
        Ok(Layout { shape, strides, offset })
    }

    /// The shape.
    #[inline]
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// The strides, in elements.
    #[inline]
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }

    /// The offset of element `[0, 0, ...]` in the storage.
    #[inline]
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Number of dimensions.
    #[inline]
    pub fn rank(&self) -> usize {
        self.shape.rank()
    }

    /// Number of elements.
    #[inline]
    pub fn numel(&self) -> usize {
        self.shape.numel()
    }

    /// Whether the elements are laid out row-major without gaps (dimensions of extent 1
    /// may have any stride).
    #[inline]
    pub fn is_contiguous(&self) -> bool {
        let mut expected = 1usize;
        for i in (0..self.rank()).rev() {
            let d = self.shape[i];
            if d != 1 {
                if self.strides[i] != expected {
                    return false;
                }
                expected *= d;
            }
        }
        true
    }

    /// The storage range `offset..offset + numel` when the layout is contiguous.
    #[inline]
    pub fn contiguous_range(&self) -> Option<std::ops::Range<usize>> {
        self.is_contiguous().then(|| self.offset..self.offset + self.numel())
    }

    /// One past the largest storage index this layout can touch (0 when empty), or `None`
    /// when that index overflows `usize`.
    pub fn storage_extent(&self) -> Option<usize> {
        if self.shape.contains(&0) {
            return Some(0);
        }
        self.shape
            .iter()
            .zip(&self.strides)
            .try_fold(self.offset, |acc, (&d, &s)| (d - 1).checked_mul(s).and_then(|span| acc.checked_add(span)))
            .and_then(|last| last.checked_add(1))
    }

    /// The storage index of the element at `index`, which must have one entry per dimension
    /// (checked in debug builds only). The index itself is not bounds-checked: this computes
    /// a number and reads nothing.
    pub fn storage_index(&self, index: &[usize]) -> usize {
        debug_assert_eq!(index.len(), self.rank());
        self.offset + index.iter().zip(&self.strides).map(|(i, s)| i * s).sum::<usize>()
    }

    /// The same storage viewed with another shape, when the strides allow it without a copy
    /// (PyTorch's `view` rule: each group of merged or split dimensions must be contiguous
    /// within itself). `None` when a copy is needed.
    pub fn reshaped(&self, shape: &Shape) -> Option<Layout> {
        if shape.numel() != self.numel() {
            return None;
        }
        if self.is_contiguous() {
            return Some(Layout::contiguous_at(shape.clone(), self.offset));
        }
        if self.numel() == 0 {
            return Some(Layout::contiguous_at(shape.clone(), self.offset));
        }
        let old_dims = &self.shape[..];
        let old_strides = &self.strides[..];
        let new_dims = &shape[..];
        let mut new_strides: Strides = SmallVec::from_elem(0, new_dims.len());
        let mut view_d = new_dims.len() as isize - 1;
        let mut chunk_base_stride = *old_strides.last().unwrap_or(&1);
        let mut tensor_numel = 1usize;
        let mut view_numel = 1usize;
        for tensor_d in (0..old_dims.len()).rev() {
            tensor_numel *= old_dims[tensor_d];
            let boundary = tensor_d == 0
                || (old_dims[tensor_d - 1] != 1 && old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride);
            if boundary {
                while view_d >= 0 && (view_numel < tensor_numel || new_dims[view_d as usize] == 1) {
                    new_strides[view_d as usize] = view_numel * chunk_base_stride;
                    view_numel *= new_dims[view_d as usize];
                    view_d -= 1;
                }
                if view_numel != tensor_numel {
                    return None;
                }
                if tensor_d > 0 {
                    chunk_base_stride = old_strides[tensor_d - 1];
                    tensor_numel = 1;
                    view_numel = 1;
                }
            }
        }
        if view_d != -1 {
            return None;
        }
        Some(Layout { shape: shape.clone(), strides: new_strides, offset: self.offset })
    }

    fn contiguous_at(shape: Shape, offset: usize) -> Layout {
        let strides = shape.contiguous_strides();
        Layout { shape, strides, offset }
    }

    // The transforms below take dimensions and ranges that the tensor layer has already
    // validated, and index with them directly; they are crate-private so that no caller
    // can reach them with unchecked arguments.

    /// Dimensions `a` and `b` swapped (already resolved indices).
    pub(crate) fn transposed(&self, a: usize, b: usize) -> Layout {
        let mut l = self.clone();
        l.shape.0.swap(a, b);
        l.strides.swap(a, b);
        l
    }

    /// Dimensions reordered so that new dimension `i` is old dimension `perm[i]`.
    pub(crate) fn permuted(&self, perm: &[usize]) -> Layout {
        Layout {
            shape: Shape(perm.iter().map(|&p| self.shape[p]).collect()),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
            offset: self.offset,
        }
    }

    /// Elements `start, start + step, ...` (`len` of them) along `dim`.
    pub(crate) fn sliced(&self, dim: usize, start: usize, len: usize, step: usize) -> Layout {
        let mut l = self.clone();
        if len > 0 {
            l.offset += start * self.strides[dim];
        }
        l.shape.0[dim] = len;
        l.strides[dim] *= step;
        l
    }

    /// The layout with dimension `dim` fixed at `index` (rank drops by one).
    pub(crate) fn selected(&self, dim: usize, index: usize) -> Layout {
        let mut l = self.clone();
        l.offset += index * self.strides[dim];
        l.shape.0.remove(dim);
        l.strides.remove(dim);
        l
    }

    /// A new dimension of extent 1 inserted at `dim`.
    pub(crate) fn unsqueezed(&self, dim: usize) -> Layout {
        let mut l = self.clone();
        let stride = if dim < self.rank() { self.strides[dim] * self.shape[dim] } else { 1 };
        l.shape.0.insert(dim, 1);
        l.strides.insert(dim, stride);
        l
    }

    /// Dimension `dim` (of extent 1) removed.
    pub(crate) fn squeezed(&self, dim: usize) -> Layout {
        let mut l = self.clone();
        l.shape.0.remove(dim);
        l.strides.remove(dim);
        l
    }

    /// The layout broadcast to `shape` (stride 0 on repeated dimensions), or a shape error
    /// naming `op`.
    pub fn broadcast_to(&self, op: &'static str, shape: &Shape) -> Result<Layout> {
        if shape.rank() < self.rank() {
            return Err(Error::shape(op, format!("cannot broadcast {} to the lower-rank shape {}", self.shape, shape)));
        }
        let extra = shape.rank() - self.rank();
        let mut strides: Strides = SmallVec::from_elem(0, shape.rank());
        for i in 0..shape.rank() {
            if i < extra {
                continue;
            }
            let d = self.shape[i - extra];
            if d == shape[i] {
                strides[i] = self.strides[i - extra];
            } else if d == 1 {
                strides[i] = 0;
            } else {
                return Err(Error::shape(
                    op,
                    format!("cannot broadcast {} to {} (dimension {i}: {d} vs {})", self.shape, shape, shape[i]),
                ));
            }
        }
        Ok(Layout { shape: shape.clone(), strides, offset: self.offset })
    }
}

/// Merges adjacent dimensions that every layout in `layouts` traverses as one run, and drops
/// dimensions of extent 1. Returns the merged shape and each layout's merged strides.
///
/// Kernels iterate the result with one inner loop over the last merged dimension, so a
/// contiguous or row-broadcast operation becomes one or two flat loops however many
/// dimensions it had.
pub(crate) fn coalesce<const N: usize>(shape: &[usize], strides: [&[usize]; N]) -> (Strides, [Strides; N]) {
    let mut out_shape: Strides = SmallVec::new();
    let mut out_strides: [Strides; N] = std::array::from_fn(|_| SmallVec::new());
    for d in 0..shape.len() {
        let extent = shape[d];
        if extent == 1 {
            continue;
        }
        if let Some(&last) = out_shape.last() {
            let mergeable = (0..N).all(|k| {
                let prev = *out_strides[k].last().unwrap_or(&0);
                prev == strides[k][d] * extent
            });
            if mergeable {
                let n = out_shape.len() - 1;
                out_shape[n] = last * extent;
                for k in 0..N {
                    out_strides[k][n] = strides[k][d];
                }
                continue;
            }
        }
        out_shape.push(extent);
        for k in 0..N {
            out_strides[k].push(strides[k][d]);
        }
    }
    (out_shape, out_strides)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transpose_is_not_contiguous() {
        let l = Layout::contiguous(Shape::from([2, 3]));
        assert!(l.is_contiguous());
        let t = l.transposed(0, 1);
        assert!(!t.is_contiguous());
        assert_eq!(t.strides(), &[1, 3]);
    }

    #[test]
    fn reshape_view_rules() {
        let l = Layout::contiguous(Shape::from([2, 3, 4]));
        assert!(l.reshaped(&Shape::from([6, 4])).is_some());
        // A transposed tensor cannot be flattened without a copy...
        let t = l.transposed(1, 2);
        assert!(t.reshaped(&Shape::from([24])).is_none());
        // ...but splitting or merging dimensions that stay contiguous among themselves can.
        assert_eq!(t.reshaped(&Shape::from([2, 4, 3, 1])).unwrap().strides(), &[12, 1, 4, 4]);
        let n = l.sliced(2, 1, 2, 1); // [2, 3, 2] with strides [12, 4, 1]
        assert_eq!(n.reshaped(&Shape::from([6, 2])).unwrap().strides(), &[4, 1]);
        assert!(n.reshaped(&Shape::from([12])).is_none());
    }

    #[test]
    fn coalesce_merges_contiguous_runs() {
        let (s, [a]) = coalesce(&[2, 3, 4], [&[12, 4, 1]]);
        assert_eq!((&s[..], &a[..]), (&[24][..], &[1][..]));
        // Row broadcast: [4, 5] + [5] keeps two dimensions.
        let (s, [a, b]) = coalesce(&[4, 5], [&[5, 1], &[0, 1]]);
        assert_eq!((&s[..], &a[..], &b[..]), (&[4, 5][..], &[5, 1][..], &[0, 1][..]));
    }

    #[test]
    fn broadcast_to_sets_zero_strides() {
        let l = Layout::contiguous(Shape::from([3, 1]));
        let b = l.broadcast_to("expand", &Shape::from([2, 3, 4])).unwrap();
        assert_eq!(b.strides(), &[0, 1, 0]);
        assert!(l.broadcast_to("expand", &Shape::from([2, 4])).is_err());
    }
}
