//! Tensor contents on the host, as the transports move and combine them.
//!
//! The 16-bit floats travel and reduce as `f32`: [`HostBuf::read`] widens an `f16` or
//! `bf16` tensor (exactly), the transport sums, averages or compares in `f32`, and the
//! result is rounded once, to nearest even, when it is written back into a tensor of the
//! caller's dtype. A sum over many ranks then loses no more than one rounding, where
//! summing in 16 bits would round at every rank.

use crate::reduce_op::ReduceOp;
use ember_tensor::{DType, Device, Error, Result, Tensor};

/// The elements of an `f32`, `f64` or `i64` tensor in logical order (`i64` for buffers
/// such as BatchNorm's `num_batches_tracked`); `f16` and `bf16` tensors are held as `f32`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum HostBuf {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I64(Vec<i64>),
}

impl HostBuf {
    /// The contents of `t`, the 16-bit floats widened to `f32`.
    pub(crate) fn read(op: &'static str, rank: usize, t: &Tensor) -> Result<HostBuf> {
        HostBuf::check_dtype(op, rank, t)?;
        match t.dtype() {
            DType::F32 => Ok(HostBuf::F32(t.to_vec()?)),
            DType::F64 => Ok(HostBuf::F64(t.to_vec()?)),
            DType::I64 => Ok(HostBuf::I64(t.to_vec()?)),
            _ => Ok(HostBuf::F32(t.to_dtype(DType::F32).to_vec()?)),
        }
    }

