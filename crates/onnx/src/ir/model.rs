//! [`GraphModel`]: a checked graph that runs on `Var`s, as a [`Module`].

use super::{Node, Value, ValueInfo};
use crate::ops::OpSpec;
use ember_autograd::Var;
use ember_nn::{Buffer, Module, Parts, TrainingFlag};
use ember_tensor::{Device, Error, Result, Tensor};
use std::collections::HashMap;

/// A checked, ordered graph with its weights as `Var`s: run it with [`GraphModel::run`]
/// (any number of inputs and outputs) or as a [`Module`] (one input, one output).
///
/// Float initializers are parameters (they require grad, so the model fine-tunes with any
/// optimizer, and [`Var::freeze`] freezes them), named as in the file
/// (`encoder.layers.0.norm1.weight` for a PyTorch export); running statistics are buffers.
pub struct GraphModel {
    name: String,
    inputs: Vec<ValueInfo>,
    outputs: Vec<ValueInfo>,
    nodes: Vec<(Node, &'static OpSpec)>,
    params: Vec<(String, Var)>,
    buffers: Vec<(String, Buffer)>,
    constants: HashMap<String, Value>,
    training: TrainingFlag,
}

impl GraphModel {
    pub(crate) fn new(
        name: String,
        inputs: Vec<ValueInfo>,
        outputs: Vec<ValueInfo>,
        nodes: Vec<(Node, &'static OpSpec)>,
        params: Vec<(String, Var)>,
        buffers: Vec<(String, Buffer)>,
        constants: HashMap<String, Value>,
    ) -> GraphModel {
        GraphModel { name, inputs, outputs, nodes, params, buffers, constants, training: TrainingFlag::new() }
    }

    /// The graph's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The inputs the model takes, in order.
    pub fn inputs(&self) -> &[ValueInfo] {
        &self.inputs
    }

    /// The outputs it returns, in order.
    pub fn outputs(&self) -> &[ValueInfo] {
        &self.outputs
    }

    /// The nodes in the order they run.
    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.nodes.iter().map(|(n, _)| n)
    }

    fn check_input(&self, info: &ValueInfo, x: &Var) -> Result<()> {
        let x_shape = x.shape();
        let dims = x_shape.dims();
        if let Some(dtype) = info.dtype
            && dtype != x.dtype()
        {
            return Err(Error::dtype(
                "onnx model",
                format!("input '{}' must be {dtype}, got {}", info.name, x.dtype()),
            ));
        }
        if let Some(shape) = &info.shape {
            let fits = shape.len() == dims.len() && shape.iter().zip(dims).all(|(w, &d)| w.is_none_or(|w| w == d));
            if !fits {
                let want: Vec<String> = shape.iter().map(|d| d.map_or("?".into(), |d| d.to_string())).collect();
                return Err(Error::shape(
                    "onnx model",
                    format!("input '{}' must have shape [{}], got {dims:?}", info.name, want.join(", ")),
                ));
            }
        }
        Ok(())
    }

    /// Checks that the graph's shapes fit together by running it once, without recording
    /// gradients, on zeros of the declared input shapes (dynamic dimensions set to 1, an
    /// undeclared dtype taken as f32); returns the output shapes. A mismatch is an error
    /// naming the node. [`load`](crate::load) calls it when every input declares its rank.
    pub fn check_shapes(&self) -> Result<Vec<Vec<usize>>> {
        // On the model's device, should it have been moved.
        let device = self.params.first().map_or(Device::Cpu, |(_, p)| p.device());
        let inputs = self
            .inputs
            .iter()
            .map(|info| {
                let shape: Vec<usize> =
                    info.shape.as_ref().map(|s| s.iter().map(|d| d.unwrap_or(1)).collect()).unwrap_or_default();
                Ok(Var::new(Tensor::full_on(shape, 0, info.dtype.unwrap_or(ember_tensor::DType::F32), device)?))
            })
            .collect::<Result<Vec<Var>>>()?;
        let outputs = ember_autograd::no_grad(|| self.run(&inputs.iter().collect::<Vec<_>>()))?;
        Ok(outputs.iter().map(|o| o.shape().dims().to_vec()).collect())
    }

