//! Views: new layouts over the same storage, O(rank) and copy-free (`reshape` copies only
//! when the strides leave no other way, like PyTorch).

use super::Tensor;
use crate::layout::Layout;
use crate::shape::{Dim, Shape, checked_numel};
use crate::{Error, Result};
use smallvec::SmallVec;

/// A target shape for `reshape`/`view`: plain extents, or signed extents where one `-1`
/// stands for "whatever is left", like PyTorch's `x.reshape(-1, 784)`.
pub trait ShapeSpec {
    /// The concrete shape for a tensor of `numel` elements, or a shape error naming `op`.
    fn resolve_shape(&self, numel: usize, op: &'static str) -> Result<Shape>;
}

fn infer(dims: &[i64], numel: usize, op: &'static str) -> Result<Shape> {
    let mut known = 1usize;
    let mut hole = None;
    for (i, &d) in dims.iter().enumerate() {
        if d == -1 {
            if hole.replace(i).is_some() {
                return Err(Error::shape(op, format!("only one dimension can be -1, got {dims:?}")));
            }
        } else if d < 0 {
            return Err(Error::shape(op, format!("invalid extent {d} in {dims:?}")));
        } else {
            known = known
                .checked_mul(d as usize)
                .ok_or_else(|| Error::shape(op, format!("shape {dims:?} has too many elements")))?;
        }
    }
    let mut out: SmallVec<[usize; 4]> = dims.iter().map(|&d| d.max(0) as usize).collect();
    if let Some(i) = hole {
        if known == 0 || !numel.is_multiple_of(known) {
            return Err(Error::shape(op, format!("shape {dims:?} is invalid for a tensor of {numel} elements")));
        }
        out[i] = numel / known;
    }
    let shape = Shape(out);
    if shape.checked_numel() != Some(numel) {
        return Err(Error::shape(op, format!("shape {dims:?} is invalid for a tensor of {numel} elements")));
    }
    checked_numel(op, &shape)?;
    Ok(shape)
}

macro_rules! spec_unsigned {
    ($($t:ty),*) => {$(
        impl ShapeSpec for $t {
            fn resolve_shape(&self, numel: usize, op: &'static str) -> Result<Shape> {
                let s: Shape = self.clone().into();
                if s.checked_numel() != Some(numel) {
                    return Err(Error::shape(op, format!("shape {s} is invalid for a tensor of {numel} elements")));
                }
                checked_numel(op, &s)?;
                Ok(s)
            }
        }
    )*};
}
spec_unsigned!(Shape, Vec<usize>, usize, ());
impl<const N: usize> ShapeSpec for [usize; N] {
    fn resolve_shape(&self, numel: usize, op: &'static str) -> Result<Shape> {
        Shape::from(*self).resolve_shape(numel, op)
    }
}
impl ShapeSpec for &[usize] {
    fn resolve_shape(&self, numel: usize, op: &'static str) -> Result<Shape> {
        Shape::from(*self).resolve_shape(numel, op)
    }
}
impl ShapeSpec for &Shape {
    fn resolve_shape(&self, numel: usize, op: &'static str) -> Result<Shape> {
        (*self).clone().resolve_shape(numel, op)
    }
}
macro_rules! spec_signed {
    ($($t:ty),*) => {$(
        impl<const N: usize> ShapeSpec for [$t; N] {
            fn resolve_shape(&self, numel: usize, op: &'static str) -> Result<Shape> {
                let d: Vec<i64> = self.iter().map(|&v| v as i64).collect();
                infer(&d, numel, op)
            }
        }
        impl ShapeSpec for &[$t] {
            fn resolve_shape(&self, numel: usize, op: &'static str) -> Result<Shape> {
                let d: Vec<i64> = self.iter().map(|&v| v as i64).collect();
                infer(&d, numel, op)
            }
        }
        impl ShapeSpec for Vec<$t> {
            fn resolve_shape(&self, numel: usize, op: &'static str) -> Result<Shape> {
                let d: Vec<i64> = self.iter().map(|&v| v as i64).collect();
                infer(&d, numel, op)
            }
        }
    )*};
}
spec_signed!(i32, i64, isize);

impl Tensor {
    /// The same elements with another shape: a view when the strides allow it, otherwise a
    /// contiguous copy. One extent may be `-1`.
    ///
    /// ```
    /// use ember_tensor::Tensor;
    /// let t = Tensor::arange(0, 12)?;
    /// let r = t.reshape([3, -1])?;
    /// assert_eq!(r.shape(), &[3, 4]);
    /// assert!(r.shares_storage(&t));
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn reshape(&self, shape: impl ShapeSpec) -> Result<Tensor> {
        let shape = shape.resolve_shape(self.numel(), "reshape")?;
        match self.layout.reshaped(&shape) {
            Some(l) => Ok(self.with_layout(l)),
            None => {
                let c = self.try_copy()?;
                Ok(c.with_layout(Layout::contiguous(shape)))
            }
        }
    }

