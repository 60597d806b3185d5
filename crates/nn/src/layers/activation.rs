//! Activation layers: stateless modules around the differentiable `Var` functions. They
//! have no parameters and no training mode.

use crate::module::Module;
use ember_autograd::Var;
use ember_tensor::Result;

/// Implements [`Module`] for a stateless layer whose forward is `$body` of `$x`: it has no
/// parts, so the structural methods' defaults fit.
macro_rules! stateless_module {
    ($ty:ty, |$self_:ident, $x:ident| $body:expr) => {
        impl Module for $ty {
            fn forward(&$self_, $x: &Var) -> Result<Var> {
                $body
            }
        }
    };
}
pub(crate) use stateless_module;

/// `max(x, 0)`, PyTorch's `nn.ReLU`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ReLU;
stateless_module!(ReLU, |self, x| Ok(x.relu()));

/// `x` for positive `x`, `negative_slope * x` otherwise; PyTorch's `nn.LeakyReLU` (default
/// slope 0.01).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LeakyReLU {
    /// The slope for negative inputs.
    pub negative_slope: f64,
}

impl LeakyReLU {
    /// A leaky ReLU with the given negative slope.
    pub fn new(negative_slope: f64) -> Self {
        LeakyReLU { negative_slope }
    }
}

impl Default for LeakyReLU {
    fn default() -> Self {
        LeakyReLU::new(0.01)
    }
}
stateless_module!(LeakyReLU, |self, x| Ok(x.leaky_relu(self.negative_slope)));

/// Which formula [`GELU`] uses (PyTorch's `approximate='none'` or `'tanh'`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GeluApproximation {
    /// `x Phi(x)` with the exact normal CDF.
    #[default]
    Exact,
    /// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
    Tanh,
}

/// The Gaussian error linear unit, PyTorch's `nn.GELU`: exact by default, or with the tanh
/// approximation.
#[allow(clippy::upper_case_acronyms)] // PyTorch's name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GELU {
    /// The formula.
    pub approximation: GeluApproximation,
}

impl GELU {
    /// The exact GELU.
    pub fn new() -> Self {
        GELU { approximation: GeluApproximation::Exact }
    }

    /// The tanh approximation (PyTorch's `nn.GELU(approximate='tanh')`).
    pub fn tanh() -> Self {
        GELU { approximation: GeluApproximation::Tanh }
    }
}
stateless_module!(GELU, |self, x| Ok(match self.approximation {
    GeluApproximation::Exact => x.gelu(),
    GeluApproximation::Tanh => x.gelu_tanh(),
}));

/// `x sigmoid(x)`, PyTorch's `nn.SiLU`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SiLU;
stateless_module!(SiLU, |self, x| Ok(x.silu()));

/// `1 / (1 + e^-x)`, PyTorch's `nn.Sigmoid`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sigmoid;
stateless_module!(Sigmoid, |self, x| Ok(x.sigmoid()));

/// The hyperbolic tangent, PyTorch's `nn.Tanh`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Tanh;
stateless_module!(Tanh, |self, x| Ok(x.tanh()));

/// Softmax along `dim` (negative counts from the end), PyTorch's `nn.Softmax(dim)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Softmax {
    /// The dimension that sums to one.
    pub dim: i64,
}

impl Softmax {
    /// Softmax along `dim`.
    pub fn new(dim: i64) -> Self {
        Softmax { dim }
    }
}
stateless_module!(Softmax, |self, x| x.softmax(self.dim));

/// Log-softmax along `dim`, numerically stable; PyTorch's `nn.LogSoftmax(dim)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogSoftmax {
    /// The dimension over which the exponentials sum to one.
    pub dim: i64,
}

impl LogSoftmax {
    /// Log-softmax along `dim`.
    pub fn new(dim: i64) -> Self {
        LogSoftmax { dim }
    }
}
stateless_module!(LogSoftmax, |self, x| x.log_softmax(self.dim));
