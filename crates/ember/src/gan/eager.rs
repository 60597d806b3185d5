//! A GAN trained in eager mode: any generator and discriminator (the MLPs of [`super`] or
//! the convolutional networks of [`super::dcgan`]), two Adam optimizers over their disjoint
//! parameters, and either the standard non-saturating loss or WGAN-GP.
//!
//! The discriminator (critic) step feeds it `fake.detach()`, so no gradient reaches the
//! generator; the generator step feeds it `&fake`, so the gradient flows through the
//! discriminator back into the generator. With [`GanLoss::Bce`] and the MLP networks, the
//! steps are the ones [`super::Gan`] runs in static mode, in the same order and with the
//! same random draws, so from the same seed both give the same first steps
//! (`tests/gan_static.rs`).
//!
//! With [`GanLoss::WganGp`] the critic's loss is `mean D(fake) - mean D(real) + lambda *
//! mean (|grad_x D(x_hat)| - 1)^2` on points `x_hat` drawn between real and generated
//! images (Gulrajani et al.). The penalty is a function of a gradient, so that gradient is
//! taken with [`grad`] and `create_graph = true`: its graph is recorded, and the critic's
//! backward differentiates through it to the critic's parameters (a second-order
//! gradient).

use super::PIXELS;
use crate::autograd::{Var, grad, no_grad};
use crate::nn::{BCEWithLogitsLoss, Loss, Module, Sequential};
use crate::optim::{Adam, AdamConfig, Optimizer};
use crate::tensor::{DType, Error, Result, Tensor};

/// How the two networks are scored.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum GanLoss {
    /// Binary cross-entropy on logits: the discriminator tells real (1) from generated (0),
    /// the generator makes the discriminator say 1 (the non-saturating loss).
    Bce,
    /// Wasserstein loss with a gradient penalty of weight `lambda` (10 in the paper): the
    /// critic scores real images high and generated ones low, the generator raises its
    /// images' scores.
    WganGp {
        /// The penalty's weight.
        lambda: f64,
    },
}

/// The losses of one discriminator (critic) step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CriticLosses {
    /// The loss on real images: BCE against 1, or `-mean D(real)` for WGAN-GP.
    pub real: f64,
    /// The loss on generated images: BCE against 0, or `mean D(fake)` for WGAN-GP.
    pub fake: f64,
    /// The gradient penalty before weighting (0 for BCE).
    pub penalty: f64,
}

/// A generator and a discriminator trained eagerly, with their optimizers.
pub struct EagerGan {
    generator: Sequential,
    discriminator: Sequential,
    g_opt: Adam,
    d_opt: Adam,
    loss: GanLoss,
    latent: usize,
    batch_size: usize,
}

impl EagerGan {
    /// Wraps the two networks (generator `[N, latent] -> [N, 784]`, discriminator
    /// `[N, 784] -> [N, 1]`) with one Adam optimizer each, both with `adam`.
    pub fn new(
        generator: Sequential,
        discriminator: Sequential,
        latent: usize,
        batch_size: usize,
        loss: GanLoss,
        adam: AdamConfig,
    ) -> Result<EagerGan> {
        if latent == 0 || batch_size == 0 {
            return Err(Error::invalid(
                "EagerGan",
                format!("latent {latent} and batch size {batch_size} must be positive"),
            ));
        }
        let g_opt = Adam::new(generator.parameters(), adam)?;
        let d_opt = Adam::new(discriminator.parameters(), adam)?;
        Ok(EagerGan { generator, discriminator, g_opt, d_opt, loss, latent, batch_size })
    }

    /// The generator.
    pub fn generator(&self) -> &Sequential {
        &self.generator
    }

    /// The discriminator (the critic for WGAN-GP).
    pub fn discriminator(&self) -> &Sequential {
        &self.discriminator
    }

    fn noise(&self) -> Result<Var> {
        Ok(Var::new(Tensor::randn([self.batch_size, self.latent])?))
    }

    fn bce(&self, logits: &Var, target: f64) -> Result<Var> {
        let labels = Tensor::full([self.batch_size, 1], target, DType::F32)?;
        BCEWithLogitsLoss::default().forward(logits, &Var::new(labels))
    }

