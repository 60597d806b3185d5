//! Convolutions and transposed convolutions.
//!
//! A convolution `y = conv(x, w)` is bilinear, and so are its two gradients: the gradient
//! with respect to `x` is a transposed convolution of the output gradient by `w`, and the
//! gradient with respect to `w` is a convolution of `x` with the output gradient. The three
//! are one operation each, sharing the convolution's geometry, and each one's backward is
//! written with the other two (differentiable `Var` operations), so gradients of every
//! order come out of the same three kernels:
//!
//! | operation | value | gradient wrt its first input | wrt its second input |
//! |---|---|---|---|
//! | `Conv(x, w)` | `y` | `ConvTranspose(g, w)` | `ConvWeightGrad(x, g)` |
//! | `ConvTranspose(y, w)` | `x`-shaped | `Conv(g, w)` | `ConvWeightGrad(g, y)` |
//! | `ConvWeightGrad(x, y)` | `w`-shaped | `ConvTranspose(y, g)` | `Conv(x, g)` |
//!
//! 1-d convolutions and unbatched inputs are the 2-d operations on views with added
//! dimensions of extent 1 ([`ConvPlan`]).

use super::apply;
use crate::autocast::{self, policy};
use crate::backward_ctx::BackwardCtx;
use crate::op::{Grads, Op, Saves};
use crate::var::Var;
use ember_tensor::ops::conv::{ConvArgs, ConvGeometry, ConvPlan, ConvTransposeArgs, conv_plan, conv_transpose_plan};
use ember_tensor::{Result, Tensor};
use smallvec::smallvec;

/// The bias's gradient: the output gradient summed over the batch and the positions.
fn bias_grad(g: &Var) -> Result<Var> {
    g.sum([0i64, 2, 3], false)
}

/// A convolution's geometry as an exporter sees it.
fn describe(name: &str, geom: &ConvGeometry) -> crate::export::OpExport {
    let w = &geom.window;
    crate::export::OpExport::new(name)
        .ints("kernel", w.kernel)
        .ints("stride", w.stride)
        .ints("padding", w.padding)
        .ints("dilation", w.dilation)
        .attr("groups", crate::export::ExportAttr::Int(geom.groups as i64))
}

/// `conv(x, w) + b` (the bias is an optional third input).
struct Conv {
    name: &'static str,
    geom: ConvGeometry,
}

impl Op for Conv {
    fn name(&self) -> &str {
        self.name
    }
    fn export(&self) -> Result<crate::export::OpExport> {
        Ok(describe(self.name, &self.geom))
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].conv2d_resolved(inputs[1], inputs.get(2).copied(), &self.geom)
    }
    fn backward(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        let gx = if ctx.needs_input_grad(0) { Some(conv_transpose(g, &ctx.input(1)?, None, self.geom)?) } else { None };
        let gw = if ctx.needs_input_grad(1) { Some(conv_weight_grad(&ctx.input(0)?, g, self.geom)?) } else { None };
        let mut grads: Grads = smallvec![gx, gw];
        if ctx.num_inputs() == 3 {
            grads.push(if ctx.needs_input_grad(2) { Some(bias_grad(g)?) } else { None });
        }
        Ok(grads)
    }
    fn saves(&self) -> Saves {
        Saves { inputs: 0b011, output: false }
    }
}

/// The transposed convolution `conv_transpose(y, w) + b`: the adjoint of [`Conv`] in its
/// input, mapping the convolution's output shape to its input shape.
struct ConvTranspose {
    name: &'static str,
    geom: ConvGeometry,
}

