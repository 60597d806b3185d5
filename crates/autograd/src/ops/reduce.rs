//! Reductions. `sum`, `max`, `min` and `prod` are operations of their own; `mean`, `var`
//! and `logsumexp` are compositions of differentiable operations, so their gradients (of
//! any order) follow; `std` is the square root of `var` through an operation whose gradient
//! is 0 where the deviation is (PyTorch's rule).

use super::{apply, apply_infallible, constant, infallible};
use crate::autocast::{self, policy};
use crate::backward_ctx::BackwardCtx;
use crate::op::{Grads, Op, Saves};
use crate::var::Var;
use ember_tensor::{Dims, Result, Shape, Tensor};
use smallvec::{SmallVec, smallvec};

type DimList = SmallVec<[usize; 4]>;

/// What backward needs to know about a reduction: which dimensions, and the input shape.
struct Reduction {
    dims: DimList,
    keepdim: bool,
    in_shape: Shape,
}

impl Reduction {
    fn new(x: &Var, dims: DimList, keepdim: bool) -> Self {
        Reduction { dims, keepdim, in_shape: x.shape() }
    }

    /// The input shape with the reduced dimensions set to 1.
    fn kept_shape(&self) -> Vec<usize> {
        self.in_shape.iter().enumerate().map(|(i, &d)| if self.dims.contains(&i) { 1 } else { d }).collect()
    }

    /// A reduced gradient (or output) reshaped so that it broadcasts against the input.
    fn kept(&self, v: &Var) -> Result<Var> {
        if self.keepdim { Ok(v.clone()) } else { v.reshape(self.kept_shape()) }
    }

    fn kept_tensor(&self, t: &Tensor) -> Result<Tensor> {
        if self.keepdim { Ok(t.clone()) } else { t.reshape(self.kept_shape()) }
    }
}

struct Sum(Reduction);

impl Op for Sum {
    fn name(&self) -> &str {
        "sum"
    }
    fn export(&self) -> Result<crate::export::OpExport> {
        Ok(crate::export::OpExport::new("sum")
            .ints("dims", self.0.dims.iter().copied())
            .attr("keepdim", crate::export::ExportAttr::Int(self.0.keepdim as i64)))
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].sum(&self.0.dims[..], self.0.keepdim)
    }
    fn backward(&self, _: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        Ok(smallvec![Some(self.0.kept(g)?.expand(self.0.in_shape.clone())?)])
    }
    fn saves(&self) -> Saves {
        Saves::NONE
    }
}

/// `max` (or `min`): the gradient goes to the extreme elements, split evenly among ties.
struct Extreme {
    r: Reduction,
    max: bool,
}

impl Op for Extreme {
    fn name(&self) -> &str {
        if self.max { "max" } else { "min" }
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        if self.max {
            inputs[0].max(&self.r.dims[..], self.r.keepdim)
        } else {
            inputs[0].min(&self.r.dims[..], self.r.keepdim)
        }
    }
    fn backward(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        let x = ctx.input(0)?.value();
        let y = self.r.kept_tensor(&ctx.output()?.value())?;
        let mask = x.eq(&y)?.to_dtype(x.dtype());
        let count = mask.sum(&self.r.dims[..], true)?;
        let share = constant(mask.div(&count)?);
        Ok(smallvec![Some(self.r.kept(g)?.mul(&share)?)])
    }
    fn saves(&self) -> Saves {
        Saves { inputs: 1, output: true }
    }
}

struct Prod(Reduction);

