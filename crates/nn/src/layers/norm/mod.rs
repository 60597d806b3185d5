//! The normalisation layers, one file each, and what they share (here): the checks of
//! per-channel operands, the affine parameters, the running statistics and the checks of a
//! normalized shape.
//!
//! - `batch_norm.rs`: [`BatchNorm1d`], [`BatchNorm2d`] (one [`BatchNorm`]), [`batch_norm`];
//! - `group_norm.rs`: [`GroupNorm`], [`group_norm`];
//! - `instance_norm.rs`: [`InstanceNorm2d`], [`instance_norm`];
//! - `layer_norm.rs`: [`LayerNorm`], [`layer_norm`];
//! - `rms_norm.rs`: [`RMSNorm`], [`rms_norm`].

mod batch_norm;
mod group_norm;
mod instance_norm;
mod layer_norm;
mod rms_norm;

pub use batch_norm::{BatchNorm, BatchNorm1d, BatchNorm2d, BatchNormOptions, batch_norm};
pub use group_norm::{GroupNorm, GroupNormOptions, group_norm};
pub use instance_norm::{InstanceNorm2d, InstanceNormOptions, instance_norm};
pub use layer_norm::{LayerNorm, LayerNormOptions, layer_norm};
pub use rms_norm::{RMSNorm, RMSNormOptions, rms_norm};

use super::param_alloc::named;
use crate::buffer::Buffer;
use crate::parts::{ModuleField, Parts};
use ember_autograd::{Var, no_grad};
use ember_tensor::{DType, Error, Result, Tensor};

/// The shape `[1, C, 1, ..]` of rank `rank`, which broadcasts a per-channel vector over an
/// `[N, C, *]` input.
fn channel_shape(rank: usize, c: usize) -> Vec<usize> {
    let mut s = vec![1; rank];
    s[1] = c;
    s
}

/// An error unless `x` is a float `[N, C, *]` input; its number of channels.
fn check_input(op: &'static str, x: &Var) -> Result<usize> {
    if x.shape().rank() < 2 {
        return Err(Error::shape(op, format!("expected an input of shape [N, C, *], got shape {}", x.shape())));
    }
    if !x.dtype().is_float() {
        return Err(Error::dtype(op, format!("the input must be float, got {}", x.dtype())));
    }
    Ok(x.shape()[1])
}

/// The shape and dtype of an optional operand, for [`check_per_channel`].
type Spec = Option<(Vec<usize>, DType)>;

/// The [`Spec`] of an optional tensor.
fn spec_t(t: Option<&Tensor>) -> Spec {
    t.map(|t| (t.shape().dims().to_vec(), t.dtype()))
}

/// The [`Spec`] of an optional `Var`.
fn spec_v(v: Option<&Var>) -> Spec {
    v.map(|v| (v.shape().dims().to_vec(), v.dtype()))
}

/// An error unless each given per-channel operand is `[c]` of the input's dtype.
fn check_per_channel(op: &'static str, x: &Var, c: usize, operands: &[(&str, Spec)]) -> Result<()> {
    for (what, p) in operands {
        let Some((shape, dtype)) = p else { continue };
        if shape != &[c] {
            return Err(Error::shape(
                op,
                format!("the {what} must have shape [{c}] for an input of shape {}, got {shape:?}", x.shape()),
            ));
        }
        if *dtype != x.dtype() {
            return Err(Error::dtype(op, format!("the input is {} but the {what} is {dtype}", x.dtype())));
        }
    }
    Ok(())
}

/// The operands of batch and instance norm besides the input, each optional and `[C]`: the
/// running statistics and the affine scale and shift.
#[derive(Clone, Copy)]
struct StatsOperands<'a> {
    running_mean: Option<&'a Tensor>,
    running_var: Option<&'a Tensor>,
    weight: Option<&'a Var>,
    bias: Option<&'a Var>,
}

