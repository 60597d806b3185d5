//! `Split`: sizes from input 1 (opset 13 and later), from the `split` attribute (earlier
//! files), equal parts by `num_outputs` (opset 18, the last part smaller when the size does
//! not divide) or, with neither, equal parts, one per output. Attention's q/k/v split.

use super::{axis, input, int_attr, ints_attr, opt_ints_in};
use crate::ir::{IntTensor, Node, Value};
use ember_tensor::{Error, Result};

pub(crate) fn split(node: &Node, args: &[Option<Value>]) -> Result<Vec<Value>> {
    let x = input(args, 0)?;
    let dims = x.shape();
    let ax = axis(int_attr(node, "axis", 0)?, dims.len())?;
    let n = dims[ax];
    let outputs = node.outputs.len();
    let given = match opt_ints_in(args, 1)? {
        Some(s) => Some(s),
        None => ints_attr(node, "split")?,
    };
    let sizes: Vec<usize> = match given {
        Some(s) => {
            if s.len() != outputs || s.iter().any(|&v| v < 0) || s.iter().sum::<i64>() != n as i64 {
                return Err(Error::shape(
                    "onnx",
                    format!(
                        "split sizes {s:?} must be {outputs} non-negative values summing to {n} (axis {ax} of {dims:?})"
                    ),
                ));
            }
            s.iter().map(|&v| v as usize).collect()
        }
        None => {
            let parts = match node.attr("num_outputs") {
                Some(_) => usize::try_from(int_attr(node, "num_outputs", 0)?).unwrap_or(0),
                None => outputs,
            };
            if parts == 0 || parts != outputs {
                return Err(Error::invalid(
                    "onnx",
                    format!("Split into {parts} parts, but the node has {outputs} outputs"),
                ));
            }
            let each = n.div_ceil(parts);
            if node.attr("num_outputs").is_none() && !n.is_multiple_of(parts) {
                return Err(Error::shape("onnx", format!("cannot split size {n} into {parts} equal parts")));
            }
            (0..parts).map(|i| each.min(n.saturating_sub(i * each))).collect()
        }
    };
    let mut start = 0;
    let mut out = Vec::with_capacity(sizes.len());
    for &len in &sizes {
        out.push(match x {
            Value::Float(v) => Value::Float(v.narrow(ax, start, len)?),
            Value::Int(t) => {
                let part = ember_autograd::Var::new(t.to_tensor()?).narrow(ax, start, len)?;
                let mut back = IntTensor::from_tensor(&part.value())?;
                back.is_bool = t.is_bool;
                Value::Int(back)
            }
        });
        start += len;
    }
    Ok(out)
}
