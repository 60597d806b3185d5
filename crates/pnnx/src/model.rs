//! [`PnnxModel`]: a loaded PNNX graph, run on `Var`s.

use crate::ops::{self, Step};
use crate::param::Operator;
use crate::weights::Weights;
use ember_autograd::Var;
use ember_nn::{Module, Parts};
use ember_tensor::{Error, Result, Tensor};
use std::collections::HashMap;

/// One operator and what it computes.
struct Node {
    op: Operator,
    step: Step,
}

/// A PNNX model: its operators in the file's (topological) order, run on ember's layers
/// and ops. The `nn.*` operators become ember layers holding the file's weights, so the
/// model is a [`Module`]: `parameters()`, optimizers and freezing work as on any model, and
/// its weights are named `<operator>.<weight>` as PyTorch names them. It is loaded in
/// evaluation mode.
pub struct PnnxModel {
    nodes: Vec<Node>,
    inputs: Vec<String>,
    outputs: Vec<String>,
}

fn graph_error(msg: String) -> Error {
    Error::invalid("pnnx", msg)
}

impl PnnxModel {
    /// Builds the model from parsed operators and the weight archive.
    pub(crate) fn build(ops: Vec<Operator>, weights: &mut Weights<'_>) -> Result<PnnxModel> {
        let mut defined: HashMap<&str, usize> = HashMap::new();
        let (mut inputs, mut outputs, mut nodes) = (Vec::new(), Vec::new(), Vec::new());
        for op in &ops {
            for b in &op.inputs {
                if !defined.contains_key(b.as_str()) {
                    return Err(graph_error(format!(
                        "{} reads blob `{b}`, which no earlier operator writes",
                        op.describe()
                    )));
                }
            }
            for b in &op.outputs {
                if let Some(line) = defined.insert(b, op.line) {
                    return Err(graph_error(format!(
                        "{} writes blob `{b}`, already written on line {line}",
                        op.describe()
                    )));
                }
            }
            match op.kind.as_str() {
                "pnnx.Input" => inputs.extend(op.outputs.iter().cloned()),
                "pnnx.Output" => outputs.extend(op.inputs.iter().cloned()),
                _ => {
                    let many_inputs =
                        matches!(op.kind.as_str(), "pnnx.Expression" | "torch.cat" | "nn.MultiheadAttention");
                    if op.outputs.len() != 1 || (!many_inputs && op.inputs.len() != 1) || op.inputs.is_empty() {
                        return Err(graph_error(format!(
                            "{} has {} inputs and {} outputs; ember runs it with one of each",
                            op.describe(),
                            op.inputs.len(),
                            op.outputs.len()
                        )));
                    }
                    nodes.push(Node { op: op.clone(), step: ops::build(op, weights)? });
                }
            }
        }
        if inputs.is_empty() || outputs.is_empty() {
            return Err(graph_error("the graph has no pnnx.Input or no pnnx.Output".into()));
        }
        Ok(PnnxModel { nodes, inputs, outputs })
    }

    /// The graph's input blobs, in order.
    pub fn input_names(&self) -> &[String] {
        &self.inputs
    }

    /// The graph's output blobs, in order.
    pub fn output_names(&self) -> &[String] {
        &self.outputs
    }

    /// Runs the graph on `inputs` (one per input blob) and returns its outputs.
    pub fn run(&self, inputs: &[Var]) -> Result<Vec<Var>> {
        if inputs.len() != self.inputs.len() {
            return Err(graph_error(format!("the model takes {} inputs, not {}", self.inputs.len(), inputs.len())));
        }
        let mut blobs: HashMap<&str, Var> =
            self.inputs.iter().map(String::as_str).zip(inputs.iter().cloned()).collect();
        for node in &self.nodes {
            // Every input was checked to be written by an earlier operator when loading.
            let args: Vec<Var> = node.op.inputs.iter().filter_map(|b| blobs.get(b.as_str()).cloned()).collect();
            let out = node.step.run(&args).map_err(|e| graph_error(format!("{}: {e}", node.op.describe())))?;
            for (name, v) in node.op.outputs.iter().zip(out) {
                blobs.insert(name, v);
            }
        }
        self.outputs
            .iter()
            .map(|b| {
                blobs
                    .get(b.as_str())
                    .cloned()
                    .ok_or_else(|| graph_error(format!("output blob `{b}` was never written")))
            })
            .collect()
    }

    /// Inference on plain tensors, without recording anything.
    pub fn infer(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let vars: Vec<Var> = inputs.iter().cloned().map(Var::new).collect();
        let out = ember_autograd::no_grad(|| self.run(&vars))?;
        Ok(out.iter().map(Var::value).collect())
    }
}

impl Module for PnnxModel {
    /// The graph on one input, giving its first output.
    fn forward(&self, x: &Var) -> Result<Var> {
        let mut out = self.run(std::slice::from_ref(x))?;
        Ok(out.swap_remove(0))
    }

    /// The layers of the nodes that hold weights, named after the nodes.
    fn children(&self) -> Parts<'_> {
        let named = self.nodes.iter().filter_map(|n| Some((n.op.name.as_str(), n.step.module()?)));
        named.fold(Parts::new(), |parts, (name, m)| parts.module(name, m))
    }

    /// Whether any layer is training: a graph without layers, loaded for inference, is not.
    fn is_training(&self) -> bool {
        self.nodes.iter().filter_map(|n| n.step.module()).any(|m| m.is_training())
    }
}