impl StatsOperands<'_> {
    /// An error unless `x`, `eps` and the operands fit `op`; the number of channels.
    fn check(&self, op: &'static str, x: &Var, eps: f64) -> Result<usize> {
        let c = check_input(op, x)?;
        check_eps(op, eps)?;
        let operands = [
            ("running_mean", spec_t(self.running_mean)),
            ("running_var", spec_t(self.running_var)),
            ("weight", spec_v(self.weight)),
            ("bias", spec_v(self.bias)),
        ];
        check_per_channel(op, x, c, &operands)?;
        Ok(c)
    }

    /// The evaluation mode: `x` normalised with the running statistics, which `op` needs
    /// `when` it does not use the input's own.
    fn normalize_with_running(&self, op: &'static str, x: &Var, eps: f64, when: &str) -> Result<Var> {
        let (Some(mean), Some(var)) = (self.running_mean, self.running_var) else {
            return Err(Error::invalid(op, format!("running_mean and running_var are required {when}")));
        };
        normalize_with(x, mean, var, self.weight, self.bias, eps)
    }
}

/// An error unless `eps` is finite and not negative.
fn check_eps(op: &'static str, eps: f64) -> Result<()> {
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(Error::invalid(op, format!("eps must be finite and >= 0, got {eps}")));
    }
    Ok(())
}

/// `(x - mean) / sqrt(var + eps) * weight + bias` with given (constant) statistics `[C]`:
/// the evaluation mode of batch and instance norm, built from `Var` operations.
///
/// Computed as PyTorch's evaluation kernel does, `x * scale + shift` with the per-channel
/// `scale = weight / sqrt(var + eps)` and `shift = bias - mean * scale`: two passes over `x`
/// instead of four (a subtraction, two products and a sum), which in a ResNet's inference
/// were a sixth of the time.
fn normalize_with(
    x: &Var,
    mean: &Tensor,
    var: &Tensor,
    weight: Option<&Var>,
    bias: Option<&Var>,
    eps: f64,
) -> Result<Var> {
    let shape = channel_shape(x.shape().rank(), x.shape()[1]);
    let invstd = Var::new(var.add_scalar(eps).rsqrt());
    let scale = match weight {
        Some(w) => w.mul(&invstd)?,
        None => invstd,
    };
    let shifted_mean = scale.mul(&Var::new(mean.clone()))?;
    let shift = match bias {
        Some(b) => b.sub(&shifted_mean)?,
        None => -&shifted_mean,
    };
    x.mul(&scale.reshape(shape.as_slice())?)?.add(&shift.reshape(shape.as_slice())?)
}

/// `y * weight + bias` per channel (dimension 1), for whichever of the two are given.
fn affine(y: &mut Var, weight: Option<&Var>, bias: Option<&Var>) -> Result<()> {
    let shape = channel_shape(y.shape().rank(), y.shape()[1]);
    if let Some(w) = weight {
        *y = y.mul(&w.reshape(shape.as_slice())?)?;
    }
    if let Some(b) = bias {
        *y = y.add(&b.reshape(shape.as_slice())?)?;
    }
    Ok(())
}

/// `running = (1 - momentum) * running + momentum * batch`, in place, recording nothing.
fn update_running(running: &Tensor, batch: &Tensor, momentum: f64) -> Result<()> {
    no_grad(|| {
        running.mul_scalar_(1.0 - momentum)?;
        running.add_scaled_(batch, momentum)
    })
}

