//! Layer operators: convolution, pooling, normalisation, softmax.

use super::{axis, float, float_attr, float_in, int_attr, ints_attr, opt_float_in, string_attr};
use crate::ir::{Node, Value};
use ember_nn::functional::{AvgPoolArgs, ConvArgs, MaxPoolArgs, Padding, layer_norm as ln};
use ember_tensor::ops::conv::ConvTransposeArgs;
use ember_tensor::{Error, Result};

type Args<'a> = &'a [Option<Value>];

/// Two spatial values from an attribute (`default` when absent), as `usize`.
fn pair(node: &Node, name: &str, default: usize) -> Result<[usize; 2]> {
    match ints_attr(node, name)? {
        None => Ok([default; 2]),
        Some(v) if v.len() == 2 && v.iter().all(|&x| x >= 0) => Ok([v[0] as usize, v[1] as usize]),
        Some(v) => {
            Err(Error::invalid("onnx", format!("'{name}' must hold 2 non-negative values (2-d only), got {v:?}")))
        }
    }
}

/// 2-d padding `[top, left, bottom, right]` from `pads` and `auto_pad`.
fn pads4(node: &Node) -> Result<[usize; 4]> {
    let auto = string_attr(node, "auto_pad", "NOTSET")?;
    if auto != "NOTSET" && auto != "VALID" {
        return Err(Error::invalid("onnx", format!("auto_pad '{auto}' is not supported (use explicit pads)")));
    }
    match ints_attr(node, "pads")? {
        None => Ok([0; 4]),
        Some(p) if p.len() == 4 && p.iter().all(|&x| x >= 0) => Ok([p[0], p[1], p[2], p[3]].map(|v| v as usize)),
        Some(p) => Err(Error::invalid("onnx", format!("pads {p:?} are not supported (2-d, non-negative)"))),
    }
}

/// Symmetric 2-d padding from `pads` (`[top, left, bottom, right]`) and `auto_pad`.
fn pads(node: &Node) -> Result<[usize; 2]> {
    match pads4(node)? {
        [t, l, b, r] if t == b && l == r => Ok([t, l]),
        p => Err(Error::invalid("onnx", format!("pads {p:?} are not supported (2-d, the same before and after)"))),
    }
}

fn four_d(x: &ember_autograd::Var) -> Result<()> {
    if x.shape().rank() != 4 {
        return Err(Error::shape("onnx", format!("only 2-d (NCHW) inputs are supported, got shape {}", x.shape())));
    }
    Ok(())
}

fn kernel(node: &Node) -> Result<[usize; 2]> {
    if node.attr("kernel_shape").is_none() {
        return Err(Error::invalid("onnx", "kernel_shape is required"));
    }
    pair(node, "kernel_shape", 1)
}

pub(crate) fn conv(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let (x, w, b) = (float_in(args, 0)?, float_in(args, 1)?, opt_float_in(args, 2)?);
    four_d(x)?;
    let group = int_attr(node, "group", 1)?;
    if group < 1 {
        return Err(Error::invalid("onnx", format!("group must be positive, got {group}")));
    }
    if node.attr("kernel_shape").is_some()
        && w.shape().rank() == 4
        && pair(node, "kernel_shape", 1)? != [w.shape()[2], w.shape()[3]]
    {
        return Err(Error::shape("onnx", format!("kernel_shape does not match the weight's shape {}", w.shape())));
    }
    // Padding that differs before and after (PyTorch's "same" with an even kernel) is
    // written out as zeros; symmetric padding stays the convolution's own.
    let [top, left, bottom, right] = pads4(node)?;
    let (x, padding) = if top == bottom && left == right {
        (x.clone(), [top, left])
    } else {
        (x.pad(&[(left, right), (top, bottom)], 0.0)?, [0, 0])
    };
    let args = ConvArgs {
        stride: pair(node, "strides", 1)?,
        padding: Padding::Explicit(padding),
        dilation: pair(node, "dilations", 1)?,
        groups: group as usize,
    };
    float(x.conv2d(w, b, &args)?)
}

/// `ConvTranspose` (2-d, symmetric pads, explicit `output_padding`; `output_shape` is not
/// supported).
pub(crate) fn conv_transpose(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let (x, w, b) = (float_in(args, 0)?, float_in(args, 1)?, opt_float_in(args, 2)?);
    four_d(x)?;
    if node.attr("output_shape").is_some() {
        return Err(Error::invalid("onnx", "output_shape is not supported (use pads and output_padding)"));
    }
    let group = int_attr(node, "group", 1)?;
    if group < 1 {
        return Err(Error::invalid("onnx", format!("group must be positive, got {group}")));
    }
    if node.attr("kernel_shape").is_some()
        && w.shape().rank() == 4
        && pair(node, "kernel_shape", 1)? != [w.shape()[2], w.shape()[3]]
    {
        return Err(Error::shape("onnx", format!("kernel_shape does not match the weight's shape {}", w.shape())));
    }
    let args = ConvTransposeArgs {
        stride: pair(node, "strides", 1)?,
        padding: pads(node)?,
        output_padding: pair(node, "output_padding", 0)?,
        dilation: pair(node, "dilations", 1)?,
        groups: group as usize,
    };
    float(x.conv_transpose2d(w, b, &args)?)
}

pub(crate) fn max_pool(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let x = float_in(args, 0)?;
    four_d(x)?;
    if node.outputs.len() > 1 && !node.outputs[1].is_empty() {
        return Err(Error::invalid("onnx", "the Indices output of MaxPool is not supported"));
    }
    if int_attr(node, "storage_order", 0)? != 0 {
        return Err(Error::invalid("onnx", "storage_order 1 is not supported"));
    }
    let mut a = MaxPoolArgs::new(kernel(node)?);
    a.stride = Some(pair(node, "strides", 1)?);
    a.padding = pads(node)?;
    a.dilation = pair(node, "dilations", 1)?;
    a.ceil_mode = int_attr(node, "ceil_mode", 0)? != 0;
    float(x.max_pool2d(&a)?)
}

pub(crate) fn avg_pool(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let x = float_in(args, 0)?;
    four_d(x)?;
    let mut a = AvgPoolArgs::new(kernel(node)?);
    a.stride = Some(pair(node, "strides", 1)?);
    a.padding = pads(node)?;
    a.ceil_mode = int_attr(node, "ceil_mode", 0)? != 0;
    a.count_include_pad = int_attr(node, "count_include_pad", 0)? != 0;
    float(x.avg_pool2d(&a)?)
}

pub(crate) fn global_avg_pool(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let x = float_in(args, 0)?;
    let rank = x.shape().rank();
    if rank < 3 {
        return Err(Error::shape("onnx", format!("GlobalAveragePool needs [N, C, ...], got {}", x.shape())));
    }
    float(x.mean((2..rank).collect::<Vec<usize>>(), true)?)
}

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

pub(crate) fn softmax(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let x = float_in(args, 0)?;
    float(x.softmax(axis(int_attr(node, "axis", -1)?, x.shape().rank())?)?)
}

pub(crate) fn log_softmax(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let x = float_in(args, 0)?;
    float(x.log_softmax(axis(int_attr(node, "axis", -1)?, x.shape().rank())?)?)
}
