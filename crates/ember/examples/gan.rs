//! Trains the small MNIST GAN of `ember::gan` in static mode (docs/static_mode.md): both
//! networks traced once, the discriminator fed real images, `fake.detach()` and `&fake`,
//! one cached criterion. Prints the losses and how far the generated images' mean is from
//! the data's.
//!
//! ```text
//! cargo run --release --example gan -- [--steps 3000] [--images 10000] [--lr 1e-3]
//!     [--batch-size 64] [--data data/mnist] [--seed 0] [--every 250] [--graph gan.svg]
//! ```
//!
//! `--graph PATH` writes the traced graph of the generator step (a `.dot` path gets
//! Graphviz DOT, anything else SVG).

use clap::Parser;
use ember::Result;
use ember::gan::{self, Gan, GanConfig};
use std::path::PathBuf;
use std::time::Instant;

/// Train a small GAN on MNIST with traced networks.
#[derive(Parser)]
struct Args {
    /// Discriminator-then-generator steps.
    #[arg(long, default_value_t = 3000)]
    steps: usize,
    /// How many training images to cycle through.
    #[arg(long, default_value_t = 10_000)]
    images: usize,
    /// Adam's learning rate, for both networks.
    #[arg(long, default_value_t = GanConfig::default().lr)]
    lr: f64,
    /// Images per step.
    #[arg(long, default_value_t = GanConfig::default().batch_size)]
    batch_size: usize,
    /// The directory with the MNIST IDX files.
    #[arg(long, default_value = "data/mnist")]
    data: PathBuf,
    /// Seed of the global generator (initial weights and noise).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Print the mean losses every this many steps.
    #[arg(long, default_value_t = 250)]
    every: usize,
    /// Also write the generator step's traced graph here (.dot for DOT, else SVG).
    #[arg(long)]
    graph: Option<PathBuf>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    ember::manual_seed(args.seed);
    let images = gan::load_images(&args.data, args.images)?;
    let config = GanConfig { lr: args.lr, batch_size: args.batch_size, ..GanConfig::default() };
    let mut gan = Gan::new(config)?;
    println!(
        "{} images; generator {}-{}-784, discriminator 784-{}-1; Adam lr {}, betas {:?}; batch {}",
        images.shape()[0],
        config.latent,
        config.hidden,
        config.hidden,
        config.lr,
        config.betas,
        config.batch_size
    );
    let distance = |gan: &Gan| -> Result<f64> { gan::mean_image_distance(&gan.sample(1000)?, &images) };
    println!("step      D loss   G loss   D(real) loss  D(fake) loss   mean-image distance");
    println!("{:>4}   {:>8} {:>8} {:>13} {:>13} {:>21.3}", 0, "", "", "", "", distance(&gan)?);

    let started = Instant::now();
    let every = args.every.max(1);
    let (mut real, mut fake, mut g) = (0.0, 0.0, 0.0);
    for step in 0..args.steps {
        let losses = gan.step(&gan::batch(&images, step, config.batch_size)?)?;
        real += losses.d_real;
        fake += losses.d_fake;
        g += losses.g;
        if (step + 1) % every == 0 || step + 1 == args.steps {
            let n = ((step % every) + 1) as f64;
            println!(
                "{:>4}   {:>8.4} {:>8.4} {:>13.4} {:>13.4} {:>21.3}",
                step + 1,
                (real + fake) / n,
                g / n,
                real / n,
                fake / n,
                distance(&gan)?
            );
            (real, fake, g) = (0.0, 0.0, 0.0);
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{} steps in {secs:.1} s ({:.1} ms/step); graphs built: generator {}, discriminator {}, criterion {}",
        args.steps,
        1e3 * secs / args.steps.max(1) as f64,
        gan.traced_generator().num_graphs(),
        gan.traced_discriminator().num_graphs(),
        gan.criterion().cached()
    );

    if let Some(path) = &args.graph {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| ember::Error::io(dir, e))?;
        }
        let loss = gan.named_graph(false)?;
        if path.extension().is_some_and(|e| e == "dot") {
            ember::autograd::save_dot(path, &[&loss])?;
        } else {
            ember::autograd::save_svg(path, &[&loss])?;
        }
        println!("wrote {}", path.display());
    }
    Ok(())
}
