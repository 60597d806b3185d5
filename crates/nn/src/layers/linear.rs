//! [`Linear`]: the affine layer `y = x W^T + b`.

use super::param_alloc::named;
use crate::Module;
use crate::init;
use crate::module::TrainingFlag;
use ember_autograd::{Var, autocast};
use ember_tensor::{DType, Error, Result, Tensor};
use std::fmt;

/// How to build a [`Linear`] beyond its sizes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinearOptions {
    /// Whether the layer adds a bias (default `true`).
    pub bias: bool,
    /// The parameters' dtype (default `f32`); inputs must have it too.
    pub dtype: DType,
}

impl Default for LinearOptions {
    fn default() -> Self {
        LinearOptions { bias: true, dtype: DType::F32 }
    }
}

/// `y = x W^T + b` over the last dimension, like PyTorch's `nn.Linear`: the weight has
/// shape `[out, in]`, the bias `[out]`, and inputs of shape `[.., in]` give `[.., out]`.
///
/// Parameters are initialised as in PyTorch: the weight by Kaiming-uniform with `a = sqrt(5)`
/// and the bias from the same range, both `U(-1/sqrt(in), 1/sqrt(in))`, drawn (weight first)
/// from ember's global generator.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::{Linear, Module};
/// use ember_tensor::Tensor;
/// let layer = Linear::new(3, 2)?;
/// let y = layer.forward(&Var::new(Tensor::randn([5, 4, 3])?))?;
/// assert_eq!(y.shape().dims(), &[5, 4, 2]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Module)]
pub struct Linear {
    weight: Var,
    bias: Option<Var>,
    training: TrainingFlag,
}

impl Linear {
    /// A layer from `in_features` to `out_features` with a bias, in `f32`.
    pub fn new(in_features: usize, out_features: usize) -> Result<Linear> {
        Self::with_options(in_features, out_features, LinearOptions::default())
    }

    /// A layer with the given options (no bias, another dtype).
    pub fn with_options(in_features: usize, out_features: usize, options: LinearOptions) -> Result<Linear> {
        let LinearOptions { bias, dtype } = options;
        if !dtype.is_float() {
            return Err(Error::dtype("Linear", format!("parameters must be float, got {dtype}")));
        }
        let weight =
            init::kaiming_uniform(&[out_features, in_features], 5f64.sqrt(), dtype).map_err(named("Linear.weight"))?;
        let bias = if bias {
            let bound = if in_features == 0 { 0.0 } else { 1.0 / (in_features as f64).sqrt() };
            Some(init::uniform(&[out_features], bound, dtype).map_err(named("Linear.bias"))?)
        } else {
            None
        };
        Self::from_parts(weight, bias)
    }

    /// A layer with the given weight `[out, in]` and optional bias `[out]` (of the weight's
    /// float dtype), which become new parameters.
    pub fn from_parts(weight: Tensor, bias: Option<Tensor>) -> Result<Linear> {
        Self::from_params(Var::param(weight), bias.map(Var::param))
    }

    /// A layer over existing parameter `Var`s, which it shares with their other holders:
    /// for weight tying (an output layer reusing an embedding matrix), or for computing
    /// gradients with respect to given `Var`s.
    pub fn from_params(weight: Var, bias: Option<Var>) -> Result<Linear> {
        if weight.rank() != 2 {
            return Err(Error::shape(
                "Linear",
                format!("the weight must be [out, in], got shape {:?}", weight.shape()),
            ));
        }
        if !weight.dtype().is_float() {
            return Err(Error::dtype("Linear", format!("the weight must be float, got {}", weight.dtype())));
        }
        if let Some(b) = &bias {
            let out = weight.shape()[0];
            if b.shape().dims() != [out] {
                return Err(Error::shape(
                    "Linear",
                    format!(
                        "a weight of shape {:?} needs a bias of shape [{out}], got {:?}",
                        weight.shape(),
                        b.shape()
                    ),
                ));
            }
            if b.dtype() != weight.dtype() {
                return Err(Error::dtype(
                    "Linear",
                    format!("the bias is {} but the weight is {}", b.dtype(), weight.dtype()),
                ));
            }
        }
        Ok(Linear { weight, bias, training: TrainingFlag::new() })
    }

    /// The weight, `[out_features, in_features]`.
    pub fn weight(&self) -> &Var {
        &self.weight
    }

    /// The bias, `[out_features]`, if the layer has one.
    pub fn bias(&self) -> Option<&Var> {
        self.bias.as_ref()
    }

    /// The size of each input's last dimension (0 if the weight was replaced by one that is
    /// not a matrix, which `forward` then reports).
    pub fn in_features(&self) -> usize {
        self.weight.shape().dims().get(1).copied().unwrap_or(0)
    }

    /// The size of each output's last dimension (0 if the weight is not a matrix).
    pub fn out_features(&self) -> usize {
        self.weight.shape().dims().first().copied().unwrap_or(0)
    }

    /// `x W^T + b` for `x` of shape `[.., in_features]`.
    fn forward(&self, x: &Var) -> Result<Var> {
        // The weight's value can be replaced after construction (`set_value`, a state dict).
        if self.weight.rank() != 2 {
            return Err(Error::shape(
                "Linear",
                format!("the weight must be [out, in], got shape {:?}", self.weight.shape()),
            ));
        }
        let in_features = self.in_features();
        if x.rank() == 0 || x.shape()[x.rank() - 1] != in_features {
            return Err(Error::shape(
                "Linear",
                format!("{self:?} needs inputs of shape [.., {in_features}], got {:?}", x.shape()),
            ));
        }
        // Inside an autocast region the product casts both to the region's dtype.
        if x.dtype() != self.weight.dtype() && !autocast::is_autocast_enabled(x.device()) {
            return Err(Error::dtype(
                "Linear",
                format!("the input is {} but the parameters are {}", x.dtype(), self.weight.dtype()),
            ));
        }
        x.linear(&self.weight, self.bias.as_ref())
    }
}

impl fmt::Debug for Linear {
    /// PyTorch's repr: `Linear(in_features=8, out_features=16, bias=true)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Linear(in_features={}, out_features={}, bias={})",
            self.in_features(),
            self.out_features(),
            self.bias.is_some()
        )
    }
}
