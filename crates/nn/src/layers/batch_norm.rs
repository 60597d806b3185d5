//! [`BatchNorm1d`], [`BatchNorm2d`] and their functional form [`batch_norm`].

use super::param_alloc::named;
use crate::module::{Module, TrainingFlag};
use ember_autograd::{Var, no_grad};
use ember_tensor::{DType, Device, Error, Result, Tensor};
use std::fmt;
use std::sync::{PoisonError, RwLock};

/// The shape `[1, C, 1, ..]` of rank `rank`, which broadcasts a per-channel vector over an
/// `[N, C, *]` input.
pub(crate) fn channel_shape(rank: usize, c: usize) -> Vec<usize> {
    let mut s = vec![1; rank];
    s[1] = c;
    s
}

/// An error unless `x` is a float `[N, C, *]` input.
pub(crate) fn check_input(op: &'static str, x: &Var) -> Result<usize> {
    if x.shape().rank() < 2 {
        return Err(Error::shape(op, format!("expected an input of shape [N, C, *], got shape {}", x.shape())));
    }
    if !x.dtype().is_float() {
        return Err(Error::dtype(op, format!("the input must be float, got {}", x.dtype())));
    }
    Ok(x.shape()[1])
}

/// The shape and dtype of an optional operand, for [`check_per_channel`].
pub(crate) type Spec = Option<(Vec<usize>, DType)>;

/// The [`Spec`] of an optional tensor.
pub(crate) fn spec_t(t: Option<&Tensor>) -> Spec {
    t.map(|t| (t.shape().dims().to_vec(), t.dtype()))
}

/// The [`Spec`] of an optional `Var`.
pub(crate) fn spec_v(v: Option<&Var>) -> Spec {
    v.map(|v| (v.shape().dims().to_vec(), v.dtype()))
}

/// An error unless each given per-channel operand is `[c]` of the input's dtype.
pub(crate) fn check_per_channel(op: &'static str, x: &Var, c: usize, operands: &[(&str, Spec)]) -> Result<()> {
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

pub(crate) fn check_eps(op: &'static str, eps: f64) -> Result<()> {
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(Error::invalid(op, format!("eps must be finite and >= 0, got {eps}")));
    }
    Ok(())
}

/// `(x - mean) / sqrt(var + eps) * weight + bias` with given (constant) statistics `[C]`:
/// batch norm's evaluation mode, built from `Var` operations.
pub(crate) fn normalize_with(
    x: &Var,
    mean: &Tensor,
    var: &Tensor,
    weight: Option<&Var>,
    bias: Option<&Var>,
    eps: f64,
) -> Result<Var> {
    let shape = channel_shape(x.shape().rank(), x.shape()[1]);
    let invstd = var.add_scalar(eps).rsqrt().reshape(shape.as_slice())?;
    let mut y = x.sub(&Var::new(mean.reshape(shape.as_slice())?))?.mul(&Var::new(invstd))?;
    if let Some(w) = weight {
        y = y.mul(&w.reshape(shape.as_slice())?)?;
    }
    if let Some(b) = bias {
        y = y.add(&b.reshape(shape.as_slice())?)?;
    }
    Ok(y)
}

/// `running = (1 - momentum) * running + momentum * batch`, in place, recording nothing.
pub(crate) fn update_running(running: &Tensor, batch: &Tensor, momentum: f64) -> Result<()> {
    no_grad(|| {
        running.mul_scalar_(1.0 - momentum)?;
        running.add_scaled_(batch, momentum)
    })
}

