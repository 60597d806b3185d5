//! [`ConvTranspose1d`] and [`ConvTranspose2d`] (one generic [`ConvTranspose`] layer) and
//! their functional forms [`conv_transpose1d`] and [`conv_transpose2d`].

use super::arg_builders::arg_builders;
use super::conv::{
    check_config, check_params, init_params, kernel_size, layer_name, param_names, tuple, unless_all, write_repr,
};
use crate::Module;
use crate::module::TrainingFlag;
use ember_autograd::Var;
use ember_tensor::{ConvTransposeArgs, DType, Result, Spatial};
use std::fmt;

/// How to build a [`ConvTranspose`] layer beyond its channels and kernel size: PyTorch's
/// `stride`, `padding`, `output_padding`, `groups`, `bias` and `dilation`, and the
/// parameters' dtype, with PyTorch's defaults (1, 0, 0, 1, a bias, 1) and `f32`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ConvTransposeOptions<const D: usize> {
    /// The stride of the convolution this transposes.
    pub stride: [usize; D],
    /// Rows and columns removed from each side of the output.
    pub padding: [usize; D],
    /// Rows and columns added to one side of the output (smaller than the stride or the
    /// dilation).
    pub output_padding: [usize; D],
    /// The spacing between kernel taps.
    pub dilation: [usize; D],
    /// The number of channel groups.
    pub groups: usize,
    /// Whether the layer adds a learned bias.
    pub bias: bool,
    /// The parameters' dtype; inputs must have it too.
    pub dtype: DType,
}

/// [`ConvTransposeOptions`] of a [`ConvTranspose1d`].
pub type ConvTranspose1dOptions = ConvTransposeOptions<1>;
/// [`ConvTransposeOptions`] of a [`ConvTranspose2d`].
pub type ConvTranspose2dOptions = ConvTransposeOptions<2>;

impl<const D: usize> Default for ConvTransposeOptions<D> {
    fn default() -> Self {
        let ConvTransposeArgs { stride, padding, output_padding, dilation, groups } = ConvTransposeArgs::default();
        ConvTransposeOptions { stride, padding, output_padding, dilation, groups, bias: true, dtype: DType::F32 }
    }
}

impl<const D: usize> ConvTransposeOptions<D> {
    arg_builders! {via args, with_args;
        /// With `stride`.
        stride(impl Spatial<D>);
        /// With `padding`.
        padding(impl Spatial<D>);
        /// With `output_padding`.
        output_padding(impl Spatial<D>);
        /// With `dilation`.
        dilation(impl Spatial<D>);
        /// With `groups`.
        groups(usize);
    }

    /// With or without a bias.
    pub fn bias(mut self, bias: bool) -> Self {
        self.bias = bias;
        self
    }

    /// With parameters of `dtype`.
    pub fn dtype(mut self, dtype: DType) -> Self {
        self.dtype = dtype;
        self
    }

    /// The transposed convolution's arguments (all but `bias` and `dtype`).
    pub fn args(&self) -> ConvTransposeArgs<D> {
        let ConvTransposeOptions { stride, padding, output_padding, dilation, groups, .. } = *self;
        ConvTransposeArgs { stride, padding, output_padding, dilation, groups }
    }

    /// These options with the transposed convolution's arguments `args`.
    pub fn with_args(self, args: ConvTransposeArgs<D>) -> Self {
        let ConvTransposeArgs { stride, padding, output_padding, dilation, groups } = args;
        ConvTransposeOptions { stride, padding, output_padding, dilation, groups, ..self }
    }
}

/// A `D`-dimensional transposed convolution layer, PyTorch's `nn.ConvTranspose1d` /
/// `nn.ConvTranspose2d` (the gradient of a convolution with respect to its input, used to
/// upsample): the weight is `[in_channels, out_channels / groups, kernel..]`, the bias
/// `[out_channels]`.
///
/// Initialised as PyTorch does: Kaiming-uniform with `a = sqrt(5)`, so weight and bias are
/// `U(-1/sqrt(fan_in), 1/sqrt(fan_in))` with `fan_in = out_channels / groups * kernel
/// elements` (PyTorch computes it from the weight's second dimension).
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::{ConvTranspose2d, ConvTranspose2dOptions, Module};
/// use ember_tensor::Tensor;
/// let up = ConvTranspose2d::with_options(16, 8, 3, ConvTranspose2dOptions::default().stride(2).padding(1).output_padding(1))?;
/// let y = up.forward(&Var::new(Tensor::randn([4, 16, 7, 7])?))?;
/// assert_eq!(y.shape().dims(), &[4, 8, 14, 14]);
/// assert_eq!(
///     format!("{up:?}"),
///     "ConvTranspose2d(16, 8, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), output_padding=(1, 1))"
/// );
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Module)]
pub struct ConvTranspose<const D: usize> {
    #[module(skip)]
    args: ConvTransposeArgs<D>,
    weight: Var,
    bias: Option<Var>,
    training: TrainingFlag,
}

/// A 1-d transposed convolution layer (PyTorch's `nn.ConvTranspose1d`).
pub type ConvTranspose1d = ConvTranspose<1>;
/// A 2-d transposed convolution layer (PyTorch's `nn.ConvTranspose2d`).
pub type ConvTranspose2d = ConvTranspose<2>;

impl<const D: usize> ConvTranspose<D> {
    /// A layer from `in_channels` to `out_channels` with a kernel of `kernel_size`, stride
    /// 1, no padding and a bias, in `f32`.
    pub fn new(in_channels: usize, out_channels: usize, kernel_size: impl Spatial<D>) -> Result<Self> {
        Self::with_options(in_channels, out_channels, kernel_size, ConvTransposeOptions::default())
    }

