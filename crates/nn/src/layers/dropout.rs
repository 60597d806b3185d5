//! [`Dropout`] and its functional form [`dropout`].

use crate::module::{Module, TrainingFlag};
use ember_autograd::Var;
use ember_tensor::{Error, Result, Tensor};

/// Zeroes each element with probability `p` in training and scales the rest by
/// `1 / (1 - p)`, so that expectations match evaluation, where it is the identity; PyTorch's
/// `nn.Dropout`.
///
/// The mask is drawn from ember's global generator (reproducible under `manual_seed`) and
/// enters the graph as a constant leaf, so that recomputing the graph reuses it.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::{Dropout, Module};
/// use ember_tensor::{DType, Tensor};
/// let drop = Dropout::new(0.5)?;
/// let x = Var::new(Tensor::ones([1000], DType::F32)?);
/// let kept = drop.forward(&x)?.value().to_vec::<f32>()?;
/// assert!(kept.iter().all(|&v| v == 0.0 || v == 2.0));
/// drop.eval();
/// assert!(drop.forward(&x)?.same_node(&x));
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Debug)]
pub struct Dropout {
    p: f64,
    training: TrainingFlag,
}

impl Dropout {
    /// Dropout with drop probability `p` in `[0, 1]`.
    pub fn new(p: f64) -> Result<Dropout> {
        check_p(p)?;
        Ok(Dropout { p, training: TrainingFlag::new() })
    }

    /// The drop probability.
    pub fn p(&self) -> f64 {
        self.p
    }
}

impl Module for Dropout {
    fn forward(&self, x: &Var) -> Result<Var> {
        dropout(x, self.p, self.training.get())
    }

    fn named_parameters(&self) -> Vec<(String, Var)> {
        Vec::new()
    }

    fn set_training(&self, on: bool) {
        self.training.set(on);
    }

    fn is_training(&self) -> bool {
        self.training.get()
    }
}

fn check_p(p: f64) -> Result<()> {
    if !(0.0..=1.0).contains(&p) {
        return Err(Error::invalid("dropout", format!("the probability must be in [0, 1], got {p}")));
    }
    Ok(())
}

/// Functional dropout: `x` itself when not `training` or when `p = 0`; zeros when `p = 1`;
/// otherwise `x` times a mask of `0` (probability `p`) and `1 / (1 - p)`.
pub fn dropout(x: &Var, p: f64, training: bool) -> Result<Var> {
    check_p(p)?;
    if !training || p == 0.0 || x.numel() == 0 {
        return Ok(x.clone());
    }
    let dtype = x.dtype();
    if !dtype.is_float() {
        return Err(Error::dtype("dropout", format!("the input must be float, got {dtype}")));
    }
    let mask = if p == 1.0 {
        // 1 / (1 - p) would be infinite; every element is dropped.
        x.value().zeros_like()
    } else {
        let keep = Tensor::uniform(x.shape(), 0.0, 1.0, dtype)?.lt_scalar(1.0 - p);
        keep.to_dtype(dtype).mul_scalar(1.0 / (1.0 - p))
    };
    x.mul(&Var::new(mask))
}
