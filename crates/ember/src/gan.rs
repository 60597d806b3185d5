//! A small GAN on MNIST trained in static mode (the loop of docs/static_mode.md), shared by
//! `examples/gan.rs`, the test `tests/gan_static.rs` and the figures of
//! `docs/static_mode.md`.
//!
//! The generator and the discriminator are each wrapped in a [`Traced`], so their graphs are
//! built on the first step and re-run afterwards. The one traced discriminator is fed three
//! kinds of input:
//!
//! | step | input | gradient |
//! |---|---|---|
//! | discriminator, real images | a `Tensor` | stops at the discriminator's input |
//! | discriminator, generated images | `fake.detach()` | stops: the generator is left alone |
//! | generator | `&fake` | routed back through the generator to its parameters |
//!
//! and one [`CachedLoss`] (binary cross-entropy on logits) serves all three, since they
//! share the discriminator's output node. Two Adam optimizers update disjoint parameter
//! sets.
//!
//! ```no_run
//! use ember::gan::{self, Gan, GanConfig};
//! ember::manual_seed(0);
//! let images = gan::load_images("data/mnist", 4096)?;
//! let mut gan = Gan::new(GanConfig::default())?;
//! for step in 0..500 {
//!     let losses = gan.step(&gan::batch(&images, step, gan.config().batch_size)?)?;
//!     if step % 100 == 0 {
//!         println!("{step}: D {:.3}  G {:.3}", losses.d_real + losses.d_fake, losses.g);
//!     }
//! }
//! let samples = gan.sample(256)?;
//! println!("distance of the mean images: {:.2}", gan::mean_image_distance(&samples, &images)?);
//! # Ok::<(), ember::Error>(())
//! ```

pub mod dcgan;
pub mod eager;

use crate::autograd::{CachedLoss, Traced, Var, no_grad};
use crate::data::{Mnist, Split};
use crate::nn::{BCEWithLogitsLoss, LeakyReLU, Linear, Loss, Module, ReLU, Sequential, Tanh};
use crate::optim::{Adam, AdamConfig, Optimizer};
use crate::tensor::{DType, Error, Result, Tensor};
use std::path::Path;
use std::sync::Arc;

/// Pixels per image: the generator's output and the discriminator's input width.
pub const PIXELS: usize = 784;

/// The sizes and optimizer settings of a [`Gan`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GanConfig {
    /// The width of the generator's noise input.
    pub latent: usize,
    /// The width of both networks' hidden layer.
    pub hidden: usize,
    /// Images per step, real and generated alike.
    pub batch_size: usize,
    /// Adam's learning rate, for both networks.
    pub lr: f64,
    /// Adam's betas, for both networks.
    pub betas: (f64, f64),
}

impl Default for GanConfig {
    /// Noise of 32, hidden layers of 128, batches of 64, and Adam with the betas of the DCGAN
    /// paper, `(0.5, 0.999)` (a short memory of the gradient suits a moving target).
    fn default() -> Self {
        GanConfig { latent: 32, hidden: 128, batch_size: 64, lr: 1e-3, betas: (0.5, 0.999) }
    }
}

/// The generator: `latent -> hidden` (ReLU) `-> 784` (tanh), images in `[-1, 1]`.
pub fn generator(latent: usize, hidden: usize) -> Result<Sequential> {
    Ok(Sequential::new().add(Linear::new(latent, hidden)?).add(ReLU).add(Linear::new(hidden, PIXELS)?).add(Tanh))
}

/// The discriminator: `784 -> hidden` (leaky ReLU, slope 0.2) `-> 1`, a logit per image.
pub fn discriminator(hidden: usize) -> Result<Sequential> {
    Ok(Sequential::new().add(Linear::new(PIXELS, hidden)?).add(LeakyReLU::new(0.2)).add(Linear::new(hidden, 1)?))
}

/// The first `n` MNIST training images from `dir` (all of them if there are fewer), as
/// `[n, 784]` `f32` scaled to `[-1, 1]`, the range of the generator's tanh.
pub fn load_images(dir: impl AsRef<Path>, n: usize) -> Result<Tensor> {
    let (images, _labels) = Mnist::load(dir, Split::Train)?;
    let n = n.min(images.shape()[0]);
    let images = images.narrow(0, 0, n)?.reshape([n, PIXELS])?.to_dtype(DType::F32);
    Ok(images.div_scalar(127.5).sub_scalar(1.0))
}