impl Op for Prod {
    fn name(&self) -> &str {
        "prod"
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].prod(&self.0.dims[..], self.0.keepdim)
    }
    fn backward(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        let x = ctx.input(0)?;
        let y = self.0.kept(&ctx.output()?)?;
        let g = self.0.kept(g)?;
        let xv = x.value();
        let zeros = xv.eq_scalar(0);
        if zeros.sum_all().item()? == 0.0 {
            // The product of the others is y / x, differentiable again.
            return Ok(smallvec![Some(g.mul(&y.div(&x)?)?)]);
        }
        // With zeros, y / x is undefined. Each element's coefficient is still the product of
        // the others, written with Var operations (masks are constants) so that
        // `create_graph` differentiates it correctly (PyTorch's prod_safe_zeros_backward):
        // - a zero that is its group's only zero: the product of the non-zero elements;
        // - a zero with exactly one other zero in its group: that product times the other
        //   zero, written `sum of the group's zeros - x` (0 in value, slope 1 in the other
        //   zero and 0 in itself);
        // - a zero among three or more: 0, whose first derivatives (products that still
        //   contain a zero) are 0 too, so second derivatives stay right;
        // - a non-zero element: y / x with the zeros replaced by 1, which is 0 in value and
        //   differentiates (through y) into the product of the rest.
        let dims = &self.0.dims[..];
        let is_zero = constant(zeros.clone());
        let zero = constant(xv.zeros_like());
        let count = zeros.to_dtype(xv.dtype().float_or_default()).sum(dims, true)?;
        let nonzero = is_zero.where_cond(&constant(xv.ones_like()), &x)?;
        let nonzero_prod = nonzero.prod(dims, true)?;
        let zero_sum = is_zero.where_cond(&x, &zero)?.sum(dims, true)?;
        let other_zero = zero_sum.sub(&x)?;
        let two = constant(count.eq_scalar(2)).where_cond(&nonzero_prod.mul(&other_zero)?, &zero)?;
        let at_zero = constant(count.eq_scalar(1)).where_cond(&nonzero_prod, &two)?;
        let coef = is_zero.where_cond(&at_zero, &y.div(&nonzero)?)?;
        Ok(smallvec![Some(g.mul(&coef)?)])
    }
    fn saves(&self) -> Saves {
        Saves { inputs: 1, output: true }
    }
}

/// `sqrt` of a variance, giving a standard deviation. An operation of its own rather than
/// `sqrt` because the gradient differs where the deviation is 0 (constant data): there
/// sqrt's `1 / (2 sqrt(v))` is infinite and the chain rule through the variance gives
/// `0 * inf = NaN`, while PyTorch's `std_backward` defines it as 0.
struct StdOfVar;

impl Op for StdOfVar {
    fn name(&self) -> &str {
        "std"
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        Ok(inputs[0].sqrt())
    }
    fn backward(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        let y = ctx.output()?;
        let yv = y.value();
        let flat = yv.eq_scalar(0);
        if flat.sum_all().item()? == 0.0 {
            return Ok(smallvec![Some(g.div(&y.mul_scalar(2.0))?)]);
        }
        // The deviation is replaced by 1 where it is 0 before dividing, so that a second
        // derivative does not meet the infinity the mask hides.
        let flat = constant(flat);
        let safe = flat.where_cond(&constant(yv.ones_like()), &y)?;
        let d = g.div(&safe.mul_scalar(2.0))?;
        Ok(smallvec![Some(flat.where_cond(&constant(d.value().zeros_like()), &d)?)])
    }
    fn saves(&self) -> Saves {
        Saves::OUTPUT
    }
}

impl Var {
    #[track_caller]
    fn resolve_dims(&self, dims: impl Dims, op: &'static str) -> Result<DimList> {
        dims.resolve_reduction(self.rank(), op)
    }

    /// The sum over `dims`.
    #[track_caller]
    pub fn sum(&self, dims: impl Dims, keepdim: bool) -> Result<Var> {
        let d = self.resolve_dims(dims, "sum")?;
        if let Some([x]) = autocast::cast(&policy::reduction("sum"), [self]) {
            return apply(Sum(Reduction::new(&x, d, keepdim)), &[&x]);
        }
        apply(Sum(Reduction::new(self, d, keepdim)), &[self])
    }

    /// The sum of all elements (0-d).
    #[track_caller]
    pub fn sum_all(&self) -> Var {
        let d: DimList = (0..self.rank()).collect();
        if let Some([x]) = autocast::cast(&policy::reduction("sum_all"), [self]) {
            return apply_infallible(Sum(Reduction::new(&x, d, false)), &[&x]);
        }
        apply_infallible(Sum(Reduction::new(self, d, false)), &[self])
    }

