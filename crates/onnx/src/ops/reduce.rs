//! Reductions: `ReduceMean` and `ReduceMax` (opset 13-17: axes as an attribute) and `ReduceSum` (axes as
//! an input since opset 13).

use super::{axis, float, float_in, int_attr, ints_attr, opt_ints_in};
use crate::ir::{Node, Value};
use ember_autograd::Var;
use ember_tensor::Result;

fn axes(x: &Var, given: Option<Vec<i64>>, node: &Node) -> Result<Option<Vec<usize>>> {
    let rank = x.shape().rank();
    match given {
        Some(a) if !a.is_empty() => Ok(Some(a.iter().map(|&a| axis(a, rank)).collect::<Result<Vec<_>>>()?)),
        _ if int_attr(node, "noop_with_empty_axes", 0)? != 0 => Ok(None),
        _ => Ok(Some((0..rank).collect())),
    }
}

pub(crate) fn reduce_mean(node: &Node, args: &[Option<Value>]) -> Result<Vec<Value>> {
    let x = float_in(args, 0)?;
    let keep = int_attr(node, "keepdims", 1)? != 0;
    match axes(x, ints_attr(node, "axes")?, node)? {
        Some(a) => float(x.mean(a, keep)?),
        None => float(x.clone()),
    }
}

pub(crate) fn reduce_sum(node: &Node, args: &[Option<Value>]) -> Result<Vec<Value>> {
    let x = float_in(args, 0)?;
    let keep = int_attr(node, "keepdims", 1)? != 0;
    match axes(x, opt_ints_in(args, 1)?, node)? {
        Some(a) => float(x.sum(a, keep)?),
        None => float(x.clone()),
    }
}

pub(crate) fn reduce_max(node: &Node, args: &[Option<Value>]) -> Result<Vec<Value>> {
    let x = float_in(args, 0)?;
    let keep = int_attr(node, "keepdims", 1)? != 0;
    match axes(x, ints_attr(node, "axes")?, node)? {
        Some(a) => float(x.max(a, keep)?),
        None => float(x.clone()),
    }
}
