//! Loss functions, in functional form (`cross_entropy(&logits, &targets, options)`) and as
//! [`Loss`] objects (`CrossEntropyLoss::default().forward(&logits, &targets)`).
//!
//! Every loss is built from differentiable `Var` operations, so gradients (and gradients of
//! gradients) come from autograd; each is checked against finite differences and against
//! PyTorch. Cross-entropy and NLL with class-index targets are one fused operation
//! ([`Var::class_loss`](ember_autograd::Var::class_loss)) whose backward is a fused kernel,
//! or `Var` operations under `create_graph`. The formulas are PyTorch's, including its numerically stable forms: no loss
//! gives NaN or infinity for logits of ±1e4.

mod binary;
mod check;
mod classification;
mod objects;
mod regression;

pub use binary::{binary_cross_entropy, binary_cross_entropy_with_logits};
pub use classification::{CrossEntropyOptions, DEFAULT_IGNORE_INDEX, NllOptions, cross_entropy, nll_loss};
pub use objects::{BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss, L1Loss, MSELoss, NLLLoss};
pub use regression::{HuberOptions, huber_loss, l1_loss, mse_loss};

use ember_autograd::{CachedLoss, Var};
use ember_tensor::Result;

/// How a loss combines its per-element values (PyTorch's `reduction`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Reduction {
    /// The mean (the default). For cross-entropy and NLL with an `ignore_index`, the mean
    /// over the targets that are not ignored.
    #[default]
    Mean,
    /// The sum.
    Sum,
    /// No reduction: one loss value per element (per sample for classification losses).
    None,
}

impl Reduction {
    /// `loss` reduced to a scalar, or as it is for [`Reduction::None`].
    pub(crate) fn apply(self, loss: Var) -> Var {
        match self {
            Reduction::Mean => loss.mean_all(),
            Reduction::Sum => loss.sum_all(),
            Reduction::None => loss,
        }
    }
}

/// A loss as an object with its options, PyTorch's `nn.*Loss` modules: `loss.forward(&input,
/// &target)`. Object-safe, so that a training loop can take `&dyn Loss`.
pub trait Loss: Send + Sync {
    /// The loss of `input` against `target`.
    fn forward(&self, input: &Var, target: &Var) -> Result<Var>;

    /// This loss as a [`CachedLoss`] (see docs/design.md, 'Static mode'): its subgraph is
    /// built once per output node and re-run with each new target, which is what the output
    /// of a [`Traced`](ember_autograd::Traced) model wants. On a fresh output every call
    /// (eager mode) it builds a new subgraph each time, like [`forward`](Loss::forward), and
    /// keeps none of them once the output is dropped.
    ///
    /// The checks that read values run when a subgraph is built, not when it is re-run:
    /// [`BCELoss`] checks that its input lies in `[0, 1]` on the first call only. (A class
    /// index out of range is caught on every run: [`cross_entropy`] and [`nll_loss`] check
    /// their targets in the kernel.)
    ///
    /// ```
    /// use ember_autograd::{Traced, Var};
    /// use ember_nn::{Linear, Loss, MSELoss, Module};
    /// use ember_tensor::{DType, Tensor};
    /// let layer = std::sync::Arc::new(Linear::new(3, 1)?);
    /// let l = layer.clone();
    /// let model = Traced::new(move |x: &Var| l.forward(x));
    /// let criterion = MSELoss::default().cached();
    /// let x = Tensor::ones([4, 3], DType::F32)?;
    /// let first = criterion.forward(&model.forward(&x)?, Tensor::zeros([4, 1], DType::F32)?)?;
    /// let second = criterion.forward(&model.forward(&x)?, Tensor::ones([4, 1], DType::F32)?)?;
    /// assert!(first.same_node(&second)); // the loss subgraph was re-run, not rebuilt
    /// assert_eq!(criterion.cached(), 1);
    /// second.backward()?;
    /// assert!(layer.weight().grad().is_some());
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    fn cached(self) -> CachedLoss
    where
        Self: Sized + 'static,
    {
        CachedLoss::new(move |output: &Var, target: &Var| self.forward(output, target))
    }
}
