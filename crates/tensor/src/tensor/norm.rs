//! Per-channel normalisation (the kernel under batch, group and instance norm) and its
//! gradient.

use super::Tensor;
use super::locks::ReadSet;
use crate::backend::View;
use crate::shape::Shape;
use crate::storage::StorageCell;
use crate::{Error, Result};
use smallvec::SmallVec;

/// The name of these operations in errors.
const OP: &str = "channel_norm";

/// A tensor's storage cell and its layout's view, for [`ReadSet`].
fn view<'a>(set: &'a ReadSet<'_>, t: &'a Tensor) -> View<'a> {
    (set.get(&t.storage), &t.layout)
}

impl Tensor {
    /// `self` (`[N, C, *]`, float, rank 2 or more) read as `[N, C, prod(*)]`: a view when
    /// the strides allow it, else a copy.
    fn as_channels(&self) -> Result<Tensor> {
        if self.rank() < 2 {
            return Err(Error::shape(OP, format!("expected an input of shape [N, C, *], got shape {}", self.shape())));
        }
        if !self.dtype.is_float() {
            return Err(Error::dtype(OP, format!("the input must be float, got {}", self.dtype)));
        }
        let dims = self.shape().dims();
        let inner: usize = dims[2..].iter().product();
        self.reshape([dims[0], dims[1], inner])
    }

    /// Per-channel normalisation of `self` (`[N, C, *]`, float): with `mean` and the
    /// *biased* `var` of each channel (dimension 1) over every other dimension,
    /// `y = (x - mean) / sqrt(var + eps) * weight + bias` (weight and bias `[C]`, optional).
    /// Returns `(y, mean, var)`; the statistics are `[C]` in `self`'s dtype. One fused kernel
    /// on the CPU: one pass for the statistics, one for the output.
    ///
    /// This is batch normalisation's training forward; group and instance norm read their
    /// input as `[1, N * groups, rest]` and call it too.
    ///
    /// ```
    /// use ember_tensor::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f64, 3.0, 10.0, 20.0], [2, 2])?;
    /// let (y, mean, var) = x.channel_norm(None, None, 0.0)?;
    /// assert_eq!(mean.to_vec::<f64>()?, vec![5.5, 11.5]);
    /// assert_eq!(var.to_vec::<f64>()?, vec![20.25, 72.25]);
    /// let y = y.to_vec::<f64>()?;
    /// assert!(y.iter().zip([-1.0, -1.0, 1.0, 1.0]).all(|(a, b)| (a - b).abs() < 1e-12));
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn channel_norm(
        &self,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let x = self.as_channels()?;
        check_eps(eps)?;
        let mut cells: SmallVec<[&StorageCell; 4]> = SmallVec::new();
        cells.push(&x.storage);
        for t in [weight, bias].into_iter().flatten() {
            self.same_device(OP, t)?;
            cells.push(&t.storage);
        }
        let set = ReadSet::new(&cells);
        let [y, mean, var] = self.backend().channel_norm(
            view(&set, &x),
            weight.map(|w| view(&set, w)),
            bias.map(|b| view(&set, b)),
            eps,
        )?;
        let c = Shape::from([x.shape()[1]]);
        Ok((
            Tensor::from_storage(y, self.shape().clone()),
            Tensor::from_storage(mean, c.clone()),
            Tensor::from_storage(var, c),
        ))
    }

    /// The gradients of [`Tensor::channel_norm`] for the incoming gradient `grad` (of
    /// `self`'s shape), given the `mean` and `var` it returned and the same `weight` and
    /// `eps`: `(grad_input, grad_bias, grad_weight)`, the last two being `sum g` and
    /// `sum g * xhat` per channel (`[C]`) with `xhat = (x - mean) / sqrt(var + eps)`. One fused
    /// kernel on the CPU: one pass for the two sums, one for the input's gradient.
    pub fn channel_norm_backward(
        &self,
        grad: &Tensor,
        mean: &Tensor,
        var: &Tensor,
        weight: Option<&Tensor>,
        eps: f64,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let x = self.as_channels()?;
        check_eps(eps)?;
        if grad.shape() != self.shape() {
            return Err(Error::shape(
                OP,
                format!("the gradient must have the input's shape {}, got {}", self.shape(), grad.shape()),
            ));
        }
        let g = grad.reshape(x.shape().clone())?;
        let mut cells: SmallVec<[&StorageCell; 4]> = SmallVec::new();
        for t in [Some(&g), Some(mean), Some(var), weight].into_iter().flatten() {
            self.same_device(OP, t)?;
            cells.push(&t.storage);
        }
        cells.push(&x.storage);
        let set = ReadSet::new(&cells);
        let [gx, sum_g, sum_g_xhat] = self.backend().channel_norm_backward(
            view(&set, &x),
            view(&set, &g),
            view(&set, mean),
            view(&set, var),
            weight.map(|w| view(&set, w)),
            eps,
        )?;
        let c = Shape::from([x.shape()[1]]);
        Ok((
            Tensor::from_storage(gx, self.shape().clone()),
            Tensor::from_storage(sum_g, c.clone()),
            Tensor::from_storage(sum_g_xhat, c),
        ))
    }
}

fn check_eps(eps: f64) -> Result<()> {
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(Error::invalid(OP, format!("eps must be finite and >= 0, got {eps}")));
    }
    Ok(())
}
