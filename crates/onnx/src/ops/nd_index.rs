//! Indexed reads and writes: `GatherElements` and `ScatterElements` (one index per
//! element along an axis), and `GatherND` and `ScatterND` (`batch_dims = 0`): index tuples
//! that name slices of `data` (its first `k` dimensions for tuples of length `k`).
//!
//! `GatherND` takes those slices (ember's `index_select` on `data` seen as
//! `[rows, slice]`). `ScatterND` (`reduction = "none"`) gives `data` with the slices replaced
//! by `updates`, as exporters write an indexed assignment (`y[:, 1] = ...`). ember has no
//! scatter of whole slices, so a float result is composed from differentiable operations:
//! `data * keep + gather(updates)`, where `keep` zeroes the replaced slices and the gather
//! takes each replaced slice's update (a later index wins, as ONNX Runtime does).

use super::{float, input, int_attr, int_in, string_attr};
use crate::ir::{IntTensor, Node, Value};
use ember_autograd::Var;
use ember_tensor::{Error, Result, Tensor};

type Args<'a> = &'a [Option<Value>];

/// The tuple length `k` and, for each index tuple, the row of `data` seen as
/// `[prod(dims[..k]), prod(dims[k..])]` it names.
fn rows_of(dims: &[usize], indices: &IntTensor) -> Result<(usize, Vec<usize>)> {
    let k = *indices.shape.last().ok_or_else(|| Error::shape("onnx", "indices must not be 0-d"))?;
    if k == 0 || k > dims.len() {
        return Err(Error::shape("onnx", format!("index length {k} for data of shape {dims:?}")));
    }
    let rows = indices
        .data
        .chunks(k)
        .map(|tuple| {
            let mut row = 0usize;
            for (&i, &d) in tuple.iter().zip(dims) {
                let j = if i < 0 { i + d as i64 } else { i };
                if !(0..d as i64).contains(&j) {
                    return Err(Error::index("onnx", format!("index {tuple:?} is out of range for {dims:?}")));
                }
                row = row * d + j as usize;
            }
            Ok(row)
        })
        .collect::<Result<_>>()?;
    Ok((k, rows))
}

/// For each of the slices of `data`, the update that replaces it (`None`: kept).
fn sources(dims: &[usize], indices: &IntTensor) -> Result<(usize, Vec<Option<usize>>)> {
    let (k, rows) = rows_of(dims, indices)?;
    let mut src = vec![None; dims[..k].iter().product()];
    for (u, row) in rows.into_iter().enumerate() {
        src[row] = Some(u);
    }
    Ok((k, src))
}

fn batch_dims_zero(node: &Node) -> Result<()> {
    match int_attr(node, "batch_dims", 0)? {
        0 => Ok(()),
        b => Err(Error::invalid("onnx", format!("batch_dims {b} is not supported (0)"))),
    }
}

pub(crate) fn gather_nd(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    batch_dims_zero(node)?;
    let (data, indices) = (input(args, 0)?, int_in(args, 1)?);
    let dims = data.shape();
    let (k, rows) = rows_of(&dims, indices)?;
    let total: usize = dims[..k].iter().product();
    let slice: usize = dims[k..].iter().product();
    let mut shape = indices.shape[..indices.shape.len() - 1].to_vec();
    shape.extend(&dims[k..]);
    match data {
        Value::Float(d) => {
            let pick: Vec<i64> = rows.iter().map(|&r| r as i64).collect();
            let pick = Var::new(Tensor::from_vec(pick, [rows.len()])?.to_device(d.device())?);
            float(d.reshape([total, slice])?.index_select(0, pick)?.reshape(shape.as_slice())?)
        }
        Value::Int(t) => {
            let data = rows.iter().flat_map(|&r| t.data[r * slice..(r + 1) * slice].iter().copied()).collect();
            Ok(vec![Value::Int(IntTensor { shape, data, is_bool: t.is_bool })])
        }
    }
}

pub(crate) fn scatter_nd(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let reduction = string_attr(node, "reduction", "none")?;
    if reduction != "none" {
        return Err(Error::invalid("onnx", format!("ScatterND reduction '{reduction}' is not supported (none)")));
    }
    let (data, indices, updates) = (input(args, 0)?, int_in(args, 1)?, input(args, 2)?);
    let dims = data.shape();
    let (k, src) = sources(&dims, indices)?;
    let slice: usize = dims[k..].iter().product();
    let count = indices.data.len() / k;
    let mut want = indices.shape[..indices.shape.len() - 1].to_vec();
    want.extend(&dims[k..]);
    if updates.shape() != want {
        return Err(Error::shape(
            "onnx",
            format!("ScatterND updates must have shape {want:?}, got {:?}", updates.shape()),
        ));
    }
    match (data, updates) {
        (Value::Float(d), Value::Float(u)) => {
            let rows = src.len();
            let keep: Vec<f64> = src.iter().map(|s| if s.is_some() { 0.0 } else { 1.0 }).collect();
            let keep = Var::new(Tensor::from_vec(keep, [rows, 1])?.to_dtype(d.dtype()).to_device(d.device())?);
            // Row `count` of the padded updates is zeros, the source of every kept slice.
            let padded = u.reshape([count, slice])?.pad(&[(0, 0), (0, 1)], 0.0)?;
            let pick: Vec<i64> = src.iter().map(|s| s.unwrap_or(count) as i64).collect();
            let pick = Var::new(Tensor::from_vec(pick, [rows])?.to_device(d.device())?);
            let placed = padded.index_select(0, pick)?;
            float(d.reshape([rows, slice])?.mul(&keep)?.add(&placed)?.reshape(dims.as_slice())?)
        }
        (Value::Int(d), Value::Int(u)) => {
            let mut out = d.clone();
            for (row, s) in src.iter().enumerate() {
                if let Some(s) = s {
                    out.data[row * slice..(row + 1) * slice].copy_from_slice(&u.data[s * slice..(s + 1) * slice]);
                }
            }
            Ok(vec![Value::Int(out)])
        }
        _ => Err(Error::dtype("onnx", "ScatterND data and updates must both be float or both integer")),
    }
}

