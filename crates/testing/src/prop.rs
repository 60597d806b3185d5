//! Inputs of the API property tests (`prop_*.rs` in the tensor, autograd and nn crates):
//! deterministic tensors of any shape and the proptest strategies for shapes and dtypes.

use ember_autograd::Var;
use ember_tensor::{DType, Tensor};
use proptest::prelude::*;

/// `shape.numel()` values in `[-2, 2]` in steps of 1/4, spread by `seed`: exactly
/// representable in every float dtype, with repeats (ties for arg-reductions and pools).
pub fn values(shape: &[usize], seed: u64) -> Vec<f64> {
    let n: usize = shape.iter().product();
    (0..n).map(|i| ((i as u64 * 2_654_435_761 + seed) % 17) as f64 / 4.0 - 2.0).collect()
}

/// A contiguous tensor of [`values`] in `dtype`.
pub fn tensor(shape: &[usize], seed: u64, dtype: DType) -> Tensor {
    Tensor::from_vec(values(shape, seed), shape.to_vec()).unwrap().to_dtype(dtype)
}

/// A parameter (a leaf that requires its gradient) holding [`tensor`].
pub fn param(shape: &[usize], seed: u64, dtype: DType) -> Var {
    Var::param(tensor(shape, seed, dtype))
}

/// Either float dtype.
pub fn dtype() -> impl Strategy<Value = DType> {
    prop_oneof![Just(DType::F32), Just(DType::F64)]
}

/// Shapes of rank up to `max_rank` with extents 0 to 4 (empty tensors included).
pub fn shape(max_rank: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..5, 0..=max_rank)
}
