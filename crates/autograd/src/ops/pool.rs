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
use ember_tensor::ops::pool::{
    AvgPoolArgs, AxisTaps, AxisWindows, MaxPoolArgs, PoolPlan, PoolWindows, Resample, adaptive_avg_pool_plan,
    adaptive_max_pool_plan, avg_pool_plan, max_pool_plan,
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
    /// The kernel-and-stride description, when the pool has one ([`kernel_description`]).
    export: Option<crate::export::OpExport>,
}

impl Op for MaxPool {
    fn name(&self) -> &str {
        self.name
    }
    fn export(&self) -> Result<crate::export::OpExport> {
        // A pool with a kernel-and-stride description exports as such; any other (adaptive,
        // or one whose ceil_mode ONNX's single flag cannot say) as its planned windows.
        Ok(self.export.clone().unwrap_or_else(|| {
            let (rows, cols) = (&self.windows.rows, &self.windows.cols);
            let flat = |a: &AxisWindows| a.windows.iter().flat_map(|&(s, c)| [s, c]).collect::<Vec<_>>();
            crate::export::OpExport::new(self.name)
                .ints("rows", flat(rows))
                .ints("cols", flat(cols))
                .ints("step", [rows.step, cols.step])
        }))
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
    /// How an exporter sees the map: an average pool's kernel-and-stride description, or an
    /// interpolation's arguments; `None` for the others (divisor overrides, uneven adaptive
    /// windows, adjoints). All but the pools also export their matrices.
    pub export: Option<crate::export::OpExport>,
}

/// A separable map's dimension as a dense row-major `[output, input]` matrix.
fn dense(a: &AxisTaps) -> Vec<f64> {
    let mut m = vec![0.0; a.output() * a.input];
    for o in 0..a.output() {
        for t in a.offsets[o]..a.offsets[o + 1] {
            m[o * a.input + a.index[t]] += a.weight[t];
        }
    }
    m
}

impl Op for Linear {
    fn name(&self) -> &str {
        self.names.0
    }
    fn export(&self) -> Result<crate::export::OpExport> {
        // An average pool's kernel and stride say it all; otherwise `y = rows · x · colsᵀ`
        // on the planes, with the matrices written out (beside an interpolation's own
        // description).
        match &self.export {
            Some(d) if d.get("kernel").is_some() => Ok(d.clone()),
            other => {
                let [ih, iw] = self.map.input();
                let [oh, ow] = self.map.output();
                Ok(other
                    .clone()
                    .unwrap_or_else(|| crate::export::OpExport::new(self.names.0))
                    .ints("plane", [ih, iw, oh, ow])
                    .attr("rows", crate::export::ExportAttr::Floats(dense(&self.map.rows)))
                    .attr("cols", crate::export::ExportAttr::Floats(dense(&self.map.cols))))
            }
        }
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
fn run_max(
    x: &Var,
    name: &'static str,
    plan: PoolPlan<PoolWindows>,
    export: Option<crate::export::OpExport>,
) -> Result<(Var, Tensor)> {
    let index = Arc::new(Mutex::new(None));
    let op = MaxPool { name, windows: Arc::new(plan.map), index: index.clone(), export };
    let values = apply(op, &[&x.reshape(&plan.input)?])?;
    // A handle to the same indices: the op keeps its own for the backward.
    let index = index.lock().clone();
    let index = index.ok_or_else(|| Error::autograd(format!("{name}: the forward left no indices")))?;
    let index = index.reshape(&plan.output)?;
    Ok((values.reshape(&plan.output)?, index))
}

/// A pool's geometry, lifted to the planned planes (`[h, w]` each).
struct PoolGeometry {
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
    ceil_mode: bool,
}

impl PoolGeometry {
    /// Lifts `D`-dimensional arguments as the planner does (a 1-d pool runs along the width
    /// of planes of height 1).
    fn lift<const D: usize>(
        kernel: [usize; D],
        stride: Option<[usize; D]>,
        padding: [usize; D],
        dilation: [usize; D],
        ceil_mode: bool,
    ) -> PoolGeometry {
        let two = |v: [usize; D], fill: usize| if D == 1 { [fill, v[0]] } else { [v[0], v[D - 1]] };
        PoolGeometry {
            kernel: two(kernel, 1),
            stride: two(stride.unwrap_or(kernel), 1),
            padding: two(padding, 0),
            dilation: two(dilation, 1),
            ceil_mode,
        }
    }
}

/// The kernel-and-stride description (ONNX's `MaxPool` / `AveragePool` attributes) of a
/// pool with geometry `g` from planes `input` to planes `output`, or `None` when ONNX's
/// single `ceil_mode` flag cannot give every dimension its planned size.
///
/// PyTorch drops a ceil-mode window that would start in the right padding; the output then
/// has the floor-mode size and the same windows, so such a dimension is written without
/// `ceil_mode`. A pool whose dimensions need different flags has no description.
fn kernel_description(
    kind: &str,
    g: &PoolGeometry,
    input: [usize; 2],
    output: [usize; 2],
) -> Option<crate::export::OpExport> {
    let extent = |i: usize, ceil: bool| {
        let (k, s, p, d) = (g.kernel[i] as i64, g.stride[i] as i64, g.padding[i] as i64, g.dilation[i] as i64);
        let span = input[i] as i64 + 2 * p - d * (k - 1) - 1 + if ceil { s - 1 } else { 0 };
        (span >= 0 && s > 0).then(|| span / s + 1)
    };
    let matches = |ceil: bool| (0..2).all(|i| extent(i, ceil) == Some(output[i] as i64));
    let ceil = if matches(false) {
        false
    } else if g.ceil_mode && matches(true) {
        true
    } else {
        return None;
    };
    Some(
        crate::export::OpExport::new(kind)
            .ints("kernel", g.kernel)
            .ints("stride", g.stride)
            .ints("padding", g.padding)
            .ints("dilation", g.dilation)
            .attr("ceil_mode", crate::export::ExportAttr::Int(ceil as i64)),
    )
}

/// The name of a `D`-dimensional operation, for errors and graphs.
fn named<const D: usize>(one: &'static str, two: &'static str) -> &'static str {
    if D == 1 { one } else { two }
}

impl Var {
    /// `D`-dimensional max pooling (`D` = 1 or 2; PyTorch's `max_pool1d` / `max_pool2d`
    /// with `return_indices=True`): the pooled values and the `i64` flat positions of the
    /// maxima in their planes. `self` is `[N, C, ..]` or unbatched `[C, ..]`.
    #[track_caller]
    pub fn max_pool_with_indices<const D: usize>(&self, args: &MaxPoolArgs<D>) -> Result<(Var, Tensor)> {
        let name = named::<D>("max_pool1d", "max_pool2d");
        let plan = max_pool_plan(name, &self.shape(), args)?;
        let g = PoolGeometry::lift(args.kernel_size, args.stride, args.padding, args.dilation, args.ceil_mode);
        let export = kernel_description(name, &g, plan.map.input(), plan.map.output());
        run_max(self, name, plan, export)
    }