    /// Like [`Tensor::reshape`] but never copies: an error when the strides do not allow a
    /// view.
    pub fn view(&self, shape: impl ShapeSpec) -> Result<Tensor> {
        let shape = shape.resolve_shape(self.numel(), "view")?;
        match self.layout.reshaped(&shape) {
            Some(l) => Ok(self.with_layout(l)),
            None => Err(Error::shape(
                "view",
                format!(
                    "a tensor of shape {:?} and strides {:?} cannot be viewed as {shape} without a copy; use reshape",
                    self.shape(),
                    self.strides()
                ),
            )),
        }
    }

    /// Dimensions `a` and `b` swapped.
    pub fn transpose(&self, a: impl Dim, b: impl Dim) -> Result<Tensor> {
        let (a, b) = (a.resolve(self.rank(), "transpose")?, b.resolve(self.rank(), "transpose")?);
        Ok(self.with_layout(self.layout.transposed(a, b)))
    }

    /// The matrix transpose of a 2-d tensor (0-d and 1-d tensors are returned as they are,
    /// like PyTorch's `t()`).
    pub fn t(&self) -> Result<Tensor> {
        match self.rank() {
            0 | 1 => Ok(self.clone()),
            2 => self.transpose(0, 1),
            r => Err(Error::shape("t", format!("t() expects a tensor of rank <= 2, got rank {r}; use transpose"))),
        }
    }

    /// The dimensions reordered: new dimension `i` is old dimension `dims[i]`.
    pub fn permute<D: Dim>(&self, dims: &[D]) -> Result<Tensor> {
        let rank = self.rank();
        if dims.len() != rank {
            return Err(Error::shape("permute", format!("expected {rank} dimensions, got {}", dims.len())));
        }
        let mut perm: SmallVec<[usize; 4]> = SmallVec::with_capacity(rank);
        for &d in dims {
            let i = d.resolve(rank, "permute")?;
            if perm.contains(&i) {
                return Err(Error::invalid("permute", format!("dimension {i} appears more than once")));
            }
            perm.push(i);
        }
        Ok(self.with_layout(self.layout.permuted(&perm)))
    }

    /// `len` elements of dimension `dim` starting at `start`.
    pub fn narrow(&self, dim: impl Dim, start: usize, len: usize) -> Result<Tensor> {
        let d = dim.resolve(self.rank(), "narrow")?;
        let extent = self.shape()[d];
        if start.checked_add(len).is_none_or(|e| e > extent) {
            return Err(Error::index(
                "narrow",
                format!(
                    "range {start}..{} is out of bounds for dimension {d} of size {extent}",
                    start.saturating_add(len)
                ),
            ));
        }
        Ok(self.with_layout(self.layout.sliced(d, start, len, 1)))
    }

