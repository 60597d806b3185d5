//! Pooling and interpolation with PyTorch's semantics (NCHW and NCL, unbatched inputs where
//! PyTorch takes them; see [`crate::ops::pool`]), and the plane kernels their gradients use.

use super::Tensor;
use crate::ops::pool::{
    AvgPoolArgs, InterpolateArgs, MaxPoolArgs, PoolPlan, PoolWindows, Resample, adaptive_avg_pool_plan,
    adaptive_max_pool_plan, avg_pool_plan, interpolate_plan, max_pool_plan,
};
use crate::shape::Shape;
use crate::{DType, Error, Result};

/// The name of a `D`-dimensional operation.
fn named<const D: usize>(one: &'static str, two: &'static str) -> &'static str {
    if D == 1 { one } else { two }
}

impl Tensor {
    /// An error unless the tensor holds floats.
    fn float_input(&self, op: &'static str) -> Result<()> {
        if !self.dtype.is_float() {
            return Err(Error::dtype(op, format!("expected a float input, got {}", self.dtype)));
        }
        Ok(())
    }

    /// Max pooling of `[N, C, h, w]` planes over resolved windows: the values and the flat
    /// `i64` positions (`i * w + j`) of the maxima in their planes, both `[N, C, oh, ow]`.
    pub fn max_pool2d_resolved(&self, windows: &PoolWindows) -> Result<(Tensor, Tensor)> {
        self.float_input("max_pool2d")?;
        let [oh, ow] = windows.output();
        let (v, i) = self.read(|x| self.backend().max_pool2d(x, windows))?;
        let shape = Shape::from([self.shape()[0], self.shape()[1], oh, ow]);
        Ok((Tensor::from_storage(v, shape.clone()), Tensor::from_storage(i, shape)))
    }

    /// A separable linear map ([`Resample`]) of `[N, C, h, w]` planes: `[N, C, oh, ow]`.
    pub fn resample2d(&self, map: &Resample) -> Result<Tensor> {
        self.float_input("resample2d")?;
        let [oh, ow] = map.output();
        let s = self.read(|x| self.backend().resample2d(x, map))?;
        Ok(Tensor::from_storage(s, Shape::from([self.shape()[0], self.shape()[1], oh, ow])))
    }

    /// `self` (`[N, C, oh, ow]`) added into zero planes of extent `plane` at the flat
    /// positions `index` (`i64`, of `self`'s shape): `[N, C, h, w]`. The gradient of a max
    /// pool whose argmax is `index`.
    pub fn scatter_planes(&self, index: &Tensor, plane: [usize; 2]) -> Result<Tensor> {
        let op = "max_pool2d_backward";
        self.float_input(op)?;
        self.same_device(op, index)?;
        if index.dtype() != DType::I64 {
            return Err(Error::dtype(op, format!("expected an i64 index, got {}", index.dtype())));
        }
        let s = self.read2(index, |x, i| self.backend().scatter_planes(x, i, plane))?;
        Ok(Tensor::from_storage(s, Shape::from([self.shape()[0], self.shape()[1], plane[0], plane[1]])))
    }

    /// `out[n, c, p] = self[n, c, index[n, c, p]]` over flattened planes: `self` is
    /// `[N, C, h, w]`, `index` `[N, C, oh, ow]` (`i64`); the adjoint of
    /// [`Tensor::scatter_planes`].
    pub fn gather_planes(&self, index: &Tensor) -> Result<Tensor> {
        let op = "max_pool2d_backward";
        self.float_input(op)?;
        self.same_device(op, index)?;
        let s = self.read2(index, |x, i| self.backend().gather_planes(x, i))?;
        Ok(Tensor::from_storage(s, index.shape().clone()))
    }

    /// Runs a planned max pool and shapes both results as planned.
    fn run_max_pool(&self, op: &'static str, plan: &PoolPlan<PoolWindows>) -> Result<(Tensor, Tensor)> {
        self.float_input(op)?;
        let (v, i) = self.reshape(&plan.input)?.max_pool2d_resolved(&plan.map)?;
        Ok((v.reshape(&plan.output)?, i.reshape(&plan.output)?))
    }

    /// Runs a planned linear map and shapes the result as planned.
    fn run_resample(&self, op: &'static str, plan: &PoolPlan<Resample>) -> Result<Tensor> {
        self.float_input(op)?;
        self.reshape(&plan.input)?.resample2d(&plan.map)?.reshape(&plan.output)
    }

    /// `D`-dimensional max pooling (`D` = 1 or 2) with the positions of the maxima: `self`
    /// is `[N, C, ..]` or unbatched `[C, ..]`; the indices are `i64` flat positions in each
    /// plane, as PyTorch's `return_indices=True` gives them.
    pub fn max_pool_with_indices<const D: usize>(&self, args: &MaxPoolArgs<D>) -> Result<(Tensor, Tensor)> {
        let op = named::<D>("max_pool1d", "max_pool2d");
        let plan = max_pool_plan(op, self.shape(), args)?;
        self.run_max_pool(op, &plan)
    }

