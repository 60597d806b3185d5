//! Weight initialisation, drawn from ember's global generator (so `manual_seed` makes it
//! reproducible) with PyTorch's formulas.

use ember_tensor::{DType, Error, Result, Tensor};

/// The fan-in of a weight of `shape`, as PyTorch computes it: the second extent times the
/// receptive field (the product of the extents after it); a 1-d shape counts its length.
pub fn fan_in(shape: &[usize]) -> usize {
    match shape {
        [] => 1,
        [n] => *n,
        [_, inputs, field @ ..] => inputs * field.iter().product::<usize>(),
    }
}

/// PyTorch's `kaiming_uniform_` with fan-in mode and the leaky-ReLU gain:
/// `U(-b, b)` with `b = sqrt(6 / ((1 + a^2) fan_in))`. With `a = sqrt(5)` (what
/// `nn.Linear` uses) the bound is `1 / sqrt(fan_in)`. An empty weight gets zeros.
///
/// ```
/// use ember_nn::init::kaiming_uniform;
/// use ember_tensor::DType;
/// let w = kaiming_uniform(&[16, 4], 5f64.sqrt(), DType::F32)?;
/// assert!(w.to_vec::<f32>()?.iter().all(|v| v.abs() <= 0.5));
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn kaiming_uniform(shape: &[usize], a: f64, dtype: DType) -> Result<Tensor> {
    let fan = fan_in(shape);
    let bound = if fan == 0 { 0.0 } else { (6.0 / ((1.0 + a * a) * fan as f64)).sqrt() };
    uniform(shape, bound, dtype)
}

/// `U(-bound, bound)` of `shape` and float `dtype`.
pub fn uniform(shape: &[usize], bound: f64, dtype: DType) -> Result<Tensor> {
    if !bound.is_finite() || bound < 0.0 {
        return Err(Error::invalid("init::uniform", format!("the bound must be finite and >= 0, got {bound}")));
    }
    Tensor::uniform(shape, -bound, bound, dtype)
}
