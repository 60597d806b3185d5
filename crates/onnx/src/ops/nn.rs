//! Layer operators: convolution, pooling, softmax.

use super::{axis, float, float_in, int_attr, ints_attr, opt_float_in, string_attr};
use crate::ir::{Node, Value};
use ember_autograd::Var;
use ember_nn::functional::{AvgPoolArgs, ConvArgs, MaxPoolArgs, Padding};
use ember_tensor::ops::conv::ConvTransposeArgs;
use ember_tensor::{Error, Result};

type Args<'a> = &'a [Option<Value>];

/// A 1-d operator runs as its 2-d form on a plane of height 1: the input `[N, C, L]` as
/// `[N, C, 1, L]`.
fn planar(x: &Var) -> Result<(Var, bool)> {
    match x.shape().rank() {
        3 => Ok((x.unsqueeze(2)?, true)),
        4 => Ok((x.clone(), false)),
        _ => {
            Err(Error::shape("onnx", format!("only 1-d (NCL) and 2-d (NCHW) inputs are supported, got {}", x.shape())))
        }
    }
}

/// Back from a plane of height 1.
fn unplanar(y: Var, one_d: bool) -> Result<Vec<Value>> {
    float(if one_d { y.squeeze(2)? } else { y })
}

/// The 1-d weight `[O, I, K]` as `[O, I, 1, K]`.
fn planar_weight(w: &Var, one_d: bool) -> Result<Var> {
    if one_d && w.shape().rank() == 3 { w.unsqueeze(2) } else { Ok(w.clone()) }
}

/// Two spatial values (height, width) from an attribute (`default` when absent); a 1-d
/// operator's one value is the width, its height `flat` (the neutral value).
fn pair(node: &Node, name: &str, default: usize, one_d: bool, flat: usize) -> Result<[usize; 2]> {
    let want = if one_d { 1 } else { 2 };
    match ints_attr(node, name)? {
        None => Ok(if one_d { [flat, default] } else { [default; 2] }),
        Some(v) if v.len() == want && v.iter().all(|&x| x >= 0) => {
            Ok(if one_d { [flat, v[0] as usize] } else { [v[0] as usize, v[1] as usize] })
        }
        Some(v) => Err(Error::invalid("onnx", format!("'{name}' must hold {want} non-negative values, got {v:?}"))),
    }
}

/// Padding `[top, left, bottom, right]` from `pads` and `auto_pad` (a 1-d `[begin, end]`
/// is the width's).
fn pads4(node: &Node, one_d: bool) -> Result<[usize; 4]> {
    let auto = string_attr(node, "auto_pad", "NOTSET")?;
    if auto != "NOTSET" && auto != "VALID" {
        return Err(Error::invalid("onnx", format!("auto_pad '{auto}' is not supported (use explicit pads)")));
    }
    match ints_attr(node, "pads")? {
        None => Ok([0; 4]),
        Some(p) if one_d && p.len() == 2 && p.iter().all(|&x| x >= 0) => Ok([0, p[0] as usize, 0, p[1] as usize]),
        Some(p) if !one_d && p.len() == 4 && p.iter().all(|&x| x >= 0) => {
            Ok([p[0], p[1], p[2], p[3]].map(|v| v as usize))
        }
        Some(p) => Err(Error::invalid("onnx", format!("pads {p:?} are not supported (non-negative, 2 per dimension)"))),
    }
}

/// Symmetric padding (height, width) from `pads` and `auto_pad`.
fn pads(node: &Node, one_d: bool) -> Result<[usize; 2]> {
    match pads4(node, one_d)? {
        [t, l, b, r] if t == b && l == r => Ok([t, l]),
        p => Err(Error::invalid("onnx", format!("pads {p:?} are not supported (the same before and after)"))),
    }
}

fn kernel(node: &Node, one_d: bool) -> Result<[usize; 2]> {
    if node.attr("kernel_shape").is_none() {
        return Err(Error::invalid("onnx", "kernel_shape is required"));
    }
    pair(node, "kernel_shape", 1, one_d, 1)
}

fn check_kernel(node: &Node, w: &Var, one_d: bool) -> Result<()> {
    if node.attr("kernel_shape").is_some()
        && w.shape().rank() == 4
        && pair(node, "kernel_shape", 1, one_d, 1)? != [w.shape()[2], w.shape()[3]]
    {
        return Err(Error::shape("onnx", format!("kernel_shape does not match the weight's shape {}", w.shape())));
    }
    Ok(())
}