/// The names of a per-channel layer's `weight`, `bias`, `running_mean` and `running_var`
/// for errors (`BatchNorm2d.weight`).
type ParamNames = [&'static str; 4];

/// Per-channel scale (ones) and shift (zeros), as PyTorch initialises them, when `affine`;
/// a refusal names the parameter.
fn affine_params(names: &ParamNames, affine: bool, c: usize, dtype: DType) -> Result<(Option<Var>, Option<Var>)> {
    if !affine {
        return Ok((None, None));
    }
    let weight = Tensor::ones([c], dtype).map_err(named(names[0]))?;
    let bias = Tensor::zeros([c], dtype).map_err(named(names[1]))?;
    Ok((Some(Var::param(weight)), Some(Var::param(bias))))
}

/// The checks PyTorch makes when a layer with running statistics is built.
fn check_options(name: &'static str, c: usize, eps: f64, momentum: Option<f64>, dtype: DType) -> Result<()> {
    if c == 0 {
        return Err(Error::invalid(name, "num_features must be positive"));
    }
    check_eps(name, eps)?;
    if let Some(m) = momentum
        && !(0.0..=1.0).contains(&m)
    {
        return Err(Error::invalid(name, format!("momentum must be in [0, 1], got {m}")));
    }
    if !dtype.is_float() {
        return Err(Error::dtype(name, format!("parameters must be float, got {dtype}")));
    }
    Ok(())
}

/// The running statistics of a batch or instance norm layer: PyTorch's `running_mean`,
/// `running_var` and `num_batches_tracked` buffers, all three or none.
struct RunningStats {
    mean: Buffer,
    var: Buffer,
    num_batches_tracked: Buffer,
}

impl RunningStats {
    /// Zero means and unit variances for `c` channels; a refusal names the buffer (`names`:
    /// the layer's [`ParamNames`]).
    fn new(names: &ParamNames, c: usize, dtype: DType) -> Result<RunningStats> {
        Ok(RunningStats {
            mean: Buffer::new(Tensor::zeros([c], dtype).map_err(named(names[2]))?),
            var: Buffer::new(Tensor::ones([c], dtype).map_err(named(names[3]))?),
            num_batches_tracked: Buffer::new(Tensor::scalar(0i64)),
        })
    }

    /// The running statistics when `track`.
    fn tracked(track: bool, names: &ParamNames, c: usize, dtype: DType) -> Result<Option<RunningStats>> {
        track.then(|| RunningStats::new(names, c, dtype)).transpose()
    }
}

/// PyTorch's three buffers under their own names (the field holding them names nothing).
impl ModuleField for RunningStats {
    fn add_to<'a>(&'a self, _name: &'static str, parts: Parts<'a>) -> Parts<'a> {
        parts
            .buffer("running_mean", &self.mean)
            .buffer("running_var", &self.var)
            .buffer("num_batches_tracked", &self.num_batches_tracked)
    }
}

/// The running mean and variance of `running`, if any, as the functional forms take them.
fn running_pair(running: Option<&RunningStats>) -> (Option<Tensor>, Option<Tensor>) {
    match running {
        Some(r) => (Some(r.mean.get()), Some(r.var.get())),
        None => (None, None),
    }
}

/// An error unless `normalized_shape` is non-empty with no zero extent.
fn check_normalized_shape(op: &'static str, normalized_shape: &[usize]) -> Result<()> {
    if normalized_shape.is_empty() || normalized_shape.contains(&0) {
        return Err(Error::shape(
            op,
            format!("the normalized shape must be non-empty with no zero extent, got {normalized_shape:?}"),
        ));
    }
    Ok(())
}

/// The dimensions of `x` to reduce over: its trailing ones, which must be
/// `normalized_shape`.
fn trailing_dims(op: &'static str, x: &Var, normalized_shape: &[usize]) -> Result<Vec<usize>> {
    let dims = x.shape().dims().to_vec();
    let k = normalized_shape.len();
    if dims.len() < k || dims[dims.len() - k..] != *normalized_shape {
        return Err(Error::shape(
            op,
            format!("inputs must end in the normalized shape {normalized_shape:?}, got shape {dims:?}"),
        ));
    }
    Ok((dims.len() - k..dims.len()).collect())
}

/// A normalized shape as a Python tuple, as PyTorch's reprs print it: `(8,)`, `(2, 3)`.
fn shape_repr(normalized_shape: &[usize]) -> String {
    let dims: Vec<String> = normalized_shape.iter().map(usize::to_string).collect();
    let trailing = if dims.len() == 1 { "," } else { "" };
    format!("({}{trailing})", dims.join(", "))
}
