//! [`Conv1d`] and [`Conv2d`] (one generic [`Conv`] layer) and their functional forms
//! [`conv1d`] and [`conv2d`].

use super::arg_builders::arg_builders;
use super::param_alloc::named;
use crate::Module;
use crate::init;
use crate::module::TrainingFlag;
use ember_autograd::Var;
use ember_tensor::{ConvArgs, DType, Error, Padding, Result, Spatial, Tensor};
use std::fmt;

/// How to build a [`Conv`] layer beyond its channels and kernel size: PyTorch's `stride`,
/// `padding`, `dilation`, `groups` and `bias`, and the parameters' dtype. The defaults are
/// PyTorch's (stride 1, no padding, dilation 1, one group, a bias) and `f32`.
///
/// ```
/// use ember_nn::Conv2dOptions;
/// use ember_tensor::Padding;
/// let o = Conv2dOptions::default().stride(2).padding(1).bias(false);
/// assert_eq!((o.stride, o.padding, o.bias), ([2, 2], Padding::Explicit([1, 1]), false));
/// let same = Conv2dOptions::default().padding(Padding::Same).groups(4);
/// assert_eq!(same.groups, 4);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ConvOptions<const D: usize> {
    /// The step between kernel positions.
    pub stride: [usize; D],
    /// The implicit zeros around the input: numbers, [`Padding::Same`] or
    /// [`Padding::Valid`].
    pub padding: Padding<D>,
    /// The spacing between kernel taps.
    pub dilation: [usize; D],
    /// The number of channel groups (`in_channels` for a depthwise convolution).
    pub groups: usize,
    /// Whether the layer adds a learned bias.
    pub bias: bool,
    /// The parameters' dtype; inputs must have it too.
    pub dtype: DType,
}

/// [`ConvOptions`] of a [`Conv1d`].
pub type Conv1dOptions = ConvOptions<1>;
/// [`ConvOptions`] of a [`Conv2d`].
pub type Conv2dOptions = ConvOptions<2>;

impl<const D: usize> Default for ConvOptions<D> {
    fn default() -> Self {
        let ConvArgs { stride, padding, dilation, groups } = ConvArgs::default();
        ConvOptions { stride, padding, dilation, groups, bias: true, dtype: DType::F32 }
    }
}

impl<const D: usize> ConvOptions<D> {
    arg_builders! {via args, with_args;
        /// With `stride` (one value for every dimension, or one per dimension).
        stride(impl Spatial<D>);
        /// With `padding`: numbers, [`Padding::Same`] or [`Padding::Valid`].
        padding(impl Into<Padding<D>>);
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

    /// The convolution arguments (all but `bias` and `dtype`).
    pub fn args(&self) -> ConvArgs<D> {
        ConvArgs { stride: self.stride, padding: self.padding, dilation: self.dilation, groups: self.groups }
    }

    /// These options with the convolution arguments `args`.
    pub fn with_args(self, args: ConvArgs<D>) -> Self {
        let ConvArgs { stride, padding, dilation, groups } = args;
        ConvOptions { stride, padding, dilation, groups, ..self }
    }
}

/// A `D`-dimensional convolution layer, PyTorch's `nn.Conv1d` / `nn.Conv2d`: the weight is
/// `[out_channels, in_channels / groups, kernel..]`, the bias `[out_channels]`, inputs are
/// `[N, in_channels, spatial..]` (or unbatched).
///
/// Parameters are initialised as in PyTorch: the weight by Kaiming-uniform with
/// `a = sqrt(5)` and the bias from the same range, both `U(-1/sqrt(fan_in), 1/sqrt(fan_in))`
/// with `fan_in = in_channels / groups * kernel elements`, drawn (weight first) from ember's
/// global generator.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::{Conv2d, Conv2dOptions, Module};
/// use ember_tensor::Tensor;
/// let conv = Conv2d::with_options(3, 16, 3, Conv2dOptions::default().stride(2).padding(1))?;
/// let y = conv.forward(&Var::new(Tensor::randn([8, 3, 32, 32])?))?;
/// assert_eq!(y.shape().dims(), &[8, 16, 16, 16]);
/// assert_eq!(format!("{conv:?}"), "Conv2d(3, 16, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1))");
/// assert_eq!(conv.state_dict().keys().collect::<Vec<_>>(), ["weight", "bias"]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Module)]
pub struct Conv<const D: usize> {
    #[module(skip)]
    args: ConvArgs<D>,
    weight: Var,
    bias: Option<Var>,
    training: TrainingFlag,
}

/// A 1-d convolution layer (PyTorch's `nn.Conv1d`).
pub type Conv1d = Conv<1>;
/// A 2-d convolution layer (PyTorch's `nn.Conv2d`).
pub type Conv2d = Conv<2>;

/// The names of the weight and the bias of the layer, for errors (`Conv2d.weight`).
pub(crate) fn param_names<const D: usize>(transposed: bool) -> [&'static str; 2] {
    match (D, transposed) {
        (1, false) => ["Conv1d.weight", "Conv1d.bias"],
        (_, false) => ["Conv2d.weight", "Conv2d.bias"],
        (1, true) => ["ConvTranspose1d.weight", "ConvTranspose1d.bias"],
        (_, true) => ["ConvTranspose2d.weight", "ConvTranspose2d.bias"],
    }
}

/// The layer's name in errors and its repr.
pub(crate) fn layer_name<const D: usize>(transposed: bool) -> &'static str {
    match (D, transposed) {
        (1, false) => "Conv1d",
        (_, false) => "Conv2d",
        (1, true) => "ConvTranspose1d",
        (_, true) => "ConvTranspose2d",
    }
}

