//! Comparisons and logic: `Equal`, `Less`, `Greater` (and their `OrEqual` forms), `Not`,
//! `And`, `Or`, `IsNaN`. Their results are host booleans, since conditions (`Where`) and
//! masks are host tensors in the graph; float operands are compared on the host too (no
//! gradient flows through a comparison).

use super::{float_in, input, int, int_in};
use crate::ir::{IntTensor, Node, Value};
use ember_autograd::Var;
use ember_tensor::{DType, Result};

type Args<'a> = &'a [Option<Value>];

/// `f(a, b)` elementwise with broadcasting, as a host boolean tensor.
fn compare(args: Args<'_>, f: fn(f64, f64) -> bool) -> Result<Vec<Value>> {
    let mut t = match (input(args, 0)?, input(args, 1)?) {
        (Value::Int(a), Value::Int(b)) => int::zip(a, b, |x, y| Ok(f(x as f64, y as f64) as i64))?,
        (a, b) => {
            let (a, b) = (a.to_var()?, b.to_var()?);
            let shape = int::broadcast_shape(a.shape().dims(), b.shape().dims())?;
            let host = |v: &Var| -> Result<Vec<f64>> {
                v.value().to_dtype(DType::F64).broadcast_to(shape.clone())?.contiguous().to_vec::<f64>()
            };
            let (x, y) = (host(&a)?, host(&b)?);
            IntTensor::new(shape, x.iter().zip(&y).map(|(&p, &q)| f(p, q) as i64).collect())?
        }
    };
    t.is_bool = true;
    Ok(vec![Value::Int(t)])
}

/// `Equal`: of integers, or of floats (e.g. a score row's maximum against `-inf`).
pub(crate) fn equal(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    compare(args, |a, b| a == b)
}

pub(crate) fn less(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    compare(args, |a, b| a < b)
}

pub(crate) fn less_or_equal(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    compare(args, |a, b| a <= b)
}

pub(crate) fn greater(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    compare(args, |a, b| a > b)
}

pub(crate) fn greater_or_equal(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    compare(args, |a, b| a >= b)
}

/// `And` and `Or` of host booleans.
fn logic(args: Args<'_>, f: fn(bool, bool) -> bool) -> Result<Vec<Value>> {
    let mut t = int::zip(int_in(args, 0)?, int_in(args, 1)?, |a, b| Ok(f(a != 0, b != 0) as i64))?;
    t.is_bool = true;
    Ok(vec![Value::Int(t)])
}

pub(crate) fn and(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    logic(args, |a, b| a && b)
}

pub(crate) fn or(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    logic(args, |a, b| a || b)
}

pub(crate) fn not(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let t = int_in(args, 0)?;
    Ok(vec![Value::Int(IntTensor {
        shape: t.shape.clone(),
        data: t.data.iter().map(|&v| (v == 0) as i64).collect(),
        is_bool: true,
    })])
}

/// `IsNaN` of a float tensor. PyTorch's exporters write `Where(IsNaN(p), 0, p)` after the
/// softmax of scaled dot-product attention: a row whose every key is masked is NaN there,
/// and zero in PyTorch.
pub(crate) fn is_nan(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let x = float_in(args, 0)?;
    let values = x.value().to_dtype(DType::F64).contiguous().to_vec::<f64>()?;
    Ok(vec![Value::Int(IntTensor {
        shape: x.shape().dims().to_vec(),
        data: values.iter().map(|v| v.is_nan() as i64).collect(),
        is_bool: true,
    })])
}
