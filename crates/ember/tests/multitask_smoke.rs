//! The multitask example's CI check (`ember::multitask`): on MNIST batches, the shared
//! trunk's gradients from two backward passes (the first with `retain_graph = true`) and
//! from one backward of the summed loss agree to 1e-6, before and during training; and a
//! short training run teaches both heads.

use ember::mnist;
use ember::multitask::{self, MultiTask};
use ember::optim::{Adam, AdamConfig};
use ember::{Result, manual_seed};

#[test]
fn separate_and_summed_backward_agree_and_both_heads_learn() -> Result<()> {
    manual_seed(0);
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/mnist");
    let train = mnist::load(data, true)?.take(6_400)?;
    let test = mnist::load(data, false)?.take(2_000)?;
    let model = MultiTask::new()?;
    let mut opt = Adam::new(model.parameters(), AdamConfig { lr: 1e-3, ..Default::default() })?;
    let loader = mnist::loader(&train, 64, 0)?;
    let mut worst = 0f64;
    for (step, batch) in loader.iter().enumerate() {
        let batch = batch?;
        let (x, y) = (&batch[0], &batch[1]);
        if step % 20 == 0 {
            let separate = multitask::shared_gradients_separately(&model, x, y)?;
            let summed = multitask::shared_gradients_summed(&model, x, y)?;
            assert_eq!(separate.len(), 4, "two linear layers' weights and biases are shared");
            // Both losses reach the trunk: neither pass alone gives the sum.
            let digit_only = {
                model.zero_grad();
                multitask::losses(&model, x, y)?.digit.backward()?;
                model.shared_parameters()[0].grad().map(|g| g.to_vec::<f32>()).transpose()?
            };
            assert!(digit_only != Some(summed[0].to_vec::<f32>()?), "step {step}: the >= 5 head added nothing");
            for (a, b) in separate.iter().zip(&summed) {
                for (u, v) in a.to_vec::<f32>()?.iter().zip(b.to_vec::<f32>()?) {
                    worst = worst.max(f64::from((u - v).abs()));
                }
            }
        }
        let (d, h) = multitask::train_step(&model, &mut opt, x, y)?;
        assert!(d.is_finite() && h.is_finite(), "step {step}: losses {d} {h}");
    }
    assert!(worst < 1e-6, "separate vs summed shared gradients differ by {worst:e}");
    let acc = multitask::evaluate(&model, &test)?;
    assert!(acc.digit >= 0.85, "digit accuracy {:.2}%", 100.0 * acc.digit);
    assert!(acc.high >= 0.85, "digit >= 5 accuracy {:.2}%", 100.0 * acc.high);
    Ok(())
}
