//! [`LayerNorm`] and its functional form [`layer_norm`].

use super::{check_eps, check_normalized_shape, shape_repr, trailing_dims};
use crate::Module;
use crate::layers::param_alloc::named;
use crate::module::TrainingFlag;
use ember_autograd::Var;
use ember_autograd::autocast::{self, DeviceType, policy};
use ember_tensor::{DType, Error, Result, Tensor};
use std::fmt;

/// How to build a [`LayerNorm`] beyond its normalized shape.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerNormOptions {
    /// Added to the variance before the square root (default `1e-5`).
    pub eps: f64,
    /// Whether the layer learns a per-element scale (initialised to ones) and, with `bias`,
    /// a shift (initialised to zeros) (default `true`).
    pub elementwise_affine: bool,
    /// Whether the affine part has a shift (default `true`; ignored without
    /// `elementwise_affine`).
    pub bias: bool,
    /// The parameters' dtype (default `f32`); inputs must have it too.
    pub dtype: DType,
}

impl Default for LayerNormOptions {
    fn default() -> Self {
        LayerNormOptions { eps: 1e-5, elementwise_affine: true, bias: true, dtype: DType::F32 }
    }
}

/// Normalises over the trailing dimensions given by `normalized_shape` to zero mean and unit
/// (biased) variance, then scales and shifts elementwise; PyTorch's `nn.LayerNorm`:
/// `y = (x - E[x]) / sqrt(Var[x] + eps) * weight + bias`.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::{LayerNorm, Module};
/// use ember_tensor::Tensor;
/// let norm = LayerNorm::new(&[4])?;
/// let x = Var::new(Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, -2.0, 0.0, 2.0, 4.0], [2, 4])?);
/// let y = norm.forward(&x)?.value().to_vec::<f32>()?;
/// // Each row now has mean 0 and variance 1 (up to eps).
/// assert!(y[..4].iter().sum::<f32>().abs() < 1e-6);
/// assert!((y[..4].iter().map(|v| v * v).sum::<f32>() / 4.0 - 1.0).abs() < 1e-4);
/// assert_eq!(norm.state_dict().keys().collect::<Vec<_>>(), ["weight", "bias"]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Module)]
pub struct LayerNorm {
    #[module(skip)]
    normalized_shape: Vec<usize>,
    #[module(skip)]
    eps: f64,
    weight: Option<Var>,
    bias: Option<Var>,
    training: TrainingFlag,
}

impl LayerNorm {
    /// A layer over trailing dimensions `normalized_shape`, with a learned scale and shift,
    /// in `f32`.
    pub fn new(normalized_shape: &[usize]) -> Result<LayerNorm> {
        Self::with_options(normalized_shape, LayerNormOptions::default())
    }

    /// A layer with the given options.
    pub fn with_options(normalized_shape: &[usize], options: LayerNormOptions) -> Result<LayerNorm> {
        let LayerNormOptions { eps, elementwise_affine, bias, dtype } = options;
        check_config(normalized_shape, eps)?;
        if !dtype.is_float() {
            return Err(Error::dtype("LayerNorm", format!("parameters must be float, got {dtype}")));
        }
        let (weight, bias) = if elementwise_affine {
            let w = Var::param(Tensor::ones(normalized_shape, dtype).map_err(named("LayerNorm.weight"))?);
            let b = if bias {
                Some(Var::param(Tensor::zeros(normalized_shape, dtype).map_err(named("LayerNorm.bias"))?))
            } else {
                None
            };
            (Some(w), b)
        } else {
            (None, None)
        };
        Ok(LayerNorm { normalized_shape: normalized_shape.to_vec(), eps, weight, bias, training: TrainingFlag::new() })
    }

    /// The trailing shape normalised over.
    pub fn normalized_shape(&self) -> &[usize] {
        &self.normalized_shape
    }

    /// The epsilon added to the variance.
    pub fn eps(&self) -> f64 {
        self.eps
    }

    /// The learned scale, of the normalized shape, if the layer has one.
    pub fn weight(&self) -> Option<&Var> {
        self.weight.as_ref()
    }

    /// The learned shift, of the normalized shape, if the layer has one.
    pub fn bias(&self) -> Option<&Var> {
        self.bias.as_ref()
    }

    /// Normalises `x` over its trailing dimensions, then scales and shifts.
    fn forward(&self, x: &Var) -> Result<Var> {
        layer_norm(x, &self.normalized_shape, self.weight.as_ref(), self.bias.as_ref(), self.eps)
    }
}

fn check_config(normalized_shape: &[usize], eps: f64) -> Result<()> {
    check_normalized_shape("LayerNorm", normalized_shape)?;
    check_eps("LayerNorm", eps)
}

impl fmt::Debug for LayerNorm {
    /// PyTorch's repr in Rust's spelling: `LayerNorm((8,), eps=1e-5, elementwise_affine=true)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "LayerNorm({}, eps={:e}, elementwise_affine={})",
            shape_repr(&self.normalized_shape),
            self.eps,
            self.weight.is_some()
        )
    }
}

/// Functional layer normalisation over the trailing `normalized_shape` of `x`, with an
/// optional `weight` and `bias` of that shape; PyTorch's `F.layer_norm`. One recorded
/// operation ([`Var::layer_norm`]), whose backward reads only `x` and `weight`, and which
/// has gradients of every order.
///
/// The parameters have `x`'s dtype; inside a CPU autocast region a 16-bit `x` may have
/// `f32` parameters (computed in `f32`, the result in `x`'s dtype, as autocast's
/// first-input policy asks).
pub fn layer_norm(
    x: &Var,
    normalized_shape: &[usize],
    weight: Option<&Var>,
    bias: Option<&Var>,
    eps: f64,
) -> Result<Var> {
    // CPU autocast's first-input policy computes a 16-bit input with f32 parameters in
    // f32 and rounds the result to the input's dtype. The fused kernel does that with the
    // operands as they are, so the policy's casts (an f32 copy of the input, another of the
    // output, both kept for backward) are skipped.
    let mixed = x.dtype().is_half()
        && DeviceType::from(x.device()) == DeviceType::Cpu
        && autocast::is_autocast_enabled(DeviceType::Cpu)
        && [weight, bias].into_iter().flatten().all(|p| p.dtype() == DType::F32);
    if !mixed
        && let Some(r) = autocast::run_cast(&policy::LAYER_NORM, [Some(x), weight, bias], |c| {
            Ok(c.output(layer_norm(c.or(0, x), normalized_shape, c.get(1), c.get(2), eps)?))
        })
    {
        return r;
    }
    check_config(normalized_shape, eps)?;
    trailing_dims("LayerNorm", x, normalized_shape)?;
    if !x.dtype().is_float() {
        return Err(Error::dtype("LayerNorm", format!("the input must be float, got {}", x.dtype())));
    }
    for (what, p) in [("weight", weight), ("bias", bias)] {
        let Some(p) = p else { continue };
        if p.shape().dims() != normalized_shape {
            return Err(Error::shape(
                "LayerNorm",
                format!("the {what} must have the normalized shape {normalized_shape:?}, got {:?}", p.shape()),
            ));
        }
        if p.dtype() != x.dtype() && !mixed {
            return Err(Error::dtype(
                "LayerNorm",
                format!("the input is {} but the {what} is {}", x.dtype(), p.dtype()),
            ));
        }
    }
    x.layer_norm(normalized_shape, weight, bias, eps)
}
