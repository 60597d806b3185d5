//! [`GroupNorm`] and its functional form [`group_norm`].

use super::{affine, affine_params, check_eps, check_input, check_per_channel, spec_v};
use crate::Module;
use crate::module::TrainingFlag;
use ember_autograd::Var;
use ember_autograd::autocast::{self, policy};
use ember_tensor::{DType, Error, Result};
use std::fmt;

/// Functional group normalisation of `x` (`[N, C, *]`, float); PyTorch's `F.group_norm`:
/// the channels are split into `num_groups` groups, each sample's group is normalised with
/// its own mean and biased variance, then `weight` and `bias` (`[C]`) scale and shift each
/// channel. `C` must be divisible by `num_groups`.
///
/// The normalisation is the fused per-channel kernel on the input read as
/// `[1, N * num_groups, rest]`, so forward and backward are one kernel each, and the
/// backward is differentiable under `create_graph`.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::functional as F;
/// use ember_tensor::Tensor;
/// let x = Var::new(Tensor::from_vec(vec![1.0f64, 3.0, 10.0, 30.0], [1, 4])?);
/// let y = F::group_norm(&x, 2, None, None, 0.0)?.value().to_vec::<f64>()?;
/// assert!(y.iter().zip([-1.0, 1.0, -1.0, 1.0]).all(|(a, b)| (a - b).abs() < 1e-12));
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn group_norm(x: &Var, num_groups: usize, weight: Option<&Var>, bias: Option<&Var>, eps: f64) -> Result<Var> {
    let op = "group_norm";
    if let Some(r) = autocast::run_cast(&policy::GROUP_NORM, [Some(x), weight, bias], |c| {
        Ok(c.output(group_norm(c.or(0, x), num_groups, c.get(1), c.get(2), eps)?))
    }) {
        return r;
    }
    let c = check_input(op, x)?;
    check_eps(op, eps)?;
    if num_groups == 0 || !c.is_multiple_of(num_groups) {
        return Err(Error::invalid(
            op,
            format!(
                "Expected number of channels in input to be divisible by num_groups, but got input of shape {} and num_groups={num_groups}",
                x.shape()
            ),
        ));
    }
    check_per_channel(op, x, c, &[("weight", spec_v(weight)), ("bias", spec_v(bias))])?;
    let dims = x.shape().dims().to_vec();
    let rest = x.numel() / (dims[0] * num_groups).max(1);
    let grouped = x.reshape([1, dims[0] * num_groups, rest])?;
    let (y, _, _) = grouped.channel_norm(None, None, eps)?;
    let mut y = y.reshape(dims.as_slice())?;
    affine(&mut y, weight, bias)?;
    Ok(y)
}

/// How to build a [`GroupNorm`] beyond its group and channel counts; PyTorch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GroupNormOptions {
    /// Added to the variance before the square root (default `1e-5`).
    pub eps: f64,
    /// Whether the layer learns a per-channel scale (ones) and shift (zeros) (default
    /// `true`).
    pub affine: bool,
    /// The parameters' dtype (default `f32`).
    pub dtype: DType,
}

impl Default for GroupNormOptions {
    fn default() -> Self {
        GroupNormOptions { eps: 1e-5, affine: true, dtype: DType::F32 }
    }
}

/// Group normalisation of `[N, C, *]` inputs (see [`group_norm`]); PyTorch's
/// `nn.GroupNorm`. The same in training and evaluation.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::{GroupNorm, Module};
/// use ember_tensor::Tensor;
/// let gn = GroupNorm::new(2, 4)?;
/// let y = gn.forward(&Var::new(Tensor::randn([3, 4, 5, 5])?))?;
/// assert_eq!(y.shape(), [3, 4, 5, 5]);
/// assert!(GroupNorm::new(3, 4).is_err()); // 4 channels do not split into 3 groups
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Module)]
pub struct GroupNorm {
    #[module(skip)]
    num_groups: usize,
    #[module(skip)]
    num_channels: usize,
    #[module(skip)]
    eps: f64,
    weight: Option<Var>,
    bias: Option<Var>,
    training: TrainingFlag,
}

impl GroupNorm {
    /// `num_channels` channels in `num_groups` groups, with a learned scale and shift.
    pub fn new(num_groups: usize, num_channels: usize) -> Result<GroupNorm> {
        Self::with_options(num_groups, num_channels, GroupNormOptions::default())
    }

    /// A layer with the given options.
    pub fn with_options(num_groups: usize, num_channels: usize, options: GroupNormOptions) -> Result<GroupNorm> {
        let name = "GroupNorm";
        if num_groups == 0 || !num_channels.is_multiple_of(num_groups) {
            return Err(Error::invalid(
                name,
                format!("num_channels must be divisible by num_groups, got {num_channels} and {num_groups}"),
            ));
        }
        check_eps(name, options.eps)?;
        if !options.dtype.is_float() {
            return Err(Error::dtype(name, format!("parameters must be float, got {}", options.dtype)));
        }
        let names = ["GroupNorm.weight", "GroupNorm.bias", "GroupNorm", "GroupNorm"];
        let (weight, bias) = affine_params(&names, options.affine, num_channels, options.dtype)?;
        Ok(GroupNorm { num_groups, num_channels, eps: options.eps, weight, bias, training: TrainingFlag::new() })
    }

    /// The number of groups.
    pub fn num_groups(&self) -> usize {
        self.num_groups
    }

    /// The number of channels.
    pub fn num_channels(&self) -> usize {
        self.num_channels
    }

    /// The learned per-channel scale, if the layer is affine.
    pub fn weight(&self) -> Option<&Var> {
        self.weight.as_ref()
    }

    /// The learned per-channel shift, if the layer is affine.
    pub fn bias(&self) -> Option<&Var> {
        self.bias.as_ref()
    }

    /// Normalises each sample's groups of channels, then scales and shifts each channel.
    fn forward(&self, x: &Var) -> Result<Var> {
        if x.shape().rank() >= 2 && x.shape()[1] != self.num_channels {
            return Err(Error::shape(
                "GroupNorm",
                format!("expected {} channels in dimension 1, got input of shape {}", self.num_channels, x.shape()),
            ));
        }
        group_norm(x, self.num_groups, self.weight.as_ref(), self.bias.as_ref(), self.eps)
    }
}

impl fmt::Debug for GroupNorm {
    /// PyTorch's repr: `GroupNorm(2, 4, eps=1e-05, affine=True)` in Rust's spelling.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "GroupNorm({}, {}, eps={:e}, affine={})",
            self.num_groups,
            self.num_channels,
            self.eps,
            self.weight.is_some()
        )
    }
}
