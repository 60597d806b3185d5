//! A small layered graph layout rendered as SVG, so that graphs can be drawn without a
//! Graphviz install.
//!
//! Nodes are placed in layers by their longest path from a source (inputs on top, the
//! output at the bottom), ordered within layers by a few barycenter sweeps to reduce
//! crossings, and connected by cubic curves.

use crate::graph_view::{EdgeKind, NodeKind, View};
use std::fmt::Write;

const LAYER_GAP: f64 = 84.0;
const NODE_GAP: f64 = 28.0;
const NODE_H: f64 = 40.0;
const MARGIN: f64 = 24.0;
const CHAR_W: f64 = 6.6;

fn xml(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// Longest-path layers, in topological order (Kahn's algorithm; the graph is acyclic).
fn layers(n: usize, edges: &[(usize, usize, EdgeKind)]) -> Vec<usize> {
    let mut indeg = vec![0usize; n];
    let mut succ: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &(a, b, _) in edges {
        indeg[b] += 1;
        succ[a].push(b);
    }
    let sources: Vec<usize> = (0..n).filter(|&i| indeg[i] == 0).collect();
    let mut layer = vec![0usize; n];
    let mut ready = sources.clone();
    while let Some(i) = ready.pop() {
        for &j in &succ[i] {
            layer[j] = layer[j].max(layer[i] + 1);
            indeg[j] -= 1;
            if indeg[j] == 0 {
                ready.push(j);
            }
        }
    }
    // Sources (inputs, parameters) sit just above their first consumer rather than all in
    // the top row, which keeps their edges short.
    for &i in &sources {
        if let Some(first) = succ[i].iter().map(|&j| layer[j]).min() {
            layer[i] = first.saturating_sub(1);
        }
    }
    layer
}

/// Orders the nodes of each layer by the mean position of their neighbours in the layer
/// above (sweeping down) and below (sweeping up). Each sweep is linear in the size of the
/// graph: neighbour lists are built once, and only the re-sorted row's positions change.
fn order(rows: &mut [Vec<usize>], edges: &[(usize, usize, EdgeKind)], n: usize) {
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut succs: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &(a, b, _) in edges {
        preds[b].push(a);
        succs[a].push(b);
    }
    let mut pos = vec![0f64; n];
    for row in rows.iter() {
        for (k, &i) in row.iter().enumerate() {
            pos[i] = k as f64;
        }
    }
    for sweep in 0..6 {
        let down = sweep % 2 == 0;
        let count = rows.len();
        for step in 0..count {
            let r = if down { step } else { count - 1 - step };
            let mut keyed: Vec<(f64, usize)> = rows[r]
                .iter()
                .map(|&i| {
                    let neighbours = if down { &preds[i] } else { &succs[i] };
                    let bary = if neighbours.is_empty() {
                        pos[i]
                    } else {
                        neighbours.iter().map(|&j| pos[j]).sum::<f64>() / neighbours.len() as f64
                    };
                    (bary, i)
                })
                .collect();
            keyed.sort_by(|x, y| x.0.total_cmp(&y.0));
            rows[r] = keyed.into_iter().map(|(_, i)| i).collect();
            for (k, &i) in rows[r].iter().enumerate() {
                pos[i] = k as f64;
            }
        }
    }
}

fn node_width(v: &View, i: usize) -> f64 {
    let chars = v.nodes[i].title.chars().count().max(v.nodes[i].detail.chars().count());
    (chars as f64 * CHAR_W + 24.0).max(70.0)
}

/// The SVG document for a graph view.
pub(crate) fn render(v: &View) -> String {
    let n = v.nodes.len();
    let layer = layers(n, &v.edges);
    let depth = layer.iter().copied().max().map_or(0, |m| m + 1);
    let mut rows: Vec<Vec<usize>> = vec![Vec::new(); depth];
    for i in 0..n {
        rows[layer[i]].push(i);
    }
    order(&mut rows, &v.edges, n);

    let widths: Vec<f64> = (0..n).map(|i| node_width(v, i)).collect();
    let row_width =
        |row: &Vec<usize>| row.iter().map(|&i| widths[i]).sum::<f64>() + NODE_GAP * row.len().saturating_sub(1) as f64;
    let total_w = rows.iter().map(row_width).fold(0.0, f64::max) + 2.0 * MARGIN;
    let total_h = depth as f64 * LAYER_GAP - (LAYER_GAP - NODE_H) + 2.0 * MARGIN;
    let mut center = vec![(0f64, 0f64); n];
    for (r, row) in rows.iter().enumerate() {
        let mut x = (total_w - row_width(row)) / 2.0;
        for &i in row {
            center[i] = (x + widths[i] / 2.0, MARGIN + r as f64 * LAYER_GAP + NODE_H / 2.0);
            x += widths[i] + NODE_GAP;
        }
    }

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{total_w:.0}" height="{total_h:.0}" viewBox="0 0 {total_w:.0} {total_h:.0}" font-family="Helvetica, Arial, sans-serif" font-size="11">"#
    );
    s.push_str(
        r##"<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="context-stroke"/></marker></defs>
<rect width="100%" height="100%" fill="white"/>
"##,
    );
    for &(a, b, kind) in &v.edges {
        let (x1, y1) = (center[a].0, center[a].1 + NODE_H / 2.0);
        let (x2, y2) = (center[b].0, center[b].1 - NODE_H / 2.0);
        let dy = (y2 - y1).abs() / 2.0;
        let (color, dash) = match kind {
            EdgeKind::Grad => ("#333333", ""),
            EdgeKind::NoGrad => ("#aaaaaa", r#" stroke-dasharray="5,4""#),
            EdgeKind::Cut => ("#cc3333", r#" stroke-dasharray="5,4""#),
            EdgeKind::Route => ("#3366cc", r#" stroke-dasharray="7,4""#),
        };
        let _ = writeln!(
            s,
            r#"<path d="M {x1:.1} {y1:.1} C {x1:.1} {:.1}, {x2:.1} {:.1}, {x2:.1} {y2:.1}" fill="none" stroke="{color}" stroke-width="1.2"{dash} marker-end="url(#arrow)"/>"#,
            y1 + dy,
            y2 - dy
        );
        if kind == EdgeKind::Route {
            let _ = writeln!(
                s,
                r##"<text x="{:.1}" y="{:.1}" fill="#3366cc" font-size="10">route</text>"##,
                (x1 + x2) / 2.0 + 4.0,
                (y1 + y2) / 2.0
            );
        }
    }
    for (i, node) in v.nodes.iter().enumerate() {
        let (cx, cy) = center[i];
        let (w, h) = (widths[i], NODE_H);
        let (fill, stroke, dash, width) = match node.kind {
            NodeKind::Parameter => ("#a8d0f0", "#2b5d8a", "", 2.0),
            NodeKind::Frozen => ("#c8d4e0", "#5a6f84", r#" stroke-dasharray="4,3""#, 1.2),
            NodeKind::Input => ("#ffffff", "#555555", "", 1.2),
            NodeKind::Detached => ("#eeeeee", "#888888", r#" stroke-dasharray="2,2""#, 1.2),
            NodeKind::Op => ("#fff3c4", "#8a7a2b", "", 1.2),
            NodeKind::ConstOp => ("#f4f4ee", "#999988", "", 1.2),
            NodeKind::DetachOp => ("#f6c6c6", "#aa3333", "", 1.2),
            NodeKind::Router => ("#e6e6e6", "#777777", r#" stroke-dasharray="5,3""#, 1.2),
        };
        let style = format!(r#"fill="{fill}" stroke="{stroke}" stroke-width="{width}"{dash}"#);
        match node.kind {
            NodeKind::Op | NodeKind::ConstOp | NodeKind::Router => {
                let _ = writeln!(
                    s,
                    r#"<ellipse cx="{cx:.1}" cy="{cy:.1}" rx="{:.1}" ry="{:.1}" {style}/>"#,
                    w / 2.0,
                    h / 2.0
                );
            }
            NodeKind::DetachOp => {
                let (l, r, t, b, c) = (cx - w / 2.0, cx + w / 2.0, cy - h / 2.0, cy + h / 2.0, 10.0);
                let _ = writeln!(
                    s,
                    r#"<polygon points="{:.1},{t:.1} {:.1},{t:.1} {r:.1},{:.1} {r:.1},{:.1} {:.1},{b:.1} {:.1},{b:.1} {l:.1},{:.1} {l:.1},{:.1}" {style}/>"#,
                    l + c,
                    r - c,
                    t + c,
                    b - c,
                    r - c,
                    l + c,
                    b - c,
                    t + c
                );
            }
            _ => {
                let _ = writeln!(
                    s,
                    r#"<rect x="{:.1}" y="{:.1}" width="{w:.1}" height="{h:.1}" rx="4" {style}/>"#,
                    cx - w / 2.0,
                    cy - h / 2.0
                );
            }
        }
        let _ = writeln!(
            s,
            r##"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" fill="#111111">{}</text>"##,
            cy - 2.0,
            xml(&node.title)
        );
        let _ = writeln!(
            s,
            r##"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" fill="#555555" font-size="10">{}</text>"##,
            cy + 11.0,
            xml(&node.detail)
        );
    }
    s.push_str("</svg>\n");
    s
}
