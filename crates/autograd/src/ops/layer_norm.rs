//! Layer normalisation as one recorded operation: one fused kernel forward, which keeps
//! the per-row mean and `rstd` beside the node, and one fused kernel backward, except under
//! `create_graph`, where the gradient is built from `Var` operations so that it can be
//! differentiated again.
//!
//! Its backward reads the input and the weight, which are other nodes' values, so the node
//! adds only its output and two numbers per row to what a training step holds; the same
//! layer composed of elementwise operations kept five full-size intermediates, in `f32`
//! under autocast.

use super::{apply, constant};
use crate::backward_ctx::BackwardCtx;
use crate::export::{ExportAttr, OpExport};
use crate::grad_mode::is_grad_enabled;
use crate::op::{Grads, Op, Saves};
use crate::var::Var;
use ember_tensor::{DType, Error, Result, Tensor};
use parking_lot::Mutex;
use smallvec::smallvec;

struct LayerNormOp {
    normalized_shape: Vec<usize>,
    eps: f64,
    /// The bias's dtype, if there is a bias (its gradient comes back in it).
    bias: Option<DType>,
    weight: bool,
    /// `(mean, rstd)` of the latest forward (a re-executed graph recomputes them), read by
    /// the fused backward.
    stats: Mutex<Option<(Tensor, Tensor)>>,
}

impl LayerNormOp {
    /// The index among the inputs of the weight and of the bias, if present.
    fn slots(&self) -> (Option<usize>, Option<usize>) {
        let w = self.weight.then_some(1);
        let b = self.bias.map(|_| 1 + usize::from(self.weight));
        (w, b)
    }

    /// The dimensions before the normalized ones, in an input of rank `rank`.
    fn leading(&self, rank: usize) -> Vec<usize> {
        (0..rank - self.normalized_shape.len()).collect()
    }
}

impl Op for LayerNormOp {
    fn name(&self) -> &str {
        "layer_norm"
    }

    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let (w, b) = self.slots();
        let (y, mean, rstd) =
            inputs[0].layer_norm(&self.normalized_shape, w.map(|i| inputs[i]), b.map(|i| inputs[i]), self.eps)?;
        *self.stats.lock() = Some((mean, rstd));
        Ok(y)
    }

    fn saves(&self) -> Saves {
        // The input and the weight; never the bias or the output.
        Saves { inputs: if self.weight { 0b11 } else { 0b1 }, output: false }
    }

    fn backward(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        let (wi, bi) = self.slots();
        let x = ctx.input(0)?;
        let weight = wi.map(|i| ctx.input(i)).transpose()?;
        let (gx, gw, gb) = if is_grad_enabled() {
            self.differentiable_grads(&x, weight.as_ref(), g)?
        } else {
            let stats = self.stats.lock().clone();
            let (mean, rstd) = stats.ok_or_else(|| Error::autograd("layer_norm: no statistics were saved"))?;
            let w = weight.as_ref().map(Var::value);
            let g = g.value().to_dtype(x.dtype());
            let (gx, gw, gb) = x.value().layer_norm_backward(&g, &self.normalized_shape, &mean, &rstd, w.as_ref())?;
            (constant(gx), constant(gw), constant(gb))
        };
        let mut grads: Grads = smallvec![ctx.needs_input_grad(0).then_some(gx)];
        if let Some(i) = wi {
            grads.push(ctx.needs_input_grad(i).then_some(gw));
        }
        if let Some(i) = bi {
            let dtype = self.bias.unwrap_or(gb.dtype());
            grads.push(ctx.needs_input_grad(i).then(|| gb.to_dtype(dtype)));
        }
        Ok(grads)
    }

    fn export(&self) -> Result<OpExport> {
        Ok(OpExport::new("layer_norm")
            .ints("normalized_shape", self.normalized_shape.iter().copied())
            .attr("eps", ExportAttr::Float(self.eps))
            .attr("weight", ExportAttr::Int(i64::from(self.weight)))
            .attr("bias", ExportAttr::Int(i64::from(self.bias.is_some()))))
    }
}

