//! [`InstanceNorm2d`] and its functional form [`instance_norm`].

use super::{RunningStats, StatsOperands, affine, affine_params, check_options, running_pair, update_running};
use crate::Module;
use crate::module::TrainingFlag;
use ember_autograd::Var;
use ember_autograd::autocast::{self, policy};
use ember_tensor::{DType, Error, Result, Tensor};
use std::fmt;

/// Functional instance normalisation of `x` (`[N, C, *]`, float); PyTorch's
/// `F.instance_norm`.
///
/// With `use_input_stats`, each sample's channel is normalised with its own mean and biased
/// variance over the spatial dimensions, and the running statistics, when given, are updated
/// in place with the batch average of the per-instance means and *unbiased* variances
/// (`running = (1 - momentum) * running + momentum * batch`). Otherwise the running
/// statistics normalise. `weight` and `bias` (`[C]`) scale and shift each channel.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::functional as F;
/// use ember_tensor::Tensor;
/// let x = Var::new(Tensor::from_vec(vec![1.0f64, 3.0, 10.0, 30.0], [1, 2, 2])?);
/// let y = F::instance_norm(&x, None, None, None, None, true, 0.1, 0.0)?.value().to_vec::<f64>()?;
/// assert!(y.iter().zip([-1.0, 1.0, -1.0, 1.0]).all(|(a, b)| (a - b).abs() < 1e-12));
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn instance_norm(
    x: &Var,
    running_mean: Option<&Tensor>,
    running_var: Option<&Tensor>,
    weight: Option<&Var>,
    bias: Option<&Var>,
    use_input_stats: bool,
    momentum: f64,
    eps: f64,
) -> Result<Var> {
    let op = "instance_norm";
    if let Some(r) = autocast::run_cast(&policy::BATCH_NORM, [Some(x), weight, bias], |c| {
        let y =
            instance_norm(c.or(0, x), running_mean, running_var, c.get(1), c.get(2), use_input_stats, momentum, eps)?;
        Ok(c.output(y))
    }) {
        return r;
    }
    let operands = StatsOperands { running_mean, running_var, weight, bias };
    let c = operands.check(op, x, eps)?;
    if !use_input_stats {
        return operands.normalize_with_running(op, x, eps, "without use_input_stats");
    }
    let dims = x.shape().dims().to_vec();
    let n = dims[0];
    let spatial = x.numel() / (n * c).max(1);
    if spatial <= 1 {
        return Err(Error::invalid(
            op,
            format!("Expected more than 1 spatial element when training, got input size {}", x.shape()),
        ));
    }
    let (y, mean, var) = x.reshape([1, n * c, spatial])?.channel_norm(None, None, eps)?;
    let mut y = y.reshape(dims.as_slice())?;
    affine(&mut y, weight, bias)?;
    if let Some(rm) = running_mean {
        update_running(rm, &mean.reshape([n, c])?.mean(0, false)?, momentum)?;
    }
    if let Some(rv) = running_var {
        let unbiased = var.mul_scalar(spatial as f64 / (spatial - 1) as f64);
        update_running(rv, &unbiased.reshape([n, c])?.mean(0, false)?, momentum)?;
    }
    Ok(y)
}

/// How to build an [`InstanceNorm2d`] beyond its number of features; PyTorch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct InstanceNormOptions {
    /// Added to the variance before the square root (default `1e-5`).
    pub eps: f64,
    /// The running statistics' averaging factor (default `Some(0.1)`); `None` leaves them
    /// as they are (PyTorch passes `0.0` to the functional form then).
    pub momentum: Option<f64>,
    /// Whether the layer learns a per-channel scale and shift (default `false`).
    pub affine: bool,
    /// Whether the layer keeps running statistics for evaluation (default `false`).
    pub track_running_stats: bool,
    /// The parameters' and running statistics' dtype (default `f32`).
    pub dtype: DType,
}

impl Default for InstanceNormOptions {
    fn default() -> Self {
        InstanceNormOptions {
            eps: 1e-5,
            momentum: Some(0.1),
            affine: false,
            track_running_stats: false,
            dtype: DType::F32,
        }
    }
}

