//! `MatMul` and `Gemm`.

use super::{float, float_attr, float_in, int_attr, opt_float_in};
use crate::ir::{Node, Value};
use ember_tensor::{Error, Result};

pub(crate) fn matmul(_: &Node, args: &[Option<Value>]) -> Result<Vec<Value>> {
    float(float_in(args, 0)?.matmul(float_in(args, 1)?)?)
}

/// `alpha * A' B' + beta * C`. The usual `transB = 1`, `alpha = beta = 1` with a 1-d bias is
/// ember's `linear` (the same kernel as `nn::Linear`, so ember -> ONNX -> ember is exact).
pub(crate) fn gemm(node: &Node, args: &[Option<Value>]) -> Result<Vec<Value>> {
    let (a, b, c) = (float_in(args, 0)?, float_in(args, 1)?, opt_float_in(args, 2)?);
    let alpha = float_attr(node, "alpha", 1.0)?;
    let beta = float_attr(node, "beta", 1.0)?;
    let (ta, tb) = (int_attr(node, "transA", 0)? != 0, int_attr(node, "transB", 0)? != 0);
    if a.shape().rank() != 2 || b.shape().rank() != 2 {
        return Err(Error::shape("Gemm", format!("A and B must be 2-d, got {} and {}", a.shape(), b.shape())));
    }
    let a = if ta { a.t()? } else { a.clone() };
    if tb && alpha == 1.0 && beta == 1.0 && c.is_none_or(|c| c.shape().rank() == 1) {
        return float(a.linear(b, c)?);
    }
    let b = if tb { b.t()? } else { b.clone() };
    let mut y = a.matmul(&b)?;
    if alpha != 1.0 {
        y = y.mul_scalar(alpha as f64);
    }
    if let Some(c) = c {
        let c = if beta != 1.0 { c.mul_scalar(beta as f64) } else { c.clone() };
        y = y.add(&c)?;
    }
    float(y)
}
