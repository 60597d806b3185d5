//! The seam between tensors and devices.
//!
//! `Tensor` methods validate arguments, resolve dimensions, promote dtypes and compute
//! output layouts; then they call one [`Backend`] method with storages and layouts that
//! are already consistent. A backend only computes. Adding a device means implementing
//! this trait and adding a [`crate::storage::Storage`] variant; callers do not change.

pub mod cpu;
pub(crate) mod validate;

use crate::layout::Layout;
use crate::storage::{CpuStorage, Storage};
use crate::{DType, Device, Result, Scalar};

/// Elementwise functions of one tensor, with their parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UnaryOp {
    /// `-x`
    Neg,
    /// `|x|`
    Abs,
    /// `-1`, `0` or `1`; NaN stays NaN (NumPy's convention; PyTorch gives 0)
    Sign,
    /// `x * x`
    Square,
    /// `max(x, 0)`
    Relu,
    /// `e^x`
    Exp,
    /// `ln x`
    Log,
    /// `sqrt x`
    Sqrt,
    /// `1 / sqrt x`
    Rsqrt,
    /// `sin x`
    Sin,
    /// `cos x`
    Cos,
    /// `tanh x`
    Tanh,
    /// `1 / (1 + e^-x)`
    Sigmoid,
    /// `x * Phi(x)` with the exact normal CDF (erf form)
    Gelu,
    /// The tanh approximation of GELU
    GeluTanh,
    /// `x * sigmoid(x)`
    Silu,
    /// The error function
    Erf,
    /// `ln(1 + x)`
    Log1p,
    /// `e^x - 1`
    Expm1,
    /// `1 / x`
    Recip,
    /// Round down
    Floor,
    /// Round up
    Ceil,
    /// Round half to even
    Round,
    /// `ln(1 + e^(beta x)) / beta`, linear above `threshold`
    Softplus {
        /// Sharpness.
        beta: f64,
        /// `beta * x` above which the function is linear.
        threshold: f64,
    },
    /// `x` for positive `x`, `slope * x` otherwise
    LeakyRelu(f64),
    /// `x` for positive `x`, `alpha * (e^x - 1)` otherwise
    Elu(f64),
    /// `min(max(x, min), max)`; NaN stays NaN
    Clamp {
        /// Lower bound (may be `-inf`).
        min: f64,
        /// Upper bound (may be `inf`).
        max: f64,
    },
    /// `x + s`
    AddScalar(Scalar),
    /// `x - s`
    SubScalar(Scalar),
    /// `s - x`
    RSubScalar(Scalar),
    /// `x * s`
    MulScalar(Scalar),
    /// `x / s`
    DivScalar(Scalar),
    /// `s / x`
    RDivScalar(Scalar),
    /// `x ^ s`; on integers the exponent must be a non-negative integer
    PowScalar(Scalar),
    /// `s ^ x`
    RPowScalar(Scalar),
    /// `max(x, s)` propagating NaN
    MaximumScalar(Scalar),
    /// `min(x, s)` propagating NaN
    MinimumScalar(Scalar),
}

impl UnaryOp {
    /// Whether the function is only defined on floats (integer inputs are computed in
    /// `f32`, like PyTorch).
    pub fn is_float_only(self) -> bool {
        use UnaryOp::*;
        !matches!(
            self,
            Neg | Abs
                | Sign
                | Square
                | Relu
                | Floor
                | Ceil
                | Round
                | Clamp { .. }
                | AddScalar(_)
                | SubScalar(_)
                | RSubScalar(_)
                | MulScalar(_)
                | PowScalar(_)
                | MaximumScalar(_)
                | MinimumScalar(_)
        )
    }

    /// The scalar operand of a tensor-scalar operation.
    pub fn scalar(self) -> Option<Scalar> {
        use UnaryOp::*;
        match self {
            AddScalar(s) | SubScalar(s) | RSubScalar(s) | MulScalar(s) | DivScalar(s) | RDivScalar(s)
            | PowScalar(s) | RPowScalar(s) | MaximumScalar(s) | MinimumScalar(s) => Some(s),
            _ => None,
        }
    }