/// Batch number `step` of `images` in order, starting over after the last full batch (a
/// short last batch is skipped, so every batch has `batch_size` rows).
pub fn batch(images: &Tensor, step: usize, batch_size: usize) -> Result<Tensor> {
    let per_pass = images.shape().first().copied().unwrap_or(0) / batch_size.max(1);
    if batch_size == 0 || per_pass == 0 {
        return Err(Error::invalid(
            "gan::batch",
            format!("need at least one batch of {batch_size} images, got shape {:?}", images.shape()),
        ));
    }
    images.narrow(0, (step % per_pass) * batch_size, batch_size)
}

/// The Euclidean distance between the mean image of `a` and that of `b` (both `[N, 784]`):
/// a coarse but steady measure of whether generated images look like the data on average.
pub fn mean_image_distance(a: &Tensor, b: &Tensor) -> Result<f64> {
    let (ma, mb) = (a.mean(0, false)?.to_vec_f64()?, b.mean(0, false)?.to_vec_f64()?);
    if ma.len() != mb.len() {
        return Err(Error::shape("gan::mean_image_distance", format!("{:?} against {:?}", a.shape(), b.shape())));
    }
    Ok(ma.iter().zip(&mb).map(|(x, y)| (x - y) * (x - y)).sum::<f64>().sqrt())
}

/// The losses of one [`Gan::step`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepLosses {
    /// The discriminator's loss on real images (target 1).
    pub d_real: f64,
    /// The discriminator's loss on generated images (target 0).
    pub d_fake: f64,
    /// The generator's loss: the discriminator's on generated images against target 1.
    pub g: f64,
}

/// A generator and a discriminator, traced, with their criterion and optimizers.
pub struct Gan {
    config: GanConfig,
    generator: Arc<Sequential>,
    discriminator: Arc<Sequential>,
    traced_generator: Traced,
    traced_discriminator: Traced,
    criterion: CachedLoss,
    g_opt: Adam,
    d_opt: Adam,
    real_labels: Tensor,
    fake_labels: Tensor,
}

impl Gan {
    /// Fresh networks (initialised from ember's global generator), traced, with their
    /// optimizers. Parameters are named `G.*` and `D.*` so that graph drawings tell them
    /// apart.
    pub fn new(config: GanConfig) -> Result<Gan> {
        if config.latent == 0 || config.hidden == 0 || config.batch_size == 0 {
            return Err(Error::invalid("Gan", format!("sizes must be positive, got {config:?}")));
        }
        let generator = Arc::new(generator(config.latent, config.hidden)?);
        let discriminator = Arc::new(discriminator(config.hidden)?);
        for (prefix, model) in [("G", &generator), ("D", &discriminator)] {
            for (name, p) in model.named_parameters() {
                p.set_name(format!("{prefix}.{name}"));
            }
        }
        let adam = AdamConfig { lr: config.lr, betas: config.betas, ..Default::default() };
        let g_opt = Adam::new(generator.parameters(), adam)?;
        let d_opt = Adam::new(discriminator.parameters(), adam)?;
        let g = generator.clone();
        let d = discriminator.clone();
        let rows = [config.batch_size, 1];
        Ok(Gan {
            config,
            traced_generator: Traced::new(move |z: &Var| g.forward(z)),
            traced_discriminator: Traced::new(move |x: &Var| d.forward(x)),
            generator,
            discriminator,
            criterion: BCEWithLogitsLoss::default().cached(),
            g_opt,
            d_opt,
            real_labels: Tensor::ones(rows, DType::F32)?,
            fake_labels: Tensor::zeros(rows, DType::F32)?,
        })
    }

    /// The settings this GAN was made with.
    pub fn config(&self) -> &GanConfig {
        &self.config
    }

    /// The generator network (its parameters are the ones the traced graph reads).
    pub fn generator(&self) -> &Sequential {
        &self.generator
    }

    /// The discriminator network.
    pub fn discriminator(&self) -> &Sequential {
        &self.discriminator
    }

    /// The traced generator: one graph, for `[batch_size, latent]` noise.
    pub fn traced_generator(&self) -> &Traced {
        &self.traced_generator
    }

