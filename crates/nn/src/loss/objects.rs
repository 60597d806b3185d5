//! The losses as [`Loss`] objects holding their options, PyTorch's `nn.*Loss` modules.

use super::binary::{binary_cross_entropy, binary_cross_entropy_with_logits};
use super::classification::{CrossEntropyOptions, NllOptions, cross_entropy, nll_loss};
use super::regression::{HuberOptions, huber_loss, l1_loss, mse_loss};
use super::{Loss, Reduction};
use ember_autograd::Var;
use ember_tensor::Result;

macro_rules! loss_object {
    ($(#[$doc:meta])* $name:ident($options:ty) => $f:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq)]
        pub struct $name(pub $options);

        impl Loss for $name {
            fn forward(&self, input: &Var, target: &Var) -> Result<Var> {
                $f(input, target, self.0)
            }
        }
    };
}

loss_object!(
    /// [`mse_loss`] with its reduction: PyTorch's `nn.MSELoss`.
    MSELoss(Reduction) => mse_loss
);
loss_object!(
    /// [`l1_loss`] with its reduction: PyTorch's `nn.L1Loss`.
    L1Loss(Reduction) => l1_loss
);
loss_object!(
    /// [`huber_loss`] with its options: PyTorch's `nn.HuberLoss`.
    HuberLoss(HuberOptions) => huber_loss
);
loss_object!(
    /// [`cross_entropy`] with its options: PyTorch's `nn.CrossEntropyLoss`.
    ///
    /// ```
    /// use ember_autograd::Var;
    /// use ember_nn::{CrossEntropyLoss, CrossEntropyOptions, Loss};
    /// use ember_tensor::Tensor;
    /// let criterion = CrossEntropyLoss(CrossEntropyOptions { label_smoothing: 0.1, ..Default::default() });
    /// let logits = Var::new(Tensor::zeros([4, 10], ember_tensor::DType::F32)?);
    /// let targets = Var::new(Tensor::from_vec(vec![1i64, 2, 3, 4], [4])?);
    /// assert!((criterion.forward(&logits, &targets)?.item()? - 10f64.ln()).abs() < 1e-6);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    CrossEntropyLoss(CrossEntropyOptions) => cross_entropy
);
loss_object!(
    /// [`nll_loss`] with its options: PyTorch's `nn.NLLLoss`.
    NLLLoss(NllOptions) => nll_loss
);
loss_object!(
    /// [`binary_cross_entropy`] with its reduction: PyTorch's `nn.BCELoss`.
    BCELoss(Reduction) => binary_cross_entropy
);
loss_object!(
    /// [`binary_cross_entropy_with_logits`] with its reduction: PyTorch's
    /// `nn.BCEWithLogitsLoss`.
    BCEWithLogitsLoss(Reduction) => binary_cross_entropy_with_logits
);
