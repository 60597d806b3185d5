//! Tensor contents on the host, as the transports move and combine them.

use crate::reduce_op::ReduceOp;
use ember_tensor::{DType, Device, Error, Result, Tensor};

/// The elements of an `f32`, `f64` or `i64` tensor in logical order (`i64` for buffers
/// such as BatchNorm's `num_batches_tracked`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum HostBuf {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I64(Vec<i64>),
}

impl HostBuf {
    /// The contents of `t`.
    pub(crate) fn read(op: &'static str, rank: usize, t: &Tensor) -> Result<HostBuf> {
        match t.dtype() {
            DType::F32 => Ok(HostBuf::F32(t.to_vec()?)),
            DType::F64 => Ok(HostBuf::F64(t.to_vec()?)),
            DType::I64 => Ok(HostBuf::I64(t.to_vec()?)),
            d => Err(Error::dtype(
                op,
                format!(
                    "rank {rank}: collectives take f32, f64 or i64 tensors, got {d} of shape {:?}",
                    t.shape().dims()
                ),
            )),
        }
    }

    /// An empty buffer of the same dtype.
    #[cfg(feature = "mpi")]
    pub(crate) fn empty_like(&self) -> HostBuf {
        match self {
            HostBuf::F32(_) => HostBuf::F32(Vec::new()),
            HostBuf::F64(_) => HostBuf::F64(Vec::new()),
            HostBuf::I64(_) => HostBuf::I64(Vec::new()),
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            HostBuf::F32(v) => v.len(),
            HostBuf::F64(v) => v.len(),
            HostBuf::I64(v) => v.len(),
        }
    }

    /// A tensor of `shape` on `device` holding the elements.
    pub(crate) fn into_tensor(self, shape: &[usize], device: Device) -> Result<Tensor> {
        let t = match self {
            HostBuf::F32(v) => Tensor::from_vec(v, shape),
            HostBuf::F64(v) => Tensor::from_vec(v, shape),
            HostBuf::I64(v) => Tensor::from_vec(v, shape),
        }?;
        t.to_device(device)
    }

    /// Writes the elements into `t` (same shape and dtype), in place.
    pub(crate) fn write_into(self, t: &Tensor) -> Result<()> {
        let shape = t.shape().dims().to_vec();
        t.copy_(&self.into_tensor(&shape, t.device())?)
    }

    /// Elements `start..start + len` as a new buffer.
    pub(crate) fn slice(&self, start: usize, len: usize) -> HostBuf {
        match self {
            HostBuf::F32(v) => HostBuf::F32(v[start..start + len].to_vec()),
            HostBuf::F64(v) => HostBuf::F64(v[start..start + len].to_vec()),
            HostBuf::I64(v) => HostBuf::I64(v[start..start + len].to_vec()),
        }
    }

    /// Appends `other`'s elements (same dtype).
    pub(crate) fn extend(&mut self, other: &HostBuf) {
        match (self, other) {
            (HostBuf::F32(a), HostBuf::F32(b)) => a.extend_from_slice(b),
            (HostBuf::F64(a), HostBuf::F64(b)) => a.extend_from_slice(b),
            (HostBuf::I64(a), HostBuf::I64(b)) => a.extend_from_slice(b),
            _ => debug_assert!(false, "dtypes are checked across ranks before data moves"),
        }
    }

    /// Multiplies every element by `factor` (averaging after a sum; floats only, averages
    /// of integers are refused before).
    pub(crate) fn scale(&mut self, factor: f64) {
        match self {
            HostBuf::F32(v) => v.iter_mut().for_each(|x| *x = (f64::from(*x) * factor) as f32),
            HostBuf::F64(v) => v.iter_mut().for_each(|x| *x *= factor),
            HostBuf::I64(_) => debug_assert!(false, "integer averages are refused when issued"),
        }
    }

    /// Combines `other` into `self` element by element (`Avg` sums; the caller divides).
    pub(crate) fn combine(&mut self, other: &HostBuf, op: ReduceOp) {
        fn go<T: Copy + PartialOrd + std::ops::Add<Output = T>>(
            a: &mut [T],
            b: &[T],
            op: ReduceOp,
            nan: fn(T) -> bool,
        ) {
            for (x, &y) in a.iter_mut().zip(b) {
                *x = match op {
                    ReduceOp::Sum | ReduceOp::Avg => *x + y,
                    // NaN wins, as in PyTorch's max/min reductions.
                    ReduceOp::Max => {
                        if y > *x || nan(y) {
                            y
                        } else {
                            *x
                        }
                    }
                    ReduceOp::Min => {
                        if y < *x || nan(y) {
                            y
                        } else {
                            *x
                        }
                    }
                };
            }
        }
        match (self, other) {
            (HostBuf::F32(a), HostBuf::F32(b)) => go(a, b, op, f32::is_nan),
            (HostBuf::F64(a), HostBuf::F64(b)) => go(a, b, op, f64::is_nan),
            (HostBuf::I64(a), HostBuf::I64(b)) => go(a, b, op, |_| false),
            _ => debug_assert!(false, "dtypes are checked across ranks before data moves"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combine_sums_and_keeps_extremes() {
        let mut a = HostBuf::F64(vec![1.0, 5.0, f64::NAN]);
        a.combine(&HostBuf::F64(vec![2.0, 3.0, 0.0]), ReduceOp::Max);
        let HostBuf::F64(v) = &a else { unreachable!() };
        assert_eq!(&v[..2], &[2.0, 5.0]);
        assert!(v[2].is_nan());
        let mut b = HostBuf::F32(vec![1.0, 2.0]);
        b.combine(&HostBuf::F32(vec![3.0, -4.0]), ReduceOp::Sum);
        b.scale(0.5);
        assert_eq!(b, HostBuf::F32(vec![2.0, -1.0]));
    }
}
