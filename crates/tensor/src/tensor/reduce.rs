//! Reductions over all dimensions or a set of dimensions, with `keepdim`.
//!
//! Integer sums and products accumulate in `i64` (so `u8` masks count correctly); means,
//! variances and `logsumexp` of integers compute in `f32`.

use super::Tensor;
use crate::backend::ReduceOp;
use crate::dtype::DType;
use crate::error::infallible;
use crate::layout::Layout;
use crate::shape::{Dim, Dims, reduced_shape};
use crate::{Error, Result};
use smallvec::SmallVec;

impl Tensor {
    fn all_dims(&self) -> SmallVec<[usize; 4]> {
        (0..self.rank()).collect()
    }

    /// Runs a reduction over resolved `dims`.
    pub(crate) fn reduce_dims(
        &self,
        op: ReduceOp,
        name: &'static str,
        dims: &[usize],
        keepdim: bool,
    ) -> Result<Tensor> {
        let src = match op {
            ReduceOp::Sum | ReduceOp::Prod if self.dtype == DType::U8 => self.try_to_dtype(DType::I64)?,
            _ => self.clone(),
        };
        if matches!(op, ReduceOp::Max | ReduceOp::Min | ReduceOp::ArgMax | ReduceOp::ArgMin)
            && dims.iter().any(|&d| self.shape()[d] == 0)
        {
            return Err(Error::shape(
                name,
                format!("cannot reduce over an empty dimension of shape {:?}", self.shape()),
            ));
        }
        let s = src.read(|v| src.backend().reduce(op, v, dims))?;
        let kept = reduced_shape(self.shape(), dims, true);
        let out = Tensor::from_storage(s, kept);
        if keepdim {
            return Ok(out);
        }
        let shape = reduced_shape(self.shape(), dims, false);
        Ok(out.with_layout(Layout::contiguous(shape)))
    }