    /// A lowercase name for messages and profiles.
    pub fn name(self) -> &'static str {
        use UnaryOp::*;
        match self {
            Neg => "neg",
            Abs => "abs",
            Sign => "sign",
            Square => "square",
            Relu => "relu",
            Exp => "exp",
            Log => "log",
            Sqrt => "sqrt",
            Rsqrt => "rsqrt",
            Sin => "sin",
            Cos => "cos",
            Tanh => "tanh",
            Sigmoid => "sigmoid",
            Gelu => "gelu",
            GeluTanh => "gelu_tanh",
            Silu => "silu",
            Erf => "erf",
            Log1p => "log1p",
            Expm1 => "expm1",
            Recip => "recip",
            Floor => "floor",
            Ceil => "ceil",
            Round => "round",
            Softplus { .. } => "softplus",
            LeakyRelu(_) => "leaky_relu",
            Elu(_) => "elu",
            Clamp { .. } => "clamp",
            AddScalar(_) => "add_scalar",
            SubScalar(_) => "sub_scalar",
            RSubScalar(_) => "rsub_scalar",
            MulScalar(_) => "mul_scalar",
            DivScalar(_) => "div_scalar",
            RDivScalar(_) => "rdiv_scalar",
            PowScalar(_) => "pow_scalar",
            RPowScalar(_) => "rpow_scalar",
            MaximumScalar(_) => "maximum_scalar",
            MinimumScalar(_) => "minimum_scalar",
        }
    }
}

/// Elementwise functions of two tensors of the same dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `a + b`
    Add,
    /// `a - b`
    Sub,
    /// `a * b`
    Mul,
    /// `a / b` (integer division by zero gives 0)
    Div,
    /// `a ^ b`
    Pow,
    /// `max(a, b)` propagating NaN
    Maximum,
    /// `min(a, b)` propagating NaN
    Minimum,
}

impl BinaryOp {
    /// A lowercase name for messages and profiles.
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Pow => "pow",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Minimum => "minimum",
        }
    }
}

/// Elementwise comparisons; the result is a `u8` mask.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// `a == b`
    Eq,
    /// `a != b`
    Ne,
    /// `a < b`
    Lt,
    /// `a <= b`
    Le,
    /// `a > b`
    Gt,
    /// `a >= b`
    Ge,
}

impl CmpOp {
    /// A lowercase name for messages and profiles.
    pub fn name(self) -> &'static str {
        match self {
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
        }
    }
}

/// Reductions over a set of dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum.
    Sum,
    /// Product.
    Prod,
    /// Maximum (NaN propagates).
    Max,
    /// Minimum (NaN propagates).
    Min,
    /// Index of the first maximum along one dimension (`i64` result).
    ArgMax,
    /// Index of the first minimum along one dimension (`i64` result).
    ArgMin,
}

impl ReduceOp {
    /// A lowercase name for messages and profiles.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::ArgMax => "argmax",
            ReduceOp::ArgMin => "argmin",
        }
    }
}

/// A storage with the layout through which an operation reads it.
pub type View<'a> = (&'a Storage, &'a Layout);