/// Functional batch normalisation of `x` (`[N, C, *]`, float); PyTorch's `F.batch_norm`.
///
/// In `training`, each channel is normalised with the batch's mean and biased variance over
/// every dimension but 1, and the running statistics, when given, are updated in place
/// (recording nothing) as `running = (1 - momentum) * running + momentum * batch` with the
/// batch's *unbiased* variance. Otherwise the running statistics, which are then required,
/// normalise. `weight` and `bias` (`[C]`) scale and shift each channel.
///
/// `momentum` is the averaging factor itself; the layers turn PyTorch's `momentum=None`
/// (a cumulative average) into `1 / num_batches_tracked`.
///
/// The training forward and backward are each one fused kernel, and the backward is
/// differentiable under `create_graph`.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::functional as F;
/// use ember_tensor::{DType, Tensor};
/// let x = Var::new(Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 5.0], [2, 2])?);
/// let (mean, var) = (Tensor::zeros([2], DType::F32)?, Tensor::ones([2], DType::F32)?);
/// let y = F::batch_norm(&x, Some(&mean), Some(&var), None, None, true, 0.1, 1e-5)?;
/// assert!((y.value().to_vec::<f32>()?[0] + 1.0).abs() < 1e-4);
/// assert!((mean.to_vec::<f32>()?[0] - 0.2).abs() < 1e-6); // 0.9 * 0 + 0.1 * 2
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn batch_norm(
    x: &Var,
    running_mean: Option<&Tensor>,
    running_var: Option<&Tensor>,
    weight: Option<&Var>,
    bias: Option<&Var>,
    training: bool,
    momentum: f64,
    eps: f64,
) -> Result<Var> {
    let op = "batch_norm";
    let c = check_input(op, x)?;
    check_eps(op, eps)?;
    let operands = [
        ("running_mean", spec_t(running_mean)),
        ("running_var", spec_t(running_var)),
        ("weight", spec_v(weight)),
        ("bias", spec_v(bias)),
    ];
    check_per_channel(op, x, c, &operands)?;
    if !training {
        let (Some(mean), Some(var)) = (running_mean, running_var) else {
            return Err(Error::invalid(op, "running_mean and running_var are required when not training"));
        };
        return normalize_with(x, mean, var, weight, bias, eps);
    }
    let per_channel = x.numel() / c.max(1);
    if per_channel <= 1 {
        return Err(Error::invalid(
            op,
            format!("Expected more than 1 value per channel when training, got input size {}", x.shape()),
        ));
    }
    let (y, mean, var) = x.channel_norm(weight, bias, eps)?;
    if let Some(rm) = running_mean {
        update_running(rm, &mean, momentum)?;
    }
    if let Some(rv) = running_var {
        let unbiased = var.mul_scalar(per_channel as f64 / (per_channel - 1) as f64);
        update_running(rv, &unbiased, momentum)?;
    }
    Ok(y)
}

/// How to build a batch norm layer beyond its number of features; PyTorch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchNormOptions {
    /// Added to the variance before the square root (default `1e-5`).
    pub eps: f64,
    /// The running statistics' averaging factor (default `Some(0.1)`); `None` is a
    /// cumulative moving average, `1 / num_batches_tracked`.
    pub momentum: Option<f64>,
    /// Whether the layer learns a per-channel scale (ones) and shift (zeros) (default
    /// `true`).
    pub affine: bool,
    /// Whether the layer keeps running statistics for evaluation (default `true`); without
    /// them it normalises with batch statistics in evaluation too.
    pub track_running_stats: bool,
    /// The parameters' and running statistics' dtype (default `f32`).
    pub dtype: DType,
}

impl Default for BatchNormOptions {
    fn default() -> Self {
        BatchNormOptions { eps: 1e-5, momentum: Some(0.1), affine: true, track_running_stats: true, dtype: DType::F32 }
    }
}

/// The running statistics of a norm layer: PyTorch's `running_mean`, `running_var` and
/// `num_batches_tracked` buffers.
#[derive(Clone)]
pub(crate) struct Stats {
    pub mean: Tensor,
    pub var: Tensor,
    pub num_batches_tracked: Tensor,
}

/// [`Stats`] behind a lock: updates write into the tensors in place, but
/// [`Module::buffers_to_device`] replaces them through `&self`.
pub(crate) struct RunningStats(RwLock<Stats>);

impl RunningStats {
    /// Zero means and unit variances for `c` channels; a refusal names the buffer (`names`:
    /// the layer's [`ParamNames`]).
    pub fn new(names: &ParamNames, c: usize, dtype: DType) -> Result<RunningStats> {
        Ok(RunningStats(RwLock::new(Stats {
            mean: Tensor::zeros([c], dtype).map_err(named(names[2]))?,
            var: Tensor::ones([c], dtype).map_err(named(names[3]))?,
            num_batches_tracked: Tensor::scalar(0i64),
        })))
    }

