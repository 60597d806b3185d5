//! Joining and tiling: cat, stack, pad, repeat, and the triangles tril/triu.

use super::Tensor;
use crate::backend::View;
use crate::dtype::{DType, Scalar};
use crate::shape::{Dim, Shape, checked_numel};
use crate::storage::StorageCell;
use crate::{Error, Result};

/// `cat` of tensors that already have the output dtype, in one backend call that writes the
/// output once (`None` when some input needs converting first). Joining many small tensors
/// (a thousand scalars, say) then costs one lock and one copy each rather than a view and a
/// strided copy each, and strided inputs need no zero-filled output.
fn cat_same_dtype(tensors: &[&Tensor], d: usize, shape: &Shape, dtype: DType) -> Result<Option<Tensor>> {
    if !tensors.iter().all(|t| t.dtype() == dtype) {
        return Ok(None);
    }
    let cells: Vec<&StorageCell> = tensors.iter().map(|t| &**t.storage).collect();
    let (guards, slot) = super::locks::read_all(&cells);
    let views: Vec<View<'_>> = tensors.iter().zip(&slot).map(|(t, &i)| (&*guards[i], &t.layout)).collect();
    let s = tensors[0].backend().cat(&views, d)?;
    Ok(Some(Tensor::from_storage(s, shape.clone())))
}

