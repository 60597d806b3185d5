//! Indexing: index_select, gather, scatter_add, masked_fill.

use super::Tensor;
use crate::dtype::{DType, Scalar};
use crate::shape::{Dim, broadcast_shapes, checked_numel};
use crate::{Error, Result};

fn check_index(op: &'static str, index: &Tensor) -> Result<()> {
    if index.dtype() != DType::I64 {
        return Err(Error::dtype(op, format!("indices must be i64, got {}", index.dtype())));
    }
    Ok(())
}

impl Tensor {
    /// The entries of dimension `dim` listed by the 1-d `i64` `index`, in that order.
    ///
    /// ```
    /// use ember_tensor::Tensor;
    /// let t = Tensor::arange(0, 6)?.reshape([3, 2])?;
    /// let rows = t.index_select(0, &Tensor::from_vec(vec![2i64, 0], [2])?)?;
    /// assert_eq!(rows.to_vec::<i64>()?, vec![4, 5, 0, 1]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn index_select(&self, dim: impl Dim, index: &Tensor) -> Result<Tensor> {
        let d = dim.resolve(self.rank(), "index_select")?;
        check_index("index_select", index)?;
        self.same_device("index_select", index)?;
        if index.rank() > 1 {
            return Err(Error::shape("index_select", format!("the index must be 1-d, got shape {:?}", index.shape())));
        }
        let mut shape = self.shape().to_vec();
        shape[d] = index.numel();
        let shape = crate::shape::Shape::from(shape);
        checked_numel("index_select", &shape)?;
        let s = self.read2(index, |v, i| self.backend().index_select(v, d, i))?;
        Ok(Tensor::from_storage(s, shape))
    }

    /// `out[i][j][k] = self[i][index[i][j][k]][k]` for `dim = 1` (and likewise for other
    /// dims). `index` has `self`'s rank and is no larger in any other dimension.
    pub fn gather(&self, dim: impl Dim, index: &Tensor) -> Result<Tensor> {
        let d = dim.resolve(self.rank(), "gather")?;
        check_index("gather", index)?;
        self.same_device("gather", index)?;
        self.check_scatter_shapes("gather", d, index, None)?;
        let s = self.read2(index, |v, i| self.backend().gather(v, d, i))?;
        Ok(Tensor::from_storage(s, index.shape().clone()))
    }

    /// A copy of `self` with `src[p]` added at position `p` with dimension `dim` replaced
    /// by `index[p]`, for every position `p` of `index` (duplicates accumulate).
    pub fn scatter_add(&self, dim: impl Dim, index: &Tensor, src: &Tensor) -> Result<Tensor> {
        let d = dim.resolve(self.rank(), "scatter_add")?;
        check_index("scatter_add", index)?;
        self.same_device("scatter_add", index)?;
        self.same_device("scatter_add", src)?;
        if src.dtype() != self.dtype() {
            return Err(Error::dtype(
                "scatter_add",
                format!("source and destination must share a dtype, got {} and {}", src.dtype(), self.dtype()),
            ));
        }
        self.check_scatter_shapes("scatter_add", d, index, Some(src))?;
        let s = self.read3(index, src, |vd, vi, vs| self.backend().scatter_add(vd, d, vi, vs))?;
        Ok(Tensor::from_storage(s, self.shape().clone()))
    }

    fn check_scatter_shapes(&self, op: &'static str, dim: usize, index: &Tensor, src: Option<&Tensor>) -> Result<()> {
        if index.rank() != self.rank() {
            return Err(Error::shape(
                op,
                format!("index of shape {:?} must have the rank of the input {:?}", index.shape(), self.shape()),
            ));
        }
        for d in 0..self.rank() {
            if d != dim && index.shape()[d] > self.shape()[d] {
                return Err(Error::shape(
                    op,
                    format!(
                        "index of shape {:?} is larger than the input {:?} in dimension {d}",
                        index.shape(),
                        self.shape()
                    ),
                ));
            }
            if let Some(s) = src
                && (s.rank() != self.rank() || index.shape()[d] > s.shape()[d])
            {
                return Err(Error::shape(
                    op,
                    format!("index of shape {:?} does not fit the source of shape {:?}", index.shape(), s.shape()),
                ));
            }
        }
        Ok(())
    }

    /// `value` where the `u8` `mask` is non-zero, `self` elsewhere; `mask` broadcasts to
    /// `self`'s shape. The result keeps `self`'s dtype, as in PyTorch: a float value
    /// converts into an integer tensor's dtype (truncating, as [`Tensor::fill_`] does), and
    /// a value the dtype cannot hold is an error (see [`Scalar::to_element_checked`]).
    ///
    /// ```
    /// use ember_tensor::{DType, Tensor};
    /// let t = Tensor::from_vec(vec![1i64, 2, 3], [3])?;
    /// let mask = Tensor::from_vec(vec![1u8, 0, 1], [3])?;
    /// let filled = t.masked_fill(&mask, 2.5)?;
    /// assert_eq!(filled.dtype(), DType::I64);
    /// assert_eq!(filled.to_vec::<i64>()?, vec![2, 2, 2]);
    /// assert!(t.to_dtype(DType::U8).masked_fill(&mask, -1.5).is_err());
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn masked_fill(&self, mask: &Tensor, value: impl Into<Scalar>) -> Result<Tensor> {
        let op = "masked_fill";
        if mask.dtype() != DType::U8 {
            return Err(Error::dtype(op, format!("the mask must be u8, got {}", mask.dtype())));
        }
        self.same_device(op, mask)?;
        let value = value.into();
        let shape = broadcast_shapes(op, self.shape(), mask.shape())?;
        if shape.dims() != self.shape() {
            return Err(Error::shape(
                op,
                format!("mask of shape {:?} does not broadcast to {:?}", mask.shape(), self.shape()),
            ));
        }
        value.check_fits(self.dtype(), op)?;
        let m = mask.with_layout(mask.layout.broadcast_to(op, &shape)?);
        let s = self.read2(&m, |v, mv| self.backend().masked_fill(v, mv, value))?;
        Ok(Tensor::from_storage(s, shape))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gather_and_scatter_are_inverse_views() {
        let t = Tensor::arange(0.0, 6.0).unwrap().reshape([2, 3]).unwrap();
        let idx = Tensor::from_vec(vec![2i64, 0, 1, 1], [2, 2]).unwrap();
        let g = t.gather(1, &idx).unwrap();
        assert_eq!(g.to_vec::<f32>().unwrap(), vec![2.0, 0.0, 4.0, 4.0]);
        let z = t.zeros_like().scatter_add(1, &idx, &g).unwrap();
        assert_eq!(z.to_vec::<f32>().unwrap(), vec![0.0, 0.0, 2.0, 0.0, 8.0, 0.0]);
        let bad = Tensor::from_vec(vec![3i64], [1, 1]).unwrap();
        assert!(t.gather(1, &bad).is_err());
        assert!(t.index_select(0, &Tensor::from_vec(vec![-1i64], [1]).unwrap()).is_err());
    }

    #[test]
    fn masked_fill_broadcasts_the_mask() {
        let t = Tensor::zeros([2, 2], DType::F32).unwrap();
        let m = Tensor::from_vec(vec![1u8, 0], [2]).unwrap();
        assert_eq!(t.masked_fill(&m, 5.0).unwrap().to_vec::<f32>().unwrap(), vec![5.0, 0.0, 5.0, 0.0]);
        assert!(t.masked_fill(&Tensor::ones([3], DType::U8).unwrap(), 1.0).is_err());
    }
}
