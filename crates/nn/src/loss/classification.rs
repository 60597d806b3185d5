//! Multi-class losses: cross-entropy on logits and negative log-likelihood on log-probabilities.

use super::Reduction;
use super::check::float_input;
use ember_autograd::autocast::{self, policy};
use ember_autograd::{IntoVar, Var};
use ember_tensor::{ClassLoss, ClassScores, Error, LossReduction, Result};

/// PyTorch's default `ignore_index`: a target of -100 contributes nothing.
pub const DEFAULT_IGNORE_INDEX: i64 = -100;

/// The options of [`cross_entropy`]; `Default` is PyTorch's defaults (mean reduction, no
/// smoothing, targets of -100 ignored).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CrossEntropyOptions {
    /// How the per-sample losses combine (default [`Reduction::Mean`]).
    pub reduction: Reduction,
    /// Mixes the target with the uniform distribution: the target class gets
    /// `1 - label_smoothing + label_smoothing / C`, every other `label_smoothing / C`.
    /// In `[0, 1]`, default 0.
    pub label_smoothing: f64,
    /// A class-index target value whose samples contribute nothing (their loss is 0 and the
    /// mean runs over the other samples). Default `Some(-100)`, as in PyTorch; `None` makes
    /// every target a class index that must be in range. With class-probability targets it
    /// must be negative (PyTorch: "ignore_index is not supported for floating point
    /// target").
    pub ignore_index: Option<i64>,
}

impl Default for CrossEntropyOptions {
    fn default() -> Self {
        CrossEntropyOptions {
            reduction: Reduction::default(),
            label_smoothing: 0.0,
            ignore_index: Some(DEFAULT_IGNORE_INDEX),
        }
    }
}

/// The options of [`nll_loss`]; `Default` is PyTorch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NllOptions {
    /// How the per-sample losses combine (default [`Reduction::Mean`]).
    pub reduction: Reduction,
    /// As in [`CrossEntropyOptions::ignore_index`] (default `Some(-100)`).
    pub ignore_index: Option<i64>,
}

impl Default for NllOptions {
    fn default() -> Self {
        NllOptions { reduction: Reduction::default(), ignore_index: Some(DEFAULT_IGNORE_INDEX) }
    }
}

/// The cross-entropy of logits, PyTorch's `F.cross_entropy`: `log_softmax` over the class
/// dimension followed by the negative log-likelihood, stable for any logits.
///
/// The input is `[N, C]`, `[N, C, d1, ..]` (class dimension 1) or a single sample `[C]`.
/// The target is either
/// - class indices: `i64` of the input's shape without the class dimension (`[N]`,
///   `[N, d1, ..]`, or `[]`), each in `0..C` or equal to `ignore_index`; or
/// - class probabilities: a float tensor of the input's shape.
///
/// With [`Reduction::None`] the result has the target's (index) shape.
///
/// With class indices the loss is one recorded operation (`cross_entropy`, inputs the
/// logits and the targets; see [`Var::class_loss`]): its forward is one fused pass per row
/// and so is its backward, which is built from `Var` operations only under
/// `create_graph`.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::{cross_entropy, CrossEntropyOptions, Reduction};
/// use ember_tensor::Tensor;
/// let logits = Var::param(Tensor::from_vec(vec![2.0f32, 0.0, 0.0, 0.0, 3.0, 0.0], [2, 3])?);
/// let targets = Tensor::from_vec(vec![0i64, 2], [2])?;
/// let loss = cross_entropy(&logits, &targets, CrossEntropyOptions::default())?;
/// let expected = ((2f64.exp() + 2.0).ln() - 2.0 + (3f64.exp() + 2.0).ln()) / 2.0;
/// assert!((loss.item()? - expected).abs() < 1e-6);
/// loss.backward()?;
/// assert_eq!(logits.grad().unwrap().shape(), &[2, 3]);
/// let none = CrossEntropyOptions { reduction: Reduction::None, ..Default::default() };
/// assert_eq!(cross_entropy(&logits, &targets, none)?.shape().dims(), &[2]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn cross_entropy(input: &Var, target: impl IntoVar, options: CrossEntropyOptions) -> Result<Var> {
    const OP: &str = "cross_entropy";
    let target = target.into_var();
    if let Some(r) = autocast::run_cast(&policy::CLASS_LOSS, [Some(input), Some(&target)], |c| {
        cross_entropy(c.or(0, input), c.or(1, &target), options)
    }) {
        return r;
    }
    float_input(OP, input)?;
    let smoothing = options.label_smoothing;
    if !(0.0..=1.0).contains(&smoothing) {
        return Err(Error::invalid(OP, format!("label_smoothing must be in [0, 1], got {smoothing}")));
    }
    let class_dim = class_dim(OP, input)?;
    if target.dtype().is_float() {
        if target.shape() != input.shape() {
            return Err(Error::shape(
                OP,
                format!(
                    "float targets are class probabilities and need the input's shape {:?}, got {:?} (class-index \
                     targets must be i64)",
                    input.shape(),
                    target.shape()
                ),
            ));
        }
        if let Some(i) = options.ignore_index.filter(|&i| i >= 0) {
            return Err(Error::invalid(
                OP,
                format!("ignore_index {i} applies to class-index targets, not to class probabilities"),
            ));
        }
        return probability_loss(&input.log_softmax(class_dim)?, &target, class_dim, smoothing, options.reduction);
    }
    class_index_loss(input, &target, ClassScores::Logits, smoothing, options.ignore_index, options.reduction)
}

