//! In-place operations. They write through every handle and view of the storage and bump
//! its version counter, which is how autograd notices that a saved value changed.

use super::Tensor;
use crate::backend::{BinaryOp, UnaryOp};
use crate::dtype::{Element, Scalar};
use crate::shape::Shape;
use crate::storage::StorageCell;
use crate::{Device, Error, Result};

/// Elements per parallel task of `update_`: a fused optimizer update is a few flops per
/// element, so smaller tasks would cost more in scheduling than they save.
const UPDATE_GRAIN: usize = 1 << 16;

/// The body of `update_` for one chunk. The operands are cut to the chunk's length first,
/// which lets the compiler drop the bounds checks and vectorise the user's closure.
#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn update_chunk<T: Element, const N: usize, F: Fn(&mut T, [T; N])>(dst: &mut [T], operands: [&[T]; N], f: &F) {
    let len = dst.len();
    let operands: [&[T]; N] = std::array::from_fn(|k| &operands[k][..len]);
    for i in 0..len {
        let args: [T; N] = std::array::from_fn(|k| operands[k][i]);
        f(&mut dst[i], args);
    }
}

impl Tensor {
    /// An error when a write through this layout would hit one element twice.
    pub(super) fn check_writable(&self, op: &'static str) -> Result<()> {
        // An empty tensor has no elements to hit twice, whatever its (saturated) strides say.
        let overlapping = self.numel() > 0 && self.shape().iter().zip(self.strides()).any(|(&d, &s)| d > 1 && s == 0);
        if overlapping {
            return Err(Error::invalid(
                op,
                format!(
                    "cannot write in place to a broadcast view of shape {:?} (strides {:?}); call contiguous() first",
                    self.shape(),
                    self.strides()
                ),
            ));
        }
        Ok(())
    }

    /// `src` converted to this tensor's dtype and broadcast to its shape, copied first if it
    /// shares storage with `self`.
    fn operand_for(&self, op: &'static str, src: &Tensor) -> Result<Tensor> {
        self.same_device(op, src)?;
        if src.dtype.is_float() && self.dtype.is_int() {
            return Err(Error::dtype(
                op,
                format!("cannot write a {} result into a {} tensor in place", src.dtype, self.dtype),
            ));
        }
        let s = if src.shares_storage(self) { src.try_copy()? } else { src.clone() };
        let s = s.converted_for(op, self.dtype)?;
        let shape: Shape = self.shape().clone();
        Ok(s.with_layout(s.layout.broadcast_to(op, &shape)?))
    }

    fn binary_inplace(&self, op: BinaryOp, other: &Tensor) -> Result<()> {
        let name = op.inplace_name();
        self.check_writable(name)?;
        let src = self.operand_for(name, other)?;
        let (mut dst, g) = super::locks::write_and_read_one(&self.storage, &src.storage);
        self.backend().binary_inplace(op, &mut dst, &self.layout, (&g, &src.layout))
    }

    /// Applies an elementwise function in place. Float-only functions, and scalar operations
    /// with a float scalar, need a float tensor (their result is float).
    pub fn apply_(&self, op: UnaryOp) -> Result<()> {
        let name = op.inplace_name();
        self.check_writable(name)?;
        if op.is_float_only() && !self.dtype.is_float() {
            return Err(Error::dtype(name, format!("{} in place needs a float tensor, got {}", op.name(), self.dtype)));
        }
        if op.scalar().is_some_and(Scalar::is_float) && self.dtype.is_int() {
            return Err(Error::dtype(
                name,
                format!("cannot write a float result into a {} tensor in place", self.dtype),
            ));
        }
        let mut dst = self.storage.write();
        self.backend().unary_inplace(op, &mut dst, &self.layout)
    }

    /// `self += other` (broadcast to `self`'s shape).
    pub fn add_(&self, other: &Tensor) -> Result<()> {
        self.binary_inplace(BinaryOp::Add, other)
    }

    /// `self -= other`.
    pub fn sub_(&self, other: &Tensor) -> Result<()> {
        self.binary_inplace(BinaryOp::Sub, other)
    }

    /// `self *= other`.
    pub fn mul_(&self, other: &Tensor) -> Result<()> {
        self.binary_inplace(BinaryOp::Mul, other)
    }

