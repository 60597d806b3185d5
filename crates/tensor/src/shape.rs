//! Shapes, dimension arguments and broadcasting.

use crate::{Error, Result};
use smallvec::SmallVec;
use std::fmt;

/// The extents of a tensor, outermost first. Up to four dimensions are stored inline.
#[derive(PartialEq, Eq, Hash, Default)]
pub struct Shape(pub(crate) SmallVec<[usize; 4]>);

impl Clone for Shape {
    /// A plain copy of the extents (`SmallVec::clone` goes element by element).
    #[inline]
    fn clone(&self) -> Self {
        Shape(SmallVec::from_slice(&self.0))
    }
}

impl Shape {
    /// The shape of a 0-d (scalar) tensor.
    pub fn scalar() -> Self {
        Shape(SmallVec::new())
    }

    /// The extents as a slice.
    #[inline]
    pub fn dims(&self) -> &[usize] {
        &self.0
    }

    /// Number of dimensions.
    #[inline]
    pub fn rank(&self) -> usize {
        self.0.len()
    }

    /// Number of elements (1 for a 0-d tensor). Saturates instead of overflowing; use
    /// [`Shape::checked_numel`] where an overflow must be reported.
    #[inline]
    pub fn numel(&self) -> usize {
        self.0.iter().fold(1usize, |a, &d| a.saturating_mul(d))
    }

    /// Number of elements, or `None` when it does not fit in `usize`.
    pub fn checked_numel(&self) -> Option<usize> {
        self.0.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
    }

    /// Row-major (C-contiguous) strides for this shape, in elements.
    #[inline]
    pub fn contiguous_strides(&self) -> SmallVec<[usize; 4]> {
        let rank = self.rank();
        if rank <= 4 {
            let mut s = [0usize; 4];
            let mut acc = 1usize;
            for i in (0..rank).rev() {
                s[i] = acc;
                acc = acc.saturating_mul(self.0[i]);
            }
            return SmallVec::from_buf_and_len(s, rank);
        }
        let mut strides: SmallVec<[usize; 4]> = SmallVec::from_elem(0, rank);
        let mut acc = 1usize;
        for i in (0..rank).rev() {
            strides[i] = acc;
            acc = acc.saturating_mul(self.0[i]);
        }
        strides
    }
}

impl std::ops::Deref for Shape {
    type Target = [usize];
    fn deref(&self) -> &[usize] {
        &self.0
    }
}

impl AsRef<[usize]> for Shape {
    fn as_ref(&self) -> &[usize] {
        &self.0
    }
}

impl<'a> IntoIterator for &'a Shape {
    type Item = &'a usize;
    type IntoIter = std::slice::Iter<'a, usize>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

// A shape compares with the other ways of writing extents, on either side, so that
// `t.shape() == [2, 3]`, `t.shape() == &[2, 3]` and `v.shape() == t.shape()` all read naturally.
impl PartialEq<[usize]> for Shape {
    fn eq(&self, other: &[usize]) -> bool {
        self.0[..] == *other
    }
}
impl<const N: usize> PartialEq<[usize; N]> for Shape {
    fn eq(&self, other: &[usize; N]) -> bool {
        self.0[..] == other[..]
    }
}
impl PartialEq<Vec<usize>> for Shape {
    fn eq(&self, other: &Vec<usize>) -> bool {
        self.0[..] == other[..]
    }
}
impl PartialEq<&[usize]> for Shape {
    fn eq(&self, other: &&[usize]) -> bool {
        self.0[..] == **other
    }
}
impl<const N: usize> PartialEq<[usize; N]> for &Shape {
    fn eq(&self, other: &[usize; N]) -> bool {
        self.0[..] == other[..]
    }
}
impl PartialEq<Vec<usize>> for &Shape {
    fn eq(&self, other: &Vec<usize>) -> bool {
        self.0[..] == other[..]
    }
}
impl PartialEq<Shape> for &Shape {
    fn eq(&self, other: &Shape) -> bool {
        self.0 == other.0
    }
}
impl PartialEq<&Shape> for Shape {
    fn eq(&self, other: &&Shape) -> bool {
        self.0 == other.0
    }
}
impl PartialEq<Shape> for [usize] {
    fn eq(&self, other: &Shape) -> bool {
        *self == other.0[..]
    }
}
impl<const N: usize> PartialEq<Shape> for [usize; N] {
    fn eq(&self, other: &Shape) -> bool {
        self[..] == other.0[..]
    }
}
impl PartialEq<Shape> for Vec<usize> {
    fn eq(&self, other: &Shape) -> bool {
        self[..] == other.0[..]
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &self.0[..])
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &self.0[..])
    }
}

