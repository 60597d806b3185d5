//! Draws the figures of `docs/static_mode.md` with ember's own SVG export: the GAN of
//! `ember::gan` run eagerly, and its traced graphs in the discriminator and the generator
//! steps.
//!
//! ```text
//! cargo run -p ember --example static_mode_figures -- [OUT_DIR (default docs/img)]
//! ```

use ember::autograd::save_svg;
use ember::gan::{Gan, GanConfig};
use ember::nn::{BCEWithLogitsLoss, Loss, Module};
use ember::{DType, Result, Tensor, Var};
use std::path::PathBuf;

fn main() -> Result<()> {
    let out = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "docs/img".into()));
    std::fs::create_dir_all(&out).map_err(|e| ember::Error::io(&out, e))?;
    ember::manual_seed(0);
    // Small sizes keep the shape labels short; the structure is the same at any size.
    let config = GanConfig { latent: 8, hidden: 16, batch_size: 4, ..GanConfig::default() };
    let gan = Gan::new(config)?;

    // Eager: every call builds new nodes. The discriminator step sees `fake.detach()` (a
    // dotted leaf, no edge back to the generator), the generator step `fake` itself, so the
    // discriminator's operations appear twice.
    let bce = BCEWithLogitsLoss::default();
    let noise = Var::new(Tensor::randn([config.batch_size, config.latent])?);
    noise.set_name("noise");
    let fake = gan.generator().forward(&noise)?;
    fake.set_name("fake");
    let labels = |value: f64, name: &str| -> Result<Var> {
        let v = Var::new(Tensor::full([config.batch_size, 1], value, DType::F32)?);
        v.set_name(name);
        Ok(v)
    };
    let d_loss = bce.forward(&gan.discriminator().forward(&fake.detach())?, &labels(0.0, "zeros")?)?;
    d_loss.set_name("D loss (fake)");
    let g_loss = bce.forward(&gan.discriminator().forward(&fake)?, &labels(1.0, "ones")?)?;
    g_loss.set_name("G loss");
    save_svg(out.join("eager_graph.svg"), &[&d_loss, &g_loss])?;

    // Static: one traced graph per network, re-run every step; what the router does with
    // the gradient depends on what it was last given.
    save_svg(out.join("static_gan_d_step.svg"), &[&gan.named_graph(true)?])?;
    save_svg(out.join("static_gan_graph.svg"), &[&gan.named_graph(false)?])?;
    println!("wrote eager_graph.svg, static_gan_d_step.svg and static_gan_graph.svg to {}", out.display());
    Ok(())
}
