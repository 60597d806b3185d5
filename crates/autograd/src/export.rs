//! What a recorded graph computes, for file writers (ONNX export): each operation describes
//! itself ([`Op::export`](crate::Op::export)) as a kind and attributes, and [`trace_graph`]
//! lists the nodes reachable from some outputs, inputs before their users.
//!
//! Descriptions are ember's own vocabulary (`linear`, `conv2d`, `add_scalar`, ...); a
//! writer maps them to its format's operators and reports the ones it cannot.

use crate::node::NodeRef;
use crate::var::Var;
use ember_tensor::Result;
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// An attribute of an [`OpExport`].
#[derive(Clone, Debug, PartialEq)]
pub enum ExportAttr {
    /// An integer (a dimension, a flag).
    Int(i64),
    /// A list of integers (a shape, a permutation, strides).
    Ints(Vec<i64>),
    /// A float (a scalar operand, an epsilon).
    Float(f64),
    /// A list of floats (the entries of a small constant matrix).
    Floats(Vec<f64>),
    /// A dtype (a cast's target).
    DType(ember_tensor::DType),
}

/// An operation as an exporter sees it: its kind (the operation's name) and attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct OpExport {
    /// The operation, as [`Op::name`](crate::Op::name) names it (`matmul`, `relu`, ...).
    pub kind: String,
    /// Its attributes, by name.
    pub attrs: Vec<(&'static str, ExportAttr)>,
}

impl OpExport {
    /// A description without attributes.
    pub fn new(kind: &str) -> OpExport {
        OpExport { kind: kind.into(), attrs: Vec::new() }
    }

    /// With the attribute `name`.
    pub fn attr(mut self, name: &'static str, value: ExportAttr) -> OpExport {
        self.attrs.push((name, value));
        self
    }

    /// With the integer list `name`.
    pub fn ints(self, name: &'static str, values: impl IntoIterator<Item = usize>) -> OpExport {
        self.attr(name, ExportAttr::Ints(values.into_iter().map(|v| v as i64).collect()))
    }

    /// The attribute `name`.
    pub fn get(&self, name: &str) -> Option<&ExportAttr> {
        self.attrs.iter().find(|(k, _)| *k == name).map(|(_, v)| v)
    }
}

/// One node of a traced graph.
pub struct TracedNode {
    /// A handle to the node (its value, shape and dtype; for a leaf, the parameter or
    /// input itself, to compare with [`Var::same_node`]).
    pub var: Var,
    /// The positions of its inputs in the list.
    pub inputs: Vec<usize>,
    /// `None` for a leaf; otherwise the operation's description, or the error saying it
    /// has none.
    pub op: Option<Result<OpExport>>,
}

fn key(n: &NodeRef) -> usize {
    Arc::as_ptr(n) as *const u8 as usize
}

/// The nodes reachable from `outputs`, every node after its inputs (iteratively: deep
/// graphs are fine).
pub fn trace_graph(outputs: &[&Var]) -> Vec<TracedNode> {
    let mut index: FxHashMap<usize, usize> = FxHashMap::default();
    let mut out: Vec<TracedNode> = Vec::new();
    // (node, whether its inputs were pushed already)
    let mut stack: Vec<(NodeRef, bool)> = outputs.iter().rev().map(|v| (v.node.clone(), false)).collect();
    while let Some((n, expanded)) = stack.pop() {
        if index.contains_key(&key(&n)) {
            continue;
        }
        if !expanded {
            stack.push((n.clone(), true));
            for i in n.inputs.iter().rev() {
                if !index.contains_key(&key(i)) {
                    stack.push((i.clone(), false));
                }
            }
            continue;
        }
        let inputs = n.inputs.iter().filter_map(|i| index.get(&key(i)).copied()).collect();
        let op = (!n.is_leaf()).then(|| n.op.export());
        index.insert(key(&n), out.len());
        // A value released because no backward reads it (or freed by a backward) is
        // recomputed here from its inputs, which the list already holds, so that every
        // handle in it has a value. Recomputing an operation that ran before on the same
        // inputs does not fail; if it did, the walk keeps the plain handle.
        let var = match Var::from_node_ensured(n.clone()) {
            Ok(v) => v,
            Err(e) => {
                log::warn!("trace_graph: recomputing the value of {} failed: {e}", n.op.name());
                Var::from_node(n)
            }
        };
        out.push(TracedNode { var, inputs, op });
    }
    out
}
