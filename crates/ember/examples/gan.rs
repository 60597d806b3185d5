//! Trains a GAN on MNIST and shows what it draws: a PNG grid of generated digits every
//! `--image-every` steps and at the end, and the loss curves as SVG, under `--out`.
//!
//! ```text
//! cargo run --release --example gan -- [--arch mlp|dcgan] [--loss bce|wgan-gp] [--eager]
//!     [--steps N] [--images 10000] [--lr LR] [--batch-size 64] [--critic-steps N]
//!     [--every 250] [--image-every 1000] [--data data/mnist] [--out runs/gan] [--seed 0]
//!     [--graph gan.svg]
//! ```
//!
//! - `--arch mlp --loss bce` (the default) is the small GAN of `ember::gan` in static mode
//!   (docs/static_mode.md): both networks traced once, the discriminator fed real images,
//!   `fake.detach()` and `&fake`, one cached criterion. `--eager` runs the same networks
//!   and steps eagerly instead (`ember::gan::eager`); from the same seed the two modes take
//!   the same first steps (checked by `tests/gan_static.rs`).
//! - `--arch dcgan` trains the convolutional networks of `ember::gan::dcgan`
//!   (`ConvTranspose2d` with batch norm up, `Conv2d` with leaky ReLU down) eagerly, with
//!   `fake.detach()` in the discriminator step and two Adam optimizers.
//! - `--loss wgan-gp` trains a Wasserstein critic with a gradient penalty, whose gradient
//!   is taken with `create_graph` so that the critic's update differentiates through it;
//!   `--critic-steps` critic updates (default 5) precede each generator update.
//!
//! `--graph PATH` writes the traced graph of the static generator step (a `.dot` path gets
//! Graphviz DOT, anything else SVG).

mod common;

use clap::{Parser, ValueEnum};
use common::cli::Common;
use common::image::save_grid;
use common::plot::{Panel, Series, save_svg};
use ember::gan::eager::{EagerGan, GanLoss};
use ember::gan::{self, Gan, GanConfig, dcgan};
use ember::optim::AdamConfig;
use ember::{Result, Tensor};
use plotters::style::{BLUE, RED};
use std::path::PathBuf;
use std::time::Instant;

/// The networks.
#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum Arch {
    /// Fully connected: noise-128-784 and 784-128-1.
    Mlp,
    /// Convolutional (DCGAN): transposed convolutions with batch norm, strided convolutions.
    Dcgan,
}

/// The training objective.
#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum Objective {
    /// Binary cross-entropy (the non-saturating GAN loss).
    Bce,
    /// Wasserstein loss with a gradient penalty (weight 10).
    WganGp,
}

/// Train a GAN on MNIST; write generated digits as PNG and the loss curves as SVG.
#[derive(Parser)]
struct Args {
    /// The networks.
    #[arg(long, value_enum, default_value_t = Arch::Mlp)]
    arch: Arch,
    /// The loss.
    #[arg(long, value_enum, default_value_t = Objective::Bce)]
    loss: Objective,
    /// Train the MLP with BCE eagerly instead of in static mode (DCGAN and WGAN-GP are
    /// always eager).
    #[arg(long)]
    eager: bool,
    /// Generator steps (default 3000 for the MLP, 600 for DCGAN; a quarter of that with
    /// WGAN-GP, whose critic takes several steps per generator step).
    #[arg(long)]
    steps: Option<usize>,
    /// How many training images to cycle through.
    #[arg(long, default_value_t = 10_000)]
    images: usize,
    /// Adam's learning rate for both networks (default 1e-3 for the MLP, 2e-4 for DCGAN).
    #[arg(long)]
    lr: Option<f64>,
    /// Images per step.
    #[arg(long, default_value_t = GanConfig::default().batch_size)]
    batch_size: usize,
    /// Critic updates per generator update (default 1 with BCE, 5 with WGAN-GP).
    #[arg(long)]
    critic_steps: Option<usize>,
    /// Print the mean losses (and add a point to the curves) every this many steps.
    #[arg(long, default_value_t = 250)]
    every: usize,
    /// Write a grid of generated digits every this many steps (and at the end).
    #[arg(long, default_value_t = 1000)]
    image_every: usize,
    #[command(flatten)]
    common: Common,
    /// Also write the static generator step's traced graph here (.dot for DOT, else SVG).
    #[arg(long)]
    graph: Option<PathBuf>,
}

/// The GAN being trained: the traced one of `ember::gan` or an eager one.
enum Trainer {
    Static(Box<Gan>),
    Eager(Box<EagerGan>),
}

impl Trainer {
    /// One critic update: losses on real and generated images and the penalty.
    fn critic_step(&mut self, real: &Tensor) -> Result<(f64, f64, f64)> {
        match self {
            Trainer::Static(g) => g.discriminator_step(real).map(|(r, f)| (r, f, 0.0)),
            Trainer::Eager(g) => g.discriminator_step(real).map(|l| (l.real, l.fake, l.penalty)),
        }
    }

    fn generator_step(&mut self) -> Result<f64> {
        match self {
            Trainer::Static(g) => g.generator_step(),
            Trainer::Eager(g) => g.generator_step(),
        }
    }

