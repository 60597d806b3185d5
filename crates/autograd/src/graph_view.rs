//! A read-only picture of a graph for export: nodes with their kind and label, and edges
//! with their kind. Shared by the DOT and SVG writers.

use crate::node::{DETACHED, FROZEN, NodeRef};
use crate::var::Var;
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// How a node is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NodeKind {
    /// A leaf that requires grad.
    Parameter,
    /// A parameter whose gradient is switched off.
    Frozen,
    /// A leaf without grad: an input or a constant.
    Input,
    /// A leaf made by `detach()`.
    Detached,
    /// A recorded operation that gradients flow through.
    Op,
    /// A recorded operation without gradient (on constants, or after a detach).
    ConstOp,
    /// An operation that stops gradients (`detach_node`).
    DetachOp,
    /// A gradient router (static mode input).
    Router,
}

/// How an edge is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EdgeKind {
    /// A gradient flows back along it.
    Grad,
    /// No gradient flows (the source does not require grad).
    NoGrad,
    /// Into a node that stops gradients.
    Cut,
    /// From a router's route target to the router.
    Route,
}

pub(crate) struct ViewNode {
    pub kind: NodeKind,
    pub title: String,
    pub detail: String,
}

pub(crate) struct View {
    pub nodes: Vec<ViewNode>,
    /// `(from, to, kind)`: data flows from `from` to `to`.
    pub edges: Vec<(usize, usize, EdgeKind)>,
}

fn key(n: &NodeRef) -> usize {
    Arc::as_ptr(n) as *const u8 as usize
}

fn describe(n: &NodeRef) -> ViewNode {
    let kind = if crate::router::route_of(n).is_some() {
        NodeKind::Router
    } else if n.is_leaf() {
        if n.has(DETACHED) {
            NodeKind::Detached
        } else if n.requires_grad() {
            NodeKind::Parameter
        } else if n.has(FROZEN) {
            NodeKind::Frozen
        } else {
            NodeKind::Input
        }
    } else if n.op.name() == "detach" {
        NodeKind::DetachOp
    } else if n.requires_grad() {
        NodeKind::Op
    } else {
        NodeKind::ConstOp
    };
    let title = match (n.name(), kind) {
        (Some(name), NodeKind::Op | NodeKind::ConstOp | NodeKind::DetachOp | NodeKind::Router) => {
            format!("{name}: {}", n.op.name())
        }
        (Some(name), _) => name,
        (None, NodeKind::Parameter | NodeKind::Frozen) => "parameter".into(),
        (None, NodeKind::Input) => "input".into(),
        (None, NodeKind::Detached) => "detached".into(),
        (None, _) => n.op.name().to_string(),
    };
    let detail = match &n.state().value {
        Some(v) if v.dtype() == ember_tensor::DType::F32 => format!("{:?}", v.shape()),
        Some(v) => format!("{:?} {}", v.shape(), v.dtype()),
        None => "(freed)".into(),
    };
    ViewNode { kind, title, detail }
}

/// Everything reachable from `roots` through inputs and router routes (iteratively).
pub(crate) fn view(roots: &[&Var]) -> View {
    let mut index: FxHashMap<usize, usize> = FxHashMap::default();
    let mut refs: Vec<NodeRef> = Vec::new();
    let mut stack: Vec<(NodeRef, usize)> = Vec::new();
    let mut add = |n: &NodeRef, refs: &mut Vec<NodeRef>, stack: &mut Vec<(NodeRef, usize)>| -> usize {
        *index.entry(key(n)).or_insert_with(|| {
            refs.push(n.clone());
            stack.push((n.clone(), refs.len() - 1));
            refs.len() - 1
        })
    };
    for r in roots {
        add(&r.node, &mut refs, &mut stack);
    }
    let mut edges = Vec::new();
    while let Some((n, to)) = stack.pop() {
        let cut = n.op.name() == "detach";
        for input in n.inputs.iter() {
            let from = add(input, &mut refs, &mut stack);
            let kind = if cut {
                EdgeKind::Cut
            } else if input.requires_grad() {
                EdgeKind::Grad
            } else {
                EdgeKind::NoGrad
            };
            edges.push((from, to, kind));
        }
        if let Some(Some(target)) = crate::router::route_of(&n) {
            let from = add(&target.node, &mut refs, &mut stack);
            edges.push((from, to, EdgeKind::Route));
        }
    }
    View { nodes: refs.iter().map(describe).collect(), edges }
}