    /// Elements `start, start + step, ...` below `end` of dimension `dim` (`x[.., start:end:step]`).
    /// `end` is clamped to the extent, as Python slicing does.
    pub fn slice(&self, dim: impl Dim, start: usize, end: usize, step: usize) -> Result<Tensor> {
        let d = dim.resolve(self.rank(), "slice")?;
        if step == 0 {
            return Err(Error::invalid("slice", "step must be positive"));
        }
        let extent = self.shape()[d];
        let end = end.min(extent);
        let start = start.min(end);
        let len = (end - start).div_ceil(step);
        // A step that leaves at most one element never advances, and scaling the stride by a
        // step past the extent could overflow.
        let step = if len > 1 { step } else { 1 };
        Ok(self.with_layout(self.layout.sliced(d, start, len, step)))
    }

    /// Entry `index` of dimension `dim`; the result has one dimension less.
    pub fn select(&self, dim: impl Dim, index: usize) -> Result<Tensor> {
        let d = dim.resolve(self.rank(), "select")?;
        let extent = self.shape()[d];
        if index >= extent {
            return Err(Error::index(
                "select",
                format!("index {index} is out of bounds for dimension {d} of size {extent}"),
            ));
        }
        Ok(self.with_layout(self.layout.selected(d, index)))
    }

    /// The tensor broadcast to `shape` without copying (repeated dimensions get stride 0).
    ///
    /// ```
    /// use ember_tensor::Tensor;
    /// let t = Tensor::from_vec(vec![1.0f32, 2.0], [2, 1])?;
    /// let e = t.expand([2, 3])?;
    /// assert_eq!(e.to_vec::<f32>()?, vec![1.0, 1.0, 1.0, 2.0, 2.0, 2.0]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn expand(&self, shape: impl Into<Shape>) -> Result<Tensor> {
        let shape = shape.into();
        let layout = self.layout.broadcast_to("expand", &shape)?;
        checked_numel("expand", &shape)?;
        Ok(self.with_layout(layout))
    }

    /// Alias of [`Tensor::expand`].
    pub fn broadcast_to(&self, shape: impl Into<Shape>) -> Result<Tensor> {
        self.expand(shape)
    }

    /// Dimension `dim` removed if its extent is 1; otherwise the tensor unchanged (PyTorch).
    pub fn squeeze(&self, dim: impl Dim) -> Result<Tensor> {
        let d = dim.resolve(self.rank(), "squeeze")?;
        if self.shape()[d] != 1 {
            return Ok(self.clone());
        }
        Ok(self.with_layout(self.layout.squeezed(d)))
    }

    /// Every dimension of extent 1 removed.
    pub fn squeeze_all(&self) -> Tensor {
        let mut l = self.layout.clone();
        for d in (0..self.rank()).rev() {
            if self.shape()[d] == 1 {
                l = l.squeezed(d);
            }
        }
        self.with_layout(l)
    }

    /// A dimension of extent 1 inserted at `dim` (`-1` appends one).
    pub fn unsqueeze(&self, dim: impl Dim) -> Result<Tensor> {
        let d = dim.resolve_insert(self.rank(), "unsqueeze")?;
        Ok(self.with_layout(self.layout.unsqueezed(d)))
    }

    /// Dimensions `start..=end` merged into one.
    pub fn flatten(&self, start: impl Dim, end: impl Dim) -> Result<Tensor> {
        if self.rank() == 0 {
            // A 0-d tensor flattens like a one-element vector, so only 0 and -1 are valid.
            start.resolve(1, "flatten")?;
            end.resolve(1, "flatten")?;
            return self.reshape([1usize]);
        }
        let (s, e) = (start.resolve(self.rank(), "flatten")?, end.resolve(self.rank(), "flatten")?);
        if s > e {
            return Err(Error::invalid("flatten", format!("start dimension {s} is after end dimension {e}")));
        }
        let mut dims: Vec<usize> = self.shape()[..s].to_vec();
        dims.push(self.shape()[s..=e].iter().product());
        dims.extend_from_slice(&self.shape()[e + 1..]);
        self.reshape(dims)
    }