/// `indices` resolved against an axis of extent `n` (negative ones count from the end).
fn resolve(indices: &IntTensor, n: usize) -> Result<Vec<i64>> {
    indices
        .data
        .iter()
        .map(|&i| {
            let j = if i < 0 { i + n as i64 } else { i };
            if (0..n as i64).contains(&j) {
                Ok(j)
            } else {
                Err(Error::index("onnx", format!("index {i} is out of range for size {n}")))
            }
        })
        .collect()
}

/// `GatherElements`: ember's `gather` along `axis` for floats; on the host for integers
/// (the TorchScript exporter writes BERT's `token_type_ids` buffer sliced to the input's
/// length this way).
pub(crate) fn gather_elements(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let indices = int_in(args, 1)?;
    let data = match input(args, 0)? {
        Value::Float(data) => data,
        Value::Int(data) => return gather_elements_host(node, data, indices),
    };
    let ax = super::axis(int_attr(node, "axis", 0)?, data.shape().rank())?;
    let idx = Tensor::from_vec(resolve(indices, data.shape()[ax])?, indices.shape.clone())?.to_device(data.device())?;
    float(data.gather(ax, Var::new(idx))?)
}

/// `GatherElements` of a host integer (or boolean) tensor: `out[i] = data[i with i[axis]
/// replaced by indices[i]]`, `indices` of `data`'s rank and no larger elsewhere.
fn gather_elements_host(node: &Node, data: &IntTensor, indices: &IntTensor) -> Result<Vec<Value>> {
    let dims = &data.shape;
    let ax = super::axis(int_attr(node, "axis", 0)?, dims.len())?;
    if dims.is_empty()
        || indices.shape.len() != dims.len()
        || indices.shape.iter().zip(dims).enumerate().any(|(d, (&i, &n))| d != ax && i > n)
    {
        return Err(Error::shape(
            "onnx",
            format!("GatherElements indices {:?} do not fit data of shape {dims:?}", indices.shape),
        ));
    }
    let resolved = resolve(indices, dims[ax])?;
    let mut strides = vec![1usize; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * dims[d + 1];
    }
    let mut out = Vec::with_capacity(resolved.len());
    for (flat, &j) in resolved.iter().enumerate() {
        // The position of `flat` in `indices`, read in `data` with `axis` replaced by `j`.
        let (mut rest, mut at) = (flat, 0usize);
        for d in (0..dims.len()).rev() {
            let i = rest % indices.shape[d];
            rest /= indices.shape[d];
            at += strides[d] * if d == ax { j as usize } else { i };
        }
        out.push(data.data[at]);
    }
    Ok(vec![Value::Int(IntTensor { shape: indices.shape.clone(), data: out, is_bool: data.is_bool })])
}

/// `ScatterElements` (`reduction = "none"`), as exporters write `select_scatter`: `data`
/// with the elements that `indices` name along `axis` replaced by `updates`, composed as
/// `data * keep + scatter_add(zeros, indices, updates)` (differentiable in both; indices
/// naming one element twice are refused, as ONNX leaves their result undefined).
pub(crate) fn scatter_elements(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let reduction = string_attr(node, "reduction", "none")?;
    if reduction != "none" {
        return Err(Error::invalid("onnx", format!("ScatterElements reduction '{reduction}' is not supported")));
    }
    let (data, indices, updates) = (super::float_in(args, 0)?, int_in(args, 1)?, super::float_in(args, 2)?);
    let dims = data.shape().dims().to_vec();
    let ax = super::axis(int_attr(node, "axis", 0)?, dims.len())?;
    if indices.shape != updates.shape().dims() || indices.shape.len() != dims.len() {
        return Err(Error::shape(
            "onnx",
            format!(
                "ScatterElements indices {:?} and updates {} must match, of rank {}",
                indices.shape,
                updates.shape(),
                dims.len()
            ),
        ));
    }
    if indices.shape.iter().zip(&dims).enumerate().any(|(d, (&i, &n))| d != ax && i > n) {
        return Err(Error::shape(
            "onnx",
            format!("ScatterElements indices {:?} exceed the data's shape {dims:?}", indices.shape),
        ));
    }
    let resolved = resolve(indices, dims[ax])?;
    // The flat position in `data` of each update.
    let mut keep = vec![1.0f64; dims.iter().product()];
    for (flat, &j) in resolved.iter().enumerate() {
        let (mut rest, mut target, mut stride) = (flat, 0usize, 1usize);
        for d in (0..dims.len()).rev() {
            let coord = rest % indices.shape[d];
            rest /= indices.shape[d];
            target += if d == ax { j as usize } else { coord } * stride;
            stride *= dims[d];
        }
        if keep[target] == 0.0 {
            return Err(Error::invalid("onnx", "ScatterElements writes one element twice"));
        }
        keep[target] = 0.0;
    }
    let keep = Var::new(Tensor::from_vec(keep, dims.clone())?.to_dtype(data.dtype()).to_device(data.device())?);
    let idx = Var::new(Tensor::from_vec(resolved, indices.shape.clone())?.to_device(data.device())?);
    let zeros = Var::new(Tensor::zeros(dims.as_slice(), data.dtype())?.to_device(data.device())?);
    float(data.mul(&keep)?.add(&zeros.scatter_add(ax, idx, updates)?)?)
}
