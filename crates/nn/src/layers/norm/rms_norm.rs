//! [`RMSNorm`] and its functional form [`rms_norm`].

use super::{check_eps, check_normalized_shape, shape_repr, trailing_dims};
use crate::Module;
use crate::layers::param_alloc::named;
use crate::module::TrainingFlag;
use ember_autograd::Var;
use ember_autograd::autocast::{self, policy};
use ember_tensor::{DType, Error, Result, Tensor};
use std::fmt;

/// Functional RMS normalisation over the trailing `normalized_shape` of `x`; PyTorch's
/// `F.rms_norm`: `y = x / sqrt(mean(x^2) + eps) * weight`, with `eps` `None` meaning the
/// input dtype's machine epsilon (`f32::EPSILON` or `f64::EPSILON`), as in PyTorch. Built
/// from differentiable ops, so it has gradients of every order.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::functional as F;
/// use ember_tensor::Tensor;
/// let x = Var::new(Tensor::from_vec(vec![3.0f64, -3.0, 4.0, 4.0], [2, 2])?);
/// let y = F::rms_norm(&x, &[2], None, Some(0.0))?.value().to_vec::<f64>()?;
/// assert_eq!(y, vec![1.0, -1.0, 1.0, 1.0]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn rms_norm(x: &Var, normalized_shape: &[usize], weight: Option<&Var>, eps: Option<f64>) -> Result<Var> {
    let op = "rms_norm";
    if let Some(r) = autocast::run_cast(&policy::LAYER_NORM, [Some(x), weight], |c| {
        Ok(c.output(rms_norm(c.or(0, x), normalized_shape, c.get(1), eps)?))
    }) {
        return r;
    }
    check_normalized_shape(op, normalized_shape)?;
    let reduce = trailing_dims(op, x, normalized_shape)?;
    let eps = match (eps, x.dtype()) {
        (Some(e), _) => e,
        (None, DType::F32) => f32::EPSILON as f64,
        (None, DType::F64) => f64::EPSILON,
        // The machine epsilons of the 16-bit formats (PyTorch's `torch.finfo(dtype).eps`).
        (None, DType::BF16) => 0.0078125,
        (None, DType::F16) => 0.0009765625,
        (None, d) => return Err(Error::dtype(op, format!("the input must be float, got {d}"))),
    };
    if !x.dtype().is_float() {
        return Err(Error::dtype(op, format!("the input must be float, got {}", x.dtype())));
    }
    check_eps(op, eps)?;
    let mut y = x.mul(&x.square().mean(&reduce, true)?.add_scalar(eps).rsqrt())?;
    if let Some(w) = weight {
        if w.shape().dims() != normalized_shape {
            return Err(Error::shape(
                op,
                format!("the weight must have the normalized shape {normalized_shape:?}, got {}", w.shape()),
            ));
        }
        if w.dtype() != x.dtype() {
            return Err(Error::dtype(op, format!("the input is {} but the weight is {}", x.dtype(), w.dtype())));
        }
        y = y.mul(w)?;
    }
    Ok(y)
}

/// How to build an [`RMSNorm`] beyond its normalized shape; PyTorch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RMSNormOptions {
    /// Added to the mean square; `None` (the default) is the input dtype's machine epsilon.
    pub eps: Option<f64>,
    /// Whether the layer learns a per-element scale, initialised to ones (default `true`).
    pub elementwise_affine: bool,
    /// The parameters' dtype (default `f32`).
    pub dtype: DType,
}

impl Default for RMSNormOptions {
    fn default() -> Self {
        RMSNormOptions { eps: None, elementwise_affine: true, dtype: DType::F32 }
    }
}

/// RMS normalisation over the trailing `normalized_shape` (see [`rms_norm`]); PyTorch's
/// `nn.RMSNorm`, with its one parameter `weight`.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::{Module, RMSNorm};
/// use ember_tensor::Tensor;
/// let norm = RMSNorm::new(&[4])?;
/// assert_eq!(norm.forward(&Var::new(Tensor::randn([2, 4])?))?.shape(), [2, 4]);
/// assert_eq!(norm.state_dict().keys().collect::<Vec<_>>(), ["weight"]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[allow(clippy::upper_case_acronyms)]
#[derive(Module)]
pub struct RMSNorm {
    #[module(skip)]
    normalized_shape: Vec<usize>,
    #[module(skip)]
    eps: Option<f64>,
    weight: Option<Var>,
    training: TrainingFlag,
}

impl RMSNorm {
    /// A layer over trailing dimensions `normalized_shape` with a learned scale, in `f32`.
    pub fn new(normalized_shape: &[usize]) -> Result<RMSNorm> {
        Self::with_options(normalized_shape, RMSNormOptions::default())
    }

    /// A layer with the given options.
    pub fn with_options(normalized_shape: &[usize], options: RMSNormOptions) -> Result<RMSNorm> {
        check_normalized_shape("RMSNorm", normalized_shape)?;
        if !options.dtype.is_float() {
            return Err(Error::dtype("RMSNorm", format!("parameters must be float, got {}", options.dtype)));
        }
        let weight = if options.elementwise_affine {
            Some(Var::param(Tensor::ones(normalized_shape, options.dtype).map_err(named("RMSNorm.weight"))?))
        } else {
            None
        };
        Ok(RMSNorm {
            normalized_shape: normalized_shape.to_vec(),
            eps: options.eps,
            weight,
            training: TrainingFlag::new(),
        })
    }

    /// The trailing shape normalised over.
    pub fn normalized_shape(&self) -> &[usize] {
        &self.normalized_shape
    }

    /// The learned scale, if the layer has one.
    pub fn weight(&self) -> Option<&Var> {
        self.weight.as_ref()
    }

    /// Normalises `x` over its trailing dimensions by their root mean square, then scales.
    fn forward(&self, x: &Var) -> Result<Var> {
        rms_norm(x, &self.normalized_shape, self.weight.as_ref(), self.eps)
    }
}

impl fmt::Debug for RMSNorm {
    /// PyTorch's repr: `RMSNorm((8,), eps=None, elementwise_affine=True)` in Rust's spelling.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (shape, affine) = (shape_repr(&self.normalized_shape), self.weight.is_some());
        let eps = self.eps.map_or("None".to_string(), |e| format!("{e:e}"));
        write!(f, "RMSNorm({shape}, eps={eps}, elementwise_affine={affine})")
    }
}