    /// All dimensions merged into one.
    pub fn flatten_all(&self) -> Tensor {
        let n = self.numel();
        match self.layout.reshaped(&Shape::from([n])) {
            Some(l) => self.with_layout(l),
            None => self.copy().with_layout(Layout::contiguous(Shape::from([n]))),
        }
    }

    /// Views of consecutive pieces of `size` along `dim` (the last may be shorter).
    pub fn split(&self, size: usize, dim: impl Dim) -> Result<Vec<Tensor>> {
        let d = dim.resolve(self.rank(), "split")?;
        if size == 0 {
            return Err(Error::invalid("split", "split size must be positive"));
        }
        let extent = self.shape()[d];
        // A broadcast view can have more pieces than fit in memory.
        let mut out = crate::host::read::vec_with_capacity("split", extent.div_ceil(size).max(1), "tensors")?;
        let mut s = 0;
        while s < extent {
            let len = size.min(extent - s);
            out.push(self.with_layout(self.layout.sliced(d, s, len, 1)));
            s += len;
        }
        if out.is_empty() {
            out.push(self.clone());
        }
        Ok(out)
    }

    /// Views of the pieces of consecutive `sizes` along `dim`; the sizes must add up to the
    /// extent.
    pub fn split_sizes(&self, sizes: &[usize], dim: impl Dim) -> Result<Vec<Tensor>> {
        let d = dim.resolve(self.rank(), "split_sizes")?;
        let extent = self.shape()[d];
        if sizes.iter().try_fold(0usize, |a, &s| a.checked_add(s)) != Some(extent) {
            return Err(Error::shape(
                "split_sizes",
                format!("sizes {sizes:?} do not add up to the extent {extent} of dimension {d}"),
            ));
        }
        let mut s = 0;
        Ok(sizes
            .iter()
            .map(|&len| {
                let t = self.with_layout(self.layout.sliced(d, s, len, 1));
                s += len;
                t
            })
            .collect())
    }

    /// `chunks` views of (nearly) equal size along `dim`, like `torch.chunk`.
    pub fn chunk(&self, chunks: usize, dim: impl Dim) -> Result<Vec<Tensor>> {
        let d = dim.resolve(self.rank(), "chunk")?;
        if chunks == 0 {
            return Err(Error::invalid("chunk", "the number of chunks must be positive"));
        }
        let size = self.shape()[d].div_ceil(chunks).max(1);
        self.split(size, d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    #[test]
    fn reshape_infers_and_validates() {
        let t = Tensor::zeros([2, 3, 4], DType::F32).unwrap();
        assert_eq!(t.reshape([-1, 4]).unwrap().shape(), &[6, 4]);
        assert_eq!(t.reshape([24usize]).unwrap().shape(), &[24]);
        assert!(t.reshape([-1, -1]).is_err());
        assert!(t.reshape([5, -1]).is_err());
        assert!(t.reshape([7usize]).is_err());
        assert!(t.transpose(0, 2).unwrap().view([24usize]).is_err());
        let r = t.transpose(0, 2).unwrap().reshape([24usize]).unwrap();
        assert!(!r.shares_storage(&t));
    }

    #[test]
    fn slicing_and_selecting() {
        let t = Tensor::arange(0, 10).unwrap();
        assert_eq!(t.slice(0, 1, 8, 3).unwrap().to_vec::<i64>().unwrap(), vec![1, 4, 7]);
        assert_eq!(t.slice(0, 8, 100, 1).unwrap().to_vec::<i64>().unwrap(), vec![8, 9]);
        assert!(t.narrow(0, 8, 3).is_err());
        let m = t.reshape([2, 5]).unwrap();
        assert_eq!(m.select(1, 2).unwrap().to_vec::<i64>().unwrap(), vec![2, 7]);
        assert_eq!(m.chunk(3, 1).unwrap().len(), 3);
        assert_eq!(m.split(2, -1).unwrap()[2].shape(), &[2, 1]);
    }
}