/// The configuration checks PyTorch makes when a convolution layer is built.
pub(crate) fn check_config<const D: usize>(
    name: &'static str,
    in_channels: usize,
    out_channels: usize,
    kernel: &[usize; D],
    (stride, dilation, groups): ([usize; D], [usize; D], usize),
    dtype: DType,
) -> Result<()> {
    if D == 0 || D > 2 {
        return Err(Error::invalid(name, format!("{D}-d convolutions are not supported")));
    }
    if groups == 0 {
        return Err(Error::invalid(name, "groups must be a positive integer"));
    }
    if !in_channels.is_multiple_of(groups) {
        return Err(Error::invalid(
            name,
            format!("in_channels ({in_channels}) must be divisible by groups ({groups})"),
        ));
    }
    if !out_channels.is_multiple_of(groups) {
        return Err(Error::invalid(
            name,
            format!("out_channels ({out_channels}) must be divisible by groups ({groups})"),
        ));
    }
    for (what, v) in [("kernel_size", kernel), ("stride", &stride), ("dilation", &dilation)] {
        if v.contains(&0) {
            return Err(Error::invalid(name, format!("{what} must be positive, got {}", tuple(v))));
        }
    }
    if !dtype.is_float() {
        return Err(Error::dtype(name, format!("parameters must be float, got {dtype}")));
    }
    Ok(())
}

