//! Fused softmax and log-softmax.

use super::apply;
use crate::autocast::{self, policy};
use crate::backward_ctx::BackwardCtx;
use crate::op::{Grads, Op, Saves};
use crate::var::Var;
use ember_tensor::{Dim, Result, Tensor};
use smallvec::smallvec;

struct Softmax {
    dim: usize,
    log: bool,
}

impl Op for Softmax {
    fn name(&self) -> &str {
        if self.log { "log_softmax" } else { "softmax" }
    }
    fn export(&self) -> Result<crate::export::OpExport> {
        Ok(crate::export::OpExport::new(self.name()).attr("dim", crate::export::ExportAttr::Int(self.dim as i64)))
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        if self.log { inputs[0].log_softmax(self.dim) } else { inputs[0].softmax(self.dim) }
    }
    fn backward(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        let y = ctx.output()?;
        let gx = if self.log {
            // d log_softmax: g - softmax * sum(g)
            g.sub(&y.exp().mul(&g.sum(self.dim, true)?)?)?
        } else {
            // d softmax: y * (g - sum(g * y))
            y.mul(&g.sub(&g.mul(&y)?.sum(self.dim, true)?)?)?
        };
        Ok(smallvec![Some(gx)])
    }
    fn saves(&self) -> Saves {
        Saves::OUTPUT
    }
}

impl Var {
    /// Softmax along `dim`.
    #[track_caller]
    pub fn softmax(&self, dim: impl Dim) -> Result<Var> {
        let d = dim.resolve(self.rank().max(1), "softmax")?;
        if let Some([x]) = autocast::cast(&policy::SOFTMAX, [self]) {
            return apply(Softmax { dim: d, log: false }, &[&x]);
        }
        apply(Softmax { dim: d, log: false }, &[self])
    }

    /// Log-softmax along `dim`, numerically stable.
    #[track_caller]
    pub fn log_softmax(&self, dim: impl Dim) -> Result<Var> {
        let d = dim.resolve(self.rank().max(1), "log_softmax")?;
        if let Some([x]) = autocast::cast(&policy::LOG_SOFTMAX, [self]) {
            return apply(Softmax { dim: d, log: true }, &[&x]);
        }
        apply(Softmax { dim: d, log: true }, &[self])
    }
}
