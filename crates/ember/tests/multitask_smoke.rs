//! The multitask example's CI checks (`ember::multitask`): on MNIST batches, the shared
//! trunk's gradients from two backward passes of the weighted losses (the first with
//! `retain_graph = true`) and from one backward of their weighted sum agree to 1e-6, before
//! and during training, and a short training run teaches both the digit classifier and the
//! ink-mass regressor; with a head frozen (`Module::freeze`), that head's parameters stay
//! bit-identical while the trunk and the other head learn.

use ember::mnist::{self, Data};
use ember::multitask::{self, Head, MultiTask, Weights};
use ember::nn::Module;
use ember::optim::{Adam, AdamConfig};
use ember::{Result, Var, manual_seed};

fn data() -> Result<(Data, Data)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/mnist");
    Ok((mnist::load(dir, true)?.take(6_400)?, mnist::load(dir, false)?.take(2_000)?))
}

fn bits(params: &[Var]) -> Vec<u32> {
    params.iter().flat_map(|p| p.value().to_vec::<f32>().unwrap().into_iter().map(f32::to_bits)).collect()
}

#[test]
fn separate_and_summed_backward_agree_and_both_heads_learn() -> Result<()> {
    manual_seed(0);
    let (train, test) = data()?;
    let model = MultiTask::new()?;
    let weights = Weights { digit: 1.0, ink: 0.5 };
    let mut opt = Adam::new(model.parameters(), AdamConfig { lr: 1e-3, ..Default::default() })?;
    let loader = mnist::loader(&train, 64, 0)?;
    let before = multitask::evaluate(&model, &test)?;
    let mut worst = 0f64;
    for (step, batch) in loader.iter().enumerate() {
        let batch = batch?;
        let (x, y) = (&batch[0], &batch[1]);
        if step % 20 == 0 {
            let separate = multitask::shared_gradients_separately(&model, x, y, &weights)?;
            let summed = multitask::shared_gradients_summed(&model, x, y, &weights)?;
            assert_eq!(separate.len(), 4, "two linear layers' weights and biases are shared");
            // Both losses reach the trunk: neither pass alone gives the sum.
            let digit_only = {
                model.zero_grad();
                multitask::losses(&model, x, y)?.digit.backward()?;
                model.shared_parameters()[0].grad().map(|g| g.to_vec::<f32>()).transpose()?
            };
            assert!(digit_only != Some(summed[0].to_vec::<f32>()?), "step {step}: the ink head added nothing");
            for (a, b) in separate.iter().zip(&summed) {
                for (u, v) in a.to_vec::<f32>()?.iter().zip(b.to_vec::<f32>()?) {
                    worst = worst.max(f64::from((u - v).abs()));
                }
            }
        }
        let (d, i) = multitask::train_step(&model, &mut opt, x, y, &weights)?;
        assert!(d.is_finite() && i.is_finite(), "step {step}: losses {d} {i}");
    }
    assert!(worst < 1e-6, "separate vs summed shared gradients differ by {worst:e}");
    let after = multitask::evaluate(&model, &test)?;
    assert!(after.digit_accuracy >= 0.85, "digit accuracy {:.2}%", 100.0 * after.digit_accuracy);
    assert!(after.ink_r2 >= 0.8 && after.ink_r2 > before.ink_r2, "ink R² {} -> {}", before.ink_r2, after.ink_r2);
    Ok(())
}

#[test]
fn a_frozen_head_stays_bit_identical_while_the_rest_learns() -> Result<()> {
    let (train, test) = data()?;
    let train = train.take(1_920)?;
    for frozen in Head::ALL {
        manual_seed(0);
        let model = MultiTask::new()?;
        let other = Head::ALL.into_iter().find(|&h| h != frozen).unwrap();
        model.freeze_head(frozen)?;
        assert!(model.head(frozen).is_frozen() && !model.head(other).is_frozen());
        let frozen_before = bits(&model.head(frozen).parameters());
        let other_before = bits(&model.head(other).parameters());
        let trunk_before = bits(&model.shared_parameters());
        // Over every parameter: the optimizer itself must leave the frozen head alone.
        let mut opt = Adam::new(model.parameters(), AdamConfig { lr: 1e-3, weight_decay: 1e-2, ..Default::default() })?;
        let weights = Weights::default();
        for (step, batch) in mnist::loader(&train, 64, 0)?.iter().enumerate() {
            let batch = batch?;
            if step == 0 {
                // The frozen head's loss still reaches the trunk through it.
                let gap = multitask::shared_gradient_gap(&model, &batch[0], &batch[1], &weights)?;
                assert!(gap < 1e-6, "{frozen}: separate vs summed differ by {gap:e}");
            }
            multitask::train_step(&model, &mut opt, &batch[0], &batch[1], &weights)?;
            assert!(model.head(frozen).parameters().iter().all(|p| p.grad().is_none()), "{frozen}: a gradient");
        }
        assert_eq!(bits(&model.head(frozen).parameters()), frozen_before, "the frozen {frozen} head changed");
        assert_ne!(
            bits(&model.head(other).parameters()),
            other_before,
            "{frozen} frozen: the {other} head did not learn"
        );
        assert_ne!(bits(&model.shared_parameters()), trunk_before, "{frozen} frozen: the trunk did not learn");
        let eval = multitask::evaluate(&model, &test)?;
        // The trunk learns to serve even the frozen, randomly initialised head.
        assert!(eval.digit_accuracy > 0.5, "{frozen} frozen: digit accuracy {:.2}%", 100.0 * eval.digit_accuracy);
        assert!(eval.ink_r2 > 0.3, "{frozen} frozen: ink R² {}", eval.ink_r2);
    }
    Ok(())
}

#[test]
fn weights_and_head_names_parse() -> Result<()> {
    assert_eq!("1,0.5".parse::<Weights>()?, Weights { digit: 1.0, ink: 0.5 });
    assert_eq!(" 0 , 2 ".parse::<Weights>()?, Weights { digit: 0.0, ink: 2.0 });
    for bad in ["1", "1,2,3", "1,-1", "a,1", "1,inf", "1,NaN"] {
        assert!(bad.parse::<Weights>().is_err(), "{bad:?} parsed");
    }
    assert_eq!("ink".parse::<Head>()?, Head::Ink);
    assert_eq!("digit".parse::<Head>()?, Head::Digit);
    assert!("high".parse::<Head>().is_err());
    Ok(())
}

#[test]
fn ink_targets_are_the_standardized_mean_intensity() -> Result<()> {
    let (train, _) = data()?;
    let t = multitask::ink_targets(&train.images)?.to_vec::<f32>()?;
    assert_eq!(t.len(), train.len());
    // Raw intensities from the standardized pixels, averaged per image, by hand.
    let pixels = train.images.narrow(0, 0, 1)?.to_vec::<f32>()?;
    let ink = pixels.iter().map(|&p| f64::from(p) * mnist::STD + mnist::MEAN).sum::<f64>() / 784.0;
    assert!((f64::from(t[0]) - (ink - multitask::INK_MEAN) / multitask::INK_STD).abs() < 1e-4);
    // On these 6,400 training images: mean near 0 and variance near 1.
    let mean = t.iter().map(|&v| f64::from(v)).sum::<f64>() / t.len() as f64;
    let var = t.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / t.len() as f64;
    assert!(mean.abs() < 0.1 && (var - 1.0).abs() < 0.15, "mean {mean}, variance {var}");
    Ok(())
}
