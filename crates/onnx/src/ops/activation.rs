//! Activations beyond the elementwise basics: `LeakyRelu`, `Elu`, `HardSigmoid`,
//! `Softplus`, `Clip`, and `Gelu` (opset 20; earlier opsets spell it with `Erf` or `Tanh`).

use super::{float, float_attr, float_in, input, string_attr};
use crate::ir::{Node, Value};
use ember_tensor::{DType, Error, Result};

type Args<'a> = &'a [Option<Value>];

pub(crate) fn leaky_relu(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    float(float_in(args, 0)?.leaky_relu(float_attr(node, "alpha", 0.01)? as f64))
}

pub(crate) fn elu(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    float(float_in(args, 0)?.elu(float_attr(node, "alpha", 1.0)? as f64))
}

/// `max(0, min(1, alpha x + beta))`; PyTorch's `hardsigmoid` is `alpha = 1/6`, `beta = 1/2`.
pub(crate) fn hard_sigmoid(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let (alpha, beta) = (float_attr(node, "alpha", 0.2)? as f64, float_attr(node, "beta", 0.5)? as f64);
    float(float_in(args, 0)?.mul_scalar(alpha).add_scalar(beta).clamp(Some(0.0), Some(1.0)))
}

/// `ln(1 + e^x)`, as ember's `softplus` with PyTorch's threshold (above 20 the two differ
/// by less than `2e-9`).
pub(crate) fn softplus(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    float(float_in(args, 0)?.softplus(1.0, 20.0))
}

/// The bound of `Clip` in input `i`, if given (a scalar of the input's type).
fn bound(args: Args<'_>, i: usize) -> Result<Option<f64>> {
    match args.get(i).and_then(Option::as_ref) {
        None => Ok(None),
        Some(v) => {
            let t = v.to_var()?.value();
            if t.shape().numel() != 1 {
                return Err(Error::shape("onnx", format!("Clip bound {i} must be a scalar, got {}", t.shape())));
            }
            Ok(Some(t.to_dtype(DType::F64).to_vec::<f64>()?[0]))
        }
    }
}

/// `Clip` between optional bounds (inputs 1 and 2, opset 11 and later): a float input is
/// ember's `clamp`, an integer one is clamped on the host.
pub(crate) fn clip(_: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let (lo, hi) = (bound(args, 1)?, bound(args, 2)?);
    match input(args, 0)? {
        Value::Float(x) => float(x.clamp(lo, hi)),
        Value::Int(t) => {
            let mut t = t.clone();
            for v in &mut t.data {
                if let Some(lo) = lo {
                    *v = (*v).max(lo as i64);
                }
                if let Some(hi) = hi {
                    *v = (*v).min(hi as i64);
                }
            }
            Ok(vec![Value::Int(t)])
        }
    }
}

/// `Gelu` (opset 20): exact (`approximate = "none"`) or PyTorch's tanh approximation.
pub(crate) fn gelu(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let x = float_in(args, 0)?;
    match string_attr(node, "approximate", "none")?.as_str() {
        "none" => float(x.gelu()),
        "tanh" => float(x.gelu_tanh()),
        other => Err(Error::invalid("onnx", format!("Gelu approximate '{other}' is not supported (none or tanh)"))),
    }
}
