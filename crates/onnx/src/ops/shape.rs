//! Shape operators. They run on float `Var`s (differentiably) and on host integers (shape
//! computations) alike: integers go through the same `Var` operations as a constant `i64`
//! tensor and come back.

use super::{axis, input, int_attr, int_in, ints_attr, one, opt_ints_in};
use crate::ir::{Attr, IntTensor, Node, Value};
use ember_autograd::Var;
use ember_tensor::{Error, Result, Tensor};

type Args<'a> = &'a [Option<Value>];

/// Applies `f` to the value as a `Var`, giving back the same kind of value.
fn map(v: &Value, f: impl FnOnce(&Var) -> Result<Var>) -> Result<Value> {
    match v {
        Value::Float(x) => Ok(Value::Float(f(x)?)),
        Value::Int(t) => {
            let out = f(&Var::new(t.to_tensor()?))?;
            let mut back = IntTensor::from_tensor(&out.value())?;
            back.is_bool = t.is_bool;
            Ok(Value::Int(back))
        }
    }
}

pub(crate) fn shape(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let dims: Vec<i64> = input(args, 0)?.shape().iter().map(|&d| d as i64).collect();
    let r = dims.len() as i64;
    let clampi = |a: i64| (if a < 0 { a + r } else { a }).clamp(0, r) as usize;
    let (s, e) = (clampi(int_attr(node, "start", 0)?), clampi(int_attr(node, "end", r)?));
    one(Value::Int(IntTensor::vector(if s < e { dims[s..e].to_vec() } else { Vec::new() })))
}

pub(crate) fn constant(node: &Node, _: Args<'_>) -> Result<Vec<Value>> {
    let v = match node.attrs.first().map(|(k, v)| (k.as_str(), v)) {
        Some(("value", Attr::Tensor(t))) => t.clone(),
        Some(("value_float", Attr::Float(f))) => Value::Float(Var::new(Tensor::scalar(*f))),
        Some(("value_floats", Attr::Floats(f))) => Value::Float(Var::new(Tensor::from_vec(f.clone(), [f.len()])?)),
        Some(("value_int", Attr::Int(i))) => Value::Int(IntTensor::scalar(*i)),
        Some(("value_ints", Attr::Ints(i))) => Value::Int(IntTensor::vector(i.clone())),
        _ => return Err(Error::invalid("onnx", "Constant needs exactly one value attribute of the right type")),
    };
    if node.attrs.len() != 1 {
        return Err(Error::invalid("onnx", "Constant needs exactly one value attribute"));
    }
    one(v)
}

pub(crate) fn reshape(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let x = input(args, 0)?;
    let target = &int_in(args, 1)?.data;
    let allowzero = int_attr(node, "allowzero", 0)? != 0;
    let dims = x.shape();
    let numel: usize = dims.iter().product();
    let mut out = Vec::with_capacity(target.len());
    let mut infer = None;
    for (i, &d) in target.iter().enumerate() {
        match d {
            0 if !allowzero => out.push(*dims.get(i).ok_or_else(|| {
                Error::shape(
                    "onnx",
                    format!("shape {target:?}: 0 copies dimension {i}, but the input {dims:?} has none"),
                )
            })?),
            -1 if infer.is_none() => {
                infer = Some(i);
                out.push(1);
            }
            d if d >= 0 => out.push(d as usize),
            _ => return Err(Error::shape("onnx", format!("invalid target shape {target:?}"))),
        }
    }
    if let Some(i) = infer {
        let known: usize = out.iter().product();
        if known == 0 || !numel.is_multiple_of(known) {
            return Err(Error::shape("onnx", format!("cannot reshape {dims:?} to {target:?}")));
        }
        out[i] = numel / known;
    }
    one(map(x, |v| v.reshape(out.as_slice()))?)
}

pub(crate) fn expand(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let x = input(args, 0)?;
    let target = &int_in(args, 1)?.data;
    let target: Vec<usize> = target
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| Error::shape("onnx", format!("invalid Expand shape {target:?}"))))
        .collect::<Result<_>>()?;
    let shape = super::int::broadcast_shape(&x.shape(), &target)?;
    one(map(x, |v| v.expand(shape.as_slice()))?)
}

pub(crate) fn flatten(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let x = input(args, 0)?;
    let dims = x.shape();
    let a = int_attr(node, "axis", 1)?;
    let r = dims.len() as i64;
    if a < -r || a > r {
        return Err(Error::invalid("onnx", format!("axis {a} is out of range for rank {r}")));
    }
    let a = if a < 0 { a + r } else { a } as usize;
    let shape = [dims[..a].iter().product::<usize>(), dims[a..].iter().product::<usize>()];
    one(map(x, |v| v.reshape(shape))?)
}

pub(crate) fn transpose(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let x = input(args, 0)?;
    let rank = x.shape().len();
    let perm = match ints_attr(node, "perm")? {
        Some(p) => p.iter().map(|&a| axis(a, rank)).collect::<Result<Vec<_>>>()?,
        None => (0..rank).rev().collect(),
    };
    one(map(x, |v| v.permute(&perm))?)
}