    /// The traced discriminator: one graph, for `[batch_size, 784]` images of any origin.
    pub fn traced_discriminator(&self) -> &Traced {
        &self.traced_discriminator
    }

    /// The cached criterion: one loss subgraph, on the discriminator's output.
    pub fn criterion(&self) -> &CachedLoss {
        &self.criterion
    }

    fn noise(&self) -> Result<Tensor> {
        Tensor::randn([self.config.batch_size, self.config.latent])
    }

    /// One discriminator update on `real` (`[batch_size, 784]`) and a batch of generated
    /// images; returns the losses on the real and on the generated images.
    ///
    /// The generated images go in as `fake.detach()`: the generator's parameters get no
    /// gradient from this step.
    pub fn discriminator_step(&mut self, real: &Tensor) -> Result<(f64, f64)> {
        let expected = [self.config.batch_size, PIXELS];
        if real.shape() != expected {
            return Err(Error::shape(
                "Gan::discriminator_step",
                format!("real images must be {expected:?}, got {:?}", real.shape()),
            ));
        }
        self.d_opt.zero_grad();
        let loss = self.criterion.forward(&self.traced_discriminator.forward(real)?, &self.real_labels)?;
        loss.backward()?;
        // Read now: the next call re-runs this same loss node with the other input.
        let real_loss = loss.item()?;
        let fake = self.traced_generator.forward(self.noise()?)?;
        let loss = self.criterion.forward(&self.traced_discriminator.forward(fake.detach())?, &self.fake_labels)?;
        loss.backward()?;
        let fake_loss = loss.item()?;
        self.d_opt.step()?;
        Ok((real_loss, fake_loss))
    }

    /// The generator's loss on fresh noise, with the gradient routed from the
    /// discriminator's input back to the generator; not yet differentiated.
    pub fn generator_loss(&self) -> Result<Var> {
        let fake = self.traced_generator.forward(self.noise()?)?;
        self.criterion.forward(&self.traced_discriminator.forward(&fake)?, &self.real_labels)
    }

    /// One generator update (the non-saturating loss: generated images against target 1);
    /// returns its loss. The discriminator's parameters receive gradients too, which its
    /// own next step clears before use.
    pub fn generator_step(&mut self) -> Result<f64> {
        self.g_opt.zero_grad();
        let loss = self.generator_loss()?;
        loss.backward()?;
        self.g_opt.step()?;
        loss.item()
    }

    /// A discriminator step on `real`, then a generator step.
    pub fn step(&mut self, real: &Tensor) -> Result<StepLosses> {
        let (d_real, d_fake) = self.discriminator_step(real)?;
        let g = self.generator_step()?;
        Ok(StepLosses { d_real, d_fake, g })
    }

    /// `n` generated images, `[n, 784]` in `[-1, 1]`, computed eagerly without recording
    /// (any `n`, without adding a graph to the traced generator).
    pub fn sample(&self, n: usize) -> Result<Tensor> {
        let z = Var::new(Tensor::randn([n, self.config.latent])?);
        Ok(no_grad(|| self.generator.forward(&z))?.value())
    }

    /// The discriminator's loss on generated images as the traced graph computes it, with
    /// its nodes named, for drawing. With `detached` it is the discriminator step's graph:
    /// the input router has no route and the generator is not part of it. Otherwise it is
    /// the generator step's: the router routes to the generator's output.
    pub fn named_graph(&self, detached: bool) -> Result<Var> {
        let noise = self.noise()?;
        let fake = self.traced_generator.forward(noise)?;
        fake.set_name("fake");
        let (out, labels) = if detached {
            (self.traced_discriminator.forward(fake.detach())?, &self.fake_labels)
        } else {
            (self.traced_discriminator.forward(&fake)?, &self.real_labels)
        };
        out.set_name("logits");
        let loss = self.criterion.forward(&out, labels)?;
        loss.set_name("loss");
        let dims = |width| [self.config.batch_size, width];
        for (traced, width, name) in
            [(&self.traced_generator, self.config.latent, "noise"), (&self.traced_discriminator, PIXELS, "images")]
        {
            if let Some(router) = traced.input_node(&dims(width), DType::F32) {
                router.set_name(name);
            }
        }
        Ok(loss)
    }
}