impl Op for ConvTranspose {
    fn name(&self) -> &str {
        self.name
    }
    fn export(&self) -> Result<crate::export::OpExport> {
        // The geometry is the convolution's this transposes: the same kernel, stride,
        // padding and dilation; the exporter reads the output padding off the shapes.
        Ok(describe(self.name, &self.geom))
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].conv_transpose2d_resolved(inputs[1], inputs.get(2).copied(), &self.geom)
    }
    fn backward(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        let gy = if ctx.needs_input_grad(0) { Some(conv(g, &ctx.input(1)?, None, "conv2d", self.geom)?) } else { None };
        let gw = if ctx.needs_input_grad(1) { Some(conv_weight_grad(g, &ctx.input(0)?, self.geom)?) } else { None };
        let mut grads: Grads = smallvec![gy, gw];
        if ctx.num_inputs() == 3 {
            grads.push(if ctx.needs_input_grad(2) { Some(bias_grad(g)?) } else { None });
        }
        Ok(grads)
    }
    fn saves(&self) -> Saves {
        Saves { inputs: 0b011, output: false }
    }
}

/// The gradient of [`Conv`] with respect to its weight, for input `x` and output gradient
/// `y`: bilinear in both.
struct ConvWeightGrad {
    geom: ConvGeometry,
}

impl Op for ConvWeightGrad {
    fn name(&self) -> &str {
        "conv2d_weight_grad"
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].conv2d_weight_grad(inputs[1], &self.geom)
    }
    fn backward(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        let gx = if ctx.needs_input_grad(0) { Some(conv_transpose(&ctx.input(1)?, g, None, self.geom)?) } else { None };
        let gy = if ctx.needs_input_grad(1) { Some(conv(&ctx.input(0)?, g, None, "conv2d", self.geom)?) } else { None };
        Ok(smallvec![gx, gy])
    }
}

#[track_caller]
fn conv(x: &Var, w: &Var, bias: Option<&Var>, name: &'static str, geom: ConvGeometry) -> Result<Var> {
    match bias {
        Some(b) => apply(Conv { name, geom }, &[x, w, b]),
        None => apply(Conv { name, geom }, &[x, w]),
    }
}

#[track_caller]
fn conv_transpose(y: &Var, w: &Var, bias: Option<&Var>, geom: ConvGeometry) -> Result<Var> {
    let name = "conv_transpose2d";
    match bias {
        Some(b) => apply(ConvTranspose { name, geom }, &[y, w, b]),
        None => apply(ConvTranspose { name, geom }, &[y, w]),
    }
}

#[track_caller]
fn conv_weight_grad(x: &Var, y: &Var, geom: ConvGeometry) -> Result<Var> {
    apply(ConvWeightGrad { geom }, &[x, y])
}

/// Runs a planned (transposed) convolution on views of the operands with the planned
/// shapes, and shapes the result as planned.
#[track_caller]
fn run(name: &'static str, x: &Var, w: &Var, bias: Option<&Var>, plan: &ConvPlan, transposed: bool) -> Result<Var> {
    let (x4, w4) = (x.reshape(&plan.input)?, w.reshape(&plan.weight)?);
    let inputs: Vec<&Var> = [&x4, &w4].into_iter().chain(bias).collect();
    let out = if transposed {
        apply(ConvTranspose { name, geom: plan.geometry }, &inputs)?
    } else {
        apply(Conv { name, geom: plan.geometry }, &inputs)?
    };
    out.reshape(&plan.output)
}

/// The name of a `D`-dimensional operation, for errors and graphs.
fn named<const D: usize>(one: &'static str, two: &'static str) -> &'static str {
    if D == 1 { one } else { two }
}

impl Var {
    /// A `D`-dimensional convolution (`D` = 1 or 2; see [`Var::conv1d`], [`Var::conv2d`]),
    /// for code generic over the number of spatial dimensions.
    #[track_caller]
    pub fn conv<const D: usize>(&self, weight: &Var, bias: Option<&Var>, args: &ConvArgs<D>) -> Result<Var> {
        if let Some(c) = autocast::cast_inputs(&policy::CONV, [Some(self), Some(weight), bias])? {
            return c.or(0, self).conv(c.or(1, weight), c.get(2), args);
        }
        let name = named::<D>("conv1d", "conv2d");
        let plan = conv_plan(name, &self.shape(), &weight.shape(), bias.map(|b| b.shape()).as_deref(), args)?;
        run(name, self, weight, bias, &plan, false)
    }

