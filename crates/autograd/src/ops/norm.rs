//! Per-channel normalisation as one recorded operation (the training forward of batch
//! norm, and the normalisation inside group and instance norm): one fused kernel forward,
//! one fused kernel backward, except under `create_graph`, where the gradient is built from
//! `Var` operations so that it can be differentiated again.

use super::{apply, constant};
use crate::backward_ctx::BackwardCtx;
use crate::grad_mode::is_grad_enabled;
use crate::op::{Grads, Op};
use crate::var::Var;
use ember_tensor::{Error, Result, Tensor};
use parking_lot::Mutex;
use smallvec::smallvec;
use std::sync::Arc;

/// The batch statistics of the latest forward, `(mean, biased variance)`.
type Stats = Arc<Mutex<Option<(Tensor, Tensor)>>>;

struct ChannelNormOp {
    eps: f64,
    weight: bool,
    bias: bool,
    /// Written by every forward (a re-executed graph recomputes them), read by the fused
    /// backward and by the caller, which updates running statistics from them.
    stats: Stats,
}

impl ChannelNormOp {
    /// The index among the inputs of the weight and of the bias, if present.
    fn slots(&self) -> (Option<usize>, Option<usize>) {
        let w = self.weight.then_some(1);
        let b = self.bias.then_some(1 + usize::from(self.weight));
        (w, b)
    }
}

impl Op for ChannelNormOp {
    fn name(&self) -> &str {
        "channel_norm"
    }

    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let (w, b) = self.slots();
        let (y, mean, var) = inputs[0].channel_norm(w.map(|i| inputs[i]), b.map(|i| inputs[i]), self.eps)?;
        *self.stats.lock() = Some((mean, var));
        Ok(y)
    }

    fn backward(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        let (wi, bi) = self.slots();
        let x = ctx.input(0)?;
        let weight = wi.map(|i| ctx.input(i)).transpose()?;
        let (gx, gw, gb) = if is_grad_enabled() {
            differentiable_grads(&x, weight.as_ref(), g, self.eps)?
        } else {
            let stats = self.stats.lock().clone();
            let (mean, var) = stats.ok_or_else(|| Error::autograd("channel_norm: no statistics were saved"))?;
            let w = weight.as_ref().map(Var::value);
            let (gx, gb, gw) = x.value().channel_norm_backward(&g.value(), &mean, &var, w.as_ref(), self.eps)?;
            (constant(gx), constant(gw), constant(gb))
        };
        let mut grads: Grads = smallvec![ctx.needs_input_grad(0).then_some(gx)];
        if let Some(i) = wi {
            grads.push(ctx.needs_input_grad(i).then_some(gw));
        }
        if let Some(i) = bi {
            grads.push(ctx.needs_input_grad(i).then_some(gb));
        }
        Ok(grads)
    }

    fn export(&self) -> Result<crate::export::OpExport> {
        use crate::export::{ExportAttr, OpExport};
        Ok(OpExport::new("channel_norm")
            .attr("eps", ExportAttr::Float(self.eps))
            .attr("weight", ExportAttr::Int(i64::from(self.weight)))
            .attr("bias", ExportAttr::Int(i64::from(self.bias))))
    }
}

/// The gradients `(input, weight, bias)` as `Var` operations of the input, weight and
/// incoming gradient, statistics recomputed from the input so that their dependence on it
/// is part of the graph:
/// `gx = invstd * (gh - mean(gh) - xhat * mean(gh * xhat))` with `gh = g * weight`.
fn differentiable_grads(x: &Var, weight: Option<&Var>, g: &Var, eps: f64) -> Result<(Var, Var, Var)> {
    let rank = x.shape().rank();
    let reduce: Vec<usize> = (0..rank).filter(|&d| d != 1).collect();
    let mut per_channel = vec![1; rank];
    per_channel[1] = x.shape()[1];
    let centred = x.sub(&x.mean(&reduce, true)?)?;
    let invstd = centred.square().mean(&reduce, true)?.add_scalar(eps).rsqrt();
    let xhat = centred.mul(&invstd)?;
    let gh = match weight {
        Some(w) => g.mul(&w.reshape(per_channel.as_slice())?)?,
        None => g.clone(),
    };
    let along = xhat.mul(&gh.mul(&xhat)?.mean(&reduce, true)?)?;
    let gx = gh.sub(&gh.mean(&reduce, true)?)?.sub(&along)?.mul(&invstd)?;
    let gw = g.mul(&xhat)?.sum(&reduce, false)?;
    let gb = g.sum(&reduce, false)?;
    Ok((gx, gw, gb))
}

impl Var {
    /// Per-channel normalisation of `self` (`[N, C, *]`) with batch statistics, as one
    /// recorded operation (see [`Tensor::channel_norm`]): `(x - mean) / sqrt(var + eps) *
    /// weight + bias` per channel (dimension 1), with optional `[C]` `weight` and `bias`.
    /// Returns the output and the batch's mean and biased variance (`[C]` constants, for
    /// running statistics).
    ///
    /// The forward and, unless the backward is itself recorded (`create_graph`), the
    /// backward are one fused kernel each; under `create_graph` the gradient is built from
    /// `Var` operations, so it has gradients of every order. `ember_nn`'s batch, group and
    /// instance norm are built on it.
    ///
    /// ```
    /// use ember_autograd::Var;
    /// use ember_tensor::Tensor;
    /// let x = Var::param(Tensor::from_vec(vec![1.0f64, 3.0, 10.0, 20.0], [2, 2])?);
    /// let (y, mean, _) = x.channel_norm(None, None, 1e-5)?;
    /// assert_eq!(mean.to_vec::<f64>()?, vec![5.5, 11.5]);
    /// y.sum_all().backward()?;
    /// // The output of each channel sums to zero whatever the input.
    /// assert!(x.grad().unwrap().to_vec::<f64>()?.iter().all(|g| g.abs() < 1e-9));
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    #[track_caller]
    pub fn channel_norm(&self, weight: Option<&Var>, bias: Option<&Var>, eps: f64) -> Result<(Var, Tensor, Tensor)> {
        let stats = Stats::default();
        let op = ChannelNormOp { eps, weight: weight.is_some(), bias: bias.is_some(), stats: stats.clone() };
        let mut inputs = vec![self];
        inputs.extend(weight);
        inputs.extend(bias);
        let y = apply(op, &inputs)?;
        let (mean, var) =
            stats.lock().clone().ok_or_else(|| Error::autograd("channel_norm: the forward saved no statistics"))?;
        Ok((y, mean, var))
    }
}
