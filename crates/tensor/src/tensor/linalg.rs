//! Matrix products.

use super::Tensor;
use crate::shape::{Shape, broadcast_shapes, checked_numel};
use crate::{Error, Result};

impl Tensor {
    /// The matrix product with PyTorch's rules: 1-d operands are vectors (a row on the left,
    /// a column on the right, removed from the result), and leading dimensions broadcast as
    /// batches.
    ///
    /// ```
    /// use ember_tensor::Tensor;
    /// let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3])?;
    /// let b = Tensor::from_vec(vec![1.0f32, 0.0, 1.0], [3])?;
    /// assert_eq!(a.matmul(&b)?.to_vec::<f32>()?, vec![4.0, 10.0]);
    /// let e = a.matmul(&a).unwrap_err();
    /// assert_eq!(e.to_string(), "matmul: cannot multiply [2, 3] by [2, 3]");
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        self.same_device("matmul", other)?;
        let mismatch = || Error::shape("matmul", format!("cannot multiply {:?} by {:?}", self.shape(), other.shape()));
        if self.rank() == 0 || other.rank() == 0 {
            return Err(Error::shape(
                "matmul",
                format!("both operands need at least one dimension, got {:?} and {:?}", self.shape(), other.shape()),
            ));
        }
        if self.dtype != other.dtype {
            return Err(Error::dtype(
                "matmul",
                format!("expected operands of one dtype, got {} and {}", self.dtype, other.dtype),
            ));
        }
        if !self.dtype.is_float() {
            return Err(Error::dtype("matmul", format!("matmul needs float operands, got {}", self.dtype)));
        }
        let a = if self.rank() == 1 { self.unsqueeze(0)? } else { self.clone() };
        let b = if other.rank() == 1 { other.unsqueeze(1)? } else { other.clone() };
        let (ra, rb) = (a.rank(), b.rank());
        let (m, k) = (a.shape()[ra - 2], a.shape()[ra - 1]);
        let (k2, n) = (b.shape()[rb - 2], b.shape()[rb - 1]);
        if k != k2 {
            return Err(mismatch());
        }
        let batch = broadcast_shapes("matmul", &a.shape()[..ra - 2], &b.shape()[..rb - 2]).map_err(|_| mismatch())?;
        let full = Shape::from(batch.iter().copied().chain([m, n]).collect::<Vec<usize>>());
        checked_numel("matmul", &full).map_err(|_| {
            Error::shape(
                "matmul",
                format!(
                    "cannot multiply {:?} by {:?}: the product {full} has too many elements",
                    self.shape(),
                    other.shape()
                ),
            )
        })?;
        let mut sa: Vec<usize> = batch.to_vec();
        sa.extend([m, k]);
        let mut sb: Vec<usize> = batch.to_vec();
        sb.extend([k, n]);
        let la = a.layout.broadcast_to("matmul", &Shape::from(sa))?;
        let lb = b.layout.broadcast_to("matmul", &Shape::from(sb))?;
        // Zero strides inside the matrices themselves (from `expand`) are materialised.
        let fix = |t: &Tensor, l: crate::layout::Layout| {
            let r = l.rank();
            let v = t.with_layout(l);
            let degenerate = (v.layout.strides()[r - 2] == 0 && v.shape()[r - 2] > 1)
                || (v.layout.strides()[r - 1] == 0 && v.shape()[r - 1] > 1);
            if degenerate { v.try_copy() } else { Ok(v) }
        };
        let (a, b) = (fix(&a, la)?, fix(&b, lb)?);
        let s = a.read2(&b, |va, vb| a.backend().matmul(va, vb))?;
        let mut out: Vec<usize> = batch.to_vec();
        if self.rank() > 1 {
            out.push(m);
        }
        if other.rank() > 1 {
            out.push(n);
        }
        let t = Tensor::from_storage(s, full);
        if self.rank() == 1 || other.rank() == 1 { t.reshape(out) } else { Ok(t) }
    }
}

