//! Normalisation: `BatchNormalization` (inference), `LayerNormalization` and
//! `InstanceNormalization`, which PyTorch also writes for `GroupNorm` (`Reshape` to
//! `[N, G, -1]`, `InstanceNormalization` with unit scale, `Reshape` back, `Mul`, `Add`).

use super::{axis, float, float_attr, float_in, int_attr, opt_float_in};
use crate::ir::{Node, Value};
use ember_nn::functional::layer_norm as ln;
use ember_tensor::{Error, Result};

type Args<'a> = &'a [Option<Value>];

/// Inference batch normalisation with the running statistics (inputs 3 and 4), computed
/// as `nn::BatchNorm2d` does in evaluation.
pub(crate) fn batch_norm(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    if int_attr(node, "training_mode", 0)? != 0 || node.outputs.iter().skip(1).any(|o| !o.is_empty()) {
        return Err(Error::invalid("onnx", "training_mode is not supported (inference only)"));
    }
    let x = float_in(args, 0)?;
    let (scale, bias, mean, var) = (float_in(args, 1)?, float_in(args, 2)?, float_in(args, 3)?, float_in(args, 4)?);
    let eps = float_attr(node, "epsilon", 1e-5)? as f64;
    if x.shape().rank() < 2 {
        return Err(Error::shape("onnx", format!("BatchNormalization needs [N, C, ...], got {}", x.shape())));
    }
    let c = x.shape()[1];
    for (what, p) in [("scale", scale), ("B", bias), ("mean", mean), ("var", var)] {
        if p.shape().dims() != [c] {
            return Err(Error::shape("onnx", format!("{what} must have shape [{c}], got {}", p.shape())));
        }
    }
    let mut shape = vec![1usize; x.shape().rank()];
    shape[1] = c;
    let invstd = var.add_scalar(eps).rsqrt().reshape(shape.as_slice())?;
    let y = x.sub(&mean.reshape(shape.as_slice())?)?.mul(&invstd)?;
    float(y.mul(&scale.reshape(shape.as_slice())?)?.add(&bias.reshape(shape.as_slice())?)?)
}

pub(crate) fn layer_norm(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let (x, w, b) = (float_in(args, 0)?, float_in(args, 1)?, opt_float_in(args, 2)?);
    if node.outputs.iter().skip(1).any(|o| !o.is_empty()) {
        return Err(Error::invalid("onnx", "the Mean and InvStdDev outputs are not supported"));
    }
    let dims = x.shape().dims().to_vec();
    let ax = axis(int_attr(node, "axis", -1)?, dims.len())?;
    let normalized = &dims[ax..];
    let eps = float_attr(node, "epsilon", 1e-5)? as f64;
    float(ln(x, normalized, Some(w), b, eps)?)
}

/// `(x - mean) / sqrt(var + epsilon) * scale + B` with the statistics of each sample and
/// channel over the spatial dimensions: ember's fused per-channel normalisation on the
/// input seen as `[1, N * C, ...]`, so each (sample, channel) pair is one channel.
pub(crate) fn instance_norm(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let (x, scale, bias) = (float_in(args, 0)?, float_in(args, 1)?, float_in(args, 2)?);
    let dims = x.shape().dims().to_vec();
    if dims.len() < 3 {
        return Err(Error::shape("onnx", format!("InstanceNormalization needs [N, C, D1, ...], got {dims:?}")));
    }
    let (n, c) = (dims[0], dims[1]);
    for (what, p) in [("scale", scale), ("B", bias)] {
        if p.shape().dims() != [c] {
            return Err(Error::shape("onnx", format!("{what} must have shape [{c}], got {}", p.shape())));
        }
    }
    let eps = float_attr(node, "epsilon", 1e-5)? as f64;
    let mut seen = vec![1, n * c];
    seen.extend(&dims[2..]);
    let (y, _, _) = x.reshape(seen.as_slice())?.channel_norm(None, None, eps)?;
    let mut per_channel = vec![1usize; dims.len()];
    per_channel[1] = c;
    let y = y.reshape(dims.as_slice())?;
    float(y.mul(&scale.reshape(per_channel.as_slice())?)?.add(&bias.reshape(per_channel.as_slice())?)?)
}