    /// A `D`-dimensional transposed convolution (`D` = 1 or 2; see
    /// [`Var::conv_transpose1d`], [`Var::conv_transpose2d`]).
    #[track_caller]
    pub fn conv_transpose<const D: usize>(
        &self,
        weight: &Var,
        bias: Option<&Var>,
        args: &ConvTransposeArgs<D>,
    ) -> Result<Var> {
        if let Some(c) = autocast::cast_inputs(&policy::CONV_TRANSPOSE, [Some(self), Some(weight), bias])? {
            return c.or(0, self).conv_transpose(c.or(1, weight), c.get(2), args);
        }
        let name = named::<D>("conv_transpose1d", "conv_transpose2d");
        let plan = conv_transpose_plan(name, &self.shape(), &weight.shape(), bias.map(|b| b.shape()).as_deref(), args)?;
        run(name, self, weight, bias, &plan, true)
    }

    /// A 1-d convolution with PyTorch's `conv1d` semantics (see
    /// [`Tensor::conv1d`](ember_tensor::Tensor::conv1d)): `self` is `[N, in, L]` (or
    /// `[in, L]`), `weight` `[out, in / groups, k]`, `bias` `[out]`.
    #[track_caller]
    pub fn conv1d(&self, weight: &Var, bias: Option<&Var>, args: &ConvArgs<1>) -> Result<Var> {
        self.conv(weight, bias, args)
    }

    /// A 2-d convolution with PyTorch's `conv2d` semantics (see
    /// [`Tensor::conv2d`](ember_tensor::Tensor::conv2d)): `self` is `[N, in, h, w]` (or
    /// `[in, h, w]`), `weight` `[out, in / groups, kh, kw]`, `bias` `[out]`. Its backward
    /// is made of differentiable convolutions, so gradients of gradients work.
    ///
    /// ```
    /// use ember_autograd::Var;
    /// use ember_tensor::{ConvArgs, Tensor};
    /// let x = Var::param(Tensor::randn([2, 3, 8, 8])?);
    /// let w = Var::param(Tensor::randn([4, 3, 3, 3])?);
    /// let y = x.conv2d(&w, None, &ConvArgs::default().padding(1))?;
    /// assert_eq!(y.shape().dims(), &[2, 4, 8, 8]);
    /// y.square().sum_all().backward()?;
    /// assert_eq!(w.grad().unwrap().shape(), &[4, 3, 3, 3]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    #[track_caller]
    pub fn conv2d(&self, weight: &Var, bias: Option<&Var>, args: &ConvArgs<2>) -> Result<Var> {
        self.conv(weight, bias, args)
    }

    /// A 1-d transposed convolution with PyTorch's `conv_transpose1d` semantics: `self` is
    /// `[N, in, L]` (or `[in, L]`), `weight` `[in, out / groups, k]`, `bias` `[out]`.
    #[track_caller]
    pub fn conv_transpose1d(&self, weight: &Var, bias: Option<&Var>, args: &ConvTransposeArgs<1>) -> Result<Var> {
        self.conv_transpose(weight, bias, args)
    }

    /// A 2-d transposed convolution with PyTorch's `conv_transpose2d` semantics (see
    /// [`Tensor::conv_transpose2d`](ember_tensor::Tensor::conv_transpose2d)): `self` is
    /// `[N, in, h, w]` (or `[in, h, w]`), `weight` `[in, out / groups, kh, kw]`, `bias`
    /// `[out]`.
    #[track_caller]
    pub fn conv_transpose2d(&self, weight: &Var, bias: Option<&Var>, args: &ConvTransposeArgs<2>) -> Result<Var> {
        self.conv_transpose(weight, bias, args)
    }
}
