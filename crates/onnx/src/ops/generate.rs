//! Tensors made from sizes: `Range` (positions for rotary embeddings and masks) and
//! `ConstantOfShape` (zero states, masks). Integer results stay on the host; float results
//! are constants.

use super::{input, int_in, one};
use crate::ir::{Attr, IntTensor, Node, Value};
use ember_autograd::Var;
use ember_tensor::{DType, Error, Result, Tensor};

type Args<'a> = &'a [Option<Value>];

/// The most elements a `Range` or `ConstantOfShape` may make (their sizes come from the
/// file or from the input's shape).
const LIMIT: usize = 1 << 24;

/// A scalar input as `f64`.
fn scalar(args: Args<'_>, i: usize, what: &str) -> Result<f64> {
    let t = input(args, i)?.to_var()?.value();
    if t.shape().numel() != 1 {
        return Err(Error::shape("onnx", format!("Range {what} must be a scalar, got {}", t.shape())));
    }
    Ok(t.to_dtype(DType::F64).to_vec::<f64>()?[0])
}

/// `start, start + delta, ...` up to `limit` (excluded): `ceil((limit - start) / delta)`
/// values, none when that is negative.
pub(crate) fn range(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let (start, limit, delta) = (scalar(args, 0, "start")?, scalar(args, 1, "limit")?, scalar(args, 2, "delta")?);
    if delta == 0.0 || !(start.is_finite() && limit.is_finite() && delta.is_finite()) {
        return Err(Error::invalid("onnx", format!("Range({start}, {limit}, {delta}) has no finite length")));
    }
    let n = ((limit - start) / delta).ceil().max(0.0);
    if n > LIMIT as f64 {
        return Err(Error::invalid("onnx", format!("Range({start}, {limit}, {delta}) makes {n} values")));
    }
    let n = n as usize;
    match input(args, 0)? {
        Value::Int(_) => {
            let (s, d) = (start as i64, delta as i64);
            let values = (0..n as i64)
                .map(|i| i.checked_mul(d).and_then(|v| v.checked_add(s)))
                .collect::<Option<Vec<i64>>>()
                .ok_or_else(|| Error::invalid("onnx", format!("Range({s}, {limit}, {d}) overflows")))?;
            one(Value::Int(IntTensor::vector(values)))
        }
        Value::Float(x) => {
            let v: Vec<f64> = (0..n).map(|i| start + i as f64 * delta).collect();
            one(Value::Float(Var::new(Tensor::from_vec(v, [n])?.to_dtype(x.dtype()))))
        }
    }
}

/// A tensor of the shape in input 0 filled with `value` (a one-element tensor; float 0 when
/// absent).
pub(crate) fn constant_of_shape(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let dims = &int_in(args, 0)?.data;
    let shape: Vec<usize> = dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| Error::shape("onnx", format!("invalid ConstantOfShape {dims:?}"))))
        .collect::<Result<_>>()?;
    let numel = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).filter(|&n| n <= LIMIT);
    let numel = numel.ok_or_else(|| Error::shape("onnx", format!("ConstantOfShape {dims:?} is too large")))?;
    match node.attr("value") {
        None => one(Value::Float(Var::new(Tensor::zeros(shape, DType::F32)?))),
        Some(Attr::Tensor(Value::Int(t))) if t.data.len() == 1 => {
            one(Value::Int(IntTensor { shape, data: vec![t.data[0]; numel], is_bool: t.is_bool }))
        }
        Some(Attr::Tensor(Value::Float(v))) if v.numel() == 1 => {
            let fill = v.value().to_dtype(DType::F64).to_vec::<f64>()?[0];
            one(Value::Float(Var::new(Tensor::full(shape, fill, v.dtype())?)))
        }
        Some(other) => Err(Error::invalid("onnx", format!("ConstantOfShape value must be one element, got {other:?}"))),
    }
}
