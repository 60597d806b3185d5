//! Pooling: max pooling (plain and adaptive) and the linear pools (average, adaptive
//! average), on `[N, C, h, w]` planes; 1-d and unbatched inputs are views of these with
//! dimensions of extent 1 ([`PoolPlan`]).
//!
//! Each operation's backward is another operation of the same family, so gradients of
//! every order come out of the same kernels:
//!
//! | operation | gradient wrt its input |
//! |---|---|
//! | `MaxPool(x)` (keeps its argmax `i`) | `ScatterPlanes(g, i)` |
//! | `ScatterPlanes(y, i)` | `GatherPlanes(g, i)` |
//! | `GatherPlanes(x, i)` | `ScatterPlanes(g, i)` |
//! | `Linear(x, map)` | `Linear(g, mapᵀ)` |
//!
//! The argmax is a constant of the graph (its derivative is zero almost everywhere), which
//! is what PyTorch's max pooling does too.

use super::{apply, constant};
use crate::backward_ctx::BackwardCtx;
use crate::op::{Grads, Op, Saves};
use crate::var::Var;
use ember_tensor::backend::{PoolWindows, Resample};
use ember_tensor::pool::{
    AvgPoolArgs, MaxPoolArgs, PoolPlan, adaptive_avg_pool_plan, adaptive_max_pool_plan, avg_pool_plan, max_pool_plan,
};
use ember_tensor::{Error, Result, Tensor};
use parking_lot::Mutex;
use smallvec::smallvec;
use std::sync::Arc;

/// Max pooling of planes; every forward (the first and any recomputation) leaves the
/// positions of its maxima in `index` for the backward.
struct MaxPool {
    name: &'static str,
    windows: Arc<PoolWindows>,
    index: Arc<Mutex<Option<Tensor>>>,
}

impl Op for MaxPool {
    fn name(&self) -> &str {
        self.name
    }
    fn export(&self) -> Result<crate::export::OpExport> {
        // The windows are planned (clipped at the borders); only a pool whose windows are
        // all whole and evenly spaced has a kernel and stride to describe.
        let (Some((kh, sh)), Some((kw, sw))) = (whole_windows(&self.windows.rows), whole_windows(&self.windows.cols))
        else {
            return Err(Error::invalid(
                "export",
                format!("{}: only pools without padding or ceil_mode can be exported", self.name),
            ));
        };
        Ok(crate::export::OpExport::new(self.name)
            .ints("kernel", [kh, kw])
            .ints("stride", [sh, sw])
            .ints("dilation", [self.windows.rows.step, self.windows.cols.step]))
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let (values, index) = inputs[0].max_pool2d_resolved(&self.windows)?;
        *self.index.lock() = Some(index);
        Ok(values)
    }
    fn backward(&self, _: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        let index = self.index.lock().clone();
        let index = index.ok_or_else(|| Error::autograd(format!("{}: backward before forward", self.name)))?;
        let plane = self.windows.input();
        Ok(smallvec![Some(apply(ScatterPlanes { plane }, &[g, &constant(index)])?)])
    }
    fn saves(&self) -> Saves {
        Saves::NONE
    }
}

/// Values added into zero planes of extent `plane` at flat positions (the second input):
/// a max pool's gradient.
struct ScatterPlanes {
    plane: [usize; 2],
}

impl Op for ScatterPlanes {
    fn name(&self) -> &str {
        "max_pool2d_backward"
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].scatter_planes(inputs[1], self.plane)
    }
    fn backward(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        let index = ctx.input(1)?;
        Ok(smallvec![Some(apply(GatherPlanes { plane: self.plane }, &[g, &index])?), None])
    }
    fn saves(&self) -> Saves {
        Saves::input(1)
    }
}

/// The planes' elements at flat positions (the second input): the adjoint of
/// [`ScatterPlanes`].
struct GatherPlanes {
    plane: [usize; 2],
}

impl Op for GatherPlanes {
    fn name(&self) -> &str {
        "max_pool2d_backward_backward"
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].gather_planes(inputs[1])
    }
    fn backward(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        let index = ctx.input(1)?;
        Ok(smallvec![Some(apply(ScatterPlanes { plane: self.plane }, &[g, &index])?), None])
    }
    fn saves(&self) -> Saves {
        Saves::input(1)
    }
}

