//! `LSTM`, `GRU` and `RNN`, step by step on `Var`s (differentiable).
//!
//! ONNX orders the gates differently from PyTorch: `LSTM` as input, output, forget, cell
//! (`iofc`; PyTorch `ifgo`) and `GRU` as update, reset, hidden (`zrh`; PyTorch `rzn`).
//! Weights are `W [D, G*H, I]`, `R [D, G*H, H]` and `B [D, 2*G*H]` (input biases, then
//! recurrent ones), `D` = 2 for `bidirectional`. `sequence_lens` stops each sequence at
//! its length: later steps output zeros and leave the state alone, and the reverse
//! direction starts at the last real step, as PyTorch's packed sequences do. Initial
//! states default to zeros. `GRU`'s `linear_before_reset = 1` is PyTorch's form (the reset
//! gate scales `R_h h + Rb_h`); 0 applies it to `h` before the product. Peepholes, `clip`,
//! `input_forget` and activations other than the defaults (and `Relu` for `RNN`) are
//! refused.

use super::{float_in, int_attr, opt_float_in, string_attr};
use crate::ir::{Attr, Node, Value};
use ember_autograd::Var;
use ember_tensor::{Error, Result, Tensor};

type Args<'a> = &'a [Option<Value>];

#[derive(Clone, Copy, PartialEq)]
enum Act {
    Tanh,
    Relu,
    Sigmoid,
}

impl Act {
    fn apply(self, x: &Var) -> Var {
        match self {
            Act::Tanh => x.tanh(),
            Act::Relu => x.relu(),
            Act::Sigmoid => x.sigmoid(),
        }
    }
}

#[derive(Clone, Copy)]
enum Cell {
    Rnn(Act),
    Gru { linear_before_reset: bool },
    Lstm,
}

impl Cell {
    fn gates(self) -> usize {
        match self {
            Cell::Rnn(_) => 1,
            Cell::Gru { .. } => 3,
            Cell::Lstm => 4,
        }
    }
}

/// The weights of one direction.
struct Weights {
    /// `R^T`: `[H, G*H]`.
    rt: Var,
    /// The recurrent bias `[G*H]`, if any.
    rb: Option<Var>,
}

/// The activations the node names, checked against what `cell` supports.
fn activations(node: &Node, cell: Cell, dirs: usize) -> Result<Cell> {
    let names: Vec<String> = match node.attr("activations") {
        None => return Ok(cell),
        Some(Attr::Strings(v)) => v.iter().map(|s| s.to_ascii_lowercase()).collect(),
        Some(other) => return Err(Error::invalid("onnx", format!("activations must be strings, got {other:?}"))),
    };
    let per_dir = names.len() / dirs.max(1);
    let defaults: &[&str] = match cell {
        Cell::Rnn(_) => &["tanh"],
        Cell::Gru { .. } => &["sigmoid", "tanh"],
        Cell::Lstm => &["sigmoid", "tanh", "tanh"],
    };
    if names.len() != per_dir * dirs
        || per_dir != defaults.len()
        || names.chunks(per_dir).any(|c| c != names[..per_dir].to_vec().as_slice())
    {
        return Err(Error::invalid("onnx", format!("activations {names:?} are not supported")));
    }
    match cell {
        Cell::Rnn(_) => match names[0].as_str() {
            "tanh" => Ok(Cell::Rnn(Act::Tanh)),
            "relu" => Ok(Cell::Rnn(Act::Relu)),
            "sigmoid" => Ok(Cell::Rnn(Act::Sigmoid)),
            other => Err(Error::invalid("onnx", format!("RNN activation '{other}' is not supported"))),
        },
        _ if names[..per_dir] == *defaults => Ok(cell),
        _ => Err(Error::invalid("onnx", format!("activations {names:?} are not supported (only {defaults:?})"))),
    }
}

/// A `[B, 1]` mask of the sequences still running at step `t`, if lengths are given.
fn running(lengths: &Option<Vec<usize>>, t: usize, like: &Var) -> Result<Option<Var>> {
    let Some(l) = lengths else { return Ok(None) };
    let m: Vec<f32> = l.iter().map(|&n| if t < n { 1.0 } else { 0.0 }).collect();
    let m = Tensor::from_vec(m, [l.len(), 1])?.to_dtype(like.dtype()).to_device(like.device())?;
    Ok(Some(Var::new(m)))
}

