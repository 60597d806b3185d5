//! Graph export: Graphviz DOT ([`to_dot`]) and a self-contained SVG rendering ([`to_svg`])
//! that needs no Graphviz install.
//!
//! Styles: parameters are blue boxes, frozen parameters steel-blue dashed boxes, inputs and
//! constants white boxes, detached leaves dotted grey boxes; operations are ellipses,
//! yellow when gradients flow through them and pale grey otherwise, gradient routers dashed
//! light-grey ellipses (see docs/design.md, 'Static mode'), and `detach_node` a red octagon.
//! Edges along which a gradient flows are solid; edges without one are grey and dashed; edges into a detaching node are red
//! and dashed; a router's route is a dashed blue edge. Labels show the name (or operation)
//! and the shape.
//!
//! ```
//! use ember_autograd::{to_dot, Var};
//! use ember_tensor::{DType, Tensor};
//! let w = Var::param(Tensor::ones([3, 2], DType::F32)?);
//! w.set_name("w");
//! let x = Var::new(Tensor::ones([4, 3], DType::F32)?);
//! let loss = x.matmul(&w)?.relu().sum_all();
//! let dot = to_dot(&[&loss]);
//! assert!(dot.starts_with("digraph") && dot.contains("matmul") && dot.contains("[3, 2]"));
//! # Ok::<(), ember_tensor::Error>(())
//! ```

use crate::graph_view::{EdgeKind, NodeKind, View, view};
use crate::var::Var;
use ember_tensor::{Error, Result};
use std::fmt::Write;
use std::path::Path;

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

fn node_style(kind: NodeKind) -> &'static str {
    match kind {
        NodeKind::Parameter => "shape=box, style=\"filled,bold\", fillcolor=\"#a8d0f0\"",
        NodeKind::Frozen => "shape=box, style=\"filled,dashed\", fillcolor=\"#c8d4e0\"",
        NodeKind::Input => "shape=box, style=filled, fillcolor=\"#ffffff\"",
        NodeKind::Detached => "shape=box, style=\"filled,dotted\", fillcolor=\"#eeeeee\", fontcolor=\"#666666\"",
        NodeKind::Op => "shape=ellipse, style=filled, fillcolor=\"#fff3c4\"",
        NodeKind::ConstOp => "shape=ellipse, style=filled, fillcolor=\"#f4f4ee\", fontcolor=\"#666666\"",
        NodeKind::DetachOp => "shape=octagon, style=filled, fillcolor=\"#f6c6c6\"",
        NodeKind::Router => "shape=ellipse, style=\"filled,dashed\", fillcolor=\"#e6e6e6\"",
    }
}

fn edge_style(kind: EdgeKind) -> &'static str {
    match kind {
        EdgeKind::Grad => "color=\"#333333\"",
        EdgeKind::NoGrad => "color=\"#aaaaaa\", style=dashed",
        EdgeKind::Cut => "color=\"#cc3333\", style=dashed",
        EdgeKind::Route => "color=\"#3366cc\", style=dashed, label=\"route\", fontcolor=\"#3366cc\"",
    }
}

fn render_dot(v: &View) -> String {
    let mut s = String::from("digraph ember {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=11];\n");
    s.push_str("  edge [arrowsize=0.7];\n");
    for (i, n) in v.nodes.iter().enumerate() {
        let _ = writeln!(s, "  n{i} [label=\"{}\\n{}\", {}];", escape(&n.title), escape(&n.detail), node_style(n.kind));
    }
    for &(a, b, kind) in &v.edges {
        let _ = writeln!(s, "  n{a} -> n{b} [{}];", edge_style(kind));
    }
    s.push_str("}\n");
    s
}

/// The graph behind `roots` in Graphviz DOT.
pub fn to_dot(roots: &[&Var]) -> String {
    render_dot(&view(roots))
}

/// Writes [`to_dot`] to `path`.
pub fn save_dot(path: impl AsRef<Path>, roots: &[&Var]) -> Result<()> {
    let path = path.as_ref();
    std::fs::write(path, to_dot(roots)).map_err(|e| Error::io(path, e))
}

/// The graph behind `roots` as a standalone SVG document, laid out by ember itself.
pub fn to_svg(roots: &[&Var]) -> String {
    crate::svg::render(&view(roots))
}

/// Writes [`to_svg`] to `path`.
pub fn save_svg(path: impl AsRef<Path>, roots: &[&Var]) -> Result<()> {
    let path = path.as_ref();
    std::fs::write(path, to_svg(roots)).map_err(|e| Error::io(path, e))
}
