//! Inference with each batch norm folded into the convolution before it.
//!
//! In evaluation mode a batch norm is a per-channel affine map, `y * a + b` with
//! `a = weight / sqrt(running_var + eps)` and `b = bias - running_mean * a`, so
//! `bn(conv(x, W))` is `conv(x, W * a) + b`: one convolution, whose kernel adds the bias
//! while each output block is still in cache, in place of a convolution and a pass over its
//! output. The ReLU after it, and a block's residual add, then run in place on that fresh
//! output rather than into new tensors.
//!
//! The folded weights are computed once and kept (one more copy of the convolutions'
//! weights) until any tensor they came from is written or replaced: the cache holds those
//! tensors and their versions, and a mismatch folds again.
//!
//! Folding applies only when nothing can be recorded (gradients disabled), the batch norm
//! is in evaluation mode with running statistics, and the weights are `f32` or `f64` (in
//! 16-bit types the folded product would round differently from PyTorch's). Otherwise the
//! modules run as written, so training, gradients and 16-bit models are untouched.

use ember_autograd::profiler::record_function;
use ember_autograd::{Var, is_grad_enabled};
use ember_nn::{BatchNorm2d, Conv2d, Module};
use ember_tensor::{DType, Result, Tensor, UnaryOp};
use parking_lot::Mutex;

/// The folded weight and bias of one convolution and batch norm pair, and what they were
/// computed from.
struct Folded {
    /// The convolution's weight (and bias), the batch norm's weight, bias, running mean and
    /// running variance, as they were when folded.
    sources: Vec<(Tensor, u64)>,
    weight: Tensor,
    bias: Tensor,
}

impl Folded {
    /// Whether `sources` are the very tensors (same storage, shape and version) folded.
    fn current(&self, sources: &[Tensor]) -> bool {
        self.sources.len() == sources.len()
            && self.sources.iter().zip(sources).all(|((held, version), now)| {
                held.shares_storage(now) && held.layout() == now.layout() && *version == now.version()
            })
    }
}

/// The folded form of a convolution followed by a batch norm, kept between forwards.
#[derive(Default)]
pub(crate) struct FoldCache(Mutex<Option<Folded>>);

/// Whether `bn(conv(x))` may run folded: see the module's documentation.
pub(crate) fn applies(conv: &Conv2d, bn: &BatchNorm2d) -> bool {
    !is_grad_enabled()
        && !bn.is_training()
        && bn.running_mean().is_some()
        && matches!(conv.weight().dtype(), DType::F32 | DType::F64)
}

/// `conv`'s and `bn`'s tensors that the folded weights depend on.
fn sources(conv: &Conv2d, bn: &BatchNorm2d) -> Vec<Tensor> {
    let mut all = vec![conv.weight().value()];
    all.extend(conv.bias().map(Var::value));
    all.extend(bn.weight().map(Var::value));
    all.extend(bn.bias().map(Var::value));
    all.extend(bn.running_mean());
    all.extend(bn.running_var());
    all
}

/// `W * a` and `b` (plus the convolution's own bias times `a`), in the weight's dtype.
fn fold(conv: &Conv2d, bn: &BatchNorm2d) -> Result<(Tensor, Tensor)> {
    let (mean, var) = match (bn.running_mean(), bn.running_var()) {
        (Some(m), Some(v)) => (m, v),
        _ => {
            return Err(ember_tensor::Error::invalid("ResNet", "folding a batch norm needs its running statistics"));
        }
    };
    let dtype = conv.weight().dtype();
    // The per-channel factors in f64, so that folding adds no rounding of its own.
    let invstd = var.to_dtype(DType::F64).add_scalar(bn.options().eps).rsqrt();
    let scale = match bn.weight() {
        Some(w) => w.value().to_dtype(DType::F64).mul(&invstd)?,
        None => invstd,
    };
    let mut shift = mean.to_dtype(DType::F64).mul(&scale)?.neg();
    if let Some(b) = bn.bias() {
        shift = shift.add(&b.value().to_dtype(DType::F64))?;
    }
    if let Some(b) = conv.bias() {
        shift = shift.add(&b.value().to_dtype(DType::F64).mul(&scale)?)?;
    }
    let w = conv.weight().value();
    let channels = w.shape()[0];
    let factors = scale.reshape([channels, 1, 1, 1])?;
    let weight = w.to_dtype(DType::F64).mul(&factors)?.to_dtype(dtype);
    Ok((weight, shift.to_dtype(dtype)))
}

impl FoldCache {
    /// `bn(conv(x))`, then ReLU when `relu`: folded when [`applies`], else as the modules
    /// compute it.
    pub(crate) fn forward(&self, conv: &Conv2d, bn: &BatchNorm2d, x: &Var, relu: bool) -> Result<Var> {
        if !applies(conv, bn) {
            let y = bn.forward(&conv.forward(x)?)?;
            return Ok(if relu { y.relu() } else { y });
        }
        // Named ranges, so that a profile (`EMBER_PROFILE=1`) still shows where the time goes
        // now that these run below the recorded operations.
        let name = if relu { "conv2d_bn_relu" } else { "conv2d_bn" };
        record_function(name, || {
            let (weight, bias) = self.folded(conv, bn)?;
            let y = x.value().conv2d(&weight, Some(&bias), conv.args())?;
            if relu {
                // The convolution's output is fresh: nothing else holds it.
                y.apply_(UnaryOp::Relu)?;
            }
            Ok(Var::new(y))
        })
    }

    /// The folded weight and bias, folded again when a source changed.
    fn folded(&self, conv: &Conv2d, bn: &BatchNorm2d) -> Result<(Tensor, Tensor)> {
        let now = sources(conv, bn);
        let mut cache = self.0.lock();
        if let Some(f) = cache.as_ref().filter(|f| f.current(&now)) {
            return Ok((f.weight.clone(), f.bias.clone()));
        }
        let (weight, bias) = fold(conv, bn)?;
        let sources = now.into_iter().map(|t| (t.clone(), t.version())).collect();
        *cache = Some(Folded { sources, weight: weight.clone(), bias: bias.clone() });
        Ok((weight, bias))
    }
}

/// `relu(y + shortcut)`, written into `y` when `in_place` (`y` is the fresh output of a
/// folded [`FoldCache::forward`], which nothing else holds), else as new tensors.
pub(crate) fn residual_relu(y: Var, shortcut: &Var, in_place: bool) -> Result<Var> {
    if !in_place {
        return Ok(y.add(shortcut)?.relu());
    }
    record_function("add_relu_", || {
        let t = y.value();
        t.add_(&shortcut.value())?;
        t.apply_(UnaryOp::Relu)
    })?;
    Ok(y)
}