fn group(node: &Node) -> Result<usize> {
    let group = int_attr(node, "group", 1)?;
    if group < 1 {
        return Err(Error::invalid("onnx", format!("group must be positive, got {group}")));
    }
    Ok(group as usize)
}

pub(crate) fn conv(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let (x, b) = (float_in(args, 0)?, opt_float_in(args, 2)?);
    let (x, one_d) = planar(x)?;
    let w = planar_weight(float_in(args, 1)?, one_d)?;
    check_kernel(node, &w, one_d)?;
    // Padding that differs before and after (PyTorch's "same" with an even kernel) is
    // written out as zeros; symmetric padding stays the convolution's own.
    let [top, left, bottom, right] = pads4(node, one_d)?;
    let (x, padding) = if top == bottom && left == right {
        (x, [top, left])
    } else {
        (x.pad(&[(left, right), (top, bottom)], 0.0)?, [0, 0])
    };
    let args = ConvArgs {
        stride: pair(node, "strides", 1, one_d, 1)?,
        padding: Padding::Explicit(padding),
        dilation: pair(node, "dilations", 1, one_d, 1)?,
        groups: group(node)?,
    };
    unplanar(x.conv2d(&w, b, &args)?, one_d)
}

/// `ConvTranspose` (1-d or 2-d, symmetric pads, explicit `output_padding`; `output_shape`
/// is not supported).
pub(crate) fn conv_transpose(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let (x, b) = (float_in(args, 0)?, opt_float_in(args, 2)?);
    let (x, one_d) = planar(x)?;
    let w = planar_weight(float_in(args, 1)?, one_d)?;
    if node.attr("output_shape").is_some() {
        return Err(Error::invalid("onnx", "output_shape is not supported (use pads and output_padding)"));
    }
    check_kernel(node, &w, one_d)?;
    let args = ConvTransposeArgs {
        stride: pair(node, "strides", 1, one_d, 1)?,
        padding: pads(node, one_d)?,
        output_padding: pair(node, "output_padding", 0, one_d, 0)?,
        dilation: pair(node, "dilations", 1, one_d, 1)?,
        groups: group(node)?,
    };
    unplanar(x.conv_transpose2d(&w, b, &args)?, one_d)
}

pub(crate) fn max_pool(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let (x, one_d) = planar(float_in(args, 0)?)?;
    if node.outputs.len() > 1 && !node.outputs[1].is_empty() {
        return Err(Error::invalid("onnx", "the Indices output of MaxPool is not supported"));
    }
    if int_attr(node, "storage_order", 0)? != 0 {
        return Err(Error::invalid("onnx", "storage_order 1 is not supported"));
    }
    let mut a = MaxPoolArgs::new(kernel(node, one_d)?);
    a.stride = Some(pair(node, "strides", 1, one_d, 1)?);
    a.padding = pads(node, one_d)?;
    a.dilation = pair(node, "dilations", 1, one_d, 1)?;
    a.ceil_mode = int_attr(node, "ceil_mode", 0)? != 0;
    unplanar(x.max_pool2d(&a)?, one_d)
}

pub(crate) fn avg_pool(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let (x, one_d) = planar(float_in(args, 0)?)?;
    if pair(node, "dilations", 1, one_d, 1)? != [1, 1] {
        return Err(Error::invalid("onnx", "dilated AveragePool is not supported"));
    }
    let mut a = AvgPoolArgs::new(kernel(node, one_d)?);
    a.stride = Some(pair(node, "strides", 1, one_d, 1)?);
    a.padding = pads(node, one_d)?;
    a.ceil_mode = int_attr(node, "ceil_mode", 0)? != 0;
    a.count_include_pad = int_attr(node, "count_include_pad", 0)? != 0;
    unplanar(x.avg_pool2d(&a)?, one_d)
}

pub(crate) fn global_avg_pool(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let x = float_in(args, 0)?;
    let rank = x.shape().rank();
    if rank < 3 {
        return Err(Error::shape("onnx", format!("GlobalAveragePool needs [N, C, ...], got {}", x.shape())));
    }
    float(x.mean((2..rank).collect::<Vec<usize>>(), true)?)
}

pub(crate) fn softmax(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let x = float_in(args, 0)?;
    float(x.softmax(axis(int_attr(node, "axis", -1)?, x.shape().rank())?)?)
}

pub(crate) fn log_softmax(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let x = float_in(args, 0)?;
    float(x.log_softmax(axis(int_attr(node, "axis", -1)?, x.shape().rank())?)?)
}
