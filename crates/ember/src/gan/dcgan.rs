//! The DCGAN networks for 28x28 images (Radford et al.'s design scaled down to MNIST):
//! transposed convolutions up from the noise with batch norm and ReLU in the generator,
//! strided convolutions down with leaky ReLU in the discriminator, batch norm on every
//! discriminator layer but the first, no pooling and no hidden linear layers.
//!
//! Both take and give the flattened `[N, 784]` images of [`super::load_images`], so they
//! drop into the same training loops as the MLP networks of [`super`].

use crate::nn::{
    BatchNorm2d, Conv2d, Conv2dOptions, ConvTranspose2d, ConvTranspose2dOptions, Flatten, LeakyReLU, ReLU, Sequential,
    Tanh, Unflatten,
};
use crate::tensor::Result;

/// The DCGAN generator: noise `[N, latent]` viewed as `[N, latent, 1, 1]`, then
/// `ConvTranspose2d(latent, 2w, 7)` (7x7), `ConvTranspose2d(2w, w, 4, stride 2, padding 1)`
/// (14x14), each followed by `BatchNorm2d` and ReLU, and `ConvTranspose2d(w, 1, 4, stride 2,
/// padding 1)` (28x28) with tanh; flattened to `[N, 784]`. The convolutions before a batch
/// norm have no bias (the norm's shift replaces it), as in DCGAN.
pub fn generator(latent: usize, width: usize) -> Result<Sequential> {
    let up = |i, o| ConvTranspose2d::with_options(i, o, 4, ConvTranspose2dOptions::default().stride(2).padding(1));
    let up_no_bias = |i, o| {
        ConvTranspose2d::with_options(i, o, 4, ConvTranspose2dOptions::default().stride(2).padding(1).bias(false))
    };
    Ok(Sequential::new()
        .add(Unflatten::new(1, [latent as i64, 1, 1]))
        .add(ConvTranspose2d::with_options(latent, 2 * width, 7, ConvTranspose2dOptions::default().bias(false))?)
        .add(BatchNorm2d::new(2 * width)?)
        .add(ReLU)
        .add(up_no_bias(2 * width, width)?)
        .add(BatchNorm2d::new(width)?)
        .add(ReLU)
        .add(up(width, 1)?)
        .add(Tanh)
        .add(Flatten::new()))
}

/// The DCGAN discriminator: `[N, 784]` images viewed as `[N, 1, 28, 28]`, then
/// `Conv2d(1, w, 4, stride 2, padding 1)` (14x14) with leaky ReLU (slope 0.2),
/// `Conv2d(w, 2w, 4, stride 2, padding 1)` (7x7) with (when `batch_norm`) `BatchNorm2d` and
/// leaky ReLU, and `Conv2d(2w, 1, 7)` to one logit, `[N, 1]`.
///
/// WGAN-GP's critic must go without batch norm: its gradient penalty is taken per sample,
/// and batch norm makes each output depend on the whole batch.
pub fn discriminator(width: usize, batch_norm: bool) -> Result<Sequential> {
    let down = |i, o, bias| Conv2d::with_options(i, o, 4, Conv2dOptions::default().stride(2).padding(1).bias(bias));
    let mut d = Sequential::new()
        .add(Unflatten::new(1, [1, 28, 28]))
        .add(down(1, width, true)?)
        .add(LeakyReLU::new(0.2))
        .add(down(width, 2 * width, !batch_norm)?);
    if batch_norm {
        d = d.add(BatchNorm2d::new(2 * width)?);
    }
    Ok(d.add(LeakyReLU::new(0.2)).add(Conv2d::new(2 * width, 1, 7)?).add(Flatten::new()))
}
