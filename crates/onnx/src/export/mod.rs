//! ONNX export: trace a [`Module`] (or any function of `Var`s) on example inputs and write
//! the recorded graph as an ONNX model (opset 17, IR version 8), the parameters as
//! initializers under their `named_parameters` names.
//!
//! Each recorded operation describes itself ([`ember_autograd::Op::export`]); `lower.rs`
//! turns the description into ONNX nodes. An operation without a description or without an
//! ONNX mapping is an error naming it.

mod batch;
mod lower;
mod table;

pub(crate) use table::EXPORTS;

use crate::proto::{
    self, Dimension, GraphProto, ModelProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto,
    TypeProtoTensor, ValueInfoProto, data_type,
};
use ember_autograd::export::trace_graph;
use ember_autograd::{Var, enable_grad};
use ember_nn::Module;
use ember_tensor::{DType, Error, Result, Tensor};
use prost::Message;
use std::path::Path;

/// The opset [`export`] writes.
pub const OPSET: i64 = 17;

/// How [`export`] names and shapes the graph's inputs and outputs.
#[derive(Clone, Debug, Default)]
pub struct ExportOptions {
    /// Input names (`input`, `input_1`, ... when left out).
    pub input_names: Vec<String>,
    /// Output names (`output`, `output_1`, ...).
    pub output_names: Vec<String>,
    /// Declare dimension 0 of every input and output as a symbolic `batch`. The model is
    /// traced a second time one sample larger, and the shapes it writes (reshape and expand
    /// targets, batch-sized constants such as zero states) follow the batch wherever it
    /// sits inside; an operation whose description changes with the batch is an error.
    pub dynamic_batch: bool,
}

impl ExportOptions {
    /// With these input names.
    pub fn input_names(mut self, names: &[&str]) -> Self {
        self.input_names = names.iter().map(|s| s.to_string()).collect();
        self
    }

    /// With these output names.
    pub fn output_names(mut self, names: &[&str]) -> Self {
        self.output_names = names.iter().map(|s| s.to_string()).collect();
        self
    }

    /// With a dynamic batch dimension (or not).
    pub fn dynamic_batch(mut self, on: bool) -> Self {
        self.dynamic_batch = on;
        self
    }
}

/// Traces `model` (in evaluation mode, restored afterwards) on `example` and writes it to
/// `path` as ONNX.
///
/// ```no_run
/// use ember_autograd::Var;
/// use ember_nn::{Linear, ReLU, Sequential};
/// use ember_onnx::ExportOptions;
/// use ember_tensor::Tensor;
/// let model = Sequential::new().add(Linear::new(4, 8)?).add(ReLU).add(Linear::new(8, 2)?);
/// let x = Var::new(Tensor::randn([1, 4])?);
/// ember_onnx::export(&model, &x, "mlp.onnx", &ExportOptions::default().dynamic_batch(true))?;
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn export(model: &dyn Module, example: &Var, path: impl AsRef<Path>, options: &ExportOptions) -> Result<()> {
    let bytes = export_bytes(model, example, options)?;
    let path = path.as_ref();
    std::fs::write(path, bytes).map_err(|e| Error::io(path, e))
}

/// [`export`] to bytes.
pub fn export_bytes(model: &dyn Module, example: &Var, options: &ExportOptions) -> Result<Vec<u8>> {
    let training = model.is_training();
    model.eval();
    let result = export_fn_bytes(
        |x| Ok(vec![model.forward(&x[0])?]),
        &model.named_parameters(),
        std::slice::from_ref(example),
        options,
    );
    model.set_training(training);
    result
}