pub(crate) fn concat(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let first = input(args, 0)?;
    let ax = axis(int_attr(node, "axis", 0)?, first.shape().len())?;
    let vars: Vec<Var> = (0..args.len()).map(|i| input(args, i)?.to_var()).collect::<Result<_>>()?;
    let refs: Vec<&Var> = vars.iter().collect();
    let out = Var::cat(&refs, ax)?;
    match first {
        Value::Float(_) => one(Value::Float(out)),
        Value::Int(_) => one(Value::Int(IntTensor::from_tensor(&out.value())?)),
    }
}

pub(crate) fn gather(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let data = input(args, 0)?;
    let idx = int_in(args, 1)?;
    let dims = data.shape();
    let ax = axis(int_attr(node, "axis", 0)?, dims.len())?;
    let n = dims[ax] as i64;
    let flat = idx
        .data
        .iter()
        .map(|&i| {
            let j = if i < 0 { i + n } else { i };
            if (0..n).contains(&j) {
                Ok(j)
            } else {
                Err(Error::index("onnx", format!("Gather index {i} is out of range for size {n}")))
            }
        })
        .collect::<Result<Vec<i64>>>()?;
    let index = Tensor::from_vec(flat, [idx.data.len()])?;
    let mut shape = dims[..ax].to_vec();
    shape.extend(&idx.shape);
    shape.extend(&dims[ax + 1..]);
    // The indices are host data: they go to the device of what they index.
    one(map(data, |v| v.index_select(ax, Var::new(index.to_device(v.device())?))?.reshape(shape.as_slice()))?)
}

pub(crate) fn unsqueeze(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let x = input(args, 0)?;
    let axes = &int_in(args, 1)?.data;
    let dims = x.shape();
    let rank = dims.len() + axes.len();
    let mut at: Vec<usize> = axes.iter().map(|&a| axis(a, rank)).collect::<Result<_>>()?;
    at.sort_unstable();
    if at.windows(2).any(|w| w[0] == w[1]) {
        return Err(Error::invalid("onnx", format!("repeated axes {axes:?}")));
    }
    let mut src = dims.iter();
    let shape: Vec<usize> =
        (0..rank).map(|i| if at.binary_search(&i).is_ok() { 1 } else { src.next().copied().unwrap_or(1) }).collect();
    one(map(x, |v| v.reshape(shape.as_slice()))?)
}

pub(crate) fn squeeze(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let x = input(args, 0)?;
    let dims = x.shape();
    let shape: Vec<usize> = match opt_ints_in(args, 1)? {
        Some(axes) => {
            let at: Vec<usize> = axes.iter().map(|&a| axis(a, dims.len())).collect::<Result<_>>()?;
            if let Some(&bad) = at.iter().find(|&&a| dims[a] != 1) {
                return Err(Error::shape("onnx", format!("cannot squeeze dimension {bad} of shape {dims:?}")));
            }
            dims.iter().enumerate().filter(|(i, _)| !at.contains(i)).map(|(_, &d)| d).collect()
        }
        None => dims.iter().copied().filter(|&d| d != 1).collect(),
    };
    one(map(x, |v| v.reshape(shape.as_slice()))?)
}

pub(crate) fn slice(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let x = input(args, 0)?;
    let dims = x.shape();
    let starts = &int_in(args, 1)?.data;
    let ends = &int_in(args, 2)?.data;
    let axes = opt_ints_in(args, 3)?.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = opt_ints_in(args, 4)?.unwrap_or_else(|| vec![1; starts.len()]);
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err(Error::invalid("onnx", "starts, ends, axes and steps must have the same length"));
    }
    // Positive steps are ember's strided `slice`; negative ones (`flip`, a reversed
    // sequence) pick their positions with `index_select`.
    enum Cut {
        Strided(usize, usize, usize, usize),
        Picked(usize, Vec<i64>),
    }
    let mut plan = Vec::with_capacity(starts.len());
    for k in 0..starts.len() {
        let a = axis(axes[k], dims.len())?;
        let step = steps[k];
        let n = dims[a] as i64;
        if step == 0 {
            return Err(Error::invalid("onnx", "Slice step 0"));
        }
        if step > 0 {
            let clampi = |v: i64| (if v < 0 { v.saturating_add(n) } else { v }).clamp(0, n);
            let (s, e) = (clampi(starts[k]), clampi(ends[k]));
            plan.push(Cut::Strided(a, s as usize, e.max(s) as usize, step as usize));
        } else if n == 0 {
            plan.push(Cut::Picked(a, Vec::new()));
        } else {
            // ONNX clamps a negative step's start to [0, n - 1] and its end to [-1, n - 1].
            let resolve = |v: i64| if v < 0 { v.saturating_add(n) } else { v };
            let (s, e) = (resolve(starts[k]).clamp(0, n - 1), resolve(ends[k]).clamp(-1, n - 1));
            let picked: Vec<i64> = (0..).map(|i: i64| s + i * step).take_while(|&i| i > e).collect();
            plan.push(Cut::Picked(a, picked));
        }
    }
    one(map(x, |v| {
        let mut v = v.clone();
        for cut in &plan {
            v = match cut {
                Cut::Strided(a, s, e, step) => v.slice(*a, *s, *e, *step)?,
                Cut::Picked(a, picked) => {
                    let index = Tensor::from_vec(picked.clone(), [picked.len()])?.to_device(v.device())?;
                    v.index_select(*a, Var::new(index))?
                }
            };
        }
        Ok(v)
    })?)
}