    /// Handles to the current tensors (sharing their storage).
    pub fn get(&self) -> Stats {
        // A panic elsewhere while the lock was held cannot leave the handles half-written.
        self.0.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    pub fn named(&self) -> Vec<(String, Tensor)> {
        let s = self.get();
        vec![
            ("running_mean".to_string(), s.mean),
            ("running_var".to_string(), s.var),
            ("num_batches_tracked".to_string(), s.num_batches_tracked),
        ]
    }

    /// Moves the statistics to `device` (nothing is replaced unless all three move).
    pub fn to_device(&self, device: Device) -> Result<()> {
        let mut g = self.0.write().unwrap_or_else(PoisonError::into_inner);
        let moved = Stats {
            mean: g.mean.to_device(device)?,
            var: g.var.to_device(device)?,
            num_batches_tracked: g.num_batches_tracked.to_device(device)?,
        };
        *g = moved;
        Ok(())
    }
}

/// The names of a per-channel layer's `weight`, `bias`, `running_mean` and `running_var`
/// for errors (`BatchNorm2d.weight`).
pub(crate) type ParamNames = [&'static str; 4];

/// Per-channel scale and shift, as PyTorch initialises them; a refusal names the parameter.
pub(crate) fn affine_params(
    names: &ParamNames,
    affine: bool,
    c: usize,
    dtype: DType,
) -> Result<(Option<Var>, Option<Var>)> {
    if !affine {
        return Ok((None, None));
    }
    let weight = Tensor::ones([c], dtype).map_err(named(names[0]))?;
    let bias = Tensor::zeros([c], dtype).map_err(named(names[1]))?;
    Ok((Some(Var::param(weight)), Some(Var::param(bias))))
}

pub(crate) fn check_options(name: &'static str, c: usize, eps: f64, momentum: Option<f64>, dtype: DType) -> Result<()> {
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

/// Batch normalisation over the channels of `[N, C, *]` inputs (see [`batch_norm`]); the
/// shared body of [`BatchNorm1d`] and [`BatchNorm2d`], which differ only in the input ranks
/// they accept.
pub struct BatchNorm {
    name: &'static str,
    ranks: &'static [usize],
    num_features: usize,
    options: BatchNormOptions,
    weight: Option<Var>,
    bias: Option<Var>,
    running: Option<RunningStats>,
    training: TrainingFlag,
}

impl BatchNorm {
    fn build(
        (name, names): (&'static str, ParamNames),
        ranks: &'static [usize],
        c: usize,
        options: BatchNormOptions,
    ) -> Result<BatchNorm> {
        check_options(name, c, options.eps, options.momentum, options.dtype)?;
        let (weight, bias) = affine_params(&names, options.affine, c, options.dtype)?;
        let running =
            if options.track_running_stats { Some(RunningStats::new(&names, c, options.dtype)?) } else { None };
        Ok(BatchNorm { name, ranks, num_features: c, options, weight, bias, running, training: TrainingFlag::new() })
    }

    /// The number of channels.
    pub fn num_features(&self) -> usize {
        self.num_features
    }

    /// The options the layer was built with.
    pub fn options(&self) -> BatchNormOptions {
        self.options
    }

    /// The learned per-channel scale, if the layer is affine.
    pub fn weight(&self) -> Option<&Var> {
        self.weight.as_ref()
    }

    /// The learned per-channel shift, if the layer is affine.
    pub fn bias(&self) -> Option<&Var> {
        self.bias.as_ref()
    }

    /// The running mean, if the layer tracks running statistics (a handle sharing its
    /// storage).
    pub fn running_mean(&self) -> Option<Tensor> {
        self.running.as_ref().map(|r| r.get().mean)
    }

    /// The running (unbiased) variance, if the layer tracks running statistics.
    pub fn running_var(&self) -> Option<Tensor> {
        self.running.as_ref().map(|r| r.get().var)
    }

    /// The number of training batches seen (an `i64` scalar), if the layer tracks running
    /// statistics.
    pub fn num_batches_tracked(&self) -> Option<Tensor> {
        self.running.as_ref().map(|r| r.get().num_batches_tracked)
    }
}

impl Module for BatchNorm {
    fn forward(&self, x: &Var) -> Result<Var> {
        let rank = x.shape().rank();
        if !self.ranks.contains(&rank) {
            let want: Vec<String> = self.ranks.iter().map(|r| format!("{r}D")).collect();
            return Err(Error::shape(
                self.name,
                format!("expected {} input (got {rank}D input of shape {})", want.join(" or "), x.shape()),
            ));
        }
        if x.shape()[1] != self.num_features {
            return Err(Error::shape(
                self.name,
                format!("expected {} channels in dimension 1, got input of shape {}", self.num_features, x.shape()),
            ));
        }
        let training = self.training.get();
        let mut momentum = self.options.momentum.unwrap_or(0.0);
        let running = self.running.as_ref().map(RunningStats::get);
        if let (true, Some(r)) = (training, &running) {
            no_grad(|| r.num_batches_tracked.add_scalar_(1))?;
            if self.options.momentum.is_none() {
                momentum = 1.0 / r.num_batches_tracked.to_scalar::<i64>()? as f64;
            }
        }
        // Without running statistics, evaluation normalises with the batch's statistics too.
        let use_batch = training || self.running.is_none();
        let (rm, rv) = match &running {
            Some(r) => (Some(&r.mean), Some(&r.var)),
            None => (None, None),
        };
        batch_norm(x, rm, rv, self.weight.as_ref(), self.bias.as_ref(), use_batch, momentum, self.options.eps)
    }

    fn named_parameters(&self) -> Vec<(String, Var)> {
        super::weight_and_bias(self.weight.as_ref(), self.bias.as_ref())
    }

    fn named_buffers(&self) -> Vec<(String, Tensor)> {
        self.running.as_ref().map(RunningStats::named).unwrap_or_default()
    }

    fn buffers_to_device(&self, device: Device) -> Result<()> {
        self.running.as_ref().map_or(Ok(()), |r| r.to_device(device))
    }

    fn set_training(&self, on: bool) {
        self.training.set(on);
    }

    fn is_training(&self) -> bool {
        self.training.get()
    }
}

impl fmt::Debug for BatchNorm {
    /// PyTorch's repr: `BatchNorm2d(16, eps=1e-05, momentum=0.1, affine=True,
    /// track_running_stats=True)` in Rust's spelling.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        let momentum = o.momentum.map_or("None".to_string(), |m| m.to_string());
        write!(
            f,
            "{}({}, eps={:e}, momentum={momentum}, affine={}, track_running_stats={})",
            self.name, self.num_features, o.eps, o.affine, o.track_running_stats
        )
    }
}

macro_rules! batch_norm_layer {
    ($(#[$doc:meta])* $name:ident, $ranks:expr) => {
        $(#[$doc])*
        pub struct $name(BatchNorm);

        impl $name {
            /// A layer over `num_features` channels with PyTorch's defaults (see
            /// [`BatchNormOptions`]).
            pub fn new(num_features: usize) -> Result<$name> {
                Self::with_options(num_features, BatchNormOptions::default())
            }

            /// A layer with the given options.
            pub fn with_options(num_features: usize, options: BatchNormOptions) -> Result<$name> {
                let names = [
                    concat!(stringify!($name), ".weight"),
                    concat!(stringify!($name), ".bias"),
                    concat!(stringify!($name), ".running_mean"),
                    concat!(stringify!($name), ".running_var"),
                ];
                BatchNorm::build((stringify!($name), names), $ranks, num_features, options).map($name)
            }
        }

        impl std::ops::Deref for $name {
            type Target = BatchNorm;
            fn deref(&self) -> &BatchNorm {
                &self.0
            }
        }

        impl Module for $name {
            fn forward(&self, x: &Var) -> Result<Var> {
                self.0.forward(x)
            }
            fn named_parameters(&self) -> Vec<(String, Var)> {
                self.0.named_parameters()
            }
            fn named_buffers(&self) -> Vec<(String, Tensor)> {
                self.0.named_buffers()
            }
            fn buffers_to_device(&self, device: Device) -> Result<()> {
                self.0.buffers_to_device(device)
            }
            fn set_training(&self, on: bool) {
                self.0.set_training(on)
            }
            fn is_training(&self) -> bool {
                self.0.is_training()
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

batch_norm_layer!(
    /// Batch normalisation of `[N, C]` or `[N, C, L]` inputs; PyTorch's `nn.BatchNorm1d`.
    /// Buffers `running_mean`, `running_var` and `num_batches_tracked` (an `i64` scalar) are
    /// in the state dict under PyTorch's names; training mode follows
    /// [`Module::train`] / [`Module::eval`].
    ///
    /// ```
    /// use ember_autograd::Var;
    /// use ember_nn::{BatchNorm1d, Module};
    /// use ember_tensor::Tensor;
    /// let bn = BatchNorm1d::new(2)?;
    /// let x = Var::new(Tensor::from_vec(vec![1.0f32, 10.0, 3.0, 30.0], [2, 2])?);
    /// let y = bn.forward(&x)?.value().to_vec::<f32>()?;
    /// assert!((y[0] + 1.0).abs() < 1e-3 && (y[3] - 1.0).abs() < 1e-3);
    /// let keys = ["weight", "bias", "running_mean", "running_var", "num_batches_tracked"];
    /// assert_eq!(bn.state_dict().keys().collect::<Vec<_>>(), keys);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    BatchNorm1d,
    &[2, 3]
);

batch_norm_layer!(
    /// Batch normalisation of `[N, C, H, W]` inputs; PyTorch's `nn.BatchNorm2d` (see
    /// [`BatchNorm1d`] for the buffers and modes).
    ///
    /// ```
    /// use ember_autograd::Var;
    /// use ember_nn::{BatchNorm2d, Module};
    /// use ember_tensor::Tensor;
    /// let bn = BatchNorm2d::new(3)?;
    /// let x = Var::new(Tensor::randn([4, 3, 5, 5])?);
    /// assert_eq!(bn.forward(&x)?.shape(), [4, 3, 5, 5]);
    /// bn.eval();
    /// assert!(bn.forward(&Var::new(Tensor::randn([4, 3, 5])?)).is_err());
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    BatchNorm2d,
    &[4]
);