impl From<&[usize]> for Shape {
    fn from(d: &[usize]) -> Self {
        Shape(SmallVec::from_slice(d))
    }
}
impl From<&Vec<usize>> for Shape {
    fn from(d: &Vec<usize>) -> Self {
        Shape(SmallVec::from_slice(d))
    }
}
impl From<Vec<usize>> for Shape {
    fn from(d: Vec<usize>) -> Self {
        Shape(SmallVec::from_vec(d))
    }
}
impl<const N: usize> From<[usize; N]> for Shape {
    fn from(d: [usize; N]) -> Self {
        Shape(SmallVec::from_slice(&d))
    }
}
impl<const N: usize> From<&[usize; N]> for Shape {
    fn from(d: &[usize; N]) -> Self {
        Shape(SmallVec::from_slice(d))
    }
}
impl From<&Shape> for Shape {
    fn from(s: &Shape) -> Self {
        s.clone()
    }
}
impl From<()> for Shape {
    fn from(_: ()) -> Self {
        Shape::scalar()
    }
}
impl From<usize> for Shape {
    fn from(d: usize) -> Self {
        Shape(SmallVec::from_slice(&[d]))
    }
}

/// The broadcast shape of `a` and `b` under NumPy rules, or a shape error naming `op`.
///
/// ```
/// use ember_tensor::shape::broadcast_shapes;
/// let s = broadcast_shapes("add", &[4, 1, 3], &[2, 1]).unwrap();
/// assert_eq!(&s[..], &[4, 2, 3]);
/// assert!(broadcast_shapes("add", &[2, 3], &[4]).is_err());
/// ```
pub fn broadcast_shapes(op: &'static str, a: &[usize], b: &[usize]) -> Result<Shape> {
    let rank = a.len().max(b.len());
    let mut out: SmallVec<[usize; 4]> = SmallVec::from_elem(0, rank);
    for i in 0..rank {
        let da = if i + a.len() >= rank { a[i + a.len() - rank] } else { 1 };
        let db = if i + b.len() >= rank { b[i + b.len() - rank] } else { 1 };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(Error::shape(
                op,
                format!("shapes {a:?} and {b:?} cannot be broadcast together (dimension {i}: {da} vs {db})"),
            ));
        };
    }
    let out = Shape(out);
    checked_numel(op, &out).map_err(|_| {
        Error::shape(op, format!("shapes {a:?} and {b:?} broadcast to {out}, which has too many elements"))
    })?;
    Ok(out)
}

