//! Constructors: from data, constant fills, ranges, identity, and random tensors.

use super::Tensor;
use crate::backend::backend_for;
use crate::dtype::{DType, Element, Scalar};
use crate::error::infallible;
use crate::random::Distribution;
use crate::shape::{MAX_NUMEL, Shape, checked_numel};
use crate::storage::{Buffer, Storage};
use crate::{Device, Error, Result};

/// Host data as a CPU storage (what the CPU backend's `upload` gives for it).
#[inline]
fn host<T: Element>(buf: Buffer<T>) -> Storage {
    Storage::from(T::into_storage(buf))
}

impl Tensor {
    /// A tensor that takes `data` in row-major order. The length must match the shape.
    ///
    /// ```
    /// use ember_tensor::Tensor;
    /// let t = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], [2, 2])?;
    /// assert_eq!(t.shape(), &[2, 2]);
    /// assert!(Tensor::from_vec(vec![1.0f32; 3], [2, 2]).is_err());
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn from_vec<T: Element>(data: Vec<T>, shape: impl Into<Shape>) -> Result<Tensor> {
        Self::copied("from_vec", &data, shape.into())
    }

    /// A tensor holding a copy of `data` in row-major order.
    pub fn from_slice<T: Element>(data: &[T], shape: impl Into<Shape>) -> Result<Tensor> {
        Self::copied("from_slice", data, shape.into())
    }

    /// `from_vec` and `from_slice`, whose errors name the constructor the caller called.
    fn copied<T: Element>(op: &'static str, data: &[T], shape: Shape) -> Result<Tensor> {
        let n = checked_numel(op, &shape)?;
        if n != data.len() {
            return Err(Error::shape(op, format!("{} elements cannot fill shape {shape} ({n} elements)", data.len())));
        }
        let buf = Buffer::from_slice(op, data)?;
        Ok(Tensor::from_storage(host(buf), shape))
    }

    /// A tensor over an existing host buffer.
    pub fn from_buffer<T: Element>(buf: Buffer<T>, shape: impl Into<Shape>) -> Result<Tensor> {
        let shape = shape.into();
        if checked_numel("from_buffer", &shape)? != buf.len() {
            return Err(Error::shape("from_buffer", format!("{} elements cannot fill shape {shape}", buf.len())));
        }
        Ok(Tensor::from_storage(host(buf), shape))
    }

    /// A 0-d tensor holding `value`.
    ///
    /// ```
    /// use ember_tensor::Tensor;
    /// let s = Tensor::scalar(1.0f32);
    /// assert_eq!(s.rank(), 0);
    /// assert_eq!(s.to_string(), "(1.0)");
    /// ```
    pub fn scalar<T: Element>(value: T) -> Tensor {
        let buf = infallible(Buffer::from_slice("scalar", &[value]));
        Tensor::from_storage(host(buf), Shape::scalar())
    }

    /// A tensor of `shape` filled with `value`, on `device`; an error when `dtype` cannot
    /// hold `value` (see [`Scalar::to_element_checked`]).
    pub fn full_on(shape: impl Into<Shape>, value: impl Into<Scalar>, dtype: DType, device: Device) -> Result<Tensor> {
        Self::filled("full", shape.into(), value.into(), dtype, device)
    }

    /// `value` everywhere in a new tensor of `shape` on `device`, with errors (a shape too
    /// large to count, a refused allocation) named `op`, the constructor the caller used.
    fn filled(op: &'static str, shape: Shape, value: Scalar, dtype: DType, device: Device) -> Result<Tensor> {
        value.check_fits(dtype, op)?;
        Self::converted_fill(op, shape, value, dtype, device)
    }

    /// [`Tensor::filled`] for a value that is an operand rather than data: it converts into
    /// `dtype` as a kernel converts a scalar ([`Scalar::to_element`]), so `where` with an
    /// `f32` tensor and `-1e300` gives `-inf`, as PyTorch's does.
    pub(crate) fn converted_fill(
        op: &'static str,
        shape: Shape,
        value: Scalar,
        dtype: DType,
        device: Device,
    ) -> Result<Tensor> {
        let n = checked_numel(op, &shape)?;
        let s = backend_for(device)?.full(n, value, dtype).map_err(|e| e.alloc_in(op))?;
        Ok(Tensor::from_storage(s, shape))
    }

    /// A tensor of `shape` filled with `value`; an error when `dtype` cannot hold `value`
    /// (see [`Scalar::to_element_checked`]).
    ///
    /// ```
    /// use ember_tensor::{DType, Tensor};
    /// assert_eq!(Tensor::full([2], -1, DType::U8)?.to_vec::<u8>()?, vec![255, 255]);
    /// assert!(Tensor::full([2], 300, DType::U8).is_err());
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn full(shape: impl Into<Shape>, value: impl Into<Scalar>, dtype: DType) -> Result<Tensor> {
        Self::full_on(shape, value, dtype, Device::Cpu)
    }

