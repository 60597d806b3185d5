//! [`Graph::build`]: checks a graph and orders its nodes.

use super::model::GraphModel;
use super::{Graph, Node, Value};
use crate::ops;
use ember_autograd::Var;
use ember_nn::Buffer;
use ember_tensor::{Error, Result};
use std::collections::{HashMap, HashSet};

/// The operators the interpreter runs, by ONNX name, with the attributes each accepts
/// (see also [`crate::tables::import_table`]).
pub fn supported_ops() -> Vec<(&'static str, &'static [&'static str])> {
    ops::OPS.iter().map(|s| (s.name, s.attrs)).collect()
}

fn invalid(what: String) -> Error {
    Error::invalid("onnx graph", what)
}

/// Which operator runs `node`, if its attributes are all understood.
fn check_node(node: &Node) -> Result<&'static ops::OpSpec> {
    let Some(spec) = ops::OPS.iter().find(|s| s.name == node.op_type) else {
        return Err(invalid(format!("{}: unsupported operator '{}'", node.label(), node.op_type)));
    };
    for (name, _) in &node.attrs {
        if !spec.attrs.contains(&name.as_str()) {
            return Err(invalid(format!("{}: unsupported attribute '{name}'", node.label())));
        }
    }
    if node.outputs.is_empty() {
        return Err(invalid(format!("{}: the node has no outputs", node.label())));
    }
    Ok(spec)
}

impl Graph {
    /// Checks the graph and makes it runnable: every operator and attribute supported,
    /// every input defined by a graph input, an initializer or exactly one node, no cycle,
    /// every graph output defined. Errors name the node (name and operator) and the value.
    pub fn build(self) -> Result<GraphModel> {
        let mut defined: HashSet<&str> = HashSet::new();
        for v in &self.inputs {
            if !defined.insert(&v.name) {
                return Err(invalid(format!("input '{}' is declared twice", v.name)));
            }
        }
        for (name, _) in &self.initializers {
            // Older files list initializers among the inputs as well: that is allowed.
            if !defined.insert(name) && !self.inputs.iter().any(|v| &v.name == name) {
                return Err(invalid(format!("initializer '{name}' is defined twice")));
            }
        }
        let mut producer: HashMap<&str, usize> = HashMap::new();
        let mut specs = Vec::with_capacity(self.nodes.len());
        for (i, node) in self.nodes.iter().enumerate() {
            specs.push(check_node(node)?);
            for out in &node.outputs {
                if out.is_empty() {
                    continue;
                }
                if defined.contains(out.as_str()) || producer.insert(out, i).is_some() {
                    return Err(invalid(format!("{}: output '{out}' is already defined elsewhere", node.label())));
                }
            }
        }
        // Kahn's algorithm, keeping the file's order among ready nodes.
        let mut waiting = vec![0usize; self.nodes.len()];
        let mut users: Vec<Vec<usize>> = vec![Vec::new(); self.nodes.len()];
        for (i, node) in self.nodes.iter().enumerate() {
            for input in node.inputs.iter().filter(|s| !s.is_empty()) {
                if let Some(&p) = producer.get(input.as_str()) {
                    waiting[i] += 1;
                    users[p].push(i);
                } else if !defined.contains(input.as_str()) {
                    return Err(invalid(format!(
                        "{}: input '{input}' is not defined by any node, input or initializer",
                        node.label()
                    )));
                }
            }
        }
        let mut ready: std::collections::VecDeque<usize> = (0..self.nodes.len()).filter(|&i| waiting[i] == 0).collect();
        let mut order = Vec::with_capacity(self.nodes.len());
        while let Some(i) = ready.pop_front() {
            order.push(i);
            for &u in &users[i] {
                waiting[u] -= 1;
                if waiting[u] == 0 {
                    ready.push_back(u);
                }
            }
        }
        if order.len() < self.nodes.len() {
            let stuck =
                (0..self.nodes.len()).find(|&i| waiting[i] > 0).map(|i| self.nodes[i].label()).unwrap_or_default();
            return Err(invalid(format!("the graph has a cycle through {stuck}")));
        }
        for out in &self.outputs {
            if !defined.contains(out.name.as_str()) && !producer.contains_key(out.name.as_str()) {
                return Err(invalid(format!("output '{}' is not computed by any node", out.name)));
            }
        }
        // Running statistics are buffers, not parameters, as in PyTorch.
        let stats: HashSet<&str> = self
            .nodes
            .iter()
            .filter(|n| n.op_type == "BatchNormalization")
            .flat_map(|n| n.inputs.iter().skip(3).take(2).map(String::as_str))
            .collect();
        let mut params = Vec::new();
        let mut buffers = Vec::new();
        let mut constants = HashMap::new();
        for (name, t) in &self.initializers {
            if !t.dtype().is_float() {
                constants.insert(name.clone(), Value::from_tensor(t)?);
            } else if stats.contains(name.as_str()) {
                buffers.push((name.clone(), Buffer::new(t.clone())));
            } else {
                params.push((name.clone(), Var::param(t.clone())));
            }
        }
        let Graph { name, inputs: graph_inputs, outputs, nodes, initializers } = self;
        let graph_inputs =
            graph_inputs.into_iter().filter(|v| !initializers.iter().any(|(n, _)| n == &v.name)).collect();
        let mut slots: Vec<Option<Node>> = nodes.into_iter().map(Some).collect();
        let nodes = order.iter().filter_map(|&i| slots[i].take().map(|n| (n, specs[i]))).collect();
        Ok(GraphModel::new(name, graph_inputs, outputs, nodes, params, buffers, constants))
    }
}
