//! Binary classification losses: on probabilities and on logits.

use super::Reduction;
use super::check::pointwise;
use ember_autograd::autocast::{self, policy};
use ember_autograd::{IntoVar, Var};
use ember_tensor::{Error, Result};

/// `ln(q)` clamped below at -100, as PyTorch's binary cross-entropy does, with a finite
/// gradient (0) where `q = 0` instead of the `0 * inf = NaN` that `log` would give.
fn clamped_log(q: &Var) -> Result<Var> {
    let zero = q.le_scalar(0.0);
    Ok(q.masked_fill(&zero, 1.0)?.log().masked_fill(&zero, -100.0)?.maximum_scalar(-100.0))
}

/// The binary cross-entropy of probabilities, PyTorch's `F.binary_cross_entropy`:
/// `-(y ln p + (1 - y) ln(1 - p))` with each logarithm clamped to `>= -100`, so that
/// saturated probabilities give a large finite loss. Every input value must lie in `[0, 1]`.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::{binary_cross_entropy, Reduction};
/// use ember_tensor::Tensor;
/// let p = Var::new(Tensor::from_vec(vec![0.5f64, 1.0], [2])?);
/// let y = Tensor::from_vec(vec![1.0f64, 0.0], [2])?;
/// let l = binary_cross_entropy(&p, &y, Reduction::None)?.value().to_vec::<f64>()?;
/// assert!((l[0] - 2f64.ln()).abs() < 1e-12 && l[1] == 100.0);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn binary_cross_entropy(input: &Var, target: impl IntoVar, reduction: Reduction) -> Result<Var> {
    const OP: &str = "binary_cross_entropy";
    let target = target.into_var();
    if let Some(r) = autocast::run_cast(&policy::BINARY_CROSS_ENTROPY, [Some(input), Some(&target)], |c| {
        binary_cross_entropy(c.or(0, input), c.or(1, &target), reduction)
    }) {
        return r;
    }
    pointwise(OP, input, &target)?;
    let values = input.value().to_vec_f64()?;
    if let Some((i, v)) = values.iter().enumerate().find(|(_, v)| !(0.0..=1.0).contains(*v)) {
        return Err(Error::invalid(
            OP,
            format!(
                "the input holds probabilities, which must lie in [0, 1]; element {i} is {v} (for logits use binary_cross_entropy_with_logits)"
            ),
        ));
    }
    let log_p = clamped_log(input)?;
    let log_not_p = clamped_log(&input.rsub_scalar(1.0))?;
    let loss = target.mul(&log_p)?.add(&target.rsub_scalar(1.0).mul(&log_not_p)?)?.neg();
    Ok(reduction.apply(loss))
}

/// The binary cross-entropy of logits, PyTorch's `F.binary_cross_entropy_with_logits`:
/// `-(y ln s(x) + (1 - y) ln(1 - s(x)))` for the sigmoid `s`, computed in the stable form
/// `max(x, 0) - x y + ln(1 + e^-|x|)`, finite for any logit.
///
/// `max(x, 0) + ln(1 + e^-|x|)` is written as `softplus(x)`: the same values, and its
/// gradient is exactly `sigmoid(x) - y` even at `x = 0`, where the kinks of `max` and `|x|`
/// would give `-y`.
pub fn binary_cross_entropy_with_logits(input: &Var, target: impl IntoVar, reduction: Reduction) -> Result<Var> {
    let target = target.into_var();
    if let Some(r) = autocast::run_cast(&policy::POINTWISE_LOSS, [Some(input), Some(&target)], |c| {
        binary_cross_entropy_with_logits(c.or(0, input), c.or(1, &target), reduction)
    }) {
        return r;
    }
    pointwise("binary_cross_entropy_with_logits", input, &target)?;
    // Above 20 softplus is x itself, within 2e-9: PyTorch's own threshold.
    let loss = input.softplus(1.0, 20.0).sub(&input.mul(&target)?)?;
    Ok(reduction.apply(loss))
}