    /// 1-d max pooling (PyTorch's `max_pool1d`): `[N, C, L]` or `[C, L]`.
    #[track_caller]
    pub fn max_pool1d(&self, args: &MaxPoolArgs<1>) -> Result<Var> {
        Ok(self.max_pool_with_indices(args)?.0)
    }

    /// 2-d max pooling (PyTorch's `max_pool2d`): `[N, C, H, W]` or `[C, H, W]`. The
    /// gradient goes to the first maximum of each window, and gradients of gradients work.
    ///
    /// ```
    /// use ember_autograd::Var;
    /// use ember_tensor::{MaxPoolArgs, Tensor};
    /// let x = Var::param(Tensor::from_vec((0..16).map(|v| v as f64).collect(), [1, 1, 4, 4])?);
    /// let y = x.max_pool2d(&MaxPoolArgs::new(2))?;
    /// y.sum_all().backward()?;
    /// let g = x.grad().unwrap().to_vec::<f64>()?;
    /// assert_eq!((g[5], g[7], g[13], g[15], g[0]), (1.0, 1.0, 1.0, 1.0, 0.0));
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    #[track_caller]
    pub fn max_pool2d(&self, args: &MaxPoolArgs<2>) -> Result<Var> {
        Ok(self.max_pool_with_indices(args)?.0)
    }

