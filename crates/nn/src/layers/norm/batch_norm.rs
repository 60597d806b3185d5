//! [`BatchNorm1d`], [`BatchNorm2d`] and their functional form [`batch_norm`].

use super::{ParamNames, RunningStats, StatsOperands, affine_params, check_options, running_pair, update_running};
use crate::Module;
use crate::module::TrainingFlag;
use ember_autograd::autocast::{self, policy};
use ember_autograd::{Var, no_grad};
use ember_tensor::{DType, Error, Result, Tensor};
use std::fmt;

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
    if let Some(r) = autocast::run_cast(&policy::BATCH_NORM, [Some(x), weight, bias], |c| {
        let y = batch_norm(c.or(0, x), running_mean, running_var, c.get(1), c.get(2), training, momentum, eps)?;
        Ok(c.output(y))
    }) {
        return r;
    }
    let operands = StatsOperands { running_mean, running_var, weight, bias };
    let c = operands.check(op, x, eps)?;
    if !training {
        return operands.normalize_with_running(op, x, eps, "when not training");
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

/// Batch normalisation over the channels of `[N, C, *]` inputs (see [`batch_norm`]); the
/// shared body of [`BatchNorm1d`] and [`BatchNorm2d`], which differ only in the input ranks
/// they accept.
#[derive(Module)]
pub struct BatchNorm {
    #[module(skip)]
    name: &'static str,
    #[module(skip)]
    ranks: &'static [usize],
    #[module(skip)]
    num_features: usize,
    #[module(skip)]
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
        let running = RunningStats::tracked(options.track_running_stats, &names, c, options.dtype)?;
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
        self.running.as_ref().map(|r| r.mean.get())
    }

    /// The running (unbiased) variance, if the layer tracks running statistics.
    pub fn running_var(&self) -> Option<Tensor> {
        self.running.as_ref().map(|r| r.var.get())
    }

    /// The number of training batches seen (an `i64` scalar), if the layer tracks running
    /// statistics.
    pub fn num_batches_tracked(&self) -> Option<Tensor> {
        self.running.as_ref().map(|r| r.num_batches_tracked.get())
    }

    /// Normalises `x` with the batch's statistics in training (updating the running ones)
    /// and with the running statistics in evaluation.
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
        if let (true, Some(r)) = (training, &self.running) {
            let tracked = r.num_batches_tracked.get();
            no_grad(|| tracked.add_scalar_(1))?;
            if self.options.momentum.is_none() {
                momentum = 1.0 / tracked.to_scalar::<i64>()? as f64;
            }
        }
        // Without running statistics, evaluation normalises with the batch's statistics too.
        let use_batch = training || self.running.is_none();
        let (rm, rv) = running_pair(self.running.as_ref());
        let (weight, bias) = (self.weight.as_ref(), self.bias.as_ref());
        batch_norm(x, rm.as_ref(), rv.as_ref(), weight, bias, use_batch, momentum, self.options.eps)
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
        #[derive(Module)]
        pub struct $name(#[module(flatten)] BatchNorm);

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

            /// Normalises `x` (see [`BatchNorm::forward`]).
            fn forward(&self, x: &Var) -> Result<Var> {
                self.0.forward(x)
            }
        }

        impl std::ops::Deref for $name {
            type Target = BatchNorm;
            fn deref(&self) -> &BatchNorm {
                &self.0
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
