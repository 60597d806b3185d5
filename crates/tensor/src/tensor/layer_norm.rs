//! Layer normalisation as one kernel (PyTorch's `native_layer_norm`) and its gradient.

use super::Tensor;
use super::locks::ReadSet;
use crate::backend::View;
use crate::ops::layer_norm::OP;
use crate::shape::Shape;
use crate::storage::StorageCell;
use crate::{Error, Result};
use smallvec::SmallVec;

/// A tensor's storage cell and its layout's view, for [`ReadSet`].
fn view<'a>(set: &'a ReadSet<'_>, t: &'a Tensor) -> View<'a> {
    (set.get(&t.storage), &t.layout)
}

impl Tensor {
    /// The number of elements per row of `self` normalised over its trailing
    /// `normalized_shape`, and the shape of the per-row statistics (the leading dimensions,
    /// then a 1 per normalized dimension, as PyTorch shapes them).
    fn layer_norm_rows(&self, normalized_shape: &[usize]) -> Result<(usize, Shape)> {
        let dims = self.shape().dims();
        let lead = dims.len().checked_sub(normalized_shape.len());
        match lead {
            Some(lead) if !normalized_shape.is_empty() && dims[lead..] == *normalized_shape => {
                let mut stats = dims[..lead].to_vec();
                stats.resize(dims.len(), 1);
                Ok((normalized_shape.iter().product(), Shape::from(stats)))
            }
            _ => Err(Error::shape(
                OP,
                format!(
                    "the input's trailing dimensions must be the normalized shape {normalized_shape:?}, got shape {}",
                    self.shape()
                ),
            )),
        }
    }

    /// Layer normalisation of `self` over its trailing `normalized_shape`, as one kernel:
    /// `y = (x - mean) / sqrt(var + eps) * weight + bias` with each row's mean and *biased*
    /// variance, `weight` and `bias` (optional) of the normalized shape. Returns
    /// `(y, mean, rstd)`, `rstd = 1 / sqrt(var + eps)`, the statistics shaped as the leading
    /// dimensions followed by ones (PyTorch's `native_layer_norm`).
    ///
    /// `y` has `self`'s dtype. A 16-bit input is computed in `f32` without a widened copy,
    /// may take `f32` parameters, and has `f32` statistics; see
    /// [`ops::layer_norm`](crate::ops::layer_norm).
    ///
    /// ```
    /// use ember_tensor::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f64, 3.0, 10.0, 20.0], [2, 2])?;
    /// let (y, mean, rstd) = x.layer_norm(&[2], None, None, 0.0)?;
    /// assert_eq!(mean.to_vec::<f64>()?, vec![2.0, 15.0]);
    /// assert_eq!(rstd.to_vec::<f64>()?, vec![1.0, 0.2]);
    /// assert_eq!(y.to_vec::<f64>()?, vec![-1.0, 1.0, -1.0, 1.0]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn layer_norm(
        &self,
        normalized_shape: &[usize],
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let (n, stats) = self.layer_norm_rows(normalized_shape)?;
        check_eps(eps)?;
        let mut cells: SmallVec<[&StorageCell; 4]> = SmallVec::new();
        cells.push(&self.storage);
        for t in [weight, bias].into_iter().flatten() {
            self.same_device(OP, t)?;
            cells.push(&t.storage);
        }
        let set = ReadSet::new(&cells);
        let [y, mean, rstd] = self.backend().layer_norm(
            view(&set, self),
            n,
            weight.map(|w| view(&set, w)),
            bias.map(|b| view(&set, b)),
            eps,
        )?;
        Ok((
            Tensor::from_storage(y, self.shape().clone()),
            Tensor::from_storage(mean, stats.clone()),
            Tensor::from_storage(rstd, stats),
        ))
    }

    /// The gradients of [`Tensor::layer_norm`] for the incoming gradient `grad` (of
    /// `self`'s shape and dtype), given the `mean` and `rstd` it returned and the same
    /// `weight`: `(grad_input, grad_weight, grad_bias)`, the last two of the normalized
    /// shape (`sum g * xhat` and `sum g` over the rows, `xhat = (x - mean) * rstd`) in the
    /// weight's dtype, or `self`'s without a weight.
    pub fn layer_norm_backward(
        &self,
        grad: &Tensor,
        normalized_shape: &[usize],
        mean: &Tensor,
        rstd: &Tensor,
        weight: Option<&Tensor>,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let (n, _) = self.layer_norm_rows(normalized_shape)?;
        let mut cells: SmallVec<[&StorageCell; 5]> = SmallVec::new();
        for t in [Some(grad), Some(mean), Some(rstd), weight].into_iter().flatten() {
            self.same_device(OP, t)?;
            cells.push(&t.storage);
        }
        cells.push(&self.storage);
        let set = ReadSet::new(&cells);
        let [gx, gw, gb] = self.backend().layer_norm_backward(
            view(&set, self),
            view(&set, grad),
            n,
            view(&set, mean),
            view(&set, rstd),
            weight.map(|w| view(&set, w)),
        )?;
        let params = Shape::from(normalized_shape.to_vec());
        Ok((
            Tensor::from_storage(gx, self.shape().clone()),
            Tensor::from_storage(gw, params.clone()),
            Tensor::from_storage(gb, params),
        ))
    }
}

fn check_eps(eps: f64) -> Result<()> {
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(Error::invalid(OP, format!("eps must be finite and >= 0, got {eps}")));
    }
    Ok(())
}