    /// [`Var::max_pool2d`] with the positions of the maxima.
    #[track_caller]
    pub fn max_pool2d_with_indices(&self, args: &MaxPoolArgs<2>) -> Result<(Var, Tensor)> {
        self.max_pool_with_indices(args)
    }

    /// `D`-dimensional average pooling (PyTorch's `avg_pool1d` / `avg_pool2d`).
    #[track_caller]
    pub fn avg_pool<const D: usize>(&self, args: &AvgPoolArgs<D>) -> Result<Var> {
        let name = named::<D>("avg_pool1d", "avg_pool2d");
        let back = named::<D>("avg_pool1d_backward", "avg_pool2d_backward");
        let plan = avg_pool_plan(name, &self.shape(), args)?;
        // A divisor override has no ONNX attribute: such pools export as their matrices.
        let export = if args.divisor_override.is_none() {
            let g = PoolGeometry::lift(args.kernel_size, args.stride, args.padding, [1; D], args.ceil_mode);
            kernel_description(name, &g, plan.map.input(), plan.map.output())
                .map(|d| d.attr("count_include_pad", crate::export::ExportAttr::Int(args.count_include_pad as i64)))
        } else {
            None
        };
        run_linear(self, (name, back), plan, export)
    }

    /// 1-d average pooling (PyTorch's `avg_pool1d`).
    #[track_caller]
    pub fn avg_pool1d(&self, args: &AvgPoolArgs<1>) -> Result<Var> {
        self.avg_pool(args)
    }

    /// 2-d average pooling (PyTorch's `avg_pool2d`).
    #[track_caller]
    pub fn avg_pool2d(&self, args: &AvgPoolArgs<2>) -> Result<Var> {
        self.avg_pool(args)
    }

    /// `D`-dimensional adaptive average pooling to `size` (PyTorch's
    /// `adaptive_avg_pool1d` / `adaptive_avg_pool2d`).
    #[track_caller]
    pub fn adaptive_avg_pool<const D: usize>(&self, size: [usize; D]) -> Result<Var> {
        let name = named::<D>("adaptive_avg_pool1d", "adaptive_avg_pool2d");
        let back = named::<D>("adaptive_avg_pool1d_backward", "adaptive_avg_pool2d_backward");
        let plan = adaptive_avg_pool_plan(name, &self.shape(), size)?;
        // An input that the output size divides evenly is pooled in equal, disjoint windows:
        // a plain average pool with kernel and stride `input / output`; other inputs export
        // as their matrices.
        let ([ih, iw], [oh, ow]) = (plan.map.input(), plan.map.output());
        let export = (oh > 0 && ow > 0 && ih.is_multiple_of(oh) && iw.is_multiple_of(ow)).then(|| {
            let k = [ih / oh, iw / ow];
            let g = PoolGeometry { kernel: k, stride: k, padding: [0, 0], dilation: [1, 1], ceil_mode: false };
            kernel_description(name, &g, [ih, iw], [oh, ow])
                .map(|d| d.attr("count_include_pad", crate::export::ExportAttr::Int(1)))
        });
        run_linear(self, (name, back), plan, export.flatten())
    }

    /// 1-d adaptive average pooling.
    #[track_caller]
    pub fn adaptive_avg_pool1d(&self, size: usize) -> Result<Var> {
        self.adaptive_avg_pool([size])
    }

    /// 2-d adaptive average pooling.
    #[track_caller]
    pub fn adaptive_avg_pool2d(&self, size: [usize; 2]) -> Result<Var> {
        self.adaptive_avg_pool(size)
    }

    /// `D`-dimensional adaptive max pooling to `size`, with the positions of the maxima
    /// (PyTorch's `adaptive_max_pool1d` / `adaptive_max_pool2d` with
    /// `return_indices=True`).
    #[track_caller]
    pub fn adaptive_max_pool_with_indices<const D: usize>(&self, size: [usize; D]) -> Result<(Var, Tensor)> {
        let name = named::<D>("adaptive_max_pool1d", "adaptive_max_pool2d");
        run_max(self, name, adaptive_max_pool_plan(name, &self.shape(), size)?, None)
    }

    /// 2-d adaptive max pooling.
    #[track_caller]
    pub fn adaptive_max_pool2d(&self, size: [usize; 2]) -> Result<Var> {
        Ok(self.adaptive_max_pool_with_indices(size)?.0)
    }
}
