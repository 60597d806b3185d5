//! Elementwise arithmetic on host integer tensors, with NumPy broadcasting: the shape
//! computations exporters put in graphs.

use crate::ir::IntTensor;
use ember_tensor::{Error, Result};

/// The broadcast shape of `a` and `b`.
pub(crate) fn broadcast_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n { a[i + a.len() - n] } else { 1 };
        let db = if i + b.len() >= n { b[i + b.len() - n] } else { 1 };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return Err(Error::shape("onnx", format!("shapes {a:?} and {b:?} do not broadcast"))),
        };
    }
    Ok(out)
}

/// The flat index into a tensor of `shape` (broadcast to `out`) for the flat output index.
fn source_index(shape: &[usize], out: &[usize], mut flat: usize) -> usize {
    let mut idx = 0;
    let mut stride = 1;
    for k in (0..out.len()).rev() {
        let coord = flat % out[k];
        flat /= out[k];
        if let Some(j) = (k + shape.len()).checked_sub(out.len()) {
            if shape[j] != 1 {
                idx += coord * stride;
            }
            stride *= shape[j];
        }
    }
    idx
}

/// `f(a, b)` elementwise with broadcasting.
pub(crate) fn zip(a: &IntTensor, b: &IntTensor, f: impl Fn(i64, i64) -> Result<i64>) -> Result<IntTensor> {
    let shape = broadcast_shape(&a.shape, &b.shape)?;
    let n: usize = shape.iter().product();
    let mut data = Vec::with_capacity(n);
    for i in 0..n {
        data.push(f(a.data[source_index(&a.shape, &shape, i)], b.data[source_index(&b.shape, &shape, i)])?);
    }
    Ok(IntTensor { shape, data, is_bool: false })
}

/// `cond ? a : b` with broadcasting.
pub(crate) fn select(cond: &IntTensor, a: &IntTensor, b: &IntTensor) -> Result<IntTensor> {
    let shape = broadcast_shape(&broadcast_shape(&cond.shape, &a.shape)?, &b.shape)?;
    let n: usize = shape.iter().product();
    let data = (0..n)
        .map(|i| {
            let c = cond.data[source_index(&cond.shape, &shape, i)];
            if c != 0 { a.data[source_index(&a.shape, &shape, i)] } else { b.data[source_index(&b.shape, &shape, i)] }
        })
        .collect();
    Ok(IntTensor { shape, data, is_bool: a.is_bool && b.is_bool })
}

/// Integer division rounding toward zero, refusing division by zero.
pub(crate) fn div(a: i64, b: i64) -> Result<i64> {
    a.checked_div(b).ok_or_else(|| Error::invalid("onnx", format!("integer division {a} / {b}")))
}
