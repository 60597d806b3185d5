//! [`Flatten`]: merges a range of dimensions into one.

use super::activation::stateless_module;
use crate::module::Module;
use ember_autograd::Var;
use ember_tensor::Result;

/// Merges dimensions `start_dim..=end_dim` into one, like PyTorch's `nn.Flatten`. The
/// default, dimensions 1 to the last, keeps the batch dimension: `[N, C, H, W]` becomes
/// `[N, C*H*W]`. Negative dimensions count from the end.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::{Flatten, Module};
/// use ember_tensor::{DType, Tensor};
/// let x = Var::new(Tensor::zeros([2, 3, 4, 5], DType::F32)?);
/// assert_eq!(Flatten::new().forward(&x)?.shape().dims(), &[2, 60]);
/// assert_eq!(Flatten::with_dims(0, -2).forward(&x)?.shape().dims(), &[24, 5]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flatten {
    /// The first dimension merged.
    pub start_dim: i64,
    /// The last dimension merged (inclusive).
    pub end_dim: i64,
}

impl Flatten {
    /// Flattens dimensions 1 to the last.
    pub fn new() -> Self {
        Flatten { start_dim: 1, end_dim: -1 }
    }

    /// Flattens dimensions `start_dim..=end_dim`.
    pub fn with_dims(start_dim: i64, end_dim: i64) -> Self {
        Flatten { start_dim, end_dim }
    }
}

impl Default for Flatten {
    fn default() -> Self {
        Self::new()
    }
}

stateless_module!(Flatten, |self, x| x.flatten(self.start_dim, self.end_dim));