    /// Runs the graph on `inputs` (one per graph input, in order) and returns its outputs.
    /// Float outputs carry their graph back to the parameters; integer outputs are
    /// constants.
    pub fn run(&self, inputs: &[&Var]) -> Result<Vec<Var>> {
        if inputs.len() != self.inputs.len() {
            return Err(Error::invalid(
                "onnx model",
                format!("the graph takes {} inputs, got {}", self.inputs.len(), inputs.len()),
            ));
        }
        let mut env: HashMap<&str, Value> = HashMap::new();
        for (info, x) in self.inputs.iter().zip(inputs) {
            self.check_input(info, x)?;
            let v = if x.dtype().is_float() { Value::Float((*x).clone()) } else { Value::from_tensor(&x.value())? };
            env.insert(&info.name, v);
        }
        for (name, p) in &self.params {
            env.insert(name, Value::Float(p.clone()));
        }
        for (name, b) in &self.buffers {
            env.insert(name, Value::Float(Var::new(b.get())));
        }
        // Float constants (initializers that are not parameters, `Constant` nodes) are made
        // on the host: they go to the device of the run, that of the model's parameters.
        let device = self.params.first().map_or(Device::Cpu, |(_, p)| p.device());
        let on_device = |v: Value| -> Result<Value> {
            match v {
                Value::Float(x) if x.device() != device => Ok(Value::Float(x.to_device(device)?)),
                other => Ok(other),
            }
        };
        for (name, c) in &self.constants {
            env.insert(name, on_device(c.clone())?);
        }
        for (node, spec) in &self.nodes {
            let args: Vec<Option<Value>> =
                node.inputs.iter().map(|n| if n.is_empty() { None } else { env.get(n.as_str()).cloned() }).collect();
            let mut outs = (spec.run)(node, &args).map_err(|e| with_node(node, e))?;
            if node.op_type == "Constant" {
                outs = outs.into_iter().map(on_device).collect::<Result<_>>()?;
            }
            for (name, v) in node.outputs.iter().zip(outs) {
                if !name.is_empty() {
                    env.insert(name, v);
                }
            }
        }
        self.outputs
            .iter()
            .map(|o| match env.get(o.name.as_str()) {
                Some(v) => v.to_var(),
                None => Err(Error::invalid("onnx model", format!("output '{}' was not computed", o.name))),
            })
            .collect()
    }
}

/// Puts the node's name and operator in front of an error from its operator.
fn with_node(node: &Node, e: Error) -> Error {
    let label = node.label();
    if e.to_string().contains(&label) {
        return e;
    }
    match e {
        Error::Shape { op, msg } => Error::Shape { op, msg: format!("{label}: {msg}") },
        Error::DType { op, msg } => Error::DType { op, msg: format!("{label}: {msg}") },
        Error::Index { op, msg } => Error::Index { op, msg: format!("{label}: {msg}") },
        Error::InvalidArgument { op, msg } => Error::InvalidArgument { op, msg: format!("{label}: {msg}") },
        other => Error::invalid("onnx model", format!("{label}: {other}")),
    }
}

impl Module for GraphModel {
    /// Runs a graph with one input and one output.
    fn forward(&self, x: &Var) -> Result<Var> {
        if self.outputs.len() != 1 {
            return Err(Error::invalid(
                "onnx model",
                format!("forward needs a graph with one output, this one has {} (use run)", self.outputs.len()),
            ));
        }
        Ok(self.run(&[x])?.remove(0))
    }

    /// The parameters and buffers under their names in the file, and the flag.
    fn children(&self) -> Parts<'_> {
        let parts = Parts::new().training(&self.training);
        let parts = self.params.iter().fold(parts, |p, (name, v)| p.parameter(name.as_str(), v));
        self.buffers.iter().fold(parts, |p, (name, b)| p.buffer(name.as_str(), b))
    }
}

impl std::fmt::Debug for GraphModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GraphModel({:?}, {} nodes, {} parameters)", self.name, self.nodes.len(), self.params.len())
    }
}
