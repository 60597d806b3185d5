//! `Trilu`: the upper (`upper = 1`, the default) or lower triangle of the last two
//! dimensions, shifted by the optional diagonal `k` (input 1). Floats are ember's
//! `triu`/`tril` (differentiable); integers and booleans (causal masks) are cut on the host.

use super::{input, int_attr, opt_ints_in};
use crate::ir::{IntTensor, Node, Value};
use ember_tensor::{Error, Result};

pub(crate) fn trilu(node: &Node, args: &[Option<Value>]) -> Result<Vec<Value>> {
    let upper = int_attr(node, "upper", 1)? != 0;
    let k = match opt_ints_in(args, 1)? {
        None => 0,
        Some(v) if v.len() == 1 => v[0],
        Some(v) => return Err(Error::shape("onnx", format!("Trilu k must be a scalar, got {v:?}"))),
    };
    let x = input(args, 0)?;
    let dims = x.shape();
    if dims.len() < 2 {
        return Err(Error::shape("onnx", format!("Trilu needs at least 2 dimensions, got {dims:?}")));
    }
    match x {
        Value::Float(v) => Ok(vec![Value::Float(if upper { v.triu(k)? } else { v.tril(k)? })]),
        Value::Int(t) => {
            let (rows, cols) = (dims[dims.len() - 2], dims[dims.len() - 1]);
            let data = t
                .data
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    let (r, c) = (((i / cols) % rows) as i64, (i % cols) as i64);
                    let keep = if upper { c - r >= k } else { c - r <= k };
                    if keep { v } else { 0 }
                })
                .collect();
            Ok(vec![Value::Int(IntTensor { shape: dims, data, is_bool: t.is_bool })])
        }
    }
}
