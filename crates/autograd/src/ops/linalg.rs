//! Matrix products.

use super::apply;
use crate::autocast::{self, policy};
use crate::backward_ctx::BackwardCtx;
use crate::op::{Grads, Op};
use crate::var::Var;
use ember_tensor::{Error, Result, Shape, Tensor};
use smallvec::smallvec;

/// `a @ b` for operands of rank 2 or more (batch dimensions broadcast).
struct Matmul {
    shapes: [Shape; 2],
}

impl Op for Matmul {
    fn name(&self) -> &str {
        "matmul"
    }
    fn export(&self) -> Result<crate::export::OpExport> {
        Ok(crate::export::OpExport::new("matmul"))
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].matmul(inputs[1])
    }
    fn backward(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        let ga = if ctx.needs_input_grad(0) {
            Some(g.matmul(&ctx.input(1)?.transpose(-1, -2)?)?.sum_to(&self.shapes[0])?)
        } else {
            None
        };
        let gb = if ctx.needs_input_grad(1) {
            Some(ctx.input(0)?.transpose(-1, -2)?.matmul(g)?.sum_to(&self.shapes[1])?)
        } else {
            None
        };
        Ok(smallvec![ga, gb])
    }
}

/// `x @ w^T + b` in one node (PyTorch's `F.linear`): `x` is `[.., in]`, `w` `[out, in]`,
/// `b` `[out]`. Backward produces the weight's gradient as `g^T @ x`, directly in the
/// weight's own `[out, in]` layout, instead of the transposed view a generic
/// `x.matmul(&w.t())` would hand to the accumulator (which then has to copy it).
struct Linear {
    bias: bool,
}

impl Op for Linear {
    fn name(&self) -> &str {
        "linear"
    }
    fn export(&self) -> Result<crate::export::OpExport> {
        Ok(crate::export::OpExport::new("linear").attr("bias", crate::export::ExportAttr::Int(self.bias as i64)))
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let y = inputs[0].matmul(&inputs[1].t()?)?;
        if self.bias {
            // The product is a fresh tensor nobody else sees yet: add the bias in place.
            y.add_(inputs[2])?;
        }
        Ok(y)
    }
    fn backward(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        let out = g.shape()[g.rank() - 1];
        let g2 = g.reshape([-1, out as i64])?;
        let gx = if ctx.needs_input_grad(0) { Some(g.matmul(&ctx.input(1)?)?) } else { None };
        let gw = if ctx.needs_input_grad(1) {
            let x = ctx.input(0)?;
            let inn = x.shape()[x.rank() - 1];
            let x2 = x.reshape([-1, inn as i64])?;
            match ctx.grad_destination(1) {
                // The weight's gradient buffer (a bucket view under data-parallel training)
                // takes the product directly: no new tensor, no copy into the buffer.
                Some(dst) if dst.dtype() == g.dtype() => {
                    g2.value().t()?.matmul_into(&x2.value(), &dst.value())?;
                    Some(dst)
                }
                _ => Some(g2.t()?.matmul(&x2)?),
            }
        } else {
            None
        };
        let mut grads: Grads = smallvec![gx, gw];
        if self.bias {
            grads.push(if ctx.needs_input_grad(2) { Some(g2.sum(0, false)?) } else { None });
        }
        Ok(grads)
    }
    fn saves(&self) -> crate::op::Saves {
        crate::op::Saves { inputs: 0b011, output: false }
    }
}

impl Var {
    /// `self @ weight^T + bias` (PyTorch's `F.linear`): `self` is `[.., in]`, `weight`
    /// `[out, in]`, `bias` `[out]`.
    #[track_caller]
    pub fn linear(&self, weight: &Var, bias: Option<&Var>) -> Result<Var> {
        let (xs, ws) = (self.shape(), weight.shape());
        let fits = xs.rank() >= 1
            && ws.rank() == 2
            && xs[xs.rank() - 1] == ws[1]
            && bias.is_none_or(|b| b.shape().dims() == [ws[0]]);
        if !fits {
            return Err(Error::shape(
                "linear",
                format!(
                    "input {:?}, weight {:?} and bias {:?} do not fit [.., in], [out, in], [out]",
                    xs,
                    ws,
                    bias.map(|b| b.shape())
                ),
            ));
        }
        if let Some(c) = autocast::cast_inputs(&policy::LINEAR, [Some(self), Some(weight), bias])?
            && let [Some(x), Some(w), b] = &c.inputs
        {
            return match b {
                Some(b) => apply(Linear { bias: true }, &[x, w, b]),
                None => apply(Linear { bias: false }, &[x, w]),
            };
        }
        match bias {
            Some(b) => apply(Linear { bias: true }, &[self, weight, b]),
            None => apply(Linear { bias: false }, &[self, weight]),
        }
    }

    /// The matrix product with PyTorch's rules (1-d operands are vectors, leading
    /// dimensions broadcast as batches).
    #[track_caller]
    pub fn matmul(&self, other: &Var) -> Result<Var> {
        if let Some([a, b]) = autocast::cast(&policy::MATMUL, [self, other]) {
            return a.matmul(&b);
        }
        let (ra, rb) = (self.rank(), other.rank());
        if ra == 0 || rb == 0 {
            return Err(Error::shape(
                "matmul",
                format!("both operands need at least one dimension, got {:?} and {:?}", self.shape(), other.shape()),
            ));
        }
        if ra >= 2 && rb >= 2 {
            return apply(Matmul { shapes: [self.shape(), other.shape()] }, &[self, other]);
        }
        // Vectors become matrices (a row on the left, a column on the right) through
        // differentiable reshapes, and the added dimension is removed from the result.
        let a = if ra == 1 { self.unsqueeze(0)? } else { self.clone() };
        let b = if rb == 1 { other.unsqueeze(1)? } else { other.clone() };
        // A shape error from the product names the reshaped operands: name the caller's
        // instead. Any other error (mixed dtypes, integer operands) is passed on as it is.
        let out = a.matmul(&b).map_err(|e| match e {
            Error::Shape { .. } => {
                Error::shape("matmul", format!("cannot multiply {:?} by {:?}", self.shape(), other.shape()))
            }
            other => other,
        })?;
        let out = if ra == 1 { out.squeeze(-2)? } else { out };
        if rb == 1 { out.squeeze(-1) } else { Ok(out) }
    }
}