    /// One discriminator update on `real` (`[batch_size, 784]`) and a batch of generated
    /// images, which go in as `fake.detach()`.
    pub fn discriminator_step(&mut self, real: &Tensor) -> Result<CriticLosses> {
        let expected = [self.batch_size, PIXELS];
        if real.shape() != expected {
            return Err(Error::shape(
                "EagerGan::discriminator_step",
                format!("real images must be {expected:?}, got {:?}", real.shape()),
            ));
        }
        self.d_opt.zero_grad();
        let real = Var::new(real.clone());
        let losses = match self.loss {
            GanLoss::Bce => {
                // Two backward calls, as in the static loop, so that both modes add the
                // gradients in the same order.
                let loss = self.bce(&self.discriminator.forward(&real)?, 1.0)?;
                loss.backward()?;
                let real_loss = loss.item()?;
                let fake = self.generator.forward(&self.noise()?)?;
                let loss = self.bce(&self.discriminator.forward(&fake.detach())?, 0.0)?;
                loss.backward()?;
                CriticLosses { real: real_loss, fake: loss.item()?, penalty: 0.0 }
            }
            GanLoss::WganGp { lambda } => {
                let fake = self.generator.forward(&self.noise()?)?.detach();
                let real_score = self.discriminator.forward(&real)?.mean_all().neg();
                let fake_score = self.discriminator.forward(&fake)?.mean_all();
                let penalty = self.gradient_penalty(&real, &fake)?;
                let loss = ((&real_score + &fake_score)? + penalty.mul_scalar(lambda))?;
                loss.backward()?;
                CriticLosses { real: real_score.item()?, fake: fake_score.item()?, penalty: penalty.item()? }
            }
        };
        self.d_opt.step()?;
        Ok(losses)
    }

    /// WGAN-GP's penalty `mean (|grad_x D(x_hat)|_2 - 1)^2` at random points between `real`
    /// and `fake`, recorded so that it can be differentiated again.
    pub fn gradient_penalty(&self, real: &Var, fake: &Var) -> Result<Var> {
        let n = self.batch_size;
        let eps = Tensor::rand([n, 1])?;
        let mix = ((real * &eps)? + (fake * &eps.rsub_scalar(1.0))?)?.detach();
        mix.requires_grad_(true)?;
        let score = self.discriminator.forward(&mix)?.sum_all();
        let Some(Some(g)) = grad(&[&score], &[&mix], &[], true, true)?.pop() else {
            return Err(Error::autograd("gradient_penalty: the critic's score does not depend on its input"));
        };
        // A small epsilon keeps the norm's derivative finite where the gradient vanishes.
        let norm = g.square().sum(1, false)?.add_scalar(1e-12).sqrt();
        Ok(norm.sub_scalar(1.0).square().mean_all())
    }

    /// The generator's loss on fresh noise (BCE against 1, or `-mean D(fake)`), with the
    /// gradient flowing through the discriminator; not yet differentiated.
    pub fn generator_loss(&self) -> Result<Var> {
        let fake = self.generator.forward(&self.noise()?)?;
        let score = self.discriminator.forward(&fake)?;
        match self.loss {
            GanLoss::Bce => self.bce(&score, 1.0),
            GanLoss::WganGp { .. } => Ok(score.mean_all().neg()),
        }
    }

    /// One generator update; returns its loss. The discriminator's parameters receive
    /// gradients too, which its own next step clears before use.
    pub fn generator_step(&mut self) -> Result<f64> {
        self.g_opt.zero_grad();
        let loss = self.generator_loss()?;
        loss.backward()?;
        self.g_opt.step()?;
        loss.item()
    }

    /// `n` generated images, `[n, 784]` in `[-1, 1]`, with the generator in eval mode (batch
    /// norm uses its running statistics) and no graph recorded.
    pub fn sample(&self, n: usize) -> Result<Tensor> {
        let z = Var::new(Tensor::randn([n, self.latent])?);
        self.generator.eval();
        let images = no_grad(|| self.generator.forward(&z));
        self.generator.train();
        Ok(images?.value())
    }
}
