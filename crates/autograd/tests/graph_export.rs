//! DOT and SVG export: every node kind and edge kind gets its own style, labels carry names
//! and shapes, and the SVG is a self-contained document.

use ember_autograd::{Traced, Var, save_svg, to_dot, to_svg};
use ember_tensor::{DType, Result, Tensor};

fn sample() -> Result<Var> {
    let g = Var::param(Tensor::ones([3, 2], DType::F32)?);
    g.set_name("G.weight");
    let noise = Var::new(Tensor::ones([4, 3], DType::F32)?);
    let fake = noise.matmul(&g)?;
    let w = Var::param(Tensor::ones([2, 1], DType::F32)?);
    let frozen = Var::param(Tensor::ones([1], DType::F32)?);
    frozen.freeze()?;
    let (w2, f2) = (w.clone(), frozen.clone());
    let disc = Traced::new(move |x: &Var| x.matmul(&w2)?.mul(&f2));
    let d = disc.forward(&fake)?;
    d.sum_all().add(&fake.detach_node().sum_all())?.add(&fake.detach().sum_all())
}

#[test]
fn dot_styles_every_kind() -> Result<()> {
    let loss = sample()?;
    let dot = to_dot(&[&loss]);
    assert!(dot.starts_with("digraph ember {") && dot.trim_end().ends_with('}'));
    assert!(dot.contains("G.weight\\n[3, 2]"), "{dot}");
    for style in [
        "fillcolor=\"#a8d0f0\"",                          // parameter
        "style=\"filled,dashed\", fillcolor=\"#c8d4e0\"", // frozen parameter
        "style=\"filled,dashed\", fillcolor=\"#e6e6e6\"", // router
        "shape=octagon",                                  // detach_node
        "style=\"filled,dotted\"",                        // detached leaf
        "label=\"route\"",                                // routed edge
        "color=\"#cc3333\", style=dashed",                // cut edge
        "color=\"#aaaaaa\", style=dashed",                // edge without gradient
    ] {
        assert!(dot.contains(style), "missing {style} in\n{dot}");
    }
    Ok(())
}

#[test]
fn svg_is_a_standalone_document() -> Result<()> {
    let loss = sample()?;
    let svg = to_svg(&[&loss]);
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\"") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains(">G.weight<") && svg.contains(">router<") && svg.contains("stroke-dasharray"));
    let n_nodes = svg.matches("<rect x=").count() + svg.matches("<ellipse").count() + svg.matches("<polygon").count();
    assert!(n_nodes >= 12, "{n_nodes} nodes drawn");
    let dir = std::env::temp_dir().join(format!("ember-svg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| ember_tensor::Error::io(&dir, e))?;
    let path = dir.join("g.svg");
    save_svg(&path, &[&loss])?;
    assert_eq!(std::fs::read_to_string(&path).map_err(|e| ember_tensor::Error::io(&path, e))?, svg);
    assert!(save_svg(dir.join("missing/dir/g.svg"), &[&loss]).is_err());
    Ok(())
}

/// Export scales with the graph: a 20,000-node chain and 2,000 parallel branches are laid
/// out (the layout used to compare every node against every edge, which never finished on
/// graphs of this size).
#[test]
fn large_graphs_are_drawn() -> Result<()> {
    let x = Var::param(Tensor::ones([1], DType::F32)?);
    let mut y = x.clone();
    for _ in 0..20_000 {
        y = y.mul_scalar(1.0);
    }
    let svg = to_svg(&[&y]);
    assert_eq!(svg.matches("<ellipse").count(), 20_000);

    let branches: Vec<Var> = (0..2_000).map(|_| x.mul_scalar(2.0)).collect();
    let refs: Vec<&Var> = branches.iter().collect();
    let total = Var::cat(&refs, 0)?.sum_all();
    let svg = to_svg(&[&total]);
    assert_eq!(svg.matches("<ellipse").count(), 2_002);
    Ok(())
}
