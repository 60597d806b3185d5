//! An `ember-nn` model's forward under `inference_mode` (from the prelude) equals its
//! `no_grad` forward bit for bit, and gives an inference tensor.

use ember::nn::{BatchNorm1d, Linear, ReLU, Sequential};
use ember::prelude::*;

#[test]
fn model_forward_under_inference_mode_equals_no_grad() -> Result<()> {
    manual_seed(7);
    let model =
        Sequential::new().add(Linear::new(6, 16)?).add(BatchNorm1d::new(16)?).add(ReLU).add(Linear::new(16, 3)?);
    model.eval();
    let x = Var::new(Tensor::randn([5, 6])?);
    let expected = no_grad(|| model.forward(&x))?;
    let got = inference_mode(|| model.forward(&x))?;
    assert!(got.is_inference() && !expected.is_inference());
    assert!(!got.requires_grad());
    assert_eq!(got.value().to_vec::<f32>()?, expected.value().to_vec::<f32>()?);
    let guarded = {
        let _g = InferenceModeGuard::new();
        model.forward(&x)?
    };
    assert_eq!(guarded.value().to_vec::<f32>()?, expected.value().to_vec::<f32>()?);
    // The parameters stay trainable: a forward outside inference mode records again.
    assert!(model.forward(&x)?.requires_grad());
    Ok(())
}
