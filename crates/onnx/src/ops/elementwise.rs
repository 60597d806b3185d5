//! Elementwise operators: arithmetic (on float `Var`s, or on host integers for shape
//! computations), comparisons, activations, casts and the inference no-ops.

use super::{float, float_in, input, int, int_attr, int_in};
use crate::ir::{IntTensor, Node, Value};
use crate::proto::data_type;
use ember_autograd::Var;
use ember_tensor::{DType, Error, Result};

type Args<'a> = &'a [Option<Value>];

/// Runs a binary operator on two floats (`f`) or two integers (`g`).
fn binary(
    args: Args<'_>,
    f: impl Fn(&Var, &Var) -> Result<Var>,
    g: impl Fn(i64, i64) -> Result<i64>,
) -> Result<Vec<Value>> {
    match (input(args, 0)?, input(args, 1)?) {
        (Value::Float(a), Value::Float(b)) => float(f(a, b)?),
        (Value::Int(a), Value::Int(b)) => Ok(vec![Value::Int(int::zip(a, b, g)?)]),
        (a, b) => Err(Error::dtype(
            "onnx",
            format!(
                "cannot combine a {} tensor of shape {:?} with a {} tensor of shape {:?}",
                kind(a),
                a.shape(),
                kind(b),
                b.shape()
            ),
        )),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Float(_) => "float",
        Value::Int(_) => "integer",
    }
}

fn overflow(op: &str, a: i64, b: i64) -> Error {
    Error::invalid("onnx", format!("integer overflow in {a} {op} {b}"))
}

pub(crate) fn add(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    binary(args, |a, b| a.add(b), |a, b| a.checked_add(b).ok_or_else(|| overflow("+", a, b)))
}

pub(crate) fn sub(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    binary(args, |a, b| a.sub(b), |a, b| a.checked_sub(b).ok_or_else(|| overflow("-", a, b)))
}

pub(crate) fn mul(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    binary(args, |a, b| a.mul(b), |a, b| a.checked_mul(b).ok_or_else(|| overflow("*", a, b)))
}

pub(crate) fn div(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    binary(args, |a, b| a.div(b), int::div)
}

pub(crate) fn pow(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let x = float_in(args, 0)?;
    match input(args, 1)? {
        // A constant scalar exponent (`x ** 2`) is the common case and has a simpler gradient.
        Value::Float(e) if e.numel() == 1 && !e.requires_grad() => {
            float(x.pow_scalar(e.value().to_dtype(DType::F64).to_vec::<f64>()?[0])?)
        }
        Value::Float(e) => float(x.pow(e)?),
        Value::Int(e) if e.data.len() == 1 => float(x.pow_scalar(e.data[0] as f64)?),
        Value::Int(e) => float(x.pow(&Var::new(e.to_tensor()?.to_dtype(x.dtype())))?),
    }
}

pub(crate) fn modulo(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    if int_attr(node, "fmod", 0)? != 0 {
        return Err(Error::invalid("onnx", "fmod = 1 is not supported"));
    }
    // Integer Mod with fmod = 0 takes the divisor's sign, like Python's `%`.
    let (a, b) = (int_in(args, 0)?, int_in(args, 1)?);
    Ok(vec![Value::Int(int::zip(a, b, |a, b| {
        if b == 0 {
            return Err(Error::invalid("onnx", format!("integer modulo {a} % 0")));
        }
        let r = a.wrapping_rem(b);
        Ok(if r != 0 && ((r < 0) != (b < 0)) { r + b } else { r })
    })?)])
}

pub(crate) fn where_op(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let cond = int_in(args, 0)?;
    match (input(args, 1)?, input(args, 2)?) {
        (Value::Int(a), Value::Int(b)) => Ok(vec![Value::Int(int::select(cond, a, b)?)]),
        (a, b) => {
            // Any non-zero integer selects, as a `u8` mask on the values' device.
            let (a, b) = (a.to_var()?, b.to_var()?);
            let mask = IntTensor { is_bool: true, ..cond.clone() }.to_tensor()?.to_device(a.device())?;
            float(Var::new(mask).where_cond(&a, &b)?)
        }
    }
}

macro_rules! unary {
    ($($name:ident => $f:expr;)*) => {
        $(pub(crate) fn $name(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
            let f: fn(&Var) -> Var = $f;
            float(f(float_in(args, 0)?))
        })*
    };
}

unary! {
    relu => |x| x.relu();
    sigmoid => |x| x.sigmoid();
    tanh => |x| x.tanh();
    exp => |x| x.exp();
    log => |x| x.log();
    neg => |x| x.neg();
    abs => |x| x.abs();
    reciprocal => |x| x.rdiv_scalar(1.0);
    sin => |x| x.sin();
    cos => |x| x.cos();
}

/// `Floor` and `Ceil`: of integers (shape arithmetic) the identity, of floats ember's own
/// (gradient zero).
fn rounding(args: Args<'_>, f: fn(&Var) -> Var) -> Result<Vec<Value>> {
    match input(args, 0)? {
        Value::Float(x) => float(f(x)),
        Value::Int(t) => Ok(vec![Value::Int(t.clone())]),
    }
}

