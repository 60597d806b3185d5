//! Static mode trains the quick-start MLP exactly like eager mode: the same seed gives the
//! same parameters after the same steps (the traced graph recomputes the same kernels in
//! the same order).

use ember::autograd::{CachedLoss, Traced, Var};
use ember::mnist;
use ember::nn::{CrossEntropyOptions, Module, cross_entropy};
use ember::optim::{Adam, AdamConfig, Optimizer};
use ember::{Result, Tensor, manual_seed};
use std::sync::Arc;

fn params_after(traced: bool, steps: usize, batch: usize) -> Result<Vec<Vec<f32>>> {
    manual_seed(7);
    let model = Arc::new(mnist::mlp()?);
    let mut opt = Adam::new(model.parameters(), AdamConfig { lr: 1e-3, ..Default::default() })?;
    let m = model.clone();
    let traced_model = Traced::new(move |x: &Var| m.forward(x));
    let criterion = CachedLoss::new(|out: &Var, y: &Var| cross_entropy(out, y, CrossEntropyOptions::default()));
    for step in 0..steps {
        let x = Tensor::normal([batch, 784], 0.0, 1.0, ember::DType::F32)?;
        let y = Tensor::from_vec((0..batch).map(|i| ((i + step) % 10) as i64).collect(), [batch])?;
        if traced {
            let loss = criterion.forward(&traced_model.forward(&x)?, &y)?;
            opt.zero_grad();
            loss.backward()?;
            opt.step()?;
        } else {
            mnist::train_step(model.as_ref(), &mut opt, &x, &y)?;
        }
    }
    model.parameters().iter().map(|p| p.value().to_vec::<f32>()).collect()
}

#[test]
fn traced_and_eager_training_agree_exactly() -> Result<()> {
    let eager = params_after(false, 5, 8)?;
    let traced = params_after(true, 5, 8)?;
    assert_eq!(eager.len(), traced.len());
    for (i, (a, b)) in eager.iter().zip(&traced).enumerate() {
        assert!(a == b, "parameter {i} differs");
    }
    Ok(())
}
