//! The interpreter's operators, one file per group, and the table that names them with the
//! attributes each accepts (anything else is rejected when the graph is built).

mod activation;
mod compare;
mod cumsum;
mod einsum;
mod elementwise;
mod erf;
mod generate;
mod int;
mod linear;
mod nd_index;
mod nn;
mod norm;
mod pad;
mod recurrent;
mod reduce;
mod resize;
mod shape;
mod split;
mod trilu;

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
    /// What the operator supports of ONNX's definition, for the documentation's table.
    pub note: &'static str,
}

const fn op(name: &'static str, attrs: &'static [&'static str], run: RunFn) -> OpSpec {
    OpSpec { name, attrs, run, note: "" }
}

impl OpSpec {
    const fn note(self, note: &'static str) -> OpSpec {
        OpSpec { note, ..self }
    }
}

/// Every supported operator, alphabetically (docs/interop.md's import table is rendered
/// from this list and its notes, see [`crate::ir::supported_ops`]).
pub(crate) static OPS: &[OpSpec] = &[
    op("Abs", &[], elementwise::abs),
    op("Add", &[], elementwise::add)
    .note("NumPy broadcasting; integers (shape computations) on the host"),
    op("And", &[], compare::and)
    .note("host booleans"),
    op("AveragePool", &["auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "strides"], nn::avg_pool)
    .note("1-d and 2-d; symmetric `pads`; `auto_pad` `NOTSET` or `VALID`; no dilations"),
    op("BatchNormalization", &["epsilon", "momentum", "training_mode"], norm::batch_norm)
    .note("inference (running statistics become buffers); `training_mode` refused"),
    op("Cast", &["to", "saturate"], elementwise::cast)
    .note("between `FLOAT`, `DOUBLE`, `FLOAT16`, `BFLOAT16` (differentiable), from integers to those, to `INT64`, `INT32`, `BOOL`"),
    op("CastLike", &["saturate"], elementwise::cast_like),
    op("Ceil", &[], elementwise::ceil),
    op("Clip", &[], activation::clip)
    .note("bounds from inputs 1 and 2 (constants: no gradient reaches them)"),
    op("Concat", &["axis"], shape::concat),
    op("Constant", &["value", "value_float", "value_floats", "value_int", "value_ints"], shape::constant),
    op("ConstantOfShape", &["value"], generate::constant_of_shape),
    op("Conv", &["auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"], nn::conv)
    .note("1-d and 2-d; uneven `pads` written out as zeros; `auto_pad` `NOTSET` or `VALID`"),
    op(
        "ConvTranspose",
        &["auto_pad", "dilations", "group", "kernel_shape", "output_padding", "output_shape", "pads", "strides"],
        nn::conv_transpose,
    )
    .note("1-d and 2-d; symmetric `pads`, `output_padding`; `output_shape` refused"),
    op("Cos", &[], elementwise::cos),
    op("CumSum", &["exclusive", "reverse"], cumsum::cumsum)
    .note("floats as a product with a triangular matrix (differentiable)"),
    op("Div", &[], elementwise::div),
    op("Dropout", &["seed"], elementwise::dropout)
    .note("inference only: the mask output and `training_mode` are refused"),
    op("Einsum", &["equation"], einsum::einsum)
    .note("any explicit or implicit equation with `...`; a letter repeated within a term (a diagonal) is refused"),
    op("Elu", &["alpha"], activation::elu),
    op("Equal", &[], compare::equal)
    .note("floats and integers; the result is a host boolean, as for every comparison"),
    op("Erf", &[], erf::erf)
    .note("PyTorch's exact GELU before opset 20"),
    op("Exp", &[], elementwise::exp),
    op("Expand", &[], shape::expand),
    op("Flatten", &["axis"], shape::flatten),
    op("Floor", &[], elementwise::floor),
    op("Gather", &["axis"], shape::gather),
    op("GatherElements", &["axis"], nd_index::gather_elements)
    .note("floats (differentiable) and host integers"),
    op("GatherND", &["batch_dims"], nd_index::gather_nd)
    .note("`batch_dims = 0`"),
    op("Gelu", &["approximate"], activation::gelu)
    .note("`none` and `tanh` (opset 20)"),
    op("Gemm", &["alpha", "beta", "transA", "transB"], linear::gemm)
    .note("`transB = 1` with a 1-d bias is ember's `linear`"),
    op("GlobalAveragePool", &[], nn::global_avg_pool),
    op("Greater", &[], compare::greater),
    op("GreaterOrEqual", &[], compare::greater_or_equal),
    op(
        "GRU",
        &["activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size", "layout", "linear_before_reset"],
        recurrent::gru,
    )
    .note("gates `zrh`; `linear_before_reset` 0 and 1; directions; `sequence_lens`; initial state; `layout`"),
    op("HardSigmoid", &["alpha", "beta"], activation::hard_sigmoid),
    op("Identity", &[], elementwise::identity),
    op("InstanceNormalization", &["epsilon"], norm::instance_norm)
    .note("also PyTorch's `GroupNorm` (`Reshape`, `InstanceNormalization`, `Reshape`, `Mul`, `Add`)"),
    op("IsNaN", &[], compare::is_nan)
    .note("floats; the result is a host boolean"),
    op("LayerNormalization", &["axis", "epsilon", "stash_type"], norm::layer_norm),
    op("LeakyRelu", &["alpha"], activation::leaky_relu),
    op("Less", &[], compare::less),
    op("LessOrEqual", &[], compare::less_or_equal),
    op("Log", &[], elementwise::log),
    op("LogSoftmax", &["axis"], nn::log_softmax),
    op(
        "LSTM",
        &["activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size", "input_forget", "layout"],
        recurrent::lstm,
    )
    .note("gates `iofc`; directions; `sequence_lens`; initial states; `layout`; peepholes, `clip`, `input_forget` refused"),
    op("MatMul", &[], linear::matmul),
    op("Max", &[], elementwise::max)
    .note("any number of inputs"),
    op(
        "MaxPool",
        &["auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"],
        nn::max_pool,
    )
    .note("1-d and 2-d; symmetric `pads`; the `Indices` output is refused"),
    op("Min", &[], elementwise::min)
    .note("any number of inputs"),
    op("Mod", &["fmod"], elementwise::modulo)
    .note("integers, `fmod = 0`"),
    op("Mul", &[], elementwise::mul),
    op("Neg", &[], elementwise::neg),
    op("Not", &[], compare::not),
    op("Or", &[], compare::or),
    op("Pad", &["mode"], pad::pad)
    .note("`constant` mode (the value a constant); negative pads crop; `axes` (opset 18)"),
    op("Pow", &[], elementwise::pow),
    op("Range", &[], generate::range),
    op("Reciprocal", &[], elementwise::reciprocal),
    op("ReduceL2", &["axes", "keepdims", "noop_with_empty_axes"], reduce::reduce_l2)
    .note("axes as attribute (to opset 17) or input (opset 18)"),
    op("ReduceMax", &["axes", "keepdims", "noop_with_empty_axes"], reduce::reduce_max)
    .note("axes as attribute (to opset 17) or input (opset 18)"),
    op("ReduceMean", &["axes", "keepdims", "noop_with_empty_axes"], reduce::reduce_mean)
    .note("axes as attribute (to opset 17) or input (opset 18)"),
    op("ReduceMin", &["axes", "keepdims", "noop_with_empty_axes"], reduce::reduce_min)
    .note("axes as attribute (to opset 17) or input (opset 18)"),
    op("ReduceSum", &["keepdims", "noop_with_empty_axes"], reduce::reduce_sum)
    .note("axes as input"),
    op("Relu", &[], elementwise::relu),
    op("Reshape", &["allowzero"], shape::reshape),
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
    )
    .note("`nearest` with `asymmetric` + `floor`; `linear` with `align_corners`, `half_pixel` or `pytorch_half_pixel`; `scales` or `sizes`; opset 18 attributes at their defaults"),
    op(
        "RNN",
        &["activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size", "layout"],
        recurrent::rnn,
    )
    .note("`Tanh`, `Relu` or `Sigmoid`; directions; `sequence_lens`; initial state; `layout`"),
    op("ScatterElements", &["axis", "reduction"], nd_index::scatter_elements)
    .note("`reduction = none`; each element written once"),
    op("ScatterND", &["reduction"], nd_index::scatter_nd)
    .note("`reduction = none`"),
    op("Shape", &["start", "end"], shape::shape),
    op("Sigmoid", &[], elementwise::sigmoid),
    op("Sin", &[], elementwise::sin),
    op("Slice", &[], shape::slice)
    .note("positive steps"),
    op("Softmax", &["axis"], nn::softmax),
    op("Softplus", &[], activation::softplus),
    op("Split", &["axis", "num_outputs", "split"], split::split)
    .note("sizes as input or attribute, `num_outputs` (opset 18), or equal parts"),
    op("Sqrt", &[], elementwise::sqrt),
    op("Squeeze", &[], shape::squeeze),
    op("Sub", &[], elementwise::sub),
    op("Tanh", &[], elementwise::tanh),
    op("Transpose", &["perm"], shape::transpose),
    op("Trilu", &["upper"], trilu::trilu)
    .note("floats (differentiable) and host integers and booleans"),
    op("Unsqueeze", &[], shape::unsqueeze),
    op("Where", &[], elementwise::where_op)
    .note("host condition"),
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
