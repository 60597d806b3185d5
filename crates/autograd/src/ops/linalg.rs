//! Matrix products.

use super::apply;
use crate::backward_ctx::BackwardCtx;
use crate::node::{Grads, Op};
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

impl Var {
    /// The matrix product with PyTorch's rules (1-d operands are vectors, leading
    /// dimensions broadcast as batches).
    pub fn matmul(&self, other: &Var) -> Result<Var> {
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
        let out = a.matmul(&b).map_err(|_| {
            Error::shape("matmul", format!("cannot multiply {:?} by {:?}", self.shape(), other.shape()))
        })?;
        let out = if ra == 1 { out.squeeze(-2)? } else { out };
        if rb == 1 { out.squeeze(-1) } else { Ok(out) }
    }
}