    /// 1-d max pooling (PyTorch's `max_pool1d`): `[N, C, L]` or `[C, L]`.
    pub fn max_pool1d(&self, args: &MaxPoolArgs<1>) -> Result<Tensor> {
        Ok(self.max_pool_with_indices(args)?.0)
    }

    /// 2-d max pooling (PyTorch's `max_pool2d`): `[N, C, H, W]` or `[C, H, W]`.
    ///
    /// ```
    /// use ember_tensor::{MaxPoolArgs, Tensor};
    /// let x = Tensor::from_vec((0..16).map(|v| v as f32).collect(), [1, 1, 4, 4])?;
    /// let (y, i) = x.max_pool2d_with_indices(&MaxPoolArgs::new(2))?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![5.0, 7.0, 13.0, 15.0]);
    /// assert_eq!(i.to_vec::<i64>()?, vec![5, 7, 13, 15]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn max_pool2d(&self, args: &MaxPoolArgs<2>) -> Result<Tensor> {
        Ok(self.max_pool_with_indices(args)?.0)
    }

    /// [`Tensor::max_pool2d`] with the flat positions of the maxima.
    pub fn max_pool2d_with_indices(&self, args: &MaxPoolArgs<2>) -> Result<(Tensor, Tensor)> {
        self.max_pool_with_indices(args)
    }

    /// `D`-dimensional average pooling (`D` = 1 or 2; PyTorch's `avg_pool1d` /
    /// `avg_pool2d`): `[N, C, ..]` or unbatched `[C, ..]`.
    pub fn avg_pool<const D: usize>(&self, args: &AvgPoolArgs<D>) -> Result<Tensor> {
        let op = named::<D>("avg_pool1d", "avg_pool2d");
        let plan = avg_pool_plan(op, self.shape(), args)?;
        self.run_resample(op, &plan)
    }

    /// 1-d average pooling (PyTorch's `avg_pool1d`).
    pub fn avg_pool1d(&self, args: &AvgPoolArgs<1>) -> Result<Tensor> {
        self.avg_pool(args)
    }

    /// 2-d average pooling (PyTorch's `avg_pool2d`).
    ///
    /// ```
    /// use ember_tensor::{AvgPoolArgs, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], [1, 1, 2, 2])?;
    /// let y = x.avg_pool2d(&AvgPoolArgs::new(2).stride(1).padding(1).count_include_pad(false))?;
    /// assert_eq!(y.to_vec::<f64>()?, vec![1.0, 1.5, 2.0, 2.0, 2.5, 3.0, 3.0, 3.5, 4.0]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn avg_pool2d(&self, args: &AvgPoolArgs<2>) -> Result<Tensor> {
        self.avg_pool(args)
    }

    /// `D`-dimensional adaptive average pooling to `size` (PyTorch's windows
    /// `floor(i * in / out)..ceil((i + 1) * in / out)`).
    pub fn adaptive_avg_pool<const D: usize>(&self, size: [usize; D]) -> Result<Tensor> {
        let op = named::<D>("adaptive_avg_pool1d", "adaptive_avg_pool2d");
        let plan = adaptive_avg_pool_plan(op, self.shape(), size)?;
        self.run_resample(op, &plan)
    }

    /// 1-d adaptive average pooling (PyTorch's `adaptive_avg_pool1d`).
    pub fn adaptive_avg_pool1d(&self, size: usize) -> Result<Tensor> {
        self.adaptive_avg_pool([size])
    }

    /// 2-d adaptive average pooling (PyTorch's `adaptive_avg_pool2d`).
    pub fn adaptive_avg_pool2d(&self, size: [usize; 2]) -> Result<Tensor> {
        self.adaptive_avg_pool(size)
    }

    /// `D`-dimensional adaptive max pooling to `size`, with the flat positions of the maxima.
    pub fn adaptive_max_pool_with_indices<const D: usize>(&self, size: [usize; D]) -> Result<(Tensor, Tensor)> {
        let op = named::<D>("adaptive_max_pool1d", "adaptive_max_pool2d");
        let plan = adaptive_max_pool_plan(op, self.shape(), size)?;
        self.run_max_pool(op, &plan)
    }

    /// 2-d adaptive max pooling (PyTorch's `adaptive_max_pool2d`).
    pub fn adaptive_max_pool2d(&self, size: [usize; 2]) -> Result<Tensor> {
        Ok(self.adaptive_max_pool_with_indices(size)?.0)
    }

    /// Resamples `[N, C, L]` or `[N, C, H, W]` inputs (PyTorch's `F.interpolate` with modes
    /// `nearest`, `linear` and `bilinear`).
    ///
    /// ```
    /// use ember_tensor::{InterpolateArgs, InterpolateMode, Tensor};
    /// let x = Tensor::from_vec(vec![0.0f32, 1.0], [1, 1, 2])?;
    /// let up = InterpolateArgs::scale_factor([2.0]).mode(InterpolateMode::Linear).align_corners(true);
    /// let y = x.interpolate(&up)?.to_vec::<f32>()?;
    /// assert!((y[1] - 1.0 / 3.0).abs() < 1e-6);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn interpolate(&self, args: &InterpolateArgs) -> Result<Tensor> {
        let plan = interpolate_plan(self.shape(), args, self.dtype)?;
        self.run_resample("interpolate", &plan)
    }
}