    /// The mean over `dims`.
    #[track_caller]
    pub fn mean(&self, dims: impl Dims, keepdim: bool) -> Result<Var> {
        let d = self.resolve_dims(dims, "mean")?;
        // A composition that keeps its input's dtype: its sum is not cast (CUDA's f32 sum).
        if let Some(r) = autocast::run_cast(&policy::reduction("mean"), [Some(self)], |_| self.mean(&d[..], keepdim)) {
            return r;
        }
        let n: usize = d.iter().map(|&i| self.shape()[i]).product();
        Ok(self.sum(&d[..], keepdim)?.div_scalar(n as f64))
    }

    /// The mean of all elements.
    #[track_caller]
    pub fn mean_all(&self) -> Var {
        if let Some(Ok(r)) = autocast::run_cast(&policy::reduction("mean"), [Some(self)], |_| Ok(self.mean_all())) {
            return r;
        }
        self.sum_all().div_scalar(self.numel() as f64)
    }

    /// The maximum over `dims` (ties share the gradient).
    #[track_caller]
    pub fn max(&self, dims: impl Dims, keepdim: bool) -> Result<Var> {
        let d = self.resolve_dims(dims, "max")?;
        apply(Extreme { r: Reduction::new(self, d, keepdim), max: true }, &[self])
    }

    /// The maximum of all elements; an error for an empty value.
    #[track_caller]
    pub fn max_all(&self) -> Result<Var> {
        let d: DimList = (0..self.rank()).collect();
        apply(Extreme { r: Reduction::new(self, d, false), max: true }, &[self])
    }

    /// The minimum over `dims` (ties share the gradient).
    #[track_caller]
    pub fn min(&self, dims: impl Dims, keepdim: bool) -> Result<Var> {
        let d = self.resolve_dims(dims, "min")?;
        apply(Extreme { r: Reduction::new(self, d, keepdim), max: false }, &[self])
    }

    /// The minimum of all elements; an error for an empty value.
    #[track_caller]
    pub fn min_all(&self) -> Result<Var> {
        let d: DimList = (0..self.rank()).collect();
        apply(Extreme { r: Reduction::new(self, d, false), max: false }, &[self])
    }

    /// The product over `dims`.
    #[track_caller]
    pub fn prod(&self, dims: impl Dims, keepdim: bool) -> Result<Var> {
        let d = self.resolve_dims(dims, "prod")?;
        if let Some([x]) = autocast::cast(&policy::reduction("prod"), [self]) {
            return apply(Prod(Reduction::new(&x, d, keepdim)), &[&x]);
        }
        apply(Prod(Reduction::new(self, d, keepdim)), &[self])
    }

    /// The product of all elements.
    #[track_caller]
    pub fn prod_all(&self) -> Var {
        let d: DimList = (0..self.rank()).collect();
        if let Some([x]) = autocast::cast(&policy::reduction("prod_all"), [self]) {
            return apply_infallible(Prod(Reduction::new(&x, d, false)), &[&x]);
        }
        apply_infallible(Prod(Reduction::new(self, d, false)), &[self])
    }

    /// The variance over `dims` (Bessel-corrected when `unbiased`).
    #[track_caller]
    pub fn var(&self, dims: impl Dims, unbiased: bool, keepdim: bool) -> Result<Var> {
        let d = self.resolve_dims(dims, "var")?;
        if let Some(r) =
            autocast::run_cast(&policy::reduction("var"), [Some(self)], |_| self.var(&d[..], unbiased, keepdim))
        {
            return r;
        }
        let n: usize = d.iter().map(|&i| self.shape()[i]).product();
        let centered = self.sub(&self.mean(&d[..], true)?)?;
        // Saturating: an empty reduction is 0 / 0 = NaN either way, as in PyTorch (n - 1
        // would be -1 and give -0).
        let denom = if unbiased { n.saturating_sub(1) as f64 } else { n as f64 };
        Ok(centered.square().sum(&d[..], keepdim)?.div_scalar(denom))
    }