/// A separable linear map of planes (average pools, interpolation); its backward is the
/// transposed map, whose backward is this one again.
pub(super) struct Linear {
    /// This map's name and its adjoint's.
    pub names: (&'static str, &'static str),
    pub map: Arc<Resample>,
    pub adjoint: Arc<Resample>,
    /// How an exporter sees the map, when it is a plain average pool; `None` for maps
    /// with no kernel-and-stride description (padded or ceil-mode pools, interpolation,
    /// adjoints).
    pub export: Option<crate::export::OpExport>,
}

impl Op for Linear {
    fn name(&self) -> &str {
        self.names.0
    }
    fn export(&self) -> Result<crate::export::OpExport> {
        self.export.clone().ok_or_else(|| {
            Error::invalid(
                "export",
                format!(
                    "{}: only average pools without padding or ceil_mode (and adaptive ones whose input divides \
                     evenly) can be exported",
                    self.names.0
                ),
            )
        })
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].resample2d(&self.map)
    }
    fn backward(&self, _: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        let back = Linear {
            names: (self.names.1, self.names.0),
            map: self.adjoint.clone(),
            adjoint: self.map.clone(),
            export: None,
        };
        Ok(smallvec![Some(apply(back, &[g])?)])
    }
    fn saves(&self) -> Saves {
        Saves::NONE
    }
}

/// Runs a planned linear map named `names` on `x`, shaped as planned; `export` describes it
/// for exporters when it is a plain average pool.
pub(super) fn run_linear(
    x: &Var,
    names: (&'static str, &'static str),
    plan: PoolPlan<Resample>,
    export: Option<crate::export::OpExport>,
) -> Result<Var> {
    let adjoint = Arc::new(plan.map.transpose());
    let op = Linear { names, map: Arc::new(plan.map), adjoint, export };
    apply(op, &[&x.reshape(&plan.input)?])?.reshape(&plan.output)
}

/// Runs a planned max pool named `name` on `x`: the values (recorded) and the positions of
/// the maxima, both shaped as planned.
fn run_max(x: &Var, name: &'static str, plan: PoolPlan<PoolWindows>) -> Result<(Var, Tensor)> {
    let index = Arc::new(Mutex::new(None));
    let op = MaxPool { name, windows: Arc::new(plan.map), index: index.clone() };
    let values = apply(op, &[&x.reshape(&plan.input)?])?;
    // A handle to the same indices: the op keeps its own for the backward.
    let index = index.lock().clone();
    let index = index.ok_or_else(|| Error::autograd(format!("{name}: the forward left no indices")))?;
    let index = index.reshape(&plan.output)?;
    Ok((values.reshape(&plan.output)?, index))
}

/// `(kernel, stride)` of windows that are all whole (`count` taps) and evenly spaced from
/// 0, as an unpadded pool without `ceil_mode` plans them.
fn whole_windows(a: &ember_tensor::backend::AxisWindows) -> Option<(usize, usize)> {
    let k = a.windows.first()?.1;
    let stride = a.windows.get(1).map_or(k.max(1), |w| w.0);
    let even = a.windows.iter().enumerate().all(|(i, &(start, count))| start == i * stride && count == k);
    (even && k > 0 && stride > 0).then_some((k, stride))
}

/// The name of a `D`-dimensional operation, for errors and graphs.
fn named<const D: usize>(one: &'static str, two: &'static str) -> &'static str {
    if D == 1 { one } else { two }
}

impl Var {
    /// `D`-dimensional max pooling (`D` = 1 or 2; PyTorch's `max_pool1d` / `max_pool2d`
    /// with `return_indices=True`): the pooled values and the `i64` flat positions of the
    /// maxima in their planes. `self` is `[N, C, ..]` or unbatched `[C, ..]`.
    pub fn max_pool_with_indices<const D: usize>(&self, args: &MaxPoolArgs<D>) -> Result<(Var, Tensor)> {
        let name = named::<D>("max_pool1d", "max_pool2d");
        run_max(self, name, max_pool_plan(name, &self.shape(), args)?)
    }

    /// 1-d max pooling (PyTorch's `max_pool1d`): `[N, C, L]` or `[C, L]`.
    pub fn max_pool1d(&self, args: &MaxPoolArgs<1>) -> Result<Var> {
        Ok(self.max_pool_with_indices(args)?.0)
    }