/// The negative log-likelihood of log-probabilities, PyTorch's `F.nll_loss` (without class
/// weights): `-input[n, target[n]]` per sample. Shapes and targets as the class-index form
/// of [`cross_entropy`], and like it one recorded operation (`nll_loss`).
pub fn nll_loss(input: &Var, target: impl IntoVar, options: NllOptions) -> Result<Var> {
    const OP: &str = "nll_loss";
    let target = target.into_var();
    if let Some(r) = autocast::run_cast(&policy::CLASS_LOSS, [Some(input), Some(&target)], |c| {
        nll_loss(c.or(0, input), c.or(1, &target), options)
    }) {
        return r;
    }
    float_input(OP, input)?;
    class_dim(OP, input)?;
    class_index_loss(input, &target, ClassScores::LogProbs, 0.0, options.ignore_index, options.reduction)
}

/// The class dimension: 0 for a single sample `[C]`, 1 otherwise.
fn class_dim(op: &'static str, input: &Var) -> Result<usize> {
    match input.rank() {
        0 => Err(Error::shape(op, "the input must be [C], [N, C] or [N, C, d1, ..], got a 0-d value")),
        1 => Ok(0),
        _ => Ok(1),
    }
}

/// `-sum_c t_c log_probs_c` per sample for probability targets `t` (smoothed towards the
/// uniform distribution); the mean divides by the number of samples.
fn probability_loss(
    log_probs: &Var,
    target: &Var,
    class_dim: usize,
    smoothing: f64,
    reduction: Reduction,
) -> Result<Var> {
    let classes = log_probs.shape()[class_dim];
    let target = if smoothing > 0.0 {
        target.mul_scalar(1.0 - smoothing).add_scalar(smoothing / classes as f64)
    } else {
        target.clone()
    };
    let products = log_probs.mul(&target)?;
    Ok(match reduction {
        Reduction::None => products.sum(class_dim, false)?.neg(),
        Reduction::Sum => products.sum_all().neg(),
        Reduction::Mean => {
            let samples = log_probs.numel().checked_div(classes).unwrap_or(0);
            products.sum_all().neg().div_scalar(samples as f64)
        }
    })
}

/// The loss of class-index targets, optionally smoothed, with ignored targets contributing
/// nothing: one recorded operation whose inputs are the scores and the targets (so that
/// recomputing the graph with a new target value, `Var::set_value` then `forward`,
/// recomputes the loss). It checks the targets' dtype, shape and classes.
fn class_index_loss(
    scores: &Var,
    target: &Var,
    kind: ClassScores,
    label_smoothing: f64,
    ignore_index: Option<i64>,
    reduction: Reduction,
) -> Result<Var> {
    let reduction = match reduction {
        Reduction::None => LossReduction::None,
        Reduction::Sum => LossReduction::Sum,
        Reduction::Mean => LossReduction::Mean,
    };
    scores.class_loss(target, ClassLoss { scores: kind, label_smoothing, ignore_index, reduction })
}
