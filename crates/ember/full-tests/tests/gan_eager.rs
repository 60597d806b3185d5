//! The eager GAN of `ember::gan::eager` with the DCGAN networks and with WGAN-GP: the
//! shapes line up, the discriminator step leaves the generator alone (`fake.detach()`),
//! and the gradient penalty, taken with `create_graph`, reaches the critic's parameters
//! through a second-order gradient.

use ember::gan::eager::{EagerGan, GanLoss};
use ember::gan::{self, PIXELS, dcgan};
use ember::nn::Module;
use ember::optim::AdamConfig;
use ember::{Result, Tensor, Var};
use ember_testing::gradcheck::seed_guard;

fn snapshot(params: &[Var]) -> Result<Vec<Vec<f32>>> {
    params.iter().map(|p| p.value().to_vec::<f32>()).collect()
}

#[test]
fn dcgan_networks_map_noise_to_images_to_logits() -> Result<()> {
    let _rng = seed_guard(0);
    let g = dcgan::generator(16, 8)?;
    let d = dcgan::discriminator(8, true)?;
    let images = g.forward(&Var::new(Tensor::randn([3, 16])?))?;
    assert_eq!(images.shape().dims(), &[3, PIXELS]);
    assert!(images.value().to_vec::<f32>()?.iter().all(|v| v.abs() <= 1.0), "tanh range");
    assert_eq!(d.forward(&images)?.shape().dims(), &[3, 1]);
    Ok(())
}

#[test]
fn dcgan_and_wgan_gp_steps_route_gradients_as_designed() -> Result<()> {
    let _rng = seed_guard(1);
    let images = gan::load_images(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../data/mnist"), 64)?;
    let adam = AdamConfig { lr: 2e-4, betas: (0.0, 0.9), ..Default::default() };
    for loss in [GanLoss::Bce, GanLoss::WganGp { lambda: 10.0 }] {
        let batch_norm = loss == GanLoss::Bce;
        let (g, d) = (dcgan::generator(16, 8)?, dcgan::discriminator(8, batch_norm)?);
        let mut gan = EagerGan::new(g, d, 16, 16, loss, adam)?;
        let g_params = gan.generator().parameters();
        let d_params = gan.discriminator().parameters();
        let (g_before, d_before) = (snapshot(&g_params)?, snapshot(&d_params)?);
        let l = gan.discriminator_step(&gan::batch(&images, 0, 16)?)?;
        assert!(l.real.is_finite() && l.fake.is_finite() && l.penalty.is_finite(), "{loss:?}: {l:?}");
        assert!(snapshot(&g_params)? == g_before, "{loss:?}: the critic step moved the generator");
        assert!(g_params.iter().all(|p| p.grad().is_none()), "{loss:?}: fake.detach() let a gradient into G");
        assert!(snapshot(&d_params)? != d_before, "{loss:?}: the critic did not move");
        let g_loss = gan.generator_step()?;
        assert!(g_loss.is_finite());
        assert!(snapshot(&g_params)? != g_before, "{loss:?}: the generator did not move");
    }
    Ok(())
}

#[test]
fn gradient_penalty_is_differentiable_to_the_critic() -> Result<()> {
    let _rng = seed_guard(2);
    let (g, d) = (gan::generator(8, 16)?, gan::discriminator(16)?);
    let gan = EagerGan::new(g, d, 8, 4, GanLoss::WganGp { lambda: 10.0 }, AdamConfig::default())?;
    let real = Var::new(Tensor::rand([4, PIXELS])?);
    let fake = Var::new(Tensor::rand([4, PIXELS])?);
    let penalty = gan.gradient_penalty(&real, &fake)?;
    assert!(penalty.item()? > 0.0);
    penalty.backward()?;
    // The penalty depends on the critic's weights only through the input gradient, so
    // these gradients exist only because that gradient's graph was recorded.
    let first = &gan.discriminator().parameters()[0];
    let grad = first.grad().map(|g| g.to_vec::<f32>()).transpose()?;
    assert!(grad.is_some_and(|g| g.iter().any(|v| *v != 0.0)), "no second-order gradient reached the critic");
    assert!(gan.generator().parameters().iter().all(|p| p.grad().is_none()));
    Ok(())
}