pub(crate) fn floor(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    rounding(args, Var::floor)
}

pub(crate) fn ceil(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    rounding(args, Var::ceil)
}

/// `Max` and `Min` of any number of inputs, broadcasting: `maximum`/`minimum` of floats
/// (ties share the gradient, as in PyTorch), or on the host of integers.
fn extreme(args: Args<'_>, max: bool) -> Result<Vec<Value>> {
    let mut acc = input(args, 0)?.clone();
    for i in 1..args.len() {
        acc = match (&acc, input(args, i)?) {
            (Value::Float(a), Value::Float(b)) => Value::Float(if max { a.maximum(b)? } else { a.minimum(b)? }),
            (Value::Int(a), Value::Int(b)) => {
                Value::Int(int::zip(a, b, |x, y| Ok(if max { x.max(y) } else { x.min(y) }))?)
            }
            (a, b) => {
                return Err(Error::dtype(
                    "onnx",
                    format!("cannot take the extreme of a {} and a {} tensor", kind(a), kind(b)),
                ));
            }
        };
    }
    Ok(vec![acc])
}

pub(crate) fn max(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    extreme(args, true)
}

pub(crate) fn min(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    extreme(args, false)
}

pub(crate) fn sqrt(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    match input(args, 0)? {
        Value::Float(x) => float(x.sqrt()),
        Value::Int(t) => Err(Error::dtype("onnx", format!("Sqrt of an integer tensor of shape {:?}", t.shape))),
    }
}

pub(crate) fn identity(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    Ok(vec![input(args, 0)?.clone()])
}

/// Dropout at inference: the identity. A graph asking for the mask output is refused.
pub(crate) fn dropout(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    if node.outputs.get(1).is_some_and(|m| !m.is_empty()) {
        return Err(Error::invalid("onnx", "the mask output of Dropout is not supported"));
    }
    if let Some(Some(Value::Int(t))) = args.get(2)
        && t.data.first().is_some_and(|&m| m != 0)
    {
        return Err(Error::invalid("onnx", "Dropout in training mode is not supported (inference only)"));
    }
    Ok(vec![input(args, 0)?.clone()])
}

/// The float dtype of an ONNX data type `Cast` may target.
fn float_dtype(to: i32) -> Option<DType> {
    match to {
        data_type::FLOAT => Some(DType::F32),
        data_type::DOUBLE => Some(DType::F64),
        data_type::FLOAT16 => Some(DType::F16),
        data_type::BFLOAT16 => Some(DType::BF16),
        _ => None,
    }
}

/// `CastLike`: `Cast` to the element type of input 1.
pub(crate) fn cast_like(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let to = match input(args, 1)? {
        Value::Float(v) => crate::export::onnx_type(v.dtype()),
        Value::Int(t) if t.is_bool => data_type::BOOL,
        Value::Int(_) => data_type::INT64,
    };
    cast_to(to, input(args, 0)?)
}

/// `Cast` between the float dtypes (rounding to nearest even into `f16` and `bf16`, and
/// differentiable), from integers to floats, and from floats and integers to integers and
/// booleans.
pub(crate) fn cast(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    cast_to(int_attr(node, "to", 0)? as i32, input(args, 0)?)
}

fn cast_to(to: i32, x: &Value) -> Result<Vec<Value>> {
    if let Some(dtype) = float_dtype(to) {
        return match x {
            Value::Float(v) => float(v.to_dtype(dtype)),
            Value::Int(t) => float(Var::new(t.to_tensor()?.to_dtype(dtype))),
        };
    }
    match (x, to) {
        (Value::Int(t), data_type::INT64 | data_type::INT32) => {
            Ok(vec![Value::Int(IntTensor { is_bool: false, ..t.clone() })])
        }
        (Value::Int(t), data_type::BOOL) => Ok(vec![Value::Int(IntTensor {
            shape: t.shape.clone(),
            data: t.data.iter().map(|&v| (v != 0) as i64).collect(),
            is_bool: true,
        })]),
        (Value::Float(v), data_type::BOOL) => {
            let vals = v.value().to_dtype(DType::F64).to_vec::<f64>()?;
            let mut t = IntTensor::new(v.shape().dims().to_vec(), vals.iter().map(|&f| (f != 0.0) as i64).collect())?;
            t.is_bool = true;
            Ok(vec![Value::Int(t)])
        }
        (Value::Float(v), data_type::INT64 | data_type::INT32) => {
            let vals = v.value().to_dtype(DType::F64).to_vec::<f64>()?;
            Ok(vec![Value::Int(IntTensor::new(
                v.shape().dims().to_vec(),
                vals.into_iter().map(|f| f as i64).collect(),
            )?)])
        }
        _ => Err(Error::dtype("onnx", format!("Cast to data type {to} is not supported"))),
    }
}
