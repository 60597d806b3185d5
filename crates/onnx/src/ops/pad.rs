//! `Pad` in `constant` mode: `pads` (input 1, all begins then all ends), the value
//! (input 2, 0 when absent) and the axes they apply to (input 3, opset 18). Negative pads
//! crop. Other modes (`reflect`, `edge`, `wrap`) are refused.

use super::{axis, float, float_in, int_in, opt_ints_in, string_attr};
use crate::ir::{Node, Value};
use ember_tensor::{DType, Error, Result};

pub(crate) fn pad(node: &Node, args: &[Option<Value>]) -> Result<Vec<Value>> {
    let mode = string_attr(node, "mode", "constant")?;
    if mode != "constant" {
        return Err(Error::invalid("onnx", format!("Pad mode '{mode}' is not supported (constant only)")));
    }
    let x = float_in(args, 0)?;
    let rank = x.shape().rank();
    let pads = &int_in(args, 1)?.data;
    let value = match args.get(2).and_then(Option::as_ref) {
        None => 0.0,
        Some(v) => {
            let t = v.to_var()?.value();
            match t.shape().numel() {
                0 => 0.0,
                1 => t.to_dtype(DType::F64).to_vec::<f64>()?[0],
                _ => return Err(Error::shape("onnx", format!("Pad value must be a scalar, got {}", t.shape()))),
            }
        }
    };
    let axes: Vec<usize> = match opt_ints_in(args, 3)? {
        Some(a) => a.iter().map(|&a| axis(a, rank)).collect::<Result<_>>()?,
        None => (0..rank).collect(),
    };
    if pads.len() != 2 * axes.len() {
        return Err(Error::shape(
            "onnx",
            format!("Pad needs {} pads for {} axes, got {pads:?}", 2 * axes.len(), axes.len()),
        ));
    }
    let mut per_dim = vec![(0i64, 0i64); rank];
    for (k, &a) in axes.iter().enumerate() {
        per_dim[a] = (pads[k], pads[k + axes.len()]);
    }
    // Crops first (negative pads), then the padding, ember's (before, after) pairs from the
    // last dimension backwards.
    let mut y = x.clone();
    for (d, &(b, e)) in per_dim.iter().enumerate() {
        if b < 0 || e < 0 {
            let n = y.shape()[d] as i64;
            let (s, t) = (b.min(0).saturating_neg(), n.saturating_sub(e.min(0).saturating_neg()));
            if s > t {
                return Err(Error::shape("onnx", format!("Pad crops {pads:?} more than {}", x.shape())));
            }
            y = y.narrow(d, s as usize, (t - s) as usize)?;
        }
    }
    let pairs: Vec<(usize, usize)> =
        per_dim.iter().rev().map(|&(b, e)| (b.max(0) as usize, e.max(0) as usize)).collect();
    if pairs.iter().any(|&p| p != (0, 0)) {
        y = y.pad(&pairs, value)?;
    }
    float(y)
}