impl Tensor {
    /// Writes the product of two matrices (`self` `[m, k]`, `other` `[k, n]`, one float
    /// dtype) into `out` (`[m, n]`, the same dtype, sharing storage with neither operand),
    /// overwriting it: the bits of [`Tensor::matmul`]'s result, with no new tensor. On the
    /// CPU an `f32` or `f64` `out` that is contiguous is written directly; otherwise the
    /// product is copied in.
    ///
    /// ```
    /// use ember_tensor::{DType, Tensor};
    /// let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2])?;
    /// let bucket = Tensor::zeros([6], DType::F32)?;
    /// a.matmul_into(&a, &bucket.narrow(0, 2, 4)?.reshape([2, 2])?)?;
    /// assert_eq!(bucket.to_vec::<f32>()?, vec![0.0, 0.0, 7.0, 10.0, 15.0, 22.0]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn matmul_into(&self, other: &Tensor, out: &Tensor) -> Result<()> {
        const OP: &str = "matmul_into";
        self.same_device(OP, other)?;
        self.same_device(OP, out)?;
        out.check_writable(OP)?;
        let fits = self.rank() == 2
            && other.rank() == 2
            && self.shape()[1] == other.shape()[0]
            && out.shape().dims() == [self.shape()[0], other.shape()[1]];
        if !fits {
            return Err(Error::shape(
                OP,
                format!(
                    "expected [m, k] @ [k, n] into [m, n], got {:?} @ {:?} into {:?}",
                    self.shape(),
                    other.shape(),
                    out.shape()
                ),
            ));
        }
        if self.dtype != other.dtype || out.dtype != self.dtype || !self.dtype.is_float() {
            return Err(Error::dtype(
                OP,
                format!(
                    "expected float operands and output of one dtype, got {} @ {} into {}",
                    self.dtype, other.dtype, out.dtype
                ),
            ));
        }
        if out.shares_storage(self) || out.shares_storage(other) {
            return Err(Error::invalid(OP, "the output shares storage with an operand"));
        }
        let (mut dst, reads) = super::locks::write_and_read(&out.storage, &[&**self.storage, &**other.storage]);
        let (a, b) = (reads.get(&self.storage), reads.get(&other.storage));
        self.backend().matmul_into((a, &self.layout), (b, &other.layout), (&mut dst, &out.layout))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    fn naive(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            }
        }
        c
    }

    /// A product written into a view of a larger buffer has `matmul`'s bits and leaves the
    /// rest of the buffer alone: directly (contiguous f32, f64, a transposed operand) and
    /// through the copy (a strided destination, f16).
    #[test]
    fn matmul_into_writes_matmuls_bits_into_the_destination() -> Result<()> {
        let (m, k, n) = (37, 53, 29);
        for dtype in [DType::F32, DType::F64, DType::F16] {
            let a = Tensor::randn([k, m])?.to_dtype(dtype).t()?;
            let b = Tensor::randn([k, n])?.to_dtype(dtype);
            let want = a.matmul(&b)?.to_dtype(DType::F64).to_vec::<f64>()?;
            let buffer = Tensor::full([m * n + 3], 7.0, dtype)?;
            a.matmul_into(&b, &buffer.narrow(0, 3, m * n)?.reshape([m, n])?)?;
            let got = buffer.to_dtype(DType::F64).to_vec::<f64>()?;
            assert_eq!(&got[..3], &[7.0; 3]);
            assert_eq!(&got[3..], &want[..], "{dtype}");
            // A strided destination: the transpose of an [n, m] block.
            let strided = Tensor::zeros([n, m], dtype)?;
            a.matmul_into(&b, &strided.t()?)?;
            assert_eq!(strided.t()?.to_dtype(DType::F64).to_vec::<f64>()?, want, "{dtype} strided");
        }
        let a = Tensor::ones([2, 3], DType::F32)?;
        let out = Tensor::zeros([2, 2], DType::F32)?;
        assert!(a.matmul_into(&a, &out).is_err()); // [2, 3] @ [2, 3]
        assert!(a.matmul_into(&a.t()?, &Tensor::zeros([3, 3], DType::F32)?).is_err()); // wrong output shape
        assert!(a.matmul_into(&a.t()?, &Tensor::zeros([2, 2], DType::F64)?).is_err()); // wrong dtype
        let square = Tensor::ones([2, 2], DType::F32)?;
        assert!(square.matmul_into(&square, &square).is_err()); // aliasing
        Ok(())
    }

    #[test]
    fn matches_naive_including_transposed_and_batched() {
        let (m, k, n) = (5, 7, 3);
        let a = Tensor::normal([m, k], 0.0, 1.0, DType::F64).unwrap();
        let b = Tensor::normal([n, k], 0.0, 1.0, DType::F64).unwrap().t().unwrap();
        let want = naive(&a.to_vec::<f64>().unwrap(), &b.to_vec::<f64>().unwrap(), m, k, n);
        let got = a.matmul(&b).unwrap().to_vec::<f64>().unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-12);
        }
        let batch = a.unsqueeze(0).unwrap().expand([4, m, k]).unwrap().contiguous();
        let out = batch.matmul(&b).unwrap();
        assert_eq!(out.shape(), &[4, m, n]);
        let last = out.select(0, 3).unwrap().to_vec::<f64>().unwrap();
        for (g, w) in last.iter().zip(&want) {
            assert!((g - w).abs() < 1e-12);
        }
    }

    #[test]
    fn vector_rules_and_errors() {
        let v = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3]).unwrap();
        assert_eq!(v.matmul(&v).unwrap().shape(), &[] as &[usize]);
        assert_eq!(v.matmul(&v).unwrap().to_scalar::<f32>().unwrap(), 14.0);
        let m = Tensor::ones([3, 2], DType::F32).unwrap();
        assert_eq!(v.matmul(&m).unwrap().to_vec::<f32>().unwrap(), vec![6.0, 6.0]);
        assert!(m.matmul(&m).is_err());
        assert!(v.matmul(&v.to_dtype(DType::F64)).is_err());
        let e = Tensor::zeros([2, 3], DType::F32).unwrap().matmul(&Tensor::zeros([4, 5], DType::F32).unwrap());
        assert_eq!(e.unwrap_err().to_string(), "matmul: cannot multiply [2, 3] by [4, 5]");
        let z = Tensor::zeros([2, 0], DType::F32).unwrap().matmul(&Tensor::zeros([0, 3], DType::F32).unwrap()).unwrap();
        assert_eq!(z.to_vec::<f32>().unwrap(), vec![0.0; 6]);
    }
}