impl LayerNormOp {
    /// The gradients `(input, weight, bias)` as `Var` operations of the input, weight and
    /// incoming gradient, in the input's compute dtype, with the statistics recomputed
    /// from the input so that their dependence on it is part of the graph:
    /// `gx = rstd * (gh - mean(gh) - xhat * mean(gh * xhat))` with `gh = g * weight`.
    fn differentiable_grads(&self, x: &Var, weight: Option<&Var>, g: &Var) -> Result<(Var, Var, Var)> {
        let compute = x.dtype().compute_dtype();
        let (xc, gc) = (x.to_dtype(compute), g.to_dtype(compute));
        let rank = x.shape().rank();
        let reduce: Vec<usize> = (rank - self.normalized_shape.len()..rank).collect();
        let centred = xc.sub(&xc.mean(&reduce, true)?)?;
        let rstd = centred.square().mean(&reduce, true)?.add_scalar(self.eps).rsqrt();
        let xhat = centred.mul(&rstd)?;
        let gh = match weight {
            Some(w) => gc.mul(&w.to_dtype(compute))?,
            None => gc.clone(),
        };
        let along = xhat.mul(&gh.mul(&xhat)?.mean(&reduce, true)?)?;
        let gx = gh.sub(&gh.mean(&reduce, true)?)?.sub(&along)?.mul(&rstd)?.to_dtype(x.dtype());
        let leading = self.leading(rank);
        let over_rows = |v: Var| if leading.is_empty() { Ok(v) } else { v.sum(&leading, false) };
        let param_dtype = weight.map_or(x.dtype(), Var::dtype);
        let gw = over_rows(gc.mul(&xhat)?)?.to_dtype(param_dtype);
        let gb = over_rows(gc)?.to_dtype(param_dtype);
        Ok((gx, gw, gb))
    }
}

impl Var {
    /// Layer normalisation of `self` over its trailing `normalized_shape` as one recorded
    /// operation (see [`Tensor::layer_norm`]): `(x - mean) / sqrt(var + eps) * weight +
    /// bias`, each row's mean and *biased* variance, with optional `weight` and `bias` of the
    /// normalized shape; PyTorch's `native_layer_norm`.
    ///
    /// The output has `self`'s dtype. A 16-bit input is computed in `f32` and may take
    /// `f32` parameters (what autocast gives a layer norm of a 16-bit activation); otherwise
    /// the parameters have the input's dtype. The node's backward reads only the input and
    /// the weight (plus two `f32` numbers per row for a 16-bit input), so it holds no
    /// intermediate. The forward and, unless the backward is itself recorded
    /// (`create_graph`), the backward are one fused kernel each; under `create_graph` the
    /// gradient is built from `Var` operations, so it has gradients of every order.
    /// `ember_nn`'s `LayerNorm` is built on it.
    ///
    /// ```
    /// use ember_autograd::Var;
    /// use ember_tensor::Tensor;
    /// let x = Var::param(Tensor::from_vec(vec![1.0f64, 3.0, 10.0, 20.0], [2, 2])?);
    /// let y = x.layer_norm(&[2], None, None, 0.0)?;
    /// assert_eq!(y.value().to_vec::<f64>()?, vec![-1.0, 1.0, -1.0, 1.0]);
    /// y.sum_all().backward()?;
    /// // Each row of the output sums to zero whatever the input.
    /// assert!(x.grad().unwrap().to_vec::<f64>()?.iter().all(|g| g.abs() < 1e-9));
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    #[track_caller]
    pub fn layer_norm(
        &self,
        normalized_shape: &[usize],
        weight: Option<&Var>,
        bias: Option<&Var>,
        eps: f64,
    ) -> Result<Var> {
        let op = LayerNormOp {
            normalized_shape: normalized_shape.to_vec(),
            eps,
            bias: bias.map(Var::dtype),
            weight: weight.is_some(),
            stats: Mutex::new(None),
        };
        let mut inputs = vec![self];
        inputs.extend(weight);
        inputs.extend(bias);
        apply(op, &inputs)
    }
}
