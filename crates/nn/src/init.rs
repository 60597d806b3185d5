//! Weight initialisation, drawn from ember's global generator (so `manual_seed` makes it
//! reproducible) with PyTorch's formulas.

use ember_tensor::{DType, Error, Result, Tensor};

/// The fan-in of a weight of `shape`, as PyTorch computes it: the second extent times the
/// receptive field (the product of the extents after it); a 1-d shape counts its length.
pub fn fan_in(shape: &[usize]) -> usize {
    match shape {
        [] => 1,
        [n] => *n,
        // Saturating: a weight whose fan overflows cannot be allocated, and its allocation
        // is what refuses it, naming the layer.
        [_, inputs, field @ ..] => inputs.saturating_mul(field.iter().fold(1usize, |a, &d| a.saturating_mul(d))),
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

/// The fan-in and fan-out of a weight of `shape`, as PyTorch's
/// `_calculate_fan_in_and_fan_out` computes them: the second and first extents, each times
/// the receptive field (the extents after the second). Fewer than 2 dimensions is an error.
pub fn fans(shape: &[usize]) -> Result<(usize, usize)> {
    match shape {
        [out, inputs, field @ ..] => {
            let field = field.iter().fold(1usize, |a, &d| a.saturating_mul(d));
            Ok((inputs.saturating_mul(field), out.saturating_mul(field)))
        }
        _ => Err(Error::shape(
            "init::fans",
            format!("fan in and fan out need at least 2 dimensions, got shape {shape:?}"),
        )),
    }
}

/// PyTorch's `xavier_uniform_` (gain 1): `U(-b, b)` with `b = sqrt(6 / (fan_in + fan_out))`.
///
/// ```
/// use ember_nn::init::xavier_uniform;
/// use ember_tensor::DType;
/// let w = xavier_uniform(&[20, 4], DType::F32)?; // sqrt(6 / (4 + 20)) = 0.5
/// assert!(w.to_vec::<f32>()?.iter().all(|v| v.abs() <= 0.5));
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn xavier_uniform(shape: &[usize], dtype: DType) -> Result<Tensor> {
    let (fan_in, fan_out) = fans(shape)?;
    let total = fan_in.saturating_add(fan_out);
    let bound = if total == 0 { 0.0 } else { (6.0 / total as f64).sqrt() };
    uniform(shape, bound, dtype)
}

/// PyTorch's `xavier_normal_` (gain 1): `N(0, s^2)` with `s = sqrt(2 / (fan_in + fan_out))`.
pub fn xavier_normal(shape: &[usize], dtype: DType) -> Result<Tensor> {
    let (fan_in, fan_out) = fans(shape)?;
    let total = fan_in.saturating_add(fan_out);
    let std = if total == 0 { 0.0 } else { (2.0 / total as f64).sqrt() };
    Tensor::normal(shape, 0.0, std, dtype)
}