    /// An error unless collectives carry `t`'s dtype (what [`HostBuf::read`] refuses).
    pub(crate) fn check_dtype(op: &'static str, rank: usize, t: &Tensor) -> Result<()> {
        match t.dtype() {
            DType::F32 | DType::F16 | DType::BF16 | DType::F64 | DType::I64 => Ok(()),
            d => Err(Error::dtype(
                op,
                format!(
                    "rank {rank}: collectives take f32, f64, f16, bf16 or i64 tensors, got {d} of shape {:?}",
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

    /// A tensor of `shape` and `dtype` on `device` holding the elements: `dtype` is the
    /// buffer's own or, for what was read from a 16-bit tensor, that tensor's, into which
    /// the `f32` elements round once.
    pub(crate) fn into_tensor(self, shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
        let t = match self {
            HostBuf::F32(v) => Tensor::from_vec(v, shape),
            HostBuf::F64(v) => Tensor::from_vec(v, shape),
            HostBuf::I64(v) => Tensor::from_vec(v, shape),
        }?;
        t.to_dtype(dtype).to_device(device)
    }

    /// Writes the elements into `t` (same shape, and `t`'s dtype or its `f32` widening),
    /// in place.
    pub(crate) fn write_into(self, t: &Tensor) -> Result<()> {
        let shape = t.shape().dims().to_vec();
        t.copy_(&self.into_tensor(&shape, t.dtype(), t.device())?)
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

/// The elements of a contiguous `f32`, `f64` or `i64` host tensor, borrowed for a collective
/// that works where they lie (no copy in, no copy out).
pub(crate) enum HostSlice<'a> {
    F32(&'a mut [f32]),
    F64(&'a mut [f64]),
    I64(&'a mut [i64]),
}

impl HostSlice<'_> {
    /// Whether [`HostSlice::with`] can lend `t`'s elements.
    pub(crate) fn fits(t: &Tensor) -> bool {
        t.device() == Device::Cpu && t.is_contiguous() && matches!(t.dtype(), DType::F32 | DType::F64 | DType::I64)
    }

    /// Runs `f` on `t`'s elements, holding its storage's write lock (an in-place write: it
    /// bumps the version). `t` must [`fit`](HostSlice::fits).
    pub(crate) fn with<R>(op: &'static str, t: &Tensor, f: impl FnOnce(HostSlice<'_>) -> Result<R>) -> Result<R> {
        let unfit = || Error::invalid(op, format!("internal: a {} tensor lent in place", t.dtype()));
        let range = t.layout().contiguous_range().ok_or_else(unfit)?;
        let mut guard = t.storage().write();
        let cpu = guard.as_cpu_mut().ok_or_else(unfit)?;
        let slice = match t.dtype() {
            DType::F32 => HostSlice::F32(&mut cpu.as_mut_slice::<f32>().ok_or_else(unfit)?[range]),
            DType::F64 => HostSlice::F64(&mut cpu.as_mut_slice::<f64>().ok_or_else(unfit)?[range]),
            DType::I64 => HostSlice::I64(&mut cpu.as_mut_slice::<i64>().ok_or_else(unfit)?[range]),
            _ => return Err(unfit()),
        };
        f(slice)
    }

    /// The same elements, borrowed again for a shorter time.
    #[cfg(feature = "mpi")]
    pub(crate) fn reborrow(&mut self) -> HostSlice<'_> {
        match self {
            HostSlice::F32(v) => HostSlice::F32(v),
            HostSlice::F64(v) => HostSlice::F64(v),
            HostSlice::I64(v) => HostSlice::I64(v),
        }
    }

    /// A copy of the elements.
    pub(crate) fn to_buf(&self) -> HostBuf {
        match self {
            HostSlice::F32(v) => HostBuf::F32(v.to_vec()),
            HostSlice::F64(v) => HostBuf::F64(v.to_vec()),
            HostSlice::I64(v) => HostBuf::I64(v.to_vec()),
        }
    }

    /// Overwrites the elements with `buf`'s (same dtype and length).
    pub(crate) fn copy_from(&mut self, op: &'static str, buf: &HostBuf) -> Result<()> {
        match (self, buf) {
            (HostSlice::F32(a), HostBuf::F32(b)) if a.len() == b.len() => a.copy_from_slice(b),
            (HostSlice::F64(a), HostBuf::F64(b)) if a.len() == b.len() => a.copy_from_slice(b),
            (HostSlice::I64(a), HostBuf::I64(b)) if a.len() == b.len() => a.copy_from_slice(b),
            _ => return Err(Error::invalid(op, "internal: a result of another dtype or length")),
        }
        Ok(())
    }

    /// Multiplies every element by `factor` (averaging after a sum; floats only).
    #[cfg(feature = "mpi")]
    pub(crate) fn scale(&mut self, factor: f64) {
        match self {
            HostSlice::F32(v) => v.iter_mut().for_each(|x| *x = (f64::from(*x) * factor) as f32),
            HostSlice::F64(v) => v.iter_mut().for_each(|x| *x *= factor),
            HostSlice::I64(_) => debug_assert!(false, "integer averages are refused when issued"),
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

    #[test]
    fn half_tensors_widen_on_read_and_round_once_on_write() -> Result<()> {
        use ember_tensor::{bf16, f16};
        // 1 + 2^-8 is not a bf16: it is held exactly in f32 and rounds (to even) only when
        // written back.
        let t = Tensor::from_vec(vec![bf16::from_f32(1.0), bf16::from_f32(-3.5)], [2])?;
        let mut buf = HostBuf::read("test", 0, &t)?;
        assert_eq!(buf, HostBuf::F32(vec![1.0, -3.5]));
        buf.combine(&HostBuf::F32(vec![2f32.powi(-8), 0.0]), ReduceOp::Sum);
        assert_eq!(buf, HostBuf::F32(vec![1.0 + 2f32.powi(-8), -3.5]));
        buf.clone().write_into(&t)?;
        assert_eq!(t.to_vec::<bf16>()?, vec![bf16::from_f32(1.0), bf16::from_f32(-3.5)]);
        let h = buf.into_tensor(&[2], DType::F16, Device::Cpu)?;
        assert_eq!(h.to_vec::<f16>()?, vec![f16::from_f32(1.0 + 2f32.powi(-8)), f16::from_f32(-3.5)]);
        Ok(())
    }
}