    /// `self /= other`; needs a float tensor.
    pub fn div_(&self, other: &Tensor) -> Result<()> {
        if self.dtype.is_int() {
            return Err(Error::dtype(
                "div_",
                format!("true division in place needs a float tensor, got {}", self.dtype),
            ));
        }
        self.binary_inplace(BinaryOp::Div, other)
    }

    /// `self += alpha * other` (PyTorch's `add_(other, alpha=...)`).
    pub fn add_scaled_(&self, other: &Tensor, alpha: f64) -> Result<()> {
        if alpha == 1.0 {
            return self.add_(other);
        }
        self.add_(&other.mul_scalar(alpha))
    }

    /// `self += s`.
    pub fn add_scalar_(&self, s: impl Into<Scalar>) -> Result<()> {
        self.scalar_inplace(s.into(), UnaryOp::AddScalar)
    }

    /// `self *= s`.
    pub fn mul_scalar_(&self, s: impl Into<Scalar>) -> Result<()> {
        self.scalar_inplace(s.into(), UnaryOp::MulScalar)
    }

    fn scalar_inplace(&self, s: Scalar, make: fn(Scalar) -> UnaryOp) -> Result<()> {
        self.apply_(make(s))
    }

    /// Limits the values to `[min, max]` in place, as [`Tensor::clamp`] does. On an integer
    /// tensor a bound without an integer value is an error: its result would be float.
    pub fn clamp_(&self, min: Option<f64>, max: Option<f64>) -> Result<()> {
        if self.dtype.is_int() && super::unary::clamp_needs_float(min, max) {
            return Err(Error::dtype(
                "clamp_",
                format!(
                    "bounds {min:?} and {max:?} give a float result, which cannot be written into a {} tensor",
                    self.dtype
                ),
            ));
        }
        self.apply_(UnaryOp::Clamp { min: min.unwrap_or(f64::NEG_INFINITY), max: max.unwrap_or(f64::INFINITY) })
    }

    /// Copies `src` (broadcast to this shape, converted to this dtype) into `self`.
    pub fn copy_(&self, src: &Tensor) -> Result<()> {
        self.check_writable("copy_")?;
        self.same_device("copy_", src)?;
        let s = if src.shares_storage(self) { src.try_copy()? } else { src.clone() };
        let s = s.with_layout(s.layout.broadcast_to("copy_", self.shape())?);
        let (mut dst, g) = super::locks::write_and_read_one(&self.storage, &s.storage);
        self.backend().copy_inplace(&mut dst, &self.layout, (&g, &s.layout))
    }

    /// Sets every element to `value`; an error when the dtype cannot hold `value` (see
    /// [`Scalar::to_element_checked`]).
    ///
    /// ```
    /// use ember_tensor::{DType, Tensor};
    /// let t = Tensor::zeros([2], DType::U8)?;
    /// t.fill_(-1)?;
    /// assert_eq!(t.to_vec::<u8>()?, vec![255, 255]);
    /// assert!(t.fill_(256).is_err());
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn fill_(&self, value: impl Into<Scalar>) -> Result<()> {
        let value = value.into();
        self.check_writable("fill_")?;
        value.check_fits(self.dtype, "fill_")?;
        let mut dst = self.storage.write();
        self.backend().fill_inplace(&mut dst, &self.layout, value)
    }

    /// Sets every element to zero.
    pub fn zero_(&self) -> Result<()> {
        self.fill_(0)
    }

    /// Sets the elements where the `u8` `mask` (broadcast to this shape) is non-zero; an
    /// error when the dtype cannot hold `value` (see [`Scalar::to_element_checked`]). A
    /// float value converts into an integer tensor's dtype (truncating), as in
    /// [`Tensor::masked_fill`].
    pub fn masked_fill_(&self, mask: &Tensor, value: impl Into<Scalar>) -> Result<()> {
        let op = "masked_fill_";
        self.check_writable(op)?;
        let value = value.into();
        value.check_fits(self.dtype, op)?;
        let filled = self.masked_fill(mask, value)?;
        self.copy_(&filled)
    }

