//! The fused optimizer updates a backend provides: their hyperparameters.
//!
//! Each update writes one parameter and its state in one pass over the data, in the
//! parameter's dtype, with PyTorch's update rule rounded like ATen's CPU kernels (the same
//! operations in the same order), so that trajectories match PyTorch's. The derived
//! constants (bias corrections, the decoupled shrink factor) are computed in `f64` from
//! these fields, as PyTorch computes them in Python floats, and then rounded to the dtype.

/// One step of stochastic gradient descent (PyTorch's `SGD`). With `d = g + weight_decay·p`:
/// without momentum `p -= lr·d`; with momentum the buffer becomes `d` on its first step and
/// `momentum·b + (1 - dampening)·d` afterwards, and `p -= lr·b`, or `p -= lr·(d +
/// momentum·b)` with Nesterov momentum.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdStep {
    /// Learning rate.
    pub lr: f64,
    /// Momentum factor; 0 turns momentum off (and then no buffer may be given).
    pub momentum: f64,
    /// Dampening of the gradient's contribution to the momentum buffer.
    pub dampening: f64,
    /// Nesterov momentum.
    pub nesterov: bool,
    /// L2 penalty added to the gradient; 0 skips the addition (so an infinite parameter does
    /// not turn the gradient into NaN, as in PyTorch).
    pub weight_decay: f64,
    /// The momentum buffer has no history yet: it is set to the decayed gradient, undampened,
    /// instead of being updated (its old contents are ignored).
    pub fresh_buffer: bool,
}

/// One step of Adam or AdamW (PyTorch's `Adam` and `AdamW`). With `d = g + weight_decay·p`
/// (coupled decay only): `m = lerp(m, d, 1 - beta1)`, `v = beta2·v + (1 - beta2)·d²`, with
/// AMSGrad `vmax = max(vmax, v)` (NaN propagating); then, decoupled, `p *= 1 -
/// lr·weight_decay`, and `p -= lr/(1 - beta1^t) · m / (√v̂ / √(1 - beta2^t) + eps)` where `v̂`
/// is `v`, or `vmax` with AMSGrad.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamStep {
    /// Learning rate.
    pub lr: f64,
    /// Decay rate of the running average of the gradient.
    pub beta1: f64,
    /// Decay rate of the running average of the squared gradient.
    pub beta2: f64,
    /// Added to the denominator for numerical stability.
    pub eps: f64,
    /// Weight decay; 0 turns it off.
    pub weight_decay: f64,
    /// Decoupled weight decay (AdamW) rather than an L2 penalty added to the gradient.
    pub decoupled: bool,
    /// Normalise by the running maximum of the second moment (needs its state).
    pub amsgrad: bool,
    /// The step being taken, counting from 1: the bias corrections use it.
    pub step: u64,
}

/// One step of RMSprop (PyTorch's `RMSprop`). With `d = g + weight_decay·p`:
/// `s = alpha·s + (1 - alpha)·d²`; centered, also `ḡ = lerp(ḡ, d, 1 - alpha)` and `a = √(s -
/// ḡ²) + eps`, else `a = √s + eps`; then `p -= lr·d/a`, or with momentum `b = momentum·b +
/// d/a` and `p -= lr·b`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RmsPropStep {
    /// Learning rate.
    pub lr: f64,
    /// Smoothing constant of the running averages.
    pub alpha: f64,
    /// Added to the denominator for numerical stability.
    pub eps: f64,
    /// L2 penalty added to the gradient; 0 turns it off.
    pub weight_decay: f64,
    /// Momentum factor; 0 turns momentum off.
    pub momentum: f64,
    /// Normalise by an estimate of the gradient's variance (needs the `grad_avg` state).
    pub centered: bool,
}