    fn sample(&self, n: usize) -> Result<Tensor> {
        match self {
            Trainer::Static(g) => g.sample(n),
            Trainer::Eager(g) => g.sample(n),
        }
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    let out = args.common.start("gan")?;
    let wgan = args.loss == Objective::WganGp;
    let critic_steps = args.critic_steps.unwrap_or(if wgan { 5 } else { 1 }).max(1);
    let base_steps = if args.arch == Arch::Dcgan { 600 } else { 3000 };
    let steps = args.steps.unwrap_or(if wgan { base_steps / 4 } else { base_steps });
    let lr = args.lr.unwrap_or(if args.arch == Arch::Dcgan { 2e-4 } else { 1e-3 });
    let images = gan::load_images(&args.common.data, args.images)?;
    let config = GanConfig { lr, batch_size: args.batch_size, ..GanConfig::default() };
    // WGAN-GP's paper uses betas (0, 0.9); the standard GAN DCGAN's (0.5, 0.999).
    let betas = if wgan { (0.0, 0.9) } else { config.betas };
    let adam = AdamConfig { lr, betas, ..Default::default() };
    let objective = if wgan { GanLoss::WganGp { lambda: 10.0 } } else { GanLoss::Bce };
    let mut trainer = match (args.arch, objective, args.eager) {
        (Arch::Mlp, GanLoss::Bce, false) => {
            println!(
                "MLP GAN in static mode: generator {}-{}-784, discriminator 784-{}-1",
                config.latent, config.hidden, config.hidden
            );
            Trainer::Static(Box::new(Gan::new(config)?))
        }
        (Arch::Mlp, _, _) => {
            println!(
                "MLP GAN in eager mode: generator {}-{}-784, discriminator 784-{}-1",
                config.latent, config.hidden, config.hidden
            );
            let (g, d) = (gan::generator(config.latent, config.hidden)?, gan::discriminator(config.hidden)?);
            Trainer::Eager(Box::new(EagerGan::new(g, d, config.latent, config.batch_size, objective, adam)?))
        }
        (Arch::Dcgan, _, _) => {
            let latent = 64;
            println!(
                "DCGAN in eager mode: generator {latent}x1x1 -> 64x7x7 -> 32x14x14 -> 1x28x28, discriminator back down"
            );
            let (g, d) = (dcgan::generator(latent, 32)?, dcgan::discriminator(32, !wgan)?);
            Trainer::Eager(Box::new(EagerGan::new(g, d, latent, config.batch_size, objective, adam)?))
        }
    };
    println!(
        "{} images; loss {}; Adam lr {lr}, betas {betas:?}; batch {}; {critic_steps} critic step(s) per generator step",
        images.shape()[0],
        if wgan { "WGAN-GP (lambda 10)" } else { "BCE" },
        config.batch_size
    );
    let distance = |t: &Trainer| -> Result<f64> { gan::mean_image_distance(&t.sample(1000)?, &images) };
    println!("step      D loss   G loss   D(real) loss  D(fake) loss   penalty   mean-image distance");
    println!("{:>4}   {:>8} {:>8} {:>13} {:>13} {:>9} {:>21.3}", 0, "", "", "", "", "", distance(&trainer)?);

    let grid = |t: &Trainer, name: String| -> Result<()> {
        let path = out.join(name);
        save_grid(&path, &t.sample(64)?, 8, 8)?;
        println!("wrote {}", path.display());
        Ok(())
    };
    let started = Instant::now();
    let every = args.every.max(1);
    let (mut d_curve, mut g_curve) = (Vec::new(), Vec::new());
    let (mut real, mut fake, mut penalty, mut g) = (0.0, 0.0, 0.0, 0.0);
    let mut batch_index = 0;
    for step in 0..steps {
        for _ in 0..critic_steps {
            let (r, f, p) = trainer.critic_step(&gan::batch(&images, batch_index, config.batch_size)?)?;
            batch_index += 1;
            real += r / critic_steps as f64;
            fake += f / critic_steps as f64;
            penalty += p / critic_steps as f64;
        }
        g += trainer.generator_step()?;
        if (step + 1) % every == 0 || step + 1 == steps {
            let n = ((step % every) + 1) as f64;
            let d_loss = (real + fake) / n + if wgan { 10.0 * penalty / n } else { 0.0 };
            println!(
                "{:>4}   {:>8.4} {:>8.4} {:>13.4} {:>13.4} {:>9.4} {:>21.3}",
                step + 1,
                d_loss,
                g / n,
                real / n,
                fake / n,
                penalty / n,
                distance(&trainer)?
            );
            d_curve.push(((step + 1) as f64, d_loss));
            g_curve.push(((step + 1) as f64, g / n));
            (real, fake, penalty, g) = (0.0, 0.0, 0.0, 0.0);
        }
        if args.image_every > 0 && (step + 1) % args.image_every == 0 && step + 1 != steps {
            grid(&trainer, format!("samples_{:05}.png", step + 1))?;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!("{steps} steps in {secs:.1} s ({:.1} ms/step)", 1e3 * secs / steps.max(1) as f64);
    grid(&trainer, "samples.png".into())?;
    let curves = out.join("gan_losses.svg");
    let title = if wgan { "critic and generator losses (WGAN-GP)" } else { "discriminator and generator losses" };
    save_svg(
        &curves,
        &[Panel::new(
            title,
            "generator step",
            "loss",
            vec![Series::line("D", d_curve, BLUE), Series::line("G", g_curve, RED)],
        )],
    )?;
    println!("wrote {}", curves.display());

    if let (Some(path), Trainer::Static(gan)) = (&args.graph, &trainer) {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| ember::Error::io(dir, e))?;
        }
        let loss = gan.named_graph(false)?;
        if path.extension().is_some_and(|e| e == "dot") {
            ember::autograd::save_dot(path, &[&loss])?;
        } else {
            ember::autograd::save_svg(path, &[&loss])?;
        }
        println!(
            "wrote {} and the static-mode graph counts: generator {}, discriminator {}, criterion {}",
            path.display(),
            gan.traced_generator().num_graphs(),
            gan.traced_discriminator().num_graphs(),
            gan.criterion().cached()
        );
    }
    Ok(())
}