/// The kernels a device provides. See the module docs for the division of labour.
///
/// Unless said otherwise, results are new contiguous storages of the output shape, and
/// binary inputs have already been broadcast to the output shape (stride 0 on repeated
/// dimensions) and converted to one dtype.
///
/// The methods are safe to call with any arguments: an implementation checks every view
/// against its storage and the operands against each other before it touches memory, and
/// answers a layout that reaches outside its storage, mismatched shapes or out-of-range
/// dimensions with an error.
pub trait Backend: Send + Sync + 'static {
    /// The device this backend computes on.
    fn device(&self) -> Device;
    /// `numel` elements of `value` (converted to `dtype` by [`Scalar::to_element`]).
    fn full(&self, numel: usize, value: Scalar, dtype: DType) -> Result<Storage>;
    /// Moves host data onto the device.
    fn upload(&self, data: CpuStorage) -> Result<Storage>;
    /// A contiguous host copy of a view.
    fn download(&self, src: View<'_>) -> Result<CpuStorage>;
    /// A contiguous copy of a view, converted to `dtype`.
    fn cast(&self, src: View<'_>, dtype: DType) -> Result<Storage>;
    /// An elementwise function.
    fn unary(&self, op: UnaryOp, src: View<'_>) -> Result<Storage>;
    /// An elementwise function of two same-dtype views of one shape.
    fn binary(&self, op: BinaryOp, a: View<'_>, b: View<'_>) -> Result<Storage>;
    /// An elementwise comparison of two same-dtype views of one shape, as a `u8` mask.
    fn compare(&self, op: CmpOp, a: View<'_>, b: View<'_>) -> Result<Storage>;
    /// An elementwise comparison with a scalar, as a `u8` mask. Integer elements compare
    /// exactly with the scalar's value; float elements with the scalar rounded to their
    /// dtype (as PyTorch converts it).
    fn compare_scalar(&self, op: CmpOp, a: View<'_>, scalar: Scalar) -> Result<Storage>;
    /// `cond ? a : b` elementwise; `cond` is `u8`, `a` and `b` share a dtype.
    fn where_cond(&self, cond: View<'_>, a: View<'_>, b: View<'_>) -> Result<Storage>;
    /// Applies `op` in place to the elements of `dst` that `layout` addresses.
    fn unary_inplace(&self, op: UnaryOp, dst: &mut Storage, layout: &Layout) -> Result<()>;
    /// `dst = dst op src` in place; `src` has `dst`'s dtype and is broadcast to its shape.
    fn binary_inplace(&self, op: BinaryOp, dst: &mut Storage, layout: &Layout, src: View<'_>) -> Result<()>;
    /// Copies `src` (broadcast to `layout`'s shape, any dtype) into `dst`.
    fn copy_inplace(&self, dst: &mut Storage, layout: &Layout, src: View<'_>) -> Result<()>;
    /// Sets the elements that `layout` addresses to `value` (see [`Backend::full`]).
    fn fill_inplace(&self, dst: &mut Storage, layout: &Layout, value: Scalar) -> Result<()>;
    /// Reduces over `dims` (sorted, unique); the result has the input's shape with those
    /// dimensions set to 1. `ArgMax`/`ArgMin` take exactly one dimension.
    fn reduce(&self, op: ReduceOp, src: View<'_>, dims: &[usize]) -> Result<Storage>;
    /// Softmax (or log-softmax) along `dim`, for float views.
    fn softmax(&self, src: View<'_>, dim: usize, log: bool) -> Result<Storage>;
    /// Batched matrix product. `a` is `[batch.., m, k]` and `b` is `[batch.., k, n]` with
    /// identical (already broadcast) batch dimensions; the result is `[batch.., m, n]`.
    fn matmul(&self, a: View<'_>, b: View<'_>) -> Result<Storage>;
    /// Selects entries `index` (`i64`, 1-d) along `dim`.
    fn index_select(&self, src: View<'_>, dim: usize, index: View<'_>) -> Result<Storage>;
    /// `out[i][j] = src[index[i][j]][j]` along `dim`; the result has `index`'s shape.
    fn gather(&self, src: View<'_>, dim: usize, index: View<'_>) -> Result<Storage>;
    /// A copy of `dst` with `src` added at the positions `index` names along `dim`.
    fn scatter_add(&self, dst: View<'_>, dim: usize, index: View<'_>, src: View<'_>) -> Result<Storage>;
    /// Entries where the `u8` mask (broadcast to `src`'s shape) is non-zero set to `value`
    /// (see [`Backend::full`]).
    fn masked_fill(&self, src: View<'_>, mask: View<'_>, value: Scalar) -> Result<Storage>;
    /// The lower (or, with `upper`, upper) triangle of the last two dimensions relative to
    /// `diagonal`; other entries are zero.
    fn triangle(&self, src: View<'_>, diagonal: i64, upper: bool) -> Result<Storage>;

    /// `numel` samples of `dist` in the float `dtype`, drawn from the global generator
    /// ([`crate::random`]) in element order: a backend that draws on its own generator breaks
    /// `manual_seed` reproducibility across devices.
    fn random(&self, numel: usize, dist: Distribution, dtype: DType) -> Result<Storage>;
    /// A random permutation of `0..n` as `i64`, drawn from the global generator.
    fn randperm(&self, n: usize) -> Result<Storage>;
    /// The views, of one dtype and of shapes that agree outside `dim`, joined along `dim`.
    fn cat(&self, srcs: &[View<'_>], dim: usize) -> Result<Storage>;
    /// `Σ|x|^p` over a float view, accumulated in `f64` (`max |x|` for `p = f64::INFINITY`,
    /// NaN if any element is NaN): one tensor's part of a total norm.
    fn power_sum(&self, src: View<'_>, p: f64) -> Result<f64>;
    /// One SGD step ([`SgdStep`]) on a float parameter, in place, in one pass. The gradient
    /// and the momentum buffer (given exactly when `momentum != 0`) are contiguous, of the
    /// parameter's shape and dtype.
    fn sgd_step(
        &self,
        param: Target<'_>,
        grad: View<'_>,
        momentum_buffer: Option<Target<'_>>,
        hp: &SgdStep,
    ) -> Result<()>;
    /// One Adam or AdamW step ([`AdamStep`]) on a float parameter and its state, in place, in
    /// one pass. Every operand is contiguous, of the parameter's shape and dtype.
    fn adam_step(&self, param: Target<'_>, grad: View<'_>, state: AdamState<'_>, hp: &AdamStep) -> Result<()>;
    /// One RMSprop step ([`RmsPropStep`]) on a float parameter and its state, in place, in
    /// one pass. Every operand is contiguous, of the parameter's shape and dtype.
    fn rmsprop_step(&self, param: Target<'_>, grad: View<'_>, state: RmsPropState<'_>, hp: &RmsPropStep) -> Result<()>;
}

/// The backend for `device`, or a "not compiled in" error.
pub fn backend_for(device: Device) -> Result<&'static dyn Backend> {
    device.check_available()?;
    Ok(&cpu::CpuBackend)
}

pub mod optim;

pub use optim::{AdamState, AdamStep, RmsPropState, RmsPropStep, SgdStep, Target};

use crate::random::Distribution;
