//! Reductions: `ReduceMean`, `ReduceMax`, `ReduceMin` and `ReduceL2`, whose axes are an
//! attribute up to opset 17 and input 1 from opset 18 (both are read), and `ReduceSum`
//! (axes as an input since opset 13).

use super::{axis, float, float_in, int_attr, ints_attr, opt_ints_in};
use crate::ir::{Node, Value};
use ember_autograd::Var;
use ember_tensor::Result;

type Args<'a> = &'a [Option<Value>];

/// The axes to reduce (`None`: none, with `noop_with_empty_axes`): input 1 when given, else
/// the `axes` attribute, else all.
fn axes(x: &Var, node: &Node, args: Args<'_>) -> Result<Option<Vec<usize>>> {
    let rank = x.shape().rank();
    let given = match opt_ints_in(args, 1)? {
        Some(a) => Some(a),
        None => ints_attr(node, "axes")?,
    };
    match given {
        Some(a) if !a.is_empty() => Ok(Some(a.iter().map(|&a| axis(a, rank)).collect::<Result<Vec<_>>>()?)),
        _ if int_attr(node, "noop_with_empty_axes", 0)? != 0 => Ok(None),
        _ => Ok(Some((0..rank).collect())),
    }
}

/// Reduces `x` over the node's axes with `f(x, axes, keepdims)`.
fn reduce(node: &Node, args: Args<'_>, f: impl Fn(&Var, Vec<usize>, bool) -> Result<Var>) -> Result<Vec<Value>> {
    let x = float_in(args, 0)?;
    let keep = int_attr(node, "keepdims", 1)? != 0;
    match axes(x, node, args)? {
        Some(a) => float(f(x, a, keep)?),
        None => float(x.clone()),
    }
}

pub(crate) fn reduce_mean(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    reduce(node, args, |x, a, k| x.mean(a, k))
}

pub(crate) fn reduce_sum(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    reduce(node, args, |x, a, k| x.sum(a, k))
}

pub(crate) fn reduce_max(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    reduce(node, args, |x, a, k| x.max(a, k))
}

pub(crate) fn reduce_min(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    reduce(node, args, |x, a, k| x.min(a, k))
}

/// `sqrt(sum(x^2))` (`F.normalize`'s norm).
pub(crate) fn reduce_l2(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    reduce(node, args, |x, a, k| Ok(x.square().sum(a, k)?.sqrt()))
}