/// A dimension argument: a `usize` counts from the front, a negative `i32`/`i64`/`isize`
/// counts from the back like PyTorch (`-1` is the last dimension).
pub trait Dim: Copy {
    /// The dimension as an index into a shape of rank `rank`, or a dimension error.
    fn resolve(self, rank: usize, op: &'static str) -> Result<usize>;
    /// Like [`Dim::resolve`] but for inserting a dimension, where `rank` itself is valid.
    fn resolve_insert(self, rank: usize, op: &'static str) -> Result<usize> {
        self.resolve(rank + 1, op)
    }
}

fn resolve_signed(d: i64, rank: usize, op: &'static str) -> Result<usize> {
    let r = rank as i64;
    let idx = if d < 0 { d + r } else { d };
    if idx < 0 || idx >= r {
        return Err(Error::Dim { op, dim: d, rank });
    }
    Ok(idx as usize)
}

impl Dim for usize {
    fn resolve(self, rank: usize, op: &'static str) -> Result<usize> {
        if self >= rank {
            return Err(Error::Dim { op, dim: self as i64, rank });
        }
        Ok(self)
    }
}
impl Dim for i32 {
    fn resolve(self, rank: usize, op: &'static str) -> Result<usize> {
        resolve_signed(self as i64, rank, op)
    }
}
impl Dim for i64 {
    fn resolve(self, rank: usize, op: &'static str) -> Result<usize> {
        resolve_signed(self, rank, op)
    }
}
impl Dim for isize {
    fn resolve(self, rank: usize, op: &'static str) -> Result<usize> {
        resolve_signed(self as i64, rank, op)
    }
}

/// A set of dimensions for reductions: one [`Dim`], an array, a slice or a `Vec` of them.
/// Duplicates are an error, like in PyTorch.
pub trait Dims {
    /// The dimensions as sorted, deduplicated indices, or a dimension error.
    fn resolve_all(&self, rank: usize, op: &'static str) -> Result<SmallVec<[usize; 4]>>;

    /// The dimensions a reduction (`sum`, `mean`, `max`, ...) covers, by PyTorch's rules:
    /// an empty set means every dimension (`x.sum(dim=[])` is the full sum in PyTorch 2),
    /// and a 0-d tensor accepts `0` and `-1` (there is nothing to reduce; the result is the
    /// value itself).
    ///
    /// ```
    /// use ember_tensor::Dims;
    /// assert_eq!(&Vec::<i64>::new().resolve_reduction(3, "sum").unwrap()[..], &[0, 1, 2]);
    /// assert_eq!(&[-1i64].resolve_reduction(3, "sum").unwrap()[..], &[2]);
    /// assert!((-1i64).resolve_reduction(0, "sum").unwrap().is_empty());
    /// assert!(1usize.resolve_reduction(0, "sum").is_err());
    /// ```
    fn resolve_reduction(&self, rank: usize, op: &'static str) -> Result<SmallVec<[usize; 4]>> {
        if rank == 0 {
            self.resolve_all(1, op).map_err(|e| match e {
                Error::Dim { op, dim, .. } => Error::Dim { op, dim, rank: 0 },
                e => e,
            })?;
            return Ok(SmallVec::new());
        }
        let dims = self.resolve_all(rank, op)?;
        Ok(if dims.is_empty() { (0..rank).collect() } else { dims })
    }
}

fn collect_dims<D: Dim>(ds: &[D], rank: usize, op: &'static str) -> Result<SmallVec<[usize; 4]>> {
    let mut out: SmallVec<[usize; 4]> = SmallVec::with_capacity(ds.len());
    for &d in ds {
        let i = d.resolve(rank, op)?;
        if out.contains(&i) {
            return Err(Error::invalid(op, format!("dimension {i} appears more than once")));
        }
        out.push(i);
    }
    out.sort_unstable();
    Ok(out)
}

macro_rules! dims_for {
    ($($t:ty),*) => {$(
        impl Dims for $t {
            fn resolve_all(&self, rank: usize, op: &'static str) -> Result<SmallVec<[usize; 4]>> {
                collect_dims(&[*self], rank, op)
            }
        }
        impl<const N: usize> Dims for [$t; N] {
            fn resolve_all(&self, rank: usize, op: &'static str) -> Result<SmallVec<[usize; 4]>> {
                collect_dims(&self[..], rank, op)
            }
        }
        impl Dims for &[$t] {
            fn resolve_all(&self, rank: usize, op: &'static str) -> Result<SmallVec<[usize; 4]>> {
                collect_dims(self, rank, op)
            }
        }
        impl Dims for Vec<$t> {
            fn resolve_all(&self, rank: usize, op: &'static str) -> Result<SmallVec<[usize; 4]>> {
                collect_dims(self, rank, op)
            }
        }
        impl Dims for &Vec<$t> {
            fn resolve_all(&self, rank: usize, op: &'static str) -> Result<SmallVec<[usize; 4]>> {
                collect_dims(self, rank, op)
            }
        }
    )*};
}
dims_for!(usize, i32, i64, isize);

/// The most elements a tensor may have: as many 8-byte values as `isize` can count bytes.
pub(crate) const MAX_NUMEL: usize = isize::MAX as usize / 8;

/// Validates a user shape for a new tensor or view and returns its element count, failing
/// on overflow instead of panicking later. A zero extent does not excuse the others: strides
/// and index arithmetic multiply the non-zero extents, so their product must fit as well.
pub(crate) fn checked_numel(op: &'static str, shape: &Shape) -> Result<usize> {
    shape
        .iter()
        .filter(|&&d| d != 0)
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= MAX_NUMEL)
        .map(|n| if shape.contains(&0) { 0 } else { n })
        .ok_or_else(|| Error::shape(op, format!("shape {shape} has too many elements")))
}

/// The output shape of a reduction over `dims`: those dimensions set to 1 with `keepdim`,
/// removed without.
pub(crate) fn reduced_shape(shape: &Shape, dims: &[usize], keepdim: bool) -> Shape {
    if keepdim {
        Shape(shape.iter().enumerate().map(|(i, &d)| if dims.contains(&i) { 1 } else { d }).collect())
    } else {
        Shape(shape.iter().enumerate().filter(|(i, _)| !dims.contains(i)).map(|(_, &d)| d).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negative_dims_count_from_the_back() {
        assert_eq!((-1i32).resolve(3, "t").unwrap(), 2);
        assert_eq!((-3i32).resolve(3, "t").unwrap(), 0);
        assert!((-4i32).resolve(3, "t").is_err());
        assert!(3usize.resolve(3, "t").is_err());
        assert_eq!((-1i32).resolve_insert(2, "t").unwrap(), 2);
    }

    #[test]
    fn dims_are_sorted_and_unique() {
        assert_eq!(&[-1i32, 0].resolve_all(3, "t").unwrap()[..], &[0, 2]);
        assert!([1i32, -2].resolve_all(3, "t").is_err());
    }

    #[test]
    fn broadcasting_rules() {
        assert_eq!(&broadcast_shapes("t", &[], &[3]).unwrap()[..], &[3]);
        assert_eq!(&broadcast_shapes("t", &[5, 1], &[1, 4]).unwrap()[..], &[5, 4]);
        assert_eq!(&broadcast_shapes("t", &[0, 1], &[1, 4]).unwrap()[..], &[0, 4]);
        let e = broadcast_shapes("add", &[2, 3], &[4]).unwrap_err().to_string();
        assert!(e.contains("add") && e.contains("[2, 3]") && e.contains("[4]"), "{e}");
    }

    #[test]
    fn strides_and_numel() {
        let s = Shape::from([2, 3, 4]);
        assert_eq!(&s.contiguous_strides()[..], &[12, 4, 1]);
        assert_eq!(s.numel(), 24);
        assert_eq!(Shape::scalar().numel(), 1);
        assert!(Shape::from([usize::MAX, 2]).checked_numel().is_none());
    }
}