/// Traces `f` on `examples` and returns the ONNX bytes. `params` names the parameters
/// (leaves reached that are not listed become initializers named `const_<n>`). With a
/// dynamic batch `f` is traced a second time, on inputs one sample larger, to find the
/// sizes that follow the batch.
pub fn export_fn_bytes(
    f: impl Fn(&[Var]) -> Result<Vec<Var>>,
    params: &[(String, Var)],
    examples: &[Var],
    options: &ExportOptions,
) -> Result<Vec<u8>> {
    // Fresh leaves, so that the inputs are found in the graph whatever was passed.
    let inputs: Vec<Var> = examples.iter().map(|x| Var::new(x.value())).collect();
    let outputs = enable_grad(|| f(&inputs))?;
    let mut w =
        lower::Writer::new(options.dynamic_batch, examples.first().and_then(|x| x.shape().dims().first().copied()));
    let nodes = trace_graph(&outputs.iter().collect::<Vec<_>>());
    let alt = if options.dynamic_batch { batch::second_trace(&f, examples, &nodes)? } else { None };
    let alt_of = |i: usize| alt.as_ref().and_then(|a| a.get(i));
    let name_at = |names: &[String], i: usize, base: &str| {
        names.get(i).cloned().unwrap_or_else(|| if i == 0 { base.to_string() } else { format!("{base}_{i}") })
    };
    let mut names: Vec<String> = Vec::with_capacity(nodes.len());
    let mut graph_inputs = Vec::new();
    let mut graph_outputs = Vec::new();
    for (i, x) in inputs.iter().enumerate() {
        graph_inputs.push(value_info(&name_at(&options.input_names, i, "input"), x, options.dynamic_batch)?);
    }
    for (i, n) in nodes.iter().enumerate() {
        let name = match &n.op {
            None => {
                if let Some(k) = inputs.iter().position(|x| x.same_node(&n.var)) {
                    name_at(&options.input_names, k, "input")
                } else if let Some((pname, _)) = params.iter().find(|(_, p)| p.same_node(&n.var)) {
                    w.initializer(pname, &n.var.value())?;
                    pname.clone()
                } else if let Some(k) = input_view(&inputs, &n.var.value()) {
                    let input = name_at(&options.input_names, k, "input");
                    let dims = n.var.shape().dims().to_vec();
                    if dims == inputs[k].shape().dims() {
                        input
                    } else {
                        // A flattened input (an embedding's ids) follows any batch.
                        let target: Vec<i64> =
                            if dims.len() == 1 { vec![-1] } else { dims.iter().map(|&d| d as i64).collect() };
                        w.input_reshape(&input, &target)?
                    }
                } else {
                    let c = format!("const_{i}");
                    let (value, other) = (n.var.value(), alt_of(i).map(|a| a.var.value()));
                    match other {
                        Some(other) if other.shape() != value.shape() => {
                            let input = name_at(&options.input_names, 0, "input");
                            w.batch_constant(&c, &value, &other, &input)?
                        }
                        _ => {
                            w.initializer(&c, &value)?;
                            c
                        }
                    }
                }
            }
            Some(desc) => {
                let desc = desc.as_ref().map_err(|e| Error::invalid("onnx export", e.to_string()))?;
                let args: Vec<(&str, &Var)> = n.inputs.iter().map(|&j| (names[j].as_str(), &nodes[j].var)).collect();
                let alt = alt_of(i).and_then(|a| a.op.as_ref()).and_then(|d| d.as_ref().ok());
                w.lower(desc, &args, &n.var, alt)?
            }
        };
        names.push(name);
    }
    for (k, out) in outputs.iter().enumerate() {
        let oname = name_at(&options.output_names, k, "output");
        let Some(at) = nodes.iter().position(|n| n.var.same_node(out)) else {
            return Err(Error::invalid("onnx export", format!("output {k} was not traced")));
        };
        w.identity(&names[at], &oname);
        graph_outputs.push(value_info(&oname, out, options.dynamic_batch)?);
    }
    let (node, initializer) = w.finish();
    let model = ModelProto {
        ir_version: proto::IR_VERSION,
        opset_import: vec![OperatorSetIdProto { domain: String::new(), version: OPSET }],
        producer_name: "ember".into(),
        producer_version: env!("CARGO_PKG_VERSION").into(),
        graph: Some(GraphProto {
            node,
            name: "ember".into(),
            initializer,
            input: graph_inputs,
            output: graph_outputs,
            ..Default::default()
        }),
        ..Default::default()
    };
    Ok(model.encode_to_vec())
}

/// The graph input whose data a traced leaf is, in another shape: a function that reads an
/// input as a plain tensor (token ids passed on as `x.value()`, an embedding's
/// `flatten_all`) records a fresh leaf holding the input's own storage, which is the input
/// and not a constant. Only whole, contiguous views from the same offset count.
fn input_view(inputs: &[Var], t: &Tensor) -> Option<usize> {
    inputs.iter().position(|x| {
        let x = x.value();
        x.shares_storage(t)
            && x.dtype() == t.dtype()
            && x.is_contiguous()
            && t.is_contiguous()
            && x.layout().offset() == t.layout().offset()
            && x.shape().numel() == t.shape().numel()
    })
}

pub(crate) fn onnx_type(dtype: DType) -> i32 {
    match dtype {
        DType::F32 => data_type::FLOAT,
        DType::F64 => data_type::DOUBLE,
        DType::F16 => data_type::FLOAT16,
        DType::BF16 => data_type::BFLOAT16,
        DType::I64 => data_type::INT64,
        DType::U8 => data_type::UINT8,
    }
}

fn value_info(name: &str, x: &Var, dynamic_batch: bool) -> Result<ValueInfoProto> {
    let shape = x.shape();
    let dims = shape.dims().iter().enumerate().map(|(i, &d)| {
        if i == 0 && dynamic_batch {
            Dimension { dim_param: Some("batch".into()), ..Default::default() }
        } else {
            Dimension { dim_value: Some(d as i64), ..Default::default() }
        }
    });
    let tensor_type =
        TypeProtoTensor { elem_type: onnx_type(x.dtype()), shape: Some(TensorShapeProto { dim: dims.collect() }) };
    Ok(ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto { tensor_type: Some(tensor_type), ..Default::default() }),
        ..Default::default()
    })
}

/// A tensor as an ONNX initializer (little-endian `raw_data`).
pub(crate) fn tensor_proto(name: &str, t: &Tensor) -> Result<TensorProto> {
    let raw: Vec<u8> = match t.dtype() {
        DType::F32 => t.to_vec::<f32>()?.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::F64 => t.to_vec::<f64>()?.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::I64 => t.to_vec::<i64>()?.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::U8 => t.to_vec::<u8>()?,
        DType::F16 => t.to_vec::<ember_tensor::f16>()?.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::BF16 => t.to_vec::<ember_tensor::bf16>()?.iter().flat_map(|v| v.to_le_bytes()).collect(),
    };
    Ok(TensorProto {
        name: name.into(),
        dims: t.shape().dims().iter().map(|&d| d as i64).collect(),
        data_type: onnx_type(t.dtype()),
        raw_data: raw,
        ..Default::default()
    })
}
