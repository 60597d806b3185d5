//! Gradient unscaling for loss scaling: the tensor side of
//! [`Backend::non_finite_check_and_unscale`](crate::backend::Backend::non_finite_check_and_unscale).

use super::Tensor;
use crate::backend::validate::unscale::OP;
use crate::{Error, Result};

impl Tensor {
    /// Multiplies this float tensor by `inv_scale` in place and returns whether any of its
    /// elements was infinite or NaN before, in one fused pass (PyTorch's
    /// `torch._amp_foreach_non_finite_check_and_unscale_` for one tensor, what a gradient
    /// scaler runs on every gradient).
    ///
    /// The product is computed in `f32` (in `f64` for an `f64` tensor) and rounded once to
    /// the tensor's dtype. `inv_scale` is an `f32` because PyTorch keeps the inverse scale in
    /// a float32 tensor (`(1 / scale as f64) as f32`), so the products match PyTorch's bit for
    /// bit. The write goes through every view of the storage and bumps its version; a
    /// broadcast view (one element reached twice) and a non-float tensor are errors.
    ///
    /// ```
    /// use ember_tensor::Tensor;
    /// let g = Tensor::from_vec(vec![2.0f32, -8.0, 1.0], [3])?;
    /// assert!(!g.non_finite_check_and_unscale_(0.5)?);
    /// assert_eq!(g.to_vec::<f32>()?, vec![1.0, -4.0, 0.5]);
    ///
    /// let bad = Tensor::from_vec(vec![f32::INFINITY, 4.0], [2])?;
    /// assert!(bad.non_finite_check_and_unscale_(0.5)?);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn non_finite_check_and_unscale_(&self, inv_scale: f32) -> Result<bool> {
        // Refused before the write lock, which would bump the version.
        if !self.dtype.is_float() {
            return Err(Error::dtype(OP, format!("gradients to unscale must be float, got {}", self.dtype)));
        }
        self.check_writable(OP)?;
        let mut dst = self.storage.write();
        self.backend().non_finite_check_and_unscale((&mut dst, &self.layout), inv_scale)
    }
}
