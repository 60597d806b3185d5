//! `CumSum` along the axis in input 1, with `exclusive` and `reverse`. ember has no
//! cumulative sum of its own, so a float input is multiplied by a triangular matrix of ones
//! (`x @ U` along the axis, differentiable); integers are summed on the host.

use super::{axis, float, input, int_attr, int_in};
use crate::ir::{IntTensor, Node, Value};
use ember_autograd::Var;
use ember_tensor::{Error, Result, Tensor};

type Args<'a> = &'a [Option<Value>];

/// The longest axis a float `CumSum` runs along (its `n x n` matrix is then 64 MiB in f32).
const MATRIX_LIMIT: usize = 4096;

/// Whether output position `j` sums input position `i`.
fn takes(i: usize, j: usize, exclusive: bool, reverse: bool) -> bool {
    match (reverse, exclusive) {
        (false, false) => i <= j,
        (false, true) => i < j,
        (true, false) => i >= j,
        (true, true) => i > j,
    }
}

pub(crate) fn cumsum(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let x = input(args, 0)?;
    let a = int_in(args, 1)?;
    if a.data.len() != 1 {
        return Err(Error::shape("onnx", format!("CumSum axis must be a scalar, got {:?}", a.data)));
    }
    let dims = x.shape();
    let ax = axis(a.data[0], dims.len())?;
    let (exclusive, reverse) = (int_attr(node, "exclusive", 0)? != 0, int_attr(node, "reverse", 0)? != 0);
    let n = dims[ax];
    match x {
        Value::Float(_) if n > MATRIX_LIMIT => Err(Error::invalid(
            "onnx",
            format!("CumSum of a float tensor along an axis of {n} > {MATRIX_LIMIT} elements is not supported"),
        )),
        Value::Float(v) => {
            let u: Vec<f64> = (0..n)
                .flat_map(|i| (0..n).map(move |j| f64::from(u8::from(takes(i, j, exclusive, reverse)))))
                .collect();
            let u = Var::new(Tensor::from_vec(u, [n, n])?.to_dtype(v.dtype()).to_device(v.device())?);
            let last = dims.len() - 1;
            let moved = v.transpose(ax, last)?;
            float(moved.matmul(&u)?.transpose(ax, last)?)
        }
        Value::Int(t) => {
            let inner: usize = dims[ax + 1..].iter().product();
            let mut data = vec![0i64; t.data.len()];
            for (flat, out) in data.iter_mut().enumerate() {
                let (outer, j, rest) = (flat / (n * inner), (flat / inner) % n, flat % inner);
                *out = (0..n)
                    .filter(|&i| takes(i, j, exclusive, reverse))
                    .map(|i| t.data[(outer * n + i) * inner + rest])
                    .try_fold(0i64, |s, v| s.checked_add(v))
                    .ok_or_else(|| Error::invalid("onnx", "integer overflow in CumSum"))?;
            }
            Ok(vec![Value::Int(IntTensor { shape: dims, data, is_bool: false })])
        }
    }
}