    /// The variance of all elements.
    #[track_caller]
    pub fn var_all(&self, unbiased: bool) -> Var {
        let d: DimList = (0..self.rank()).collect();
        infallible(self.var(&d[..], unbiased, false), "variance over all dimensions")
    }

    /// The standard deviation over `dims`. Where it is 0 (constant data) its gradient is 0,
    /// as in PyTorch, not the NaN of differentiating `sqrt` at 0.
    #[track_caller]
    pub fn std(&self, dims: impl Dims, unbiased: bool, keepdim: bool) -> Result<Var> {
        // Resolved here so that a bad dimension is an error naming `std`, not `var`.
        let d = self.resolve_dims(dims, "std")?;
        Ok(apply_infallible(StdOfVar, &[&self.var(&d[..], unbiased, keepdim)?]))
    }

    /// The standard deviation of all elements (gradient 0 where it is 0, as for
    /// [`Var::std`]).
    #[track_caller]
    pub fn std_all(&self, unbiased: bool) -> Var {
        apply_infallible(StdOfVar, &[&self.var_all(unbiased)])
    }

    /// `log(sum(exp(x)))` over `dims`, stable for large values. The shift by the maximum is
    /// a constant, so the gradient is exactly the softmax.
    #[track_caller]
    pub fn logsumexp(&self, dims: impl Dims, keepdim: bool) -> Result<Var> {
        if let Some([x]) = autocast::cast(&policy::reduction("logsumexp"), [self]) {
            return x.logsumexp(dims, keepdim);
        }
        let d = self.resolve_dims(dims, "logsumexp")?;
        let kept: Vec<usize> =
            self.shape().iter().enumerate().map(|(i, &s)| if d.contains(&i) { 1 } else { s }).collect();
        // Over an empty dimension there is no maximum; any shift works, and the result is
        // log(0) = -inf as in PyTorch.
        let empty = d.iter().any(|&i| self.shape()[i] == 0);
        let m = if empty {
            Tensor::full_on(kept, 0, self.dtype(), self.device())?
        } else {
            self.value().max(&d[..], true)?
        };
        let finite = m.abs().lt_scalar(f64::INFINITY);
        let shift = constant(finite.where_cond(&m, &m.zeros_like())?);
        let out = self.sub(&shift)?.exp().sum(&d[..], true)?.log().add(&shift)?;
        if keepdim {
            return Ok(out);
        }
        let shape: Vec<usize> =
            self.shape().iter().enumerate().filter(|(i, _)| !d.contains(i)).map(|(_, &s)| s).collect();
        out.reshape(shape)
    }

    /// This gradient summed down to `shape`: the reverse of broadcasting `shape` to this
    /// shape.
    #[track_caller]
    pub fn sum_to(&self, shape: &Shape) -> Result<Var> {
        let own = self.shape();
        if own == *shape {
            return Ok(self.clone());
        }
        if shape.rank() > own.rank() {
            return Err(ember_tensor::Error::shape(
                "sum_to",
                format!("cannot sum {own:?} down to the larger-rank shape {shape:?}"),
            ));
        }
        // Only the reverse of a broadcast is a sum: every trailing dimension of the target
        // must equal this one's or be 1 (otherwise the reshape below would silently turn,
        // say, [2, 3] into [3, 2]).
        if let Some((t, o)) = shape.iter().rev().zip(own.iter().rev()).find(|&(&t, &o)| t != o && t != 1) {
            return Err(ember_tensor::Error::shape(
                "sum_to",
                format!(
                    "cannot sum {own:?} down to {shape:?}: {shape:?} does not broadcast to it (size {t} against {o})"
                ),
            ));
        }
        let lead = own.rank() - shape.rank();
        let dims: Vec<usize> = (0..own.rank()).filter(|&i| i < lead || (shape[i - lead] == 1 && own[i] != 1)).collect();
        let summed = if dims.is_empty() { self.clone() } else { self.sum(dims, true)? };
        summed.reshape(shape.clone())
    }
}