/// Instance normalisation of `[N, C, H, W]` or unbatched `[C, H, W]` inputs (see
/// [`instance_norm`]); PyTorch's `nn.InstanceNorm2d`. With `track_running_stats`, the
/// buffers `running_mean`, `running_var` and `num_batches_tracked` are kept under PyTorch's
/// names and normalise in evaluation.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::{InstanceNorm2d, Module};
/// use ember_tensor::Tensor;
/// let norm = InstanceNorm2d::new(3)?;
/// assert_eq!(norm.forward(&Var::new(Tensor::randn([2, 3, 4, 4])?))?.shape(), [2, 3, 4, 4]);
/// assert_eq!(norm.forward(&Var::new(Tensor::randn([3, 4, 4])?))?.shape(), [3, 4, 4]);
/// assert!(norm.state_dict().is_empty());
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Module)]
pub struct InstanceNorm2d {
    #[module(skip)]
    num_features: usize,
    #[module(skip)]
    options: InstanceNormOptions,
    weight: Option<Var>,
    bias: Option<Var>,
    running: Option<RunningStats>,
    training: TrainingFlag,
}

impl InstanceNorm2d {
    /// A layer over `num_features` channels with PyTorch's defaults (no affine part, no
    /// running statistics).
    pub fn new(num_features: usize) -> Result<InstanceNorm2d> {
        Self::with_options(num_features, InstanceNormOptions::default())
    }

    /// A layer with the given options.
    pub fn with_options(num_features: usize, options: InstanceNormOptions) -> Result<InstanceNorm2d> {
        check_options("InstanceNorm2d", num_features, options.eps, options.momentum, options.dtype)?;
        let names = [
            "InstanceNorm2d.weight",
            "InstanceNorm2d.bias",
            "InstanceNorm2d.running_mean",
            "InstanceNorm2d.running_var",
        ];
        let (weight, bias) = affine_params(&names, options.affine, num_features, options.dtype)?;
        let running = RunningStats::tracked(options.track_running_stats, &names, num_features, options.dtype)?;
        Ok(InstanceNorm2d { num_features, options, weight, bias, running, training: TrainingFlag::new() })
    }

    /// The number of channels.
    pub fn num_features(&self) -> usize {
        self.num_features
    }

    /// The running mean, if the layer tracks running statistics (a handle sharing its
    /// storage).
    pub fn running_mean(&self) -> Option<Tensor> {
        self.running.as_ref().map(|r| r.mean.get())
    }

    /// The running variance, if the layer tracks running statistics.
    pub fn running_var(&self) -> Option<Tensor> {
        self.running.as_ref().map(|r| r.var.get())
    }

    /// Normalises each sample's channels with their own statistics in training (updating
    /// the running ones, if tracked) and with the running statistics in evaluation.
    fn forward(&self, x: &Var) -> Result<Var> {
        let name = "InstanceNorm2d";
        let rank = x.shape().rank();
        if rank != 3 && rank != 4 {
            return Err(Error::shape(
                name,
                format!("expected 3D or 4D input (got {rank}D input of shape {})", x.shape()),
            ));
        }
        let batched = if rank == 3 { x.unsqueeze(0)? } else { x.clone() };
        if batched.shape()[1] != self.num_features {
            return Err(Error::shape(
                name,
                format!("expected {} channels, got input of shape {}", self.num_features, x.shape()),
            ));
        }
        let (rm, rv) = running_pair(self.running.as_ref());
        let use_input_stats = self.training.get() || self.running.is_none();
        let y = instance_norm(
            &batched,
            rm.as_ref(),
            rv.as_ref(),
            self.weight.as_ref(),
            self.bias.as_ref(),
            use_input_stats,
            self.options.momentum.unwrap_or(0.0),
            self.options.eps,
        )?;
        if rank == 3 { y.squeeze(0) } else { Ok(y) }
    }
}

impl fmt::Debug for InstanceNorm2d {
    /// PyTorch's repr: `InstanceNorm2d(3, eps=1e-05, momentum=0.1, affine=False,
    /// track_running_stats=False)` in Rust's spelling.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        let momentum = o.momentum.map_or("None".to_string(), |m| m.to_string());
        write!(
            f,
            "InstanceNorm2d({}, eps={:e}, momentum={momentum}, affine={}, track_running_stats={})",
            self.num_features, o.eps, o.affine, o.track_running_stats
        )
    }
}
