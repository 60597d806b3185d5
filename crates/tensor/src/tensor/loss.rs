//! Fused losses: the classification loss of class-index targets and its gradient.

use super::Tensor;
use crate::Result;
use crate::backend::validate;
use crate::ops::loss::{ClassLoss, LossReduction};
use crate::shape::Shape;

impl Tensor {
    /// The classification loss of these scores against class-index `target`s, in one
    /// kernel: cross-entropy of logits or the negative log-likelihood of log-probabilities,
    /// optionally smoothed, with ignored targets and a reduction (see [`ClassLoss`]).
    ///
    /// The scores are float `[C]`, `[N, C]` or `[N, C, d1, ..]` (classes along dimension 1);
    /// `target` is `i64` of their shape without the class dimension. The result has the
    /// scores' dtype, and the target's shape for [`LossReduction::None`] (else it is 0-d).
    /// Errors name the loss (`cross_entropy` or `nll_loss`) and the offending shapes, dtypes
    /// or target.
    ///
    /// ```
    /// use ember_tensor::{ClassLoss, ClassScores, LossReduction, Tensor};
    /// let logits = Tensor::from_vec(vec![2.0f64, 0.0, 0.0, 0.0, 3.0, 0.0], [2, 3])?;
    /// let targets = Tensor::from_vec(vec![0i64, -100], [2])?;
    /// let loss = ClassLoss {
    ///     scores: ClassScores::Logits,
    ///     label_smoothing: 0.0,
    ///     ignore_index: Some(-100),
    ///     reduction: LossReduction::Mean,
    /// };
    /// let l = logits.class_loss(&targets, &loss)?.to_scalar::<f64>()?;
    /// assert!((l - ((2f64.exp() + 2.0).ln() - 2.0)).abs() < 1e-12);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn class_loss(&self, target: &Tensor, loss: &ClassLoss) -> Result<Tensor> {
        let op = loss.name();
        self.same_device(op, target)?;
        validate::class_loss(loss, (self.dtype, &self.layout), (target.dtype, &target.layout), None)?;
        let s = self.read2(target, |v, t| self.backend().class_loss(v, t, loss))?;
        let shape = match loss.reduction {
            LossReduction::None => validate::class_loss_rows(self.shape()),
            LossReduction::Sum | LossReduction::Mean => Shape::scalar(),
        };
        Ok(Tensor::from_storage(s, shape))
    }

    /// The gradient of [`Tensor::class_loss`] with respect to the scores (`self`), for the
    /// incoming gradient `grad` of the loss (0-d, or of the target's shape for
    /// [`LossReduction::None`]; a float gradient of another dtype is converted). The result
    /// has the scores' shape; rows whose target is ignored are 0.
    pub fn class_loss_backward(&self, target: &Tensor, grad: &Tensor, loss: &ClassLoss) -> Result<Tensor> {
        let op = loss.name();
        self.same_device(op, target)?;
        self.same_device(op, grad)?;
        let grad = if grad.dtype != self.dtype && grad.dtype.is_float() && self.dtype.is_float() {
            grad.try_to_dtype(self.dtype)?
        } else {
            grad.clone()
        };
        validate::class_loss(
            loss,
            (self.dtype, &self.layout),
            (target.dtype, &target.layout),
            Some((grad.dtype, &grad.layout)),
        )?;
        let s = self.read3(target, &grad, |v, t, g| self.backend().class_loss_backward(v, t, g, loss))?;
        Ok(Tensor::from_storage(s, self.shape().clone()))
    }
}
