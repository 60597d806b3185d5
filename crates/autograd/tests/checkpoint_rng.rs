//! A checkpointed segment that draws random numbers (a dropout mask, say) draws the same
//! ones when backward recomputes it, and leaves the generator's sequence undisturbed.
//! Alone in its file: the generator is process-wide, and other tests would draw from it.

use ember_autograd::Var;
use ember_tensor::{DType, Result, Tensor};

#[test]
fn random_segments_replay_the_generator() -> Result<()> {
    // A dropout-like mask drawn inside the segment is drawn again, identically, in backward.
    let x = Var::param(Tensor::ones([64], DType::F64)?);
    let _rng = ember_testing::gradcheck::seed_guard(9);
    let y = x.checkpoint(|h| {
        let mask = Tensor::rand([64])?.to_dtype(DType::F64);
        h.mul(&Var::new(mask))
    })?;
    let mask = y.value().to_vec::<f64>()?;
    let after_forward = Tensor::rand([1])?.to_vec::<f32>()?;
    y.sum_all().backward()?;
    // The gradient is the forward's mask, and the generator's own sequence is undisturbed.
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, mask);
    ember_tensor::manual_seed(9);
    Tensor::rand([64])?;
    assert_eq!(Tensor::rand([1])?.to_vec::<f32>()?, after_forward);
    Ok(())
}
