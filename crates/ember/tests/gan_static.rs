//! The static-mode GAN loop of docs/static_mode.md, on real MNIST images (`ember::gan`):
//! both networks traced once, the one traced discriminator fed real images (a tensor),
//! `fake.detach()` and `&fake`, one cached criterion, two Adam optimizers over disjoint
//! parameters.
//!
//! Checked at every step: a discriminator update leaves every generator parameter bitwise
//! unchanged and gives the generator no gradient (the detached input routes nowhere); a
//! generator update moves every generator parameter (the routed input carries the
//! gradient through). Checked over the run: the graphs are built once and re-run, the
//! discriminator learns to recognise real images within a few dozen steps, and the
//! generated images' mean image approaches the data's.

use ember::gan::{self, Gan, GanConfig, PIXELS};
use ember::nn::Module;
use ember::{DType, Result, Var, manual_seed};
use parking_lot::Mutex;

const STEPS: usize = 300;

/// Both tests replay the global generator from seed 0; run side by side, their draws
/// would interleave.
static SERIAL: Mutex<()> = Mutex::new(());

fn snapshot(params: &[Var]) -> Result<Vec<Vec<f32>>> {
    params.iter().map(|p| p.value().to_vec::<f32>()).collect()
}

#[test]
fn static_gan_routes_gradients_reuses_its_graphs_and_trains() -> Result<()> {
    let _serial = SERIAL.lock();
    manual_seed(0);
    let images = gan::load_images(concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/mnist"), 2048)?;
    let mut gan = Gan::new(GanConfig::default())?;
    let batch = gan.config().batch_size;
    let g_params = gan.generator().parameters();
    let d_params = gan.discriminator().parameters();
    let initial_distance = gan::mean_image_distance(&gan.sample(1000)?, &images)?;

    let mut real_losses = Vec::new();
    let mut d_router: Option<Var> = None;
    for step in 0..STEPS {
        // Cleared so that whatever the discriminator step leaves on the generator shows.
        gan.generator().zero_grad();
        let g_before = snapshot(&g_params)?;
        let d_before = snapshot(&d_params)?;
        let (real_loss, fake_loss) = gan.discriminator_step(&gan::batch(&images, step, batch)?)?;
        assert!(real_loss.is_finite() && fake_loss.is_finite(), "step {step}: {real_loss} {fake_loss}");
        real_losses.push(real_loss);
        assert!(snapshot(&g_params)? == g_before, "step {step}: a discriminator update changed the generator");
        assert!(g_params.iter().all(|p| p.grad().is_none()), "step {step}: fake.detach() let a gradient into G");
        assert!(snapshot(&d_params)? != d_before, "step {step}: the discriminator did not move");

        let router = gan.traced_discriminator().input_node(&[batch, PIXELS], DType::F32);
        let Some(router) = router else { panic!("step {step}: the discriminator's graph is missing") };
        assert!(router.route().is_none(), "the last input was detached: no route");
        match &d_router {
            None => d_router = Some(router.clone()),
            Some(first) => assert!(first.same_node(&router), "step {step}: the discriminator was re-traced"),
        }

        let g_loss = gan.generator_step()?;
        assert!(g_loss.is_finite(), "step {step}: generator loss {g_loss}");
        let Some(route) = router.route() else { panic!("step {step}: &fake was not routed") };
        assert_eq!(route.op_name(), "tanh", "the route is the generator's output");
        assert!(g_params.iter().all(|p| p.grad().is_some()), "step {step}: the routed gradient did not reach G");
        for (i, (after, before)) in snapshot(&g_params)?.iter().zip(&g_before).enumerate() {
            assert!(after != before, "step {step}: generator parameter {i} did not move");
        }
    }

    // One graph per network and one loss subgraph, re-run at every step.
    assert_eq!(gan.traced_generator().num_graphs(), 1);
    assert_eq!(gan.traced_discriminator().num_graphs(), 1);
    assert_eq!(gan.criterion().cached(), 1);

    // At chance the discriminator's loss on real images is ln 2; it learns fast.
    let early = real_losses[..50].iter().sum::<f64>() / 50.0;
    assert!(early < 0.5 * 2f64.ln(), "mean D loss on real images over the first 50 steps: {early:.3}");
    // The generator starts near grey noise; its mean image must move well toward MNIST's.
    let distance = gan::mean_image_distance(&gan.sample(1000)?, &images)?;
    assert!(
        distance < 0.5 * initial_distance,
        "mean-image distance {initial_distance:.2} -> {distance:.2} after {STEPS} steps"
    );
    Ok(())
}

/// The eager loop of `ember::gan::eager` (no tracing, `fake.detach()` on a freshly built
/// graph, a new loss node per call) with the MLP networks and the BCE loss takes the same
/// first steps as the static loop above, from the same seed: same losses, same weights.
#[test]
fn eager_and_static_modes_take_the_same_first_steps() -> Result<()> {
    let _serial = SERIAL.lock();
    use ember::gan::eager::{EagerGan, GanLoss};
    use ember::optim::AdamConfig;
    const FIRST: usize = 5;
    let images = gan::load_images(concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/mnist"), 512)?;
    let config = GanConfig::default();

    manual_seed(0);
    let mut traced = Gan::new(config)?;
    let mut static_losses = Vec::new();
    for step in 0..FIRST {
        let l = traced.step(&gan::batch(&images, step, config.batch_size)?)?;
        static_losses.push([l.d_real, l.d_fake, l.g]);
    }

    manual_seed(0);
    let g = gan::generator(config.latent, config.hidden)?;
    let d = gan::discriminator(config.hidden)?;
    let adam = AdamConfig { lr: config.lr, betas: config.betas, ..Default::default() };
    let mut eager = EagerGan::new(g, d, config.latent, config.batch_size, GanLoss::Bce, adam)?;
    for (step, expected) in static_losses.iter().enumerate() {
        let d = eager.discriminator_step(&gan::batch(&images, step, config.batch_size)?)?;
        let g = eager.generator_step()?;
        for (got, want) in [d.real, d.fake, g].iter().zip(expected) {
            assert!((got - want).abs() < 1e-6, "step {step}: eager loss {got} against static {want}");
        }
    }
    let pairs = [(eager.generator(), traced.generator()), (eager.discriminator(), traced.discriminator())];
    for (e, s) in pairs {
        for ((name, a), (_, b)) in e.named_parameters().iter().zip(s.named_parameters()) {
            let (a, b) = (a.value().to_vec::<f32>()?, b.value().to_vec::<f32>()?);
            let gap = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
            assert!(gap < 1e-5, "{name}: eager and static weights differ by {gap} after {FIRST} steps");
        }
    }
    Ok(())
}