/// `values` as a Python tuple, as PyTorch's reprs print them: `(3,)`, `(3, 3)`.
pub(crate) fn tuple(values: &[usize]) -> String {
    match values {
        [one] => format!("({one},)"),
        _ => format!("({})", values.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ")),
    }
}

/// A weight of `shape` and, with `bias`, a bias of `bias_len`, drawn as PyTorch's
/// convolution layers draw them; a refusal names the parameter (`names`: weight, bias).
pub(crate) fn init_params(
    names: [&'static str; 2],
    shape: &[usize],
    bias_len: Option<usize>,
    dtype: DType,
) -> Result<(Tensor, Option<Tensor>)> {
    let weight = init::kaiming_uniform(shape, 5f64.sqrt(), dtype).map_err(named(names[0]))?;
    let bias = match bias_len {
        Some(n) => {
            let fan = init::fan_in(shape);
            let bound = if fan == 0 { 0.0 } else { 1.0 / (fan as f64).sqrt() };
            Some(init::uniform(&[n], bound, dtype).map_err(named(names[1]))?)
        }
        None => None,
    };
    Ok((weight, bias))
}

/// An error unless `weight` has `D + 2` dimensions and a float dtype, and `bias` is
/// `[channels]` of the weight's dtype.
pub(crate) fn check_params<const D: usize>(
    name: &'static str,
    weight: &Var,
    bias: Option<&Var>,
    bias_channels: impl Fn(&[usize]) -> usize,
) -> Result<()> {
    let ws = weight.shape();
    if ws.rank() != D + 2 {
        return Err(Error::shape(name, format!("the weight must have {} dimensions, got shape {ws:?}", D + 2)));
    }
    if !weight.dtype().is_float() {
        return Err(Error::dtype(name, format!("the weight must be float, got {}", weight.dtype())));
    }
    if let Some(b) = bias {
        let channels = bias_channels(&ws);
        if b.shape().dims() != [channels] {
            return Err(Error::shape(
                name,
                format!("a weight of shape {ws:?} needs a bias of shape [{channels}], got {:?}", b.shape()),
            ));
        }
        if b.dtype() != weight.dtype() {
            return Err(Error::dtype(name, format!("the bias is {} but the weight is {}", b.dtype(), weight.dtype())));
        }
    }
    Ok(())
}

impl<const D: usize> Conv<D> {
    /// A layer from `in_channels` to `out_channels` with a kernel of `kernel_size` (one
    /// extent for every dimension, or one per dimension), stride 1, no padding and a bias,
    /// in `f32`.
    pub fn new(in_channels: usize, out_channels: usize, kernel_size: impl Spatial<D>) -> Result<Self> {
        Self::with_options(in_channels, out_channels, kernel_size, ConvOptions::default())
    }

    /// A layer with the given options.
    pub fn with_options(
        in_channels: usize,
        out_channels: usize,
        kernel_size: impl Spatial<D>,
        options: ConvOptions<D>,
    ) -> Result<Self> {
        let name = layer_name::<D>(false);
        let kernel = kernel_size.spatial();
        let ConvOptions { stride, dilation, groups, bias, dtype, padding } = options;
        check_config(name, in_channels, out_channels, &kernel, (stride, dilation, groups), dtype)?;
        if padding == Padding::Same && stride.iter().any(|&s| s != 1) {
            return Err(Error::invalid(name, "padding \"same\" is not supported for strided convolutions"));
        }
        let mut shape = vec![out_channels, in_channels / groups];
        shape.extend_from_slice(&kernel);
        let (weight, bias) = init_params(param_names::<D>(false), &shape, bias.then_some(out_channels), dtype)?;
        Self::from_params(Var::param(weight), bias.map(Var::param), options.args())
    }

    /// A layer over existing parameters (shared with their other holders): `weight`
    /// `[out, in / groups, kernel..]` and an optional `bias` `[out]` of its float dtype.
    pub fn from_params(weight: Var, bias: Option<Var>, args: ConvArgs<D>) -> Result<Self> {
        let name = layer_name::<D>(false);
        check_params::<D>(name, &weight, bias.as_ref(), |ws| ws[0])?;
        if args.groups == 0 || !weight.shape()[0].is_multiple_of(args.groups) {
            return Err(Error::invalid(
                name,
                format!("groups ({}) must divide the weight's {} output channels", args.groups, weight.shape()[0]),
            ));
        }
        Ok(Conv { args, weight, bias, training: TrainingFlag::new() })
    }

    /// The weight, `[out_channels, in_channels / groups, kernel..]`.
    pub fn weight(&self) -> &Var {
        &self.weight
    }

    /// The bias, `[out_channels]`, if the layer has one.
    pub fn bias(&self) -> Option<&Var> {
        self.bias.as_ref()
    }

    /// The convolution's arguments.
    pub fn args(&self) -> &ConvArgs<D> {
        &self.args
    }

    /// The input channels the layer expects.
    pub fn in_channels(&self) -> usize {
        self.weight.shape().dims().get(1).copied().unwrap_or(0) * self.args.groups
    }

    /// The output channels.
    pub fn out_channels(&self) -> usize {
        self.weight.shape().dims().first().copied().unwrap_or(0)
    }

    /// The kernel's extents.
    pub fn kernel_size(&self) -> [usize; D] {
        kernel_size(&self.weight)
    }

    /// The convolution of `x` (`[N, in_channels, spatial..]` or unbatched).
    fn forward(&self, x: &Var) -> Result<Var> {
        x.conv(&self.weight, self.bias.as_ref(), &self.args)
    }
}

/// The kernel's extents from a weight `[.., .., kernel..]` (zeros where it has fewer
/// dimensions, which `forward` then reports).
pub(crate) fn kernel_size<const D: usize>(weight: &Var) -> [usize; D] {
    let ws = weight.shape();
    std::array::from_fn(|d| ws.dims().get(2 + d).copied().unwrap_or(0))
}

/// PyTorch's repr of a padding argument.
pub(crate) fn padding_repr<const D: usize>(p: &Padding<D>) -> Option<String> {
    match p {
        Padding::Explicit(v) if v.iter().all(|&x| x == 0) => None,
        Padding::Explicit(v) => Some(tuple(v)),
        Padding::Same => Some("same".to_string()),
        Padding::Valid => Some("valid".to_string()),
    }
}

impl<const D: usize> fmt::Debug for Conv<D> {
    /// PyTorch's repr: `Conv2d(3, 16, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))`,
    /// naming padding, dilation, groups and a missing bias only when not the default.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ConvArgs { stride, padding, dilation, groups } = self.args;
        let head = (layer_name::<D>(false), self.in_channels(), self.out_channels());
        let extras = [("padding", padding_repr(&padding)), ("dilation", unless_all(&dilation, 1))];
        write_repr(f, head, (&self.kernel_size(), &stride), &extras, groups, self.bias.is_some())
    }
}

/// `values` as a tuple unless every one is `default`.
pub(crate) fn unless_all(values: &[usize], default: usize) -> Option<String> {
    values.iter().any(|&v| v != default).then(|| tuple(values))
}

/// PyTorch's repr of a convolution layer, `Conv2d(3, 16, kernel_size=(3, 3), stride=(1,
/// 1), ..)` from `(name, in_channels, out_channels)`, the kernel size and the stride: then
/// each of `extras` that is given, the groups unless 1, and `bias=False` without a bias.
pub(crate) fn write_repr(
    f: &mut fmt::Formatter<'_>,
    (name, in_channels, out_channels): (&str, usize, usize),
    (kernel, stride): (&[usize], &[usize]),
    extras: &[(&str, Option<String>)],
    groups: usize,
    bias: bool,
) -> fmt::Result {
    write!(f, "{name}({in_channels}, {out_channels}, kernel_size={}, stride={}", tuple(kernel), tuple(stride))?;
    for (what, value) in extras {
        if let Some(v) = value {
            write!(f, ", {what}={v}")?;
        }
    }
    if groups != 1 {
        write!(f, ", groups={groups}")?;
    }
    if !bias {
        write!(f, ", bias=False")?;
    }
    write!(f, ")")
}

/// A 1-d convolution, PyTorch's `torch.nn.functional.conv1d`: `input` `[N, in, L]` (or
/// `[in, L]`), `weight` `[out, in / groups, k]`, `bias` `[out]`.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::functional as F;
/// use ember_tensor::{ConvArgs, Padding, Tensor};
/// let x = Var::new(Tensor::randn([2, 4, 10])?);
/// let w = Var::new(Tensor::randn([6, 4, 3])?);
/// let y = F::conv1d(&x, &w, None, &ConvArgs::default().padding(Padding::Same))?;
/// assert_eq!(y.shape().dims(), &[2, 6, 10]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn conv1d(input: &Var, weight: &Var, bias: Option<&Var>, args: &ConvArgs<1>) -> Result<Var> {
    input.conv1d(weight, bias, args)
}

/// A 2-d convolution, PyTorch's `torch.nn.functional.conv2d`: `input` `[N, in, h, w]` (or
/// `[in, h, w]`), `weight` `[out, in / groups, kh, kw]`, `bias` `[out]`.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::functional as F;
/// use ember_tensor::{ConvArgs, Tensor};
/// let x = Var::new(Tensor::randn([1, 8, 9, 9])?);
/// let depthwise = Var::new(Tensor::randn([8, 1, 3, 3])?);
/// let y = F::conv2d(&x, &depthwise, None, &ConvArgs::default().stride(2).groups(8))?;
/// assert_eq!(y.shape().dims(), &[1, 8, 4, 4]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn conv2d(input: &Var, weight: &Var, bias: Option<&Var>, args: &ConvArgs<2>) -> Result<Var> {
    input.conv2d(weight, bias, args)
}
