//! Draws a small graph with every node and edge style (used for the static-mode docs).
//!
//! `cargo run -p ember-autograd --example graph_demo -- OUT_DIR`
use ember_autograd::{Traced, Var, save_dot, save_svg};
use ember_tensor::{DType, Result, Tensor};

fn main() -> Result<()> {
    let out = std::env::args().nth(1).unwrap_or_else(|| ".".into());
    let g = Var::param(Tensor::randn([16, 4])?);
    g.set_name("G.weight");
    let noise = Var::new(Tensor::randn([8, 16])?);
    noise.set_name("noise");
    let fake = noise.matmul(&g)?.tanh();
    fake.set_name("fake");
    let w = Var::param(Tensor::randn([4, 1])?);
    w.set_name("D.weight");
    let frozen = Var::param(Tensor::ones([1], DType::F32)?);
    frozen.set_name("D.scale");
    frozen.freeze()?;
    let w2 = w.clone();
    let f2 = frozen.clone();
    let disc = Traced::new(move |x: &Var| Ok(x.matmul(&w2)?.mul(&f2)?.sigmoid()));
    let d_fake = disc.forward(&fake)?;
    let target = Var::new(Tensor::ones([8, 1], DType::F32)?);
    target.set_name("labels");
    let loss = d_fake.sub(&target)?.square().mean_all().add(&fake.detach_node().abs().mean_all())?;
    loss.set_name("loss");
    save_dot(format!("{out}/graph_demo.dot"), &[&loss])?;
    save_svg(format!("{out}/graph_demo.svg"), &[&loss])?;
    Ok(())
}
