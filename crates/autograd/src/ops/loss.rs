//! The fused classification loss of class-index targets (cross-entropy of logits,
//! negative log-likelihood of log-probabilities): one node whose inputs are the scores and
//! the targets.

use super::{apply, constant};
use crate::autocast::{self, policy};
use crate::backward_ctx::BackwardCtx;
use crate::grad_mode::is_grad_enabled;
use crate::op::{Grads, Op};
use crate::var::Var;
use ember_tensor::{ClassLoss, ClassScores, LossReduction, Result, Shape, Tensor};
use smallvec::smallvec;

struct ClassLossOp(ClassLoss);

impl Op for ClassLossOp {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].class_loss(inputs[1], &self.0)
    }
    fn backward(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        if !ctx.needs_input_grad(0) {
            return Ok(smallvec![None, None]);
        }
        let scores = ctx.input(0)?;
        let target = ctx.input(1)?.value();
        // Grad mode is on in backward exactly under create_graph: then the gradient must be
        // a graph itself, so it is built from Var operations; otherwise one fused kernel.
        let gx = if is_grad_enabled() {
            differentiable_grad(&self.0, &scores, &target, g)?
        } else {
            constant(scores.value().class_loss_backward(&target, &g.value(), &self.0)?)
        };
        Ok(smallvec![Some(gx), None])
    }
}

/// The gradient `w * (softmax(x) - q)` (logits) or `-w * q` (log-probabilities) as `Var`
/// operations, so that it can be differentiated again: `q`, the smoothed one-hot of the
/// targets, and the ignored-row mask are constants; `w` is the incoming gradient per row.
fn differentiable_grad(loss: &ClassLoss, x: &Var, target: &Tensor, g: &Var) -> Result<Var> {
    let (shape, dtype, device) = (x.shape(), x.dtype(), x.device());
    let class_dim = ClassLoss::class_dim(shape.rank());
    let classes = shape[class_dim];
    let ignored = loss.ignore_index.map(|i| target.eq_scalar(i));
    // Ignored targets may hold any value; 0 makes them valid indices, and their rows are
    // zeroed below.
    let safe = match &ignored {
        Some(mask) => target.masked_fill(mask, 0i64)?,
        None => target.clone(),
    };
    let e = loss.label_smoothing;
    let at = safe.unsqueeze(class_dim)?;
    let hit = Tensor::full_on(at.shape().clone(), 1.0 - e, dtype, device)?;
    let q = Tensor::full_on(shape.clone(), e / classes as f64, dtype, device)?.scatter_add(class_dim, &at, &hit)?;

    let mut w = match loss.reduction {
        LossReduction::None => g.clone(),
        LossReduction::Sum | LossReduction::Mean => g.expand(target.shape().clone())?,
    };
    if loss.reduction == LossReduction::Mean {
        let counted = match &ignored {
            Some(mask) => mask.eq_scalar(0).to_dtype(dtype).sum_all(),
            None => Tensor::full_on(Shape::scalar(), target.numel() as f64, dtype, device)?,
        };
        w = w.div(&constant(counted))?;
    }
    let w = w.unsqueeze(class_dim)?;
    let q = constant(q);
    let gx = match loss.scores {
        ClassScores::Logits => x.softmax(class_dim)?.sub(&q)?.mul(&w)?,
        ClassScores::LogProbs => q.mul(&w)?.neg(),
    };
    match &ignored {
        // Exactly 0 on ignored rows, also where their scores are not finite.
        Some(mask) => gx.masked_fill(constant(mask.unsqueeze(class_dim)?), 0.0),
        None => Ok(gx),
    }
}

impl Var {
    /// The classification loss of these scores against class-index `target`s as one
    /// recorded operation (see [`ClassLoss`] and [`Tensor::class_loss`]): the forward is one
    /// fused kernel, and so is the backward, except under `create_graph`, where the
    /// gradient is built from `Var` operations so that it can be differentiated again.
    ///
    /// The target stays an input of the node, so replacing its value (`set_value`) and
    /// calling `forward` recomputes the loss. `ember_nn::cross_entropy` and
    /// `ember_nn::nll_loss` call this for class-index targets.
    ///
    /// ```
    /// use ember_autograd::Var;
    /// use ember_tensor::{ClassLoss, ClassScores, LossReduction, Tensor};
    /// let logits = Var::param(Tensor::from_vec(vec![0.0f64, 0.0, 0.0, 0.0], [2, 2])?);
    /// let targets = Var::new(Tensor::from_vec(vec![1i64, 0], [2])?);
    /// let loss = ClassLoss {
    ///     scores: ClassScores::Logits,
    ///     label_smoothing: 0.0,
    ///     ignore_index: None,
    ///     reduction: LossReduction::Sum,
    /// };
    /// let l = logits.class_loss(&targets, loss)?;
    /// assert_eq!(l.op_name(), "cross_entropy");
    /// l.backward()?;
    /// assert_eq!(logits.grad().unwrap().to_vec::<f64>()?, vec![0.5, -0.5, -0.5, 0.5]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    #[track_caller]
    pub fn class_loss(&self, target: &Var, loss: ClassLoss) -> Result<Var> {
        if let Some([x]) = autocast::cast(&policy::CLASS_LOSS, [self]) {
            return apply(ClassLossOp(loss), &[&x, target]);
        }
        apply(ClassLossOp(loss), &[self, target])
    }
}