    /// Updates a contiguous tensor of element type `T` in place with a fused elementwise
    /// function of itself and `N` other contiguous tensors of the same shape and dtype:
    /// `f(&mut self[i], [others[0][i], ...])`. Runs in parallel on large tensors, as a
    /// kernel: with [`flush_denormal`](crate::threading::flush_denormal) on, the closure's
    /// arithmetic flushes subnormals to zero on every thread.
    ///
    /// A CPU-only escape hatch: the closure runs on host memory, so no other backend can
    /// provide it, and tensors on other devices are refused. ember's own kernels (the
    /// optimizers' fused steps among them, see [`Tensor::adam_step_`]) go through the
    /// [`Backend`](crate::backend::Backend) instead.
    ///
    /// ```
    /// use ember_tensor::Tensor;
    /// let p = Tensor::from_vec(vec![1.0f32, 2.0], [2])?;
    /// let g = Tensor::from_vec(vec![0.5f32, 0.5], [2])?;
    /// p.update_::<f32, 1>([&g], |p, [g]| *p -= 0.1 * g)?;
    /// assert_eq!(p.to_vec::<f32>()?, vec![0.95, 1.95]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn update_<T: Element, const N: usize>(
        &self,
        others: [&Tensor; N],
        f: impl Fn(&mut T, [T; N]) + Sync + Send,
    ) -> Result<()> {
        let op = "update_";
        let check = |t: &Tensor, what: &str| -> Result<()> {
            if t.dtype != T::DTYPE {
                return Err(Error::dtype(op, format!("{what} is {}, expected {}", t.dtype, T::DTYPE)));
            }
            if !t.is_contiguous() {
                return Err(Error::invalid(op, format!("{what} must be contiguous")));
            }
            if t.shape() != self.shape() {
                return Err(Error::shape(op, format!("{what} has shape {:?}, expected {:?}", t.shape(), self.shape())));
            }
            Ok(())
        };
        check(self, "the updated tensor")?;
        // The closure reads host memory: a tensor on another device would leave its operand
        // without a host slice to read.
        for (i, t) in [self].into_iter().chain(others).enumerate() {
            if t.device != Device::Cpu {
                let what = if i == 0 { "the updated tensor".to_string() } else { format!("operand {}", i - 1) };
                return Err(Error::Device {
                    device: t.device.to_string(),
                    msg: format!(
                        "{op}: {what} is on {}, but the closure runs on host memory: move it to cpu first",
                        t.device
                    ),
                });
            }
        }
        for (i, o) in others.iter().enumerate() {
            check(o, &format!("operand {i}"))?;
            if o.shares_storage(self) {
                return Err(Error::invalid(op, format!("operand {i} shares storage with the updated tensor")));
            }
        }
        // One read lock per distinct storage (operands may alias each other), all taken in
        // the global lock order together with the write lock.
        let cells: Vec<&StorageCell> = others.iter().map(|o| &**o.storage).collect();
        let (mut dst, reads) = super::locks::write_and_read(&self.storage, &cells);
        let slices: [&[T]; N] = std::array::from_fn(|i| {
            let o = others[i];
            let r = o.layout.contiguous_range().unwrap_or(0..0);
            reads.get(&o.storage).as_cpu().and_then(|c| c.as_slice::<T>()).map(|s| &s[r]).unwrap_or(&[])
        });
        let range = self.layout.contiguous_range().unwrap_or(0..0);
        let d = dst
            .as_cpu_mut()
            .and_then(|c| c.as_mut_slice::<T>())
            .ok_or_else(|| Error::invalid(op, "update_ needs CPU tensors"))?;
        let d = &mut d[range];
        // The closure runs on the helper threads too, which keep the kernels' float mode: run
        // all of it in that mode, whichever thread takes a chunk.
        let _mode = crate::host::float_mode::enter();
        crate::host::iter::fill_chunks(d, UPDATE_GRAIN, |start, chunk| {
            let end = start + chunk.len();
            let operands: [&[T]; N] = std::array::from_fn(|k| &slices[k][start..end]);
            update_chunk(chunk, operands, &f);
        });
        Ok(())
    }

    /// Runs `f` on the elements of a tensor of element type `T` (a contiguous copy of a
    /// strided one). Like [`Tensor::update_`], a CPU-only escape hatch for user code.
    pub fn with_slice<T: Element, R>(&self, f: impl FnOnce(&[T]) -> R) -> Result<R> {
        if self.dtype != T::DTYPE {
            return Err(Error::dtype("with_slice", format!("the tensor is {}, not {}", self.dtype, T::DTYPE)));
        }
        let c = self.try_contiguous()?;
        let g = c.storage.read();
        let r = c.layout.contiguous_range().unwrap_or(0..0);
        let s = g
            .as_cpu()
            .and_then(|s| s.as_slice::<T>())
            .ok_or_else(|| Error::invalid("with_slice", "with_slice needs a CPU tensor"))?;
        Ok(f(&s[r]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    #[test]
    fn inplace_ops_bump_versions_through_views() {
        let t = Tensor::zeros([2, 3], DType::F32).unwrap();
        let row = t.select(0, 1).unwrap();
        row.add_(&Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3]).unwrap()).unwrap();
        assert_eq!(t.version(), 1);
        assert_eq!(row.version(), 1);
        t.mul_scalar_(2.0).unwrap();
        assert_eq!(t.to_vec::<f32>().unwrap(), vec![0.0, 0.0, 0.0, 2.0, 4.0, 6.0]);
        assert_eq!(t.version(), 2);
    }

    #[test]
    fn aliasing_and_bad_targets() {
        let t = Tensor::arange(0.0, 4.0).unwrap().reshape([2, 2]).unwrap();
        t.add_(&t.t().unwrap()).unwrap();
        assert_eq!(t.to_vec::<f32>().unwrap(), vec![0.0, 3.0, 3.0, 6.0]);
        let e = Tensor::ones([1, 3], DType::F32).unwrap().expand([2, 3]).unwrap();
        assert!(e.fill_(0.0).is_err());
        let i = Tensor::arange(0, 3).unwrap();
        assert!(i.add_(&Tensor::ones([3], DType::F32).unwrap()).is_err());
        assert!(i.mul_scalar_(0.5).is_err());
        assert!(i.exp_check().is_err());
    }

    /// Two threads adding two tensors into each other (and a third reading both, and
    /// updating one from the other) finish: each operation takes its locks in one global
    /// order. With the read lock of the source taken before the write lock of the
    /// destination, `a.add_(&b)` beside `b.add_(&a)` deadlocked within a few iterations. The
    /// test fails after two minutes instead of hanging if that comes back; on a working
    /// build it takes milliseconds.
    #[test]
    fn crossed_in_place_updates_do_not_deadlock() {
        use std::sync::mpsc;
        use std::time::Duration;
        let a = Tensor::zeros([4096], DType::F32).unwrap();
        let b = Tensor::zeros([4096], DType::F32).unwrap();
        let (tx, rx) = mpsc::channel();
        let spawn = |f: Box<dyn Fn() + Send>| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for _ in 0..2000 {
                    f();
                }
                let _ = tx.send(());
            })
        };
        let (a1, b1, a2, b2, a3, b3) = (a.clone(), b.clone(), a.clone(), b.clone(), a.clone(), b.clone());
        let threads = [
            spawn(Box::new(move || a1.add_(&b1).unwrap())),
            spawn(Box::new(move || b2.add_(&a2).unwrap())),
            spawn(Box::new(move || {
                a3.add(&b3).unwrap();
                b3.where_cond_check(&a3);
                b3.update_::<f32, 1>([&a3], |x, [y]| *x += 0.0 * y).unwrap();
                a3.copy_(&b3.mul_scalar(1.0)).unwrap();
            })),
        ];
        for _ in 0..threads.len() {
            rx.recv_timeout(Duration::from_secs(120)).expect("crossed in-place updates deadlocked");
        }
        for t in threads {
            t.join().unwrap();
        }
    }

    /// Partial overlap of the source and the written view: the source is read as it was
    /// before the write, as if it had been cloned first.
    #[test]
    fn overlapping_source_reads_the_old_values() {
        let a = Tensor::arange(0.0, 5.0).unwrap();
        a.narrow(0, 1, 4).unwrap().add_(&a.narrow(0, 0, 4).unwrap()).unwrap();
        assert_eq!(a.to_vec::<f32>().unwrap(), vec![0.0, 1.0, 3.0, 5.0, 7.0]);
        let b = Tensor::arange(0.0, 5.0).unwrap();
        b.narrow(0, 0, 4).unwrap().copy_(&b.narrow(0, 1, 4).unwrap()).unwrap();
        assert_eq!(b.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0, 4.0]);
    }

    impl Tensor {
        fn where_cond_check(&self, other: &Tensor) {
            self.gt_scalar(0.0).where_cond(self, other).unwrap();
        }

        fn exp_check(&self) -> Result<()> {
            self.apply_(UnaryOp::Exp)
        }
    }
}
