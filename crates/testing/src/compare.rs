//! Comparing ember's values with a fixture's.

use crate::fixture::FixtureTensor;
use ember_tensor::Tensor;

/// How far a value may be from the expected one: `|actual - expected| <= atol + rtol *
/// |expected|`, as `torch.allclose` has it. A NaN matches only a NaN (PyTorch's fixtures
/// hold NaN where PyTorch computed one).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    /// The absolute part.
    pub atol: f64,
    /// The part relative to the expected value.
    pub rtol: f64,
}

impl Tolerance {
    /// `atol + rtol * |expected|`.
    pub const fn new(atol: f64, rtol: f64) -> Tolerance {
        Tolerance { atol, rtol }
    }

    /// How far `actual` is past what this tolerance allows around `expected`: above zero
    /// fails. `f64::INFINITY` where only one is NaN or they are unequal and one is infinite.
    pub fn excess(&self, actual: f64, expected: f64) -> f64 {
        if actual.is_nan() || expected.is_nan() {
            return if actual.is_nan() && expected.is_nan() { f64::NEG_INFINITY } else { f64::INFINITY };
        }
        if actual == expected {
            return f64::NEG_INFINITY;
        }
        if actual.is_infinite() || expected.is_infinite() {
            return f64::INFINITY;
        }
        (actual - expected).abs() - (self.atol + self.rtol * expected.abs())
    }

    /// Whether `actual` is close enough to `expected`.
    pub fn allows(&self, actual: f64, expected: f64) -> bool {
        self.excess(actual, expected) <= 0.0
    }
}

/// `actual`'s values as f64 when its dtype and shape are the fixture's; otherwise what
/// differs, in words.
pub fn values_like(actual: &Tensor, expected: &FixtureTensor) -> Result<Vec<f64>, String> {
    if actual.dtype().name() != expected.dtype {
        return Err(format!("dtype {} in ember, {} in PyTorch", actual.dtype(), expected.dtype));
    }
    if actual.shape() != expected.shape.as_slice() {
        return Err(format!("shape {:?} in ember, {:?} in PyTorch", actual.shape(), expected.shape));
    }
    actual.to_vec_f64().map_err(|e| format!("cannot read ember's value: {e}"))
}

/// What differs between `actual` and the fixture's `expected` (dtype, shape, or values
/// beyond `tol`: how many, and the worst one), or `None` when they match.
///
/// ```
/// use ember_testing::{FixtureTensor, Tolerance, tensor_mismatch};
/// let expected = FixtureTensor { dtype: "f64".into(), shape: vec![2], data: vec![1.0, 2.0] };
/// let tol = Tolerance::new(1e-5, 1e-5);
/// let close = ember_tensor::Tensor::from_vec(vec![1.0, 2.0 + 1e-9], [2])?;
/// assert_eq!(tensor_mismatch(&close, &expected, tol), None);
/// let off = ember_tensor::Tensor::from_vec(vec![1.0, 2.1], [2])?;
/// assert!(tensor_mismatch(&off, &expected, tol).unwrap().contains("flat index 1"));
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn tensor_mismatch(actual: &Tensor, expected: &FixtureTensor, tol: Tolerance) -> Option<String> {
    let values = match values_like(actual, expected) {
        Ok(v) => v,
        Err(e) => return Some(e),
    };
    let mut bad = 0;
    let mut worst: Option<(usize, f64)> = None;
    for (i, (&a, &e)) in values.iter().zip(&expected.data).enumerate() {
        let excess = tol.excess(a, e);
        if excess > 0.0 {
            bad += 1;
            if worst.is_none_or(|(_, w)| excess > w) {
                worst = Some((i, excess));
            }
        }
    }
    let (i, _) = worst?;
    Some(format!(
        "{bad} of {} elements differ beyond {:e} + {:e}|expected|; worst at flat index {i}: ember {}, PyTorch {} \
         (|diff| {:e})",
        values.len(),
        tol.atol,
        tol.rtol,
        values[i],
        expected.data[i],
        (values[i] - expected.data[i]).abs()
    ))
}

/// [`tensor_mismatch`] for a value that may be absent, such as a gradient (`null` in the
/// fixture where PyTorch's `.grad` is `None`).
pub fn optional_mismatch(actual: Option<&Tensor>, expected: Option<&FixtureTensor>, tol: Tolerance) -> Option<String> {
    match (actual, expected) {
        (None, None) => None,
        (Some(a), None) => Some(format!("PyTorch has none, ember has one of shape {:?}", a.shape())),
        (None, Some(e)) => Some(format!("ember has none, PyTorch has one of shape {:?}", e.shape)),
        (Some(a), Some(e)) => tensor_mismatch(a, e, tol),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f64s(data: &[f64], shape: &[usize]) -> Tensor {
        Tensor::from_vec(data.to_vec(), shape).unwrap()
    }

    #[test]
    fn mismatches_are_reported() {
        let e = FixtureTensor { dtype: "f64".into(), shape: vec![2], data: vec![1.0, 2.0] };
        let tol = Tolerance::new(1e-5, 1e-5);
        assert_eq!(tensor_mismatch(&f64s(&[1.0, 2.0 + 1e-9], &[2]), &e, tol), None);
        let value = tensor_mismatch(&f64s(&[1.0, 2.001], &[2]), &e, tol).unwrap();
        assert!(value.starts_with("1 of 2 elements") && value.contains("flat index 1"), "{value}");
        let nan = tensor_mismatch(&f64s(&[f64::NAN, 2.0], &[2]), &e, tol).unwrap();
        assert!(nan.contains("flat index 0"), "{nan}");
        let shape = tensor_mismatch(&f64s(&[1.0, 2.0], &[1, 2]), &e, tol).unwrap();
        assert!(shape.starts_with("shape [1, 2]"), "{shape}");
        let f32s = Tensor::from_vec(vec![1.0f32, 2.0], [2]).unwrap();
        assert!(tensor_mismatch(&f32s, &e, tol).unwrap().starts_with("dtype f32"));
        assert!(optional_mismatch(None, Some(&e), tol).unwrap().starts_with("ember has none"));
        let present = f64s(&[1.0, 2.0], &[2]);
        assert!(optional_mismatch(Some(&present), None, tol).unwrap().starts_with("PyTorch has none"));
        assert_eq!(optional_mismatch(None, None, tol), None);
    }

    #[test]
    fn nans_and_infinities_match_only_themselves() {
        let tol = Tolerance::new(1e-5, 1e-5);
        assert!(tol.allows(f64::NAN, f64::NAN));
        assert!(tol.allows(f64::INFINITY, f64::INFINITY));
        assert!(!tol.allows(f64::INFINITY, f64::NEG_INFINITY));
        assert!(!tol.allows(f64::NAN, 1.0));
        assert!(!tol.allows(1.0, f64::NAN));
        assert!(!tol.allows(1e300, f64::INFINITY));
        assert!(tol.allows(100.0 + 9e-4, 100.0));
        assert!(!tol.allows(100.0 + 2e-3, 100.0));
    }
}