    /// A layer with the given options.
    pub fn with_options(
        in_channels: usize,
        out_channels: usize,
        kernel_size: impl Spatial<D>,
        options: ConvTransposeOptions<D>,
    ) -> Result<Self> {
        let name = layer_name::<D>(true);
        let kernel = kernel_size.spatial();
        let ConvTransposeOptions { stride, output_padding, dilation, groups, bias, dtype, .. } = options;
        check_config(name, in_channels, out_channels, &kernel, (stride, dilation, groups), dtype)?;
        for d in 0..D {
            if output_padding[d] >= stride[d] && output_padding[d] >= dilation[d] {
                return Err(ember_tensor::Error::invalid(
                    name,
                    format!(
                        "output padding must be smaller than either stride or dilation, got output padding {}, \
                         stride {} and dilation {}",
                        tuple(&output_padding),
                        tuple(&stride),
                        tuple(&dilation)
                    ),
                ));
            }
        }
        let mut shape = vec![in_channels, out_channels / groups];
        shape.extend_from_slice(&kernel);
        let (weight, bias) = init_params(param_names::<D>(true), &shape, bias.then_some(out_channels), dtype)?;
        Self::from_params(Var::param(weight), bias.map(Var::param), options.args())
    }

    /// A layer over existing parameters: `weight` `[in, out / groups, kernel..]` and an
    /// optional `bias` `[out]` of its float dtype.
    pub fn from_params(weight: Var, bias: Option<Var>, args: ConvTransposeArgs<D>) -> Result<Self> {
        let name = layer_name::<D>(true);
        let groups = args.groups;
        check_params::<D>(name, &weight, bias.as_ref(), |ws| ws[1] * groups)?;
        if groups == 0 || !weight.shape()[0].is_multiple_of(groups) {
            return Err(ember_tensor::Error::invalid(
                name,
                format!("groups ({groups}) must divide the weight's {} input channels", weight.shape()[0]),
            ));
        }
        Ok(ConvTranspose { args, weight, bias, training: TrainingFlag::new() })
    }

    /// The weight, `[in_channels, out_channels / groups, kernel..]`.
    pub fn weight(&self) -> &Var {
        &self.weight
    }

    /// The bias, `[out_channels]`, if the layer has one.
    pub fn bias(&self) -> Option<&Var> {
        self.bias.as_ref()
    }

    /// The transposed convolution's arguments.
    pub fn args(&self) -> &ConvTransposeArgs<D> {
        &self.args
    }

    /// The input channels the layer expects.
    pub fn in_channels(&self) -> usize {
        self.weight.shape().dims().first().copied().unwrap_or(0)
    }

    /// The output channels.
    pub fn out_channels(&self) -> usize {
        self.weight.shape().dims().get(1).copied().unwrap_or(0) * self.args.groups
    }

    /// The kernel's extents.
    pub fn kernel_size(&self) -> [usize; D] {
        kernel_size(&self.weight)
    }

    /// The transposed convolution of `x` (`[N, in_channels, spatial..]` or unbatched).
    fn forward(&self, x: &Var) -> Result<Var> {
        x.conv_transpose(&self.weight, self.bias.as_ref(), &self.args)
    }
}

impl<const D: usize> fmt::Debug for ConvTranspose<D> {
    /// PyTorch's repr: `ConvTranspose2d(16, 8, kernel_size=(3, 3), stride=(2, 2))`, naming
    /// padding, output padding, dilation, groups and a missing bias only when not the
    /// default.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ConvTransposeArgs { stride, padding, output_padding, dilation, groups } = self.args;
        let head = (layer_name::<D>(true), self.in_channels(), self.out_channels());
        let extras = [
            ("padding", unless_all(&padding, 0)),
            ("dilation", unless_all(&dilation, 1)),
            ("output_padding", unless_all(&output_padding, 0)),
        ];
        write_repr(f, head, (&self.kernel_size(), &stride), &extras, groups, self.bias.is_some())
    }
}

/// A 1-d transposed convolution, PyTorch's `torch.nn.functional.conv_transpose1d`:
/// `input` `[N, in, L]` (or `[in, L]`), `weight` `[in, out / groups, k]`, `bias` `[out]`.
pub fn conv_transpose1d(input: &Var, weight: &Var, bias: Option<&Var>, args: &ConvTransposeArgs<1>) -> Result<Var> {
    input.conv_transpose1d(weight, bias, args)
}

/// A 2-d transposed convolution, PyTorch's `torch.nn.functional.conv_transpose2d`:
/// `input` `[N, in, h, w]` (or `[in, h, w]`), `weight` `[in, out / groups, kh, kw]`,
/// `bias` `[out]`.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::functional as F;
/// use ember_tensor::{ConvTransposeArgs, Tensor};
/// let x = Var::new(Tensor::randn([1, 4, 5, 5])?);
/// let w = Var::new(Tensor::randn([4, 2, 4, 4])?);
/// let y = F::conv_transpose2d(&x, &w, None, &ConvTransposeArgs::default().stride(2).padding(1))?;
/// assert_eq!(y.shape().dims(), &[1, 2, 10, 10]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn conv_transpose2d(input: &Var, weight: &Var, bias: Option<&Var>, args: &ConvTransposeArgs<2>) -> Result<Var> {
    input.conv_transpose2d(weight, bias, args)
}