    /// Zeros of `shape` and `dtype`.
    ///
    /// ```
    /// use ember_tensor::{DType, Tensor};
    /// let z = Tensor::zeros([2, 3], DType::F32)?;
    /// assert_eq!(z.to_vec::<f32>()?, vec![0.0; 6]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn zeros(shape: impl Into<Shape>, dtype: DType) -> Result<Tensor> {
        Self::filled("zeros", shape.into(), Scalar::from(0), dtype, Device::Cpu)
    }

    /// Ones of `shape` and `dtype`.
    pub fn ones(shape: impl Into<Shape>, dtype: DType) -> Result<Tensor> {
        Self::filled("ones", shape.into(), Scalar::from(1), dtype, Device::Cpu)
    }

    /// Zeros with this tensor's shape, dtype and device.
    pub fn zeros_like(&self) -> Tensor {
        self.filled_like(Scalar::Int(0))
    }

    /// Ones with this tensor's shape, dtype and device.
    pub fn ones_like(&self) -> Tensor {
        self.filled_like(Scalar::Int(1))
    }

    /// `value` everywhere, with this tensor's shape, dtype and device; an error when the
    /// dtype cannot hold `value` (see [`Scalar::to_element_checked`]).
    pub fn full_like(&self, value: impl Into<Scalar>) -> Result<Tensor> {
        let value = value.into();
        value.check_fits(self.dtype, "full_like")?;
        Ok(self.filled_like(value))
    }

    /// `value`, which the dtype holds, everywhere in a tensor like this one.
    fn filled_like(&self, value: Scalar) -> Tensor {
        let s = infallible(self.backend().full(self.numel(), value, self.dtype));
        Tensor::from_storage(s, self.shape().clone())
    }

    /// `start, start + 1, ...` below `end`. Integer bounds give `i64`, float bounds `f32`.
    ///
    /// ```
    /// use ember_tensor::{DType, Tensor};
    /// assert_eq!(Tensor::arange(0, 4)?.to_vec::<i64>()?, vec![0, 1, 2, 3]);
    /// assert_eq!(Tensor::arange(0.0, 2.0)?.dtype(), DType::F32);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn arange(start: impl Into<Scalar>, end: impl Into<Scalar>) -> Result<Tensor> {
        Self::arange_step(start, end, 1)
    }

    /// `start, start + step, ...` strictly before `end` (after it, for a negative step).
    pub fn arange_step(start: impl Into<Scalar>, end: impl Into<Scalar>, step: impl Into<Scalar>) -> Result<Tensor> {
        let (start, end, step) = (start.into(), end.into(), step.into());
        if let (Scalar::Int(a), Scalar::Int(b), Scalar::Int(s)) = (start, end, step) {
            return Self::arange_int(a, b, s);
        }
        let (a, b, s) = (start.to_f64(), end.to_f64(), step.to_f64());
        if s == 0.0 || !s.is_finite() || !a.is_finite() || !b.is_finite() {
            return Err(Error::invalid("arange", format!("invalid range {a}..{b} with step {s}")));
        }
        if (b - a) * s < 0.0 {
            return Err(Error::invalid("arange", format!("step {s} moves away from the end of {a}..{b}")));
        }
        let n = ((b - a) / s).ceil().max(0.0);
        if n > (isize::MAX as f64) / 8.0 {
            return Err(Error::invalid("arange", format!("range {a}..{b} with step {s} is too long")));
        }
        let n = n as usize;
        let buf = Buffer::<f32>::from_fn("arange", n, |i| (a + s * i as f64) as f32)?;
        Tensor::from_buffer(buf, [n])
    }

    /// `arange_step` for integer bounds, exact over the whole `i64` range (an `f64` would
    /// round bounds beyond 2^53, and `end - start` may not fit in `i64`).
    fn arange_int(a: i64, b: i64, s: i64) -> Result<Tensor> {
        if s == 0 {
            return Err(Error::invalid("arange", format!("invalid range {a}..{b} with step {s}")));
        }
        let (span, step) = (b as i128 - a as i128, s as i128);
        if span.signum() * step.signum() < 0 {
            return Err(Error::invalid("arange", format!("step {s} moves away from the end of {a}..{b}")));
        }
        // `span` and `step` share a sign here, so this rounds the quotient away from zero.
        let n = (span + step - step.signum()) / step;
        if n > MAX_NUMEL as i128 {
            return Err(Error::invalid("arange", format!("range {a}..{b} with step {s} is too long")));
        }
        let n = n as usize;
        // Every value lies between `a` and `b`, so the wrapping arithmetic is exact.
        let buf = Buffer::<i64>::from_fn("arange", n, |i| a.wrapping_add(s.wrapping_mul(i as i64)))?;
        Tensor::from_buffer(buf, [n])
    }

    /// `steps` evenly spaced `f32` values from `start` to `end` inclusive.
    pub fn linspace(start: f64, end: f64, steps: usize) -> Result<Tensor> {
        if !start.is_finite() || !end.is_finite() {
            return Err(Error::invalid("linspace", format!("invalid bounds {start}..={end}")));
        }
        let step = if steps > 1 { (end - start) / (steps - 1) as f64 } else { 0.0 };
        let buf = Buffer::<f32>::from_fn("linspace", steps, |i| {
            // Fill from both ends, like PyTorch, so that the last value is exactly `end`; a
            // single step is `start`.
            if i < steps / 2 || steps == 1 {
                (start + step * i as f64) as f32
            } else {
                (end - step * (steps - 1 - i) as f64) as f32
            }
        })?;
        Tensor::from_buffer(buf, [steps])
    }

    /// The `n x n` identity matrix in `f32`.
    pub fn eye(n: usize) -> Result<Tensor> {
        let total = n.checked_mul(n).ok_or_else(|| Error::shape("eye", format!("{n} x {n} is too large")))?;
        let mut buf = Buffer::<f32>::zeros("eye", total)?;
        for i in 0..n {
            buf[i * n + i] = 1.0;
        }
        Tensor::from_buffer(buf, [n, n])
    }

    /// Samples of `dist` of `shape` and float `dtype`, from the global generator.
    fn random(op: &'static str, shape: Shape, dtype: DType, dist: Distribution, device: Device) -> Result<Tensor> {
        let n = checked_numel(op, &shape)?;
        if !dtype.is_float() {
            return Err(Error::dtype(op, format!("random tensors must be float, got {dtype}")));
        }
        let storage = backend_for(device)?.random(n, dist, dtype)?;
        Ok(Tensor::from_storage(storage, shape))
    }

    /// Uniform samples from `[low, high)` of `shape` and float `dtype`, like PyTorch's
    /// `uniform_`: the bounds are taken in `dtype`, and no sample equals `high` (a draw that
    /// rounds up to it becomes the largest value below it). `low == high` gives `low`.
    pub fn uniform(shape: impl Into<Shape>, low: f64, high: f64, dtype: DType) -> Result<Tensor> {
        Self::uniform_on(shape, low, high, dtype, Device::Cpu)
    }

    /// [`Tensor::uniform`] on `device`. The samples are drawn from the same global generator
    /// in the same order whatever the device, so a seeded run draws the same values.
    pub fn uniform_on(shape: impl Into<Shape>, low: f64, high: f64, dtype: DType, device: Device) -> Result<Tensor> {
        if low > high || !low.is_finite() || !high.is_finite() {
            return Err(Error::invalid("uniform", format!("invalid bounds [{low}, {high})")));
        }
        Self::random("uniform", shape.into(), dtype, Distribution::Uniform { low, high }, device)
    }

    /// Normal samples with `mean` and standard deviation `std`, of `shape` and float `dtype`.
    pub fn normal(shape: impl Into<Shape>, mean: f64, std: f64, dtype: DType) -> Result<Tensor> {
        Self::normal_on(shape, mean, std, dtype, Device::Cpu)
    }

    /// [`Tensor::normal`] on `device` (drawn as [`Tensor::uniform_on`] draws).
    pub fn normal_on(shape: impl Into<Shape>, mean: f64, std: f64, dtype: DType, device: Device) -> Result<Tensor> {
        if std < 0.0 || !std.is_finite() || !mean.is_finite() {
            return Err(Error::invalid("normal", format!("invalid mean {mean} or standard deviation {std}")));
        }
        Self::random("normal", shape.into(), dtype, Distribution::Normal { mean, std }, device)
    }

    /// `f32` samples from `[0, 1)`, like `torch.rand`.
    pub fn rand(shape: impl Into<Shape>) -> Result<Tensor> {
        Self::uniform(shape, 0.0, 1.0, DType::F32)
    }

    /// `f32` standard normal samples, like `torch.randn`.
    pub fn randn(shape: impl Into<Shape>) -> Result<Tensor> {
        Self::normal(shape, 0.0, 1.0, DType::F32)
    }

    /// Samples from `[0, 1)` with this tensor's shape, (float) dtype and device.
    pub fn rand_like(&self) -> Result<Tensor> {
        Self::uniform_on(self.shape().clone(), 0.0, 1.0, self.dtype.float_or_default(), self.device)
    }

    /// Standard normal samples with this tensor's shape, (float) dtype and device.
    pub fn randn_like(&self) -> Result<Tensor> {
        Self::normal_on(self.shape().clone(), 0.0, 1.0, self.dtype.float_or_default(), self.device)
    }

    /// A random permutation of `0..n` as `i64` (for shuffling).
    pub fn randperm(n: usize) -> Result<Tensor> {
        let storage = backend_for(Device::Cpu)?.randperm(n)?;
        Ok(Tensor::from_storage(storage, Shape::from([n])))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_takes_scalars_exactly() {
        let z = Tensor::full([2], -0.0, DType::F32).unwrap().to_vec::<f32>().unwrap();
        assert!(z.iter().all(|v| v.to_bits() == (-0.0f32).to_bits()));
        let big = (1i64 << 53) + 1;
        assert_eq!(Tensor::full([1], big, DType::I64).unwrap().to_vec::<i64>().unwrap(), vec![big]);
        assert_eq!(Tensor::full([1], -1, DType::U8).unwrap().to_vec::<u8>().unwrap(), vec![255]);
        assert_eq!(Tensor::full([1], 2.9, DType::I64).unwrap().to_vec::<i64>().unwrap(), vec![2]);
        let t = Tensor::zeros([2], DType::I64).unwrap();
        assert_eq!(t.full_like(big).unwrap().to_vec::<i64>().unwrap(), vec![big, big]);
    }

    #[test]
    fn eye_is_the_identity() {
        let e = Tensor::eye(3).unwrap();
        assert_eq!((e.shape().dims(), e.dtype()), (&[3usize, 3][..], DType::F32));
        assert_eq!(e.to_vec::<f32>().unwrap(), vec![1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]);
        assert_eq!(Tensor::eye(1).unwrap().to_vec::<f32>().unwrap(), vec![1.0]);
        assert_eq!(Tensor::eye(0).unwrap().shape(), &[0, 0]);
        assert!(Tensor::eye(usize::MAX).is_err());
    }

    #[test]
    fn linspace_hits_both_ends() {
        let l = Tensor::linspace(-1.0, 1.0, 5).unwrap();
        assert_eq!(l.to_vec::<f32>().unwrap(), vec![-1.0, -0.5, 0.0, 0.5, 1.0]);
        // Filled from both ends, so the last value is exactly `end` however the steps round.
        let t = Tensor::linspace(0.0, 0.3, 7).unwrap().to_vec::<f32>().unwrap();
        assert_eq!((t[0], t[6]), (0.0, 0.3));
        for (i, v) in t.iter().enumerate() {
            assert!((*v as f64 - 0.05 * i as f64).abs() < 1e-7, "{i}: {v}");
        }
        assert_eq!(Tensor::linspace(2.0, 5.0, 1).unwrap().to_vec::<f32>().unwrap(), vec![2.0]);
        assert_eq!(Tensor::linspace(2.0, 5.0, 0).unwrap().shape(), &[0]);
        assert_eq!(Tensor::linspace(3.0, 1.0, 3).unwrap().to_vec::<f32>().unwrap(), vec![3.0, 2.0, 1.0]);
        assert!(Tensor::linspace(0.0, f64::NAN, 3).is_err());
        assert!(Tensor::linspace(f64::INFINITY, 0.0, 3).is_err());
    }

    #[test]
    fn arange_with_negative_and_float_steps() {
        let i = |a: i64, b: i64, s: i64| Tensor::arange_step(a, b, s).unwrap().to_vec::<i64>().unwrap();
        assert_eq!(i(5, 0, -2), vec![5, 3, 1]);
        assert_eq!(i(-3, 3, 2), vec![-3, -1, 1]);
        assert_eq!(i(0, 0, -1), Vec::<i64>::new());
        let f = |a: f64, b: f64, s: f64| Tensor::arange_step(a, b, s).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(f(0.0, 1.0, 0.25), vec![0.0, 0.25, 0.5, 0.75]);
        assert_eq!(f(1.0, 0.0, -0.5), vec![1.0, 0.5]);
        // The count is ceil((end - start) / step): a partial last step still yields a value.
        assert_eq!(f(0.0, 1.0, 0.3).len(), 4);
        assert_eq!(Tensor::arange_step(0, 1, 0.5).unwrap().dtype(), DType::F32);
        assert!(Tensor::arange_step(0, 5, 0).is_err());
        assert!(Tensor::arange_step(0.0, 5.0, 0.0).is_err());
        assert!(Tensor::arange_step(0, 5, -1).is_err());
        assert!(Tensor::arange_step(5.0, 0.0, 0.5).is_err());
        assert!(Tensor::arange_step(0.0, f64::INFINITY, 1.0).is_err());
    }
}