/// One step of `cell` from `x` (the input's projection with its bias, `[B, G*H]`) and the
/// state `(h, c)`; returns the new state.
fn step(cell: Cell, w: &Weights, x: &Var, h: &Var, c: Option<&Var>, hidden: usize) -> Result<(Var, Option<Var>)> {
    let gate = |v: &Var, k: usize| v.narrow(1, k * hidden, hidden);
    let mut r = h.matmul(&w.rt)?;
    if let Some(rb) = &w.rb {
        r = r.add(rb)?;
    }
    match cell {
        Cell::Rnn(act) => Ok((act.apply(&x.add(&r)?), None)),
        Cell::Lstm => {
            let a = x.add(&r)?;
            let (i, o, f, g) =
                (gate(&a, 0)?.sigmoid(), gate(&a, 1)?.sigmoid(), gate(&a, 2)?.sigmoid(), gate(&a, 3)?.tanh());
            let c = c.ok_or_else(|| Error::invalid("onnx", "LSTM step without a cell state"))?;
            let c = f.mul(c)?.add(&i.mul(&g)?)?;
            Ok((o.mul(&c.tanh())?, Some(c)))
        }
        Cell::Gru { linear_before_reset } => {
            let z = gate(x, 0)?.add(&gate(&r, 0)?)?.sigmoid();
            let rs = gate(x, 1)?.add(&gate(&r, 1)?)?.sigmoid();
            let n = if linear_before_reset {
                gate(x, 2)?.add(&rs.mul(&gate(&r, 2)?)?)?
            } else {
                let rh = w.rt.narrow(1, 2 * hidden, hidden)?;
                let mut p = rs.mul(h)?.matmul(&rh)?;
                if let Some(rb) = &w.rb {
                    p = p.add(&rb.narrow(0, 2 * hidden, hidden)?)?;
                }
                gate(x, 2)?.add(&p)?
            }
            .tanh();
            // (1 - z) n + z h = n + z (h - n)
            Ok((n.add(&z.mul(&h.sub(&n)?)?)?, None))
        }
    }
}