    /// 2-d max pooling (PyTorch's `max_pool2d`): `[N, C, H, W]` or `[C, H, W]`. The
    /// gradient goes to the first maximum of each window, and gradients of gradients work.
    ///
    /// ```
    /// use ember_autograd::Var;
    /// use ember_tensor::{pool::MaxPoolArgs, Tensor};
    /// let x = Var::param(Tensor::from_vec((0..16).map(|v| v as f64).collect(), [1, 1, 4, 4])?);
    /// let y = x.max_pool2d(&MaxPoolArgs::new(2))?;
    /// y.sum_all().backward()?;
    /// let g = x.grad().unwrap().to_vec::<f64>()?;
    /// assert_eq!((g[5], g[7], g[13], g[15], g[0]), (1.0, 1.0, 1.0, 1.0, 0.0));
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn max_pool2d(&self, args: &MaxPoolArgs<2>) -> Result<Var> {
        Ok(self.max_pool_with_indices(args)?.0)
    }

    /// [`Var::max_pool2d`] with the positions of the maxima.
    pub fn max_pool2d_with_indices(&self, args: &MaxPoolArgs<2>) -> Result<(Var, Tensor)> {
        self.max_pool_with_indices(args)
    }

    /// `D`-dimensional average pooling (PyTorch's `avg_pool1d` / `avg_pool2d`).
    pub fn avg_pool<const D: usize>(&self, args: &AvgPoolArgs<D>) -> Result<Var> {
        let name = named::<D>("avg_pool1d", "avg_pool2d");
        let back = named::<D>("avg_pool1d_backward", "avg_pool2d_backward");
        // Without padding, ceil_mode or a divisor override every window is whole and divided
        // by its size: a plain kernel-and-stride average.
        let plain =
            D == 2 && args.padding.iter().all(|&p| p == 0) && !args.ceil_mode && args.divisor_override.is_none();
        let export = plain.then(|| {
            let stride = args.stride.unwrap_or(args.kernel_size);
            crate::export::OpExport::new("avg_pool2d").ints("kernel", args.kernel_size).ints("stride", stride)
        });
        run_linear(self, (name, back), avg_pool_plan(name, &self.shape(), args)?, export)
    }

    /// 1-d average pooling (PyTorch's `avg_pool1d`).
    pub fn avg_pool1d(&self, args: &AvgPoolArgs<1>) -> Result<Var> {
        self.avg_pool(args)
    }

    /// 2-d average pooling (PyTorch's `avg_pool2d`).
    pub fn avg_pool2d(&self, args: &AvgPoolArgs<2>) -> Result<Var> {
        self.avg_pool(args)
    }

    /// `D`-dimensional adaptive average pooling to `size` (PyTorch's
    /// `adaptive_avg_pool1d` / `adaptive_avg_pool2d`).
    pub fn adaptive_avg_pool<const D: usize>(&self, size: [usize; D]) -> Result<Var> {
        let name = named::<D>("adaptive_avg_pool1d", "adaptive_avg_pool2d");
        let back = named::<D>("adaptive_avg_pool1d_backward", "adaptive_avg_pool2d_backward");
        // An input that the output size divides evenly is pooled in equal, disjoint windows:
        // a plain average pool with kernel and stride `input / output`.
        let dims = self.shape().dims().to_vec();
        let plane = &dims[dims.len().saturating_sub(D)..];
        let even = D == 2 && plane.len() == 2 && (0..2).all(|i| size[i] > 0 && plane[i].is_multiple_of(size[i]));
        let export = even.then(|| {
            let k = [plane[0] / size[0], plane[1] / size[1]];
            crate::export::OpExport::new("avg_pool2d").ints("kernel", k).ints("stride", k)
        });
        run_linear(self, (name, back), adaptive_avg_pool_plan(name, &self.shape(), size)?, export)
    }

    /// 1-d adaptive average pooling.
    pub fn adaptive_avg_pool1d(&self, size: usize) -> Result<Var> {
        self.adaptive_avg_pool([size])
    }

    /// 2-d adaptive average pooling.
    pub fn adaptive_avg_pool2d(&self, size: [usize; 2]) -> Result<Var> {
        self.adaptive_avg_pool(size)
    }

    /// `D`-dimensional adaptive max pooling to `size`, with the positions of the maxima
    /// (PyTorch's `adaptive_max_pool1d` / `adaptive_max_pool2d` with
    /// `return_indices=True`).
    pub fn adaptive_max_pool_with_indices<const D: usize>(&self, size: [usize; D]) -> Result<(Var, Tensor)> {
        let name = named::<D>("adaptive_max_pool1d", "adaptive_max_pool2d");
        run_max(self, name, adaptive_max_pool_plan(name, &self.shape(), size)?)
    }

    /// 2-d adaptive max pooling.
    pub fn adaptive_max_pool2d(&self, size: [usize; 2]) -> Result<Var> {
        Ok(self.adaptive_max_pool_with_indices(size)?.0)
    }
}