impl Tensor {
    /// The tensors joined along `dim`; all other extents must agree. Dtypes promote.
    ///
    /// ```
    /// use ember_tensor::Tensor;
    /// let a = Tensor::arange(0, 4)?.reshape([2, 2])?;
    /// let b = Tensor::arange(4, 6)?.reshape([2, 1])?;
    /// assert_eq!(Tensor::cat(&[&a, &b], 1)?.to_vec::<i64>()?, vec![0, 1, 4, 2, 3, 5]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn cat(tensors: &[&Tensor], dim: impl Dim) -> Result<Tensor> {
        let first = *tensors.first().ok_or_else(|| Error::invalid("cat", "expected at least one tensor"))?;
        let rank = first.rank();
        if rank == 0 {
            return Err(Error::shape("cat", "zero-dimensional tensors cannot be concatenated; use stack"));
        }
        let d = dim.resolve(rank, "cat")?;
        let mut dtype = first.dtype();
        let mut total = 0usize;
        for t in tensors {
            first.same_device("cat", t)?;
            let compatible = t.rank() == rank && (0..rank).all(|i| i == d || t.shape()[i] == first.shape()[i]);
            if !compatible {
                return Err(Error::shape(
                    "cat",
                    format!("cannot join {:?} and {:?} along dimension {d}", first.shape(), t.shape()),
                ));
            }
            dtype = dtype.promote(t.dtype());
            total =
                total.checked_add(t.shape()[d]).ok_or_else(|| Error::shape("cat", "the joined extent overflows"))?;
        }
        let mut shape = first.shape().to_vec();
        shape[d] = total;
        let shape = Shape::from(shape);
        checked_numel("cat", &shape)?;
        if let Some(out) = cat_same_dtype(tensors, d, &shape, dtype)? {
            return Ok(out);
        }
        let out = Tensor::full_on(shape, 0, dtype, first.device())?;
        let mut at = 0;
        for t in tensors {
            let len = t.shape()[d];
            out.narrow(d, at, len)?.copy_(t)?;
            at += len;
        }
        // A fresh tensor starts at version 0 whatever it took to build it.
        Ok(out.copy_as_new())
    }

    /// The tensors (of one shape) stacked along a new dimension `dim`.
    pub fn stack(tensors: &[&Tensor], dim: impl Dim) -> Result<Tensor> {
        let first = *tensors.first().ok_or_else(|| Error::invalid("stack", "expected at least one tensor"))?;
        let d = dim.resolve_insert(first.rank(), "stack")?;
        for t in tensors {
            if t.shape() != first.shape() {
                return Err(Error::shape("stack", format!("cannot stack {:?} with {:?}", first.shape(), t.shape())));
            }
        }
        let expanded: Vec<Tensor> = tensors.iter().map(|t| t.unsqueeze(d)).collect::<Result<_>>()?;
        let refs: Vec<&Tensor> = expanded.iter().collect();
        Tensor::cat(&refs, d)
    }

    /// Constant padding, PyTorch's `F.pad(x, pad, value=...)`: `pad` holds `(before, after)`
    /// pairs starting from the **last** dimension. The result keeps `self`'s dtype (a float
    /// value is truncated into an integer tensor). As in PyTorch, the value is taken as an
    /// `f64`, integers included, and one the dtype cannot hold is an error (see
    /// [`Scalar::to_element_checked`]): `-1` into a `u8` tensor is an error, not 255.
    ///
    /// ```
    /// use ember_tensor::Tensor;
    /// let t = Tensor::ones([1, 2], ember_tensor::DType::F32)?;
    /// let p = t.pad(&[(1, 0), (0, 1)], 0.0)?; // last dim: 1 before; first dim: 1 after
    /// assert_eq!(p.shape(), &[2, 3]);
    /// assert_eq!(p.to_vec::<f32>()?, vec![0.0, 1.0, 1.0, 0.0, 0.0, 0.0]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn pad(&self, pad: &[(usize, usize)], value: impl Into<Scalar>) -> Result<Tensor> {
        let rank = self.rank();
        if pad.len() > rank {
            return Err(Error::shape("pad", format!("{} padded dimensions for a tensor of rank {rank}", pad.len())));
        }
        let value = value.into();
        let mut shape = self.shape().to_vec();
        for (i, &(b, a)) in pad.iter().enumerate() {
            let d = rank - 1 - i;
            shape[d] = shape[d]
                .checked_add(b)
                .and_then(|v| v.checked_add(a))
                .ok_or_else(|| Error::shape("pad", "padding overflows"))?;
        }
        let shape = Shape::from(shape);
        checked_numel("pad", &shape)?;
        // The result keeps the input's dtype, as PyTorch's does: a float value is truncated
        // into an integer tensor, and a value the dtype cannot hold is refused. PyTorch's
        // padding value is a double, so an integer passes through one first: -1 does not
        // wrap into `u8`, and 2^53 + 1 pads an `i64` tensor with 2^53.
        let value = match value {
            Scalar::Int(v) => Scalar::Float(v as f64),
            v => v,
        };
        value.check_fits(self.dtype(), "pad")?;
        let out = Tensor::full_on(shape, value, self.dtype(), self.device()).map_err(|e| e.alloc_in("pad"))?;
        let mut inner = out.clone();
        for (i, &(b, _)) in pad.iter().enumerate() {
            let d = rank - 1 - i;
            inner = inner.narrow(d, b, self.shape()[d])?;
        }
        inner.copy_(self)?;
        Ok(out.copy_as_new())
    }

    /// The tensor tiled `repeats[i]` times along dimension `i`, like `torch.Tensor.repeat`
    /// (extra leading repeats add dimensions).
    pub fn repeat(&self, repeats: &[usize]) -> Result<Tensor> {
        if repeats.len() < self.rank() {
            return Err(Error::shape(
                "repeat",
                format!("{} repeats for a tensor of rank {}", repeats.len(), self.rank()),
            ));
        }
        let extra = repeats.len() - self.rank();
        let mut base: Vec<usize> = vec![1; extra];
        base.extend_from_slice(self.shape());
        // View as [1, d0, 1, d1, ...], expand to [r0, d0, r1, d1, ...], then merge pairs.
        let mut inter = Vec::with_capacity(2 * base.len());
        let mut expanded = Vec::with_capacity(2 * base.len());
        let mut out = Vec::with_capacity(base.len());
        for (i, &d) in base.iter().enumerate() {
            inter.extend([1, d]);
            expanded.extend([repeats[i], d]);
            out.push(repeats[i].checked_mul(d).ok_or_else(|| Error::shape("repeat", "the repeated shape overflows"))?);
        }
        checked_numel("repeat", &Shape::from(&out))?;
        self.reshape(inter)?.expand(expanded)?.try_contiguous().map_err(|e| e.alloc_in("repeat"))?.reshape(out)
    }

    /// The lower triangle of the last two dimensions (entries with `col - row <= diagonal`);
    /// the rest zero.
    pub fn tril(&self, diagonal: i64) -> Result<Tensor> {
        self.triangle("tril", diagonal, false)
    }

    /// The upper triangle of the last two dimensions (entries with `col - row >= diagonal`).
    pub fn triu(&self, diagonal: i64) -> Result<Tensor> {
        self.triangle("triu", diagonal, true)
    }

    fn triangle(&self, op: &'static str, diagonal: i64, upper: bool) -> Result<Tensor> {
        if self.rank() < 2 {
            return Err(Error::shape(op, format!("expected at least 2 dimensions, got shape {:?}", self.shape())));
        }
        let s = self.read(|v| self.backend().triangle(v, diagonal, upper))?;
        Ok(Tensor::from_storage(s, self.shape().clone()))
    }

    /// The tensor with its version history started over. Constructors that fill their
    /// result in place (through views of it, which may still be alive) call it before handing
    /// the result out: a fresh tensor is at version 0 whatever it took to build it.
    fn copy_as_new(self) -> Tensor {
        self.storage.reset_version();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    #[test]
    fn join_ops() {
        let a = Tensor::arange(0, 6).unwrap().reshape([2, 3]).unwrap();
        let s = Tensor::stack(&[&a, &a], 1).unwrap();
        assert_eq!(s.shape(), &[2, 2, 3]);
        assert_eq!(s.version(), 0);
        assert_eq!(a.repeat(&[2, 1]).unwrap().shape(), &[4, 3]);
        assert_eq!(
            Tensor::arange(0, 2).unwrap().repeat(&[2, 2]).unwrap().to_vec::<i64>().unwrap(),
            vec![0, 1, 0, 1, 0, 1, 0, 1]
        );
        assert_eq!(a.tril(0).unwrap().to_vec::<i64>().unwrap(), vec![0, 0, 0, 3, 4, 0]);
        assert_eq!(a.triu(1).unwrap().to_vec::<i64>().unwrap(), vec![0, 1, 2, 0, 0, 5]);
        assert!(Tensor::cat(&[&a, &a.t().unwrap()], 0).is_err());
        let f = Tensor::cat(&[&a, &a.to_dtype(DType::F32)], 0).unwrap();
        assert_eq!(f.dtype(), DType::F32);
    }

    /// Every result built by writing into a fresh tensor starts at version 0: `pad` used to
    /// return version 1, because a view of the result was still alive when its history was
    /// to be reset.
    #[test]
    fn fresh_results_are_at_version_zero() {
        let a = Tensor::arange(0.0, 6.0).unwrap().reshape([2, 3]).unwrap();
        let t = a.t().unwrap(); // not contiguous: `cat` takes the general, in-place path
        let results = [
            ("pad", a.pad(&[(1, 2), (0, 1)], 0.5).unwrap()),
            ("pad of a view", t.pad(&[(1, 1)], 0).unwrap()),
            ("cat", Tensor::cat(&[&a, &a], 0).unwrap()),
            ("cat of views", Tensor::cat(&[&t, &t], 1).unwrap()),
            ("cat with promotion", Tensor::cat(&[&a, &a.to_dtype(DType::F64)], 1).unwrap()),
            ("stack", Tensor::stack(&[&t, &t], 0).unwrap()),
            ("repeat", t.repeat(&[2, 1]).unwrap()),
            ("tril", t.tril(0).unwrap()),
            ("masked_fill", a.masked_fill(&a.gt_scalar(2.0), 0.0).unwrap()),
        ];
        for (name, r) in results {
            assert_eq!(r.version(), 0, "{name}");
            // ...and its own history counts from there.
            r.add_scalar_(1).unwrap();
            assert_eq!(r.version(), 1, "{name}");
        }
        assert_eq!(a.version(), 0);
    }
}
