//! The interpreter's operators, one file per group, and the table that names them with the
//! attributes each accepts (anything else is rejected when the graph is built).

mod elementwise;
mod erf;
mod int;
mod linear;
mod nn;
mod reduce;
mod resize;
mod shape;

use crate::ir::{Attr, IntTensor, Node, Value};
use ember_autograd::Var;
use ember_tensor::{Error, Result};

/// How an operator runs: the node (for its attributes) and its inputs (`None`: an
/// optional input left out) to its outputs.
pub(crate) type RunFn = fn(&Node, &[Option<Value>]) -> Result<Vec<Value>>;

/// One operator: its ONNX name, the attributes it accepts and how it runs.
pub(crate) struct OpSpec {
    pub name: &'static str,
    pub attrs: &'static [&'static str],
    pub run: RunFn,
}

const fn op(name: &'static str, attrs: &'static [&'static str], run: RunFn) -> OpSpec {
    OpSpec { name, attrs, run }
}

/// Every supported operator.
pub(crate) static OPS: &[OpSpec] = &[
    op("Add", &[], elementwise::add),
    op("Sub", &[], elementwise::sub),
    op("Mul", &[], elementwise::mul),
    op("Div", &[], elementwise::div),
    op("Pow", &[], elementwise::pow),
    op("Mod", &["fmod"], elementwise::modulo),
    op("Equal", &[], elementwise::equal),
    op("Where", &[], elementwise::where_op),
    op("Relu", &[], elementwise::relu),
    op("Sigmoid", &[], elementwise::sigmoid),
    op("Tanh", &[], elementwise::tanh),
    op("Sqrt", &[], elementwise::sqrt),
    op("Exp", &[], elementwise::exp),
    op("Log", &[], elementwise::log),
    op("Neg", &[], elementwise::neg),
    op("Abs", &[], elementwise::abs),
    op("Reciprocal", &[], elementwise::reciprocal),
    op("Erf", &[], erf::erf),
    op("Identity", &[], elementwise::identity),
    op("Dropout", &["seed"], elementwise::dropout),
    op("Cast", &["to", "saturate"], elementwise::cast),
    op("MatMul", &[], linear::matmul),
    op("Gemm", &["alpha", "beta", "transA", "transB"], linear::gemm),
    op("Conv", &["auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"], nn::conv),
    op(
        "ConvTranspose",
        &["auto_pad", "dilations", "group", "kernel_shape", "output_padding", "output_shape", "pads", "strides"],
        nn::conv_transpose,
    ),
    op(
        "MaxPool",
        &["auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"],
        nn::max_pool,
    ),
    op("AveragePool", &["auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides"], nn::avg_pool),
    op("GlobalAveragePool", &[], nn::global_avg_pool),
    op("BatchNormalization", &["epsilon", "momentum", "training_mode"], nn::batch_norm),
    op("LayerNormalization", &["axis", "epsilon", "stash_type"], nn::layer_norm),
    op("Softmax", &["axis"], nn::softmax),
    op("LogSoftmax", &["axis"], nn::log_softmax),
    op("ReduceMean", &["axes", "keepdims", "noop_with_empty_axes"], reduce::reduce_mean),
    op("ReduceMax", &["axes", "keepdims", "noop_with_empty_axes"], reduce::reduce_max),
    op("ReduceSum", &["keepdims", "noop_with_empty_axes"], reduce::reduce_sum),
    op(
        "Resize",
        &[
            "antialias",
            "axes",
            "coordinate_transformation_mode",
            "cubic_coeff_a",
            "exclude_outside",
            "extrapolation_value",
            "keep_aspect_ratio_policy",
            "mode",
            "nearest_mode",
        ],
        resize::resize,
    ),
    op("Shape", &["start", "end"], shape::shape),
    op("Constant", &["value", "value_float", "value_floats", "value_int", "value_ints"], shape::constant),
    op("Reshape", &["allowzero"], shape::reshape),
    op("Expand", &[], shape::expand),
    op("Flatten", &["axis"], shape::flatten),
    op("Transpose", &["perm"], shape::transpose),
    op("Concat", &["axis"], shape::concat),
    op("Gather", &["axis"], shape::gather),
    op("Unsqueeze", &[], shape::unsqueeze),
    op("Squeeze", &[], shape::squeeze),
    op("Slice", &[], shape::slice),
];

// Attribute and input access, with errors that say what is missing (the caller adds the
// node's name and operator).

pub(crate) fn int_attr(node: &Node, name: &str, default: i64) -> Result<i64> {
    match node.attr(name) {
        None => Ok(default),
        Some(Attr::Int(v)) => Ok(*v),
        Some(other) => Err(bad_attr(name, "an integer", other)),
    }
}

pub(crate) fn float_attr(node: &Node, name: &str, default: f32) -> Result<f32> {
    match node.attr(name) {
        None => Ok(default),
        Some(Attr::Float(v)) => Ok(*v),
        Some(other) => Err(bad_attr(name, "a float", other)),
    }
}

pub(crate) fn ints_attr(node: &Node, name: &str) -> Result<Option<Vec<i64>>> {
    match node.attr(name) {
        None => Ok(None),
        Some(Attr::Ints(v)) => Ok(Some(v.clone())),
        Some(other) => Err(bad_attr(name, "a list of integers", other)),
    }
}

pub(crate) fn string_attr(node: &Node, name: &str, default: &str) -> Result<String> {
    match node.attr(name) {
        None => Ok(default.into()),
        Some(Attr::String(v)) => Ok(v.clone()),
        Some(other) => Err(bad_attr(name, "a string", other)),
    }
}

fn bad_attr(name: &str, want: &str, got: &Attr) -> Error {
    Error::invalid("onnx", format!("attribute '{name}' must be {want}, got {got:?}"))
}

/// Input `i`, which must be present.
pub(crate) fn input(args: &[Option<Value>], i: usize) -> Result<&Value> {
    args.get(i)
        .and_then(Option::as_ref)
        .ok_or_else(|| Error::invalid("onnx", format!("input {i} is required but missing")))
}

/// Input `i` as a float tensor.
pub(crate) fn float_in(args: &[Option<Value>], i: usize) -> Result<&Var> {
    match input(args, i)? {
        Value::Float(v) => Ok(v),
        Value::Int(t) => Err(Error::dtype(
            "onnx",
            format!("input {i} must be a float tensor, got an integer tensor of shape {:?}", t.shape),
        )),
    }
}

/// Optional input `i` as a float tensor.
pub(crate) fn opt_float_in(args: &[Option<Value>], i: usize) -> Result<Option<&Var>> {
    match args.get(i).and_then(Option::as_ref) {
        None => Ok(None),
        Some(_) => float_in(args, i).map(Some),
    }
}

/// Input `i` as a host integer tensor.
pub(crate) fn int_in(args: &[Option<Value>], i: usize) -> Result<&IntTensor> {
    match input(args, i)? {
        Value::Int(t) => Ok(t),
        Value::Float(v) => Err(Error::dtype(
            "onnx",
            format!("input {i} must be an integer tensor, got {} of shape {}", v.dtype(), v.shape()),
        )),
    }
}

/// Optional input `i` as integers.
pub(crate) fn opt_ints_in(args: &[Option<Value>], i: usize) -> Result<Option<Vec<i64>>> {
    match args.get(i).and_then(Option::as_ref) {
        None => Ok(None),
        Some(_) => Ok(Some(int_in(args, i)?.data.clone())),
    }
}

/// An axis in `-rank..rank`, resolved.
pub(crate) fn axis(a: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    if a < -r || a >= r.max(1) {
        return Err(Error::invalid("onnx", format!("axis {a} is out of range for rank {rank}")));
    }
    Ok(if a < 0 { (a + r) as usize } else { a as usize })
}

pub(crate) fn one(v: Value) -> Result<Vec<Value>> {
    Ok(vec![v])
}

pub(crate) fn float(v: Var) -> Result<Vec<Value>> {
    Ok(vec![Value::Float(v)])
}