fn recurrent(node: &Node, args: Args<'_>, cell: Cell) -> Result<Vec<Value>> {
    for a in ["clip", "activation_alpha", "activation_beta"] {
        if node.attr(a).is_some() {
            return Err(Error::invalid("onnx", format!("attribute '{a}' is not supported")));
        }
    }
    if int_attr(node, "input_forget", 0)? != 0 {
        return Err(Error::invalid("onnx", "input_forget = 1 is not supported"));
    }
    if args.get(7).and_then(Option::as_ref).is_some() {
        return Err(Error::invalid("onnx", "LSTM peepholes (input P) are not supported"));
    }
    let dirs: &[bool] = match string_attr(node, "direction", "forward")?.as_str() {
        "forward" => &[false],
        "reverse" => &[true],
        "bidirectional" => &[false, true],
        other => return Err(Error::invalid("onnx", format!("direction '{other}' is not supported"))),
    };
    let cell = activations(node, cell, dirs.len())?;
    let layout = int_attr(node, "layout", 0)?;
    let x = match layout {
        0 => float_in(args, 0)?.clone(),
        1 => float_in(args, 0)?.transpose(0, 1)?,
        _ => return Err(Error::invalid("onnx", format!("layout {layout} is not supported"))),
    };
    let (w, r, b) = (float_in(args, 1)?, float_in(args, 2)?, opt_float_in(args, 3)?);
    let [steps, batch, features] = <[usize; 3]>::try_from(x.shape().dims())
        .map_err(|_| Error::shape("onnx", format!("X must be 3-d, got {}", x.shape())))?;
    let g = cell.gates();
    let hidden = match r.shape().dims() {
        &[d, gh, h] if d == dirs.len() && gh == g * h => h,
        other => {
            return Err(Error::shape("onnx", format!("R must be [{}, {g} * H, H], got {other:?}", dirs.len())));
        }
    };
    let declared = int_attr(node, "hidden_size", hidden as i64)?;
    if declared != hidden as i64 {
        return Err(Error::shape("onnx", format!("hidden_size {declared} but R holds {hidden}")));
    }
    if w.shape().dims() != [dirs.len(), g * hidden, features] {
        return Err(Error::shape(
            "onnx",
            format!("W must be [{}, {}, {features}], got {}", dirs.len(), g * hidden, w.shape()),
        ));
    }
    if let Some(b) = b
        && b.shape().dims() != [dirs.len(), 2 * g * hidden]
    {
        return Err(Error::shape("onnx", format!("B must be [{}, {}], got {}", dirs.len(), 2 * g * hidden, b.shape())));
    }
    let lengths: Option<Vec<usize>> = match args.get(4).and_then(Option::as_ref) {
        None => None,
        Some(Value::Int(t)) if t.data.len() == batch && t.data.iter().all(|&n| (0..=steps as i64).contains(&n)) => {
            Some(t.data.iter().map(|&n| n as usize).collect())
        }
        Some(other) => {
            return Err(Error::shape(
                "onnx",
                format!("sequence_lens must be {batch} lengths in 0..={steps}, got shape {:?}", other.shape()),
            ));
        }
    };
    // Initial states are [D, B, H] ([B, D, H] with layout 1).
    let state = |i: usize| -> Result<Option<Var>> {
        match opt_float_in(args, i)? {
            None => Ok(None),
            Some(s) => {
                let s = if layout == 1 { s.transpose(0, 1)? } else { s.clone() };
                if s.shape().dims() != [dirs.len(), batch, hidden] {
                    return Err(Error::shape(
                        "onnx",
                        format!("initial state {i} must be [{}, {batch}, {hidden}], got {}", dirs.len(), s.shape()),
                    ));
                }
                Ok(Some(s))
            }
        }
    };
    let (h0, c0) = (state(5)?, if matches!(cell, Cell::Lstm) { state(6)? } else { None });
    let zeros = Var::new(Tensor::zeros([batch, hidden], x.dtype())?.to_device(x.device())?);
    let (mut ys, mut hs, mut cs) = (Vec::new(), Vec::new(), Vec::new());
    for (d, &reverse) in dirs.iter().enumerate() {
        let wd = w.select(0, d)?;
        let mut xw = x.matmul(&wd.t()?)?;
        let mut weights = Weights { rt: r.select(0, d)?.t()?, rb: None };
        if let Some(b) = b {
            let bd = b.select(0, d)?;
            xw = xw.add(&bd.narrow(0, 0, g * hidden)?)?;
            weights.rb = Some(bd.narrow(0, g * hidden, g * hidden)?);
        }
        let mut h = match &h0 {
            Some(s) => s.select(0, d)?,
            None => zeros.clone(),
        };
        let mut c = match (&c0, cell) {
            (Some(s), _) => Some(s.select(0, d)?),
            (None, Cell::Lstm) => Some(zeros.clone()),
            _ => None,
        };
        let mut out: Vec<Option<Var>> = vec![None; steps];
        for n in 0..steps {
            let t = if reverse { steps - 1 - n } else { n };
            let (h_new, c_new) = step(cell, &weights, &xw.select(0, t)?, &h, c.as_ref(), hidden)?;
            match running(&lengths, t, &h)? {
                None => {
                    out[t] = Some(h_new.clone());
                    h = h_new;
                    c = c_new;
                }
                Some(m) => {
                    out[t] = Some(h_new.mul(&m)?);
                    h = h.add(&m.mul(&h_new.sub(&h)?)?)?;
                    c = match (c, c_new) {
                        (Some(c), Some(cn)) => Some(c.add(&m.mul(&cn.sub(&c)?)?)?),
                        (c, _) => c,
                    };
                }
            }
        }
        let out: Vec<Var> = out.into_iter().flatten().collect();
        let refs: Vec<&Var> = out.iter().collect();
        ys.push(if refs.is_empty() {
            Var::new(Tensor::zeros([0, batch, hidden], x.dtype())?.to_device(x.device())?)
        } else {
            Var::stack(&refs, 0)?
        });
        hs.push(h);
        if let Some(c) = c {
            cs.push(c);
        }
    }
    let stack = |v: &[Var], dim: usize| Var::stack(&v.iter().collect::<Vec<_>>(), dim);
    // Y: [T, D, B, H], or [B, T, D, H] with layout 1; the states [D, B, H] or [B, D, H].
    let (mut y, mut yh) = (stack(&ys, 1)?, stack(&hs, 0)?);
    let mut yc = if cs.is_empty() { None } else { Some(stack(&cs, 0)?) };
    if layout == 1 {
        y = y.permute(&[2, 0, 1, 3])?;
        yh = yh.transpose(0, 1)?;
        yc = yc.map(|c| c.transpose(0, 1)).transpose()?;
    }
    let mut outs = vec![Value::Float(y), Value::Float(yh)];
    outs.extend(yc.map(Value::Float));
    Ok(outs)
}

pub(crate) fn lstm(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    recurrent(node, args, Cell::Lstm)
}

pub(crate) fn gru(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    recurrent(node, args, Cell::Gru { linear_before_reset: int_attr(node, "linear_before_reset", 0)? != 0 })
}

pub(crate) fn rnn(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    recurrent(node, args, Cell::Rnn(Act::Tanh))
}