    /// The sum over `dims`. As in PyTorch an empty `dims` sums over every dimension, and a
    /// 0-d tensor accepts `0` and `-1` (see [`Dims::resolve_reduction`], which all reductions
    /// here follow).
    ///
    /// ```
    /// use ember_tensor::Tensor;
    /// let t = Tensor::arange(0.0, 6.0)?.reshape([2, 3])?;
    /// assert_eq!(t.sum(1, false)?.to_vec::<f32>()?, vec![3.0, 12.0]);
    /// assert_eq!(t.sum([0, 1], true)?.shape(), &[1, 1]);
    /// assert_eq!(t.sum_all().to_scalar::<f32>()?, 15.0);
    /// assert_eq!(t.sum(Vec::<i64>::new(), true)?.shape(), &[1, 1]);
    /// assert_eq!(ember_tensor::Tensor::scalar(2.0f32).sum(-1, false)?.to_scalar::<f32>()?, 2.0);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn sum(&self, dims: impl Dims, keepdim: bool) -> Result<Tensor> {
        let d = dims.resolve_reduction(self.rank(), "sum")?;
        self.reduce_dims(ReduceOp::Sum, "sum", &d, keepdim)
    }

    /// The sum of all elements, as a 0-d tensor.
    pub fn sum_all(&self) -> Tensor {
        infallible(self.reduce_dims(ReduceOp::Sum, "sum", &self.all_dims(), false))
    }

    /// The mean over `dims`.
    pub fn mean(&self, dims: impl Dims, keepdim: bool) -> Result<Tensor> {
        let d = dims.resolve_reduction(self.rank(), "mean")?;
        self.mean_resolved(&d, keepdim)
    }

    fn mean_resolved(&self, d: &[usize], keepdim: bool) -> Result<Tensor> {
        if self.dtype.is_half() {
            return self.rounded_from_f32(|x| x.mean_resolved(d, keepdim));
        }
        let n: usize = d.iter().map(|&i| self.shape()[i]).product();
        let x = self.try_to_dtype(self.dtype.float_or_default())?;
        Ok(x.reduce_dims(ReduceOp::Sum, "mean", d, keepdim)?.div_scalar(n as f64))
    }

    /// The mean of all elements, as a 0-d tensor (NaN for an empty tensor).
    pub fn mean_all(&self) -> Tensor {
        infallible(self.mean_resolved(&self.all_dims(), false))
    }

    /// The product over `dims`.
    pub fn prod(&self, dims: impl Dims, keepdim: bool) -> Result<Tensor> {
        let d = dims.resolve_reduction(self.rank(), "prod")?;
        self.reduce_dims(ReduceOp::Prod, "prod", &d, keepdim)
    }

    /// The product of all elements.
    pub fn prod_all(&self) -> Tensor {
        infallible(self.reduce_dims(ReduceOp::Prod, "prod", &self.all_dims(), false))
    }

    /// The maximum over `dims` (PyTorch's `amax`); NaN propagates. Empty dimensions are an
    /// error.
    pub fn max(&self, dims: impl Dims, keepdim: bool) -> Result<Tensor> {
        let d = dims.resolve_reduction(self.rank(), "max")?;
        self.reduce_dims(ReduceOp::Max, "max", &d, keepdim)
    }

    /// The maximum of all elements; an error for an empty tensor.
    pub fn max_all(&self) -> Result<Tensor> {
        self.reduce_dims(ReduceOp::Max, "max", &self.all_dims(), false)
    }

    /// The minimum over `dims` (PyTorch's `amin`); NaN propagates.
    pub fn min(&self, dims: impl Dims, keepdim: bool) -> Result<Tensor> {
        let d = dims.resolve_reduction(self.rank(), "min")?;
        self.reduce_dims(ReduceOp::Min, "min", &d, keepdim)
    }

    /// The minimum of all elements; an error for an empty tensor.
    pub fn min_all(&self) -> Result<Tensor> {
        self.reduce_dims(ReduceOp::Min, "min", &self.all_dims(), false)
    }

    /// The `i64` index of the first maximum along `dim` (0 for a 0-d tensor, which accepts
    /// `dim` 0 or -1 like PyTorch).
    pub fn argmax(&self, dim: impl Dim, keepdim: bool) -> Result<Tensor> {
        self.arg_extreme(dim, keepdim, ReduceOp::ArgMax, "argmax")
    }

    /// The `i64` index of the first minimum along `dim` (0 for a 0-d tensor).
    pub fn argmin(&self, dim: impl Dim, keepdim: bool) -> Result<Tensor> {
        self.arg_extreme(dim, keepdim, ReduceOp::ArgMin, "argmin")
    }

    fn arg_extreme(&self, dim: impl Dim, keepdim: bool, op: ReduceOp, name: &'static str) -> Result<Tensor> {
        if self.rank() == 0 {
            // A scalar is its own only element, along dimension 0 or -1.
            if let Err(Error::Dim { dim, .. }) = dim.resolve(1, name) {
                return Err(Error::Dim { op: name, dim, rank: 0 });
            }
            return Ok(Tensor::scalar(0i64));
        }
        let d = dim.resolve(self.rank(), name)?;
        self.reduce_dims(op, name, &[d], keepdim)
    }

    /// The flat index of the first maximum of all elements.
    pub fn argmax_all(&self) -> Result<Tensor> {
        self.flatten_all().argmax(0, false)
    }

    /// The flat index of the first minimum of all elements.
    pub fn argmin_all(&self) -> Result<Tensor> {
        self.flatten_all().argmin(0, false)
    }

    /// The variance over `dims`, with Bessel's correction when `unbiased`.
    pub fn var(&self, dims: impl Dims, unbiased: bool, keepdim: bool) -> Result<Tensor> {
        let d = dims.resolve_reduction(self.rank(), "var")?;
        self.var_resolved(&d, unbiased, keepdim)
    }

    fn var_resolved(&self, d: &[usize], unbiased: bool, keepdim: bool) -> Result<Tensor> {
        if self.dtype.is_half() {
            return self.rounded_from_f32(|x| x.var_resolved(d, unbiased, keepdim));
        }
        let n: usize = d.iter().map(|&i| self.shape()[i]).product();
        let x = self.try_to_dtype(self.dtype.float_or_default())?;
        let mean = x.mean_resolved(d, true)?;
        let sq = x.sub(&mean)?.square();
        // An empty set has no degrees of freedom rather than -1: its variance is 0 / 0 = NaN.
        let denom = if unbiased { (n as f64 - 1.0).max(0.0) } else { n as f64 };
        Ok(sq.reduce_dims(ReduceOp::Sum, "var", d, keepdim)?.div_scalar(denom))
    }

    /// The variance of all elements.
    pub fn var_all(&self, unbiased: bool) -> Tensor {
        infallible(self.var_resolved(&self.all_dims(), unbiased, false))
    }

    /// The standard deviation over `dims`.
    pub fn std(&self, dims: impl Dims, unbiased: bool, keepdim: bool) -> Result<Tensor> {
        // Resolved here, not by `var`, so that a bad dimension is an error naming `std`.
        let d = dims.resolve_reduction(self.rank(), "std")?;
        if self.dtype.is_half() {
            return self.rounded_from_f32(|x| Ok(x.var_resolved(&d, unbiased, keepdim)?.sqrt()));
        }
        Ok(self.var_resolved(&d, unbiased, keepdim)?.sqrt())
    }

    /// The standard deviation of all elements.
    pub fn std_all(&self, unbiased: bool) -> Tensor {
        if self.dtype.is_half() {
            return infallible(self.rounded_from_f32(|x| Ok(x.var_all(unbiased).sqrt())));
        }
        self.var_all(unbiased).sqrt()
    }

    /// `f` (a reduction composed of several ops) computed on `self` widened to `f32`, its
    /// result rounded once to `self`'s 16-bit dtype: as PyTorch computes these reductions,
    /// and not off by the rounding of every intermediate (the mean inside a variance, the
    /// exponentials inside a log-sum-exp) to 8 or 11 bits.
    fn rounded_from_f32(&self, f: impl FnOnce(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
        Ok(f(&self.to_dtype(DType::F32))?.to_dtype(self.dtype))
    }

    /// `log(sum(exp(x)))` over `dims`, computed stably by shifting by the maximum.
    pub fn logsumexp(&self, dims: impl Dims, keepdim: bool) -> Result<Tensor> {
        let d = dims.resolve_reduction(self.rank(), "logsumexp")?;
        if self.dtype.is_half() {
            return self.rounded_from_f32(|x| x.logsumexp(&d[..], keepdim));
        }
        let x = self.try_to_dtype(self.dtype.float_or_default())?;
        if d.iter().any(|&i| self.shape()[i] == 0) {
            // The log of an empty sum is -inf (PyTorch agrees); there is no maximum to shift by.
            let shape = reduced_shape(self.shape(), &d, keepdim);
            return Tensor::full_on(shape, f64::NEG_INFINITY, x.dtype(), x.device());
        }
        let m = x.reduce_dims(ReduceOp::Max, "logsumexp", &d, true)?;
        // An all -inf slice has no finite maximum; shifting it by 0 yields -inf, not NaN.
        let finite = m.abs().lt_scalar(f64::INFINITY);
        let shift = finite.where_cond(&m, &m.zeros_like())?;
        let s = x.sub(&shift)?.exp().reduce_dims(ReduceOp::Sum, "logsumexp", &d, true)?.log();
        let out = s.add(&shift)?;
        if keepdim {
            return Ok(out);
        }
        out.reshape(reduced_shape(self.shape(), &d, false))
    }

    /// Softmax along `dim` (fused, one kernel).
    ///
    /// ```
    /// use ember_tensor::Tensor;
    /// let p = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3])?.softmax(0)?;
    /// let s: f32 = p.to_vec::<f32>()?.iter().sum();
    /// assert!((s - 1.0).abs() < 1e-6);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn softmax(&self, dim: impl Dim) -> Result<Tensor> {
        self.softmax_impl(dim, false, "softmax")
    }

    /// Log-softmax along `dim` (fused, numerically stable).
    pub fn log_softmax(&self, dim: impl Dim) -> Result<Tensor> {
        self.softmax_impl(dim, true, "log_softmax")
    }

    fn softmax_impl(&self, dim: impl Dim, log: bool, name: &'static str) -> Result<Tensor> {
        if self.rank() == 0 {
            // Softmax of a scalar along dimension 0 or -1, as PyTorch allows.
            dim.resolve(1, name)?;
            return self.unsqueeze(0)?.softmax_impl(0usize, log, name)?.reshape(());
        }
        let d = dim.resolve(self.rank(), name)?;
        let x = self.try_to_dtype(self.dtype.float_or_default())?;
        let s = x.read(|v| x.backend().softmax(v, d, log))?;
        Ok(Tensor::from_storage(s, self.shape().clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reductions_over_dims() {
        let t = Tensor::arange(0.0, 24.0).unwrap().reshape([2, 3, 4]).unwrap().to_dtype(DType::F64);
        assert_eq!(t.sum([0, 2], false).unwrap().to_vec::<f64>().unwrap(), vec![60.0, 92.0, 124.0]);
        assert_eq!(t.max(-1, false).unwrap().to_vec::<f64>().unwrap(), vec![3.0, 7.0, 11.0, 15.0, 19.0, 23.0]);
        assert_eq!(t.argmin(1, true).unwrap().shape(), &[2, 1, 4]);
        assert_eq!(t.mean_all().to_scalar::<f64>().unwrap(), 11.5);
        let v = t.var_all(true).to_scalar::<f64>().unwrap();
        assert!((v - 50.0).abs() < 1e-9, "{v}");
        assert_eq!(t.prod(0, false).unwrap().to_vec::<f64>().unwrap()[1], 13.0);
    }

    /// Sums of a million elements, and of a few long rows, come out bitwise the same on
    /// every call and whatever the number of threads: partial results combine in a fixed
    /// order, never in the order threads finish.
    #[test]
    fn long_sums_are_bitwise_reproducible() {
        // Magnitudes spread over many orders, so that any change in the order of additions
        // changes the rounded result.
        let v: Vec<f32> = (0..1_000_003u64)
            .map(|i| {
                let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
                (h as f32 / 16_777_216.0 - 0.5) * 10f32.powi((i % 9) as i32 - 4)
            })
            .collect();
        let flat = Tensor::from_vec(v.clone(), [v.len()]).unwrap();
        let rows = Tensor::from_vec(v[..1_000_000].to_vec(), [2, 500_000]).unwrap();
        let run = || {
            let s = flat.sum_all().to_scalar::<f32>().unwrap().to_bits();
            let m = flat.mean_all().to_scalar::<f32>().unwrap().to_bits();
            let r: Vec<u32> =
                rows.sum(1, false).unwrap().to_vec::<f32>().unwrap().iter().map(|x| x.to_bits()).collect();
            (s, m, r)
        };
        let want = run();
        for threads in [1, 2, 3, 8] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            for _ in 0..20 {
                assert_eq!(pool.install(run), want, "{threads} threads");
            }
        }
        for _ in 0..20 {
            assert_eq!(run(), want);
        }
    }

    #[test]
    fn empty_dims_reduce_everything_and_scalars_take_dim_zero() {
        let t = Tensor::arange(0.0, 6.0).unwrap().reshape([2, 3]).unwrap();
        let none: &[i64] = &[];
        assert_eq!(t.sum(none, false).unwrap().to_scalar::<f32>().unwrap(), 15.0);
        assert_eq!(t.sum(none, true).unwrap().shape(), &[1, 1]);
        assert_eq!(t.mean(Vec::<usize>::new(), false).unwrap().to_scalar::<f32>().unwrap(), 2.5);
        assert_eq!(t.prod(none, false).unwrap().to_scalar::<f32>().unwrap(), 0.0);
        assert_eq!(t.max(none, false).unwrap().to_scalar::<f32>().unwrap(), 5.0);
        assert_eq!(t.min(none, true).unwrap().shape(), &[1, 1]);
        assert_eq!(t.var(none, false, false).unwrap().to_scalar::<f32>().unwrap(), 35.0 / 12.0);
        let lse = t.logsumexp(none, false).unwrap().to_scalar::<f32>().unwrap();
        assert!((lse as f64 - (0..6).map(|i| (i as f64).exp()).sum::<f64>().ln()).abs() < 1e-5);
        // A 0-d tensor reduces along 0 or -1 to itself, with or without keepdim.
        let s = Tensor::scalar(4.0f32);
        for r in [s.sum(0, false), s.sum(-1, true), s.mean([0], false), s.max(-1, false), s.prod(0, true)] {
            let r = r.unwrap();
            assert_eq!((r.rank(), r.to_scalar::<f32>().unwrap()), (0, 4.0));
        }
        assert_eq!(s.std(0, false, false).unwrap().to_scalar::<f32>().unwrap(), 0.0);
        assert_eq!(s.argmax(0, false).unwrap().to_scalar::<i64>().unwrap(), 0);
        assert_eq!(s.argmin(-1, true).unwrap().to_scalar::<i64>().unwrap(), 0);
        let e = s.sum(1, false).unwrap_err().to_string();
        assert_eq!(e, "sum: dimension 1 is out of range for a tensor of rank 0");
        assert!(s.sum([0, -1], false).is_err());
        assert!(s.argmax(-2, false).is_err());
    }

    #[test]
    fn integer_sums_and_masks() {
        let m = Tensor::from_vec(vec![1u8, 1, 0, 1], [4]).unwrap();
        assert_eq!(m.sum_all().to_scalar::<i64>().unwrap(), 3);
        assert_eq!(m.mean_all().to_scalar::<f32>().unwrap(), 0.75);
    }

    #[test]
    fn logsumexp_is_stable() {
        let t = Tensor::from_vec(vec![1000.0f32, 1000.0, f32::NEG_INFINITY, f32::NEG_INFINITY], [2, 2]).unwrap();
        let l = t.logsumexp(1, false).unwrap().to_vec::<f32>().unwrap();
        assert!((l[0] - (1000.0 + 2f32.ln())).abs() < 1e-3);
        assert_eq!(l[1], f32::NEG_INFINITY);
    }

    #[test]
    fn log_softmax_keeps_f32_precision_for_large_logits() {
        // x - (m + ln(sum)) would round m + ln(sum) to the precision of 1e4 (~1e-3).
        let t = Tensor::from_vec(vec![1.0e4f32, 1.0e4 + 1.0], [2]).unwrap();
        let l = t.log_softmax(0).unwrap().to_vec::<f32>().unwrap();
        let c = (1.0 + (-1.0f64).exp()).ln(); // the log-sum-exp above the larger logit
        let want = [-1.0 - c, -c];
        for (g, w) in l.iter().zip(want) {
            assert!((*g as f64 - w).abs() < 1e-6, "{g} vs {w}");
        }
    }

    #[test]
    fn softmax_along_any_dim() {
        let t = Tensor::arange(0.0, 6.0).unwrap().reshape([2, 3]).unwrap();
        let s0 = t.softmax(0).unwrap();
        let col: f32 = s0.narrow(1, 1, 1).unwrap().sum_all().to_scalar().unwrap();
        assert!((col - 1.0).abs() < 1e-6);
        let ls = t.log_softmax(-1).unwrap().exp().sum(1, false).unwrap();
        for v in ls.to_vec::<f32>().unwrap() {
            assert!((v - 1.0).abs() < 1e-6);
        }
        assert!(t.max_all().is_ok());
        assert!(Tensor::zeros([0], DType::F32).unwrap().max_all().is_err());
    }
}
