//! PNNX operators as ember computations: each `.param` operator becomes one [`Step`],
//! built from its parameters and weights.

use crate::expr::{self, Expr};
use crate::param::Operator;
use crate::weights::Weights;
use ember_autograd::{Var, no_grad};
use ember_nn::functional::{AvgPoolArgs, MaxPoolArgs, Padding};
use ember_nn::{
    BatchNorm1d, BatchNorm2d, BatchNormOptions, Conv2d, Conv2dOptions, LayerNorm, LayerNormOptions, Linear,
    LinearOptions, Module, MultiheadAttention, MultiheadAttentionArgs, MultiheadAttentionOptions,
};
use ember_tensor::{Error, Result};

/// What one operator computes.
pub(crate) enum Step {
    /// An `nn.*` layer holding weights.
    Layer(Box<dyn Module>),
    /// `nn.MultiheadAttention` on one input (self-attention) or three (query, key, value).
    Attention(MultiheadAttention),
    /// An elementwise function.
    Unary(fn(&Var) -> Var),
    /// `softmax` or `log_softmax` over `dim`.
    Softmax {
        dim: i64,
        log: bool,
    },
    Flatten {
        start: i64,
        end: i64,
    },
    Reshape(Vec<i64>),
    Cat(i64),
    MaxPool(MaxPoolArgs<2>),
    AvgPool(AvgPoolArgs<2>),
    AdaptiveAvgPool([usize; 2]),
    Expression(Expr),
}

/// Typed access to an operator's parameters, with errors naming the operator.
struct Params<'a>(&'a Operator);

impl Params<'_> {
    fn raw(&self, key: &str) -> Result<&str> {
        self.0.params.get(key).map(String::as_str).ok_or_else(|| self.error(format!("has no parameter `{key}`")))
    }

    fn error(&self, msg: String) -> Error {
        Error::invalid("pnnx", format!("{} {msg}", self.0.describe()))
    }

    fn bool(&self, key: &str) -> Result<bool> {
        match self.raw(key)? {
            "True" => Ok(true),
            "False" => Ok(false),
            other => Err(self.error(format!("has `{key}={other}`, not True or False"))),
        }
    }

    fn bool_or(&self, key: &str, default: bool) -> Result<bool> {
        if self.0.params.contains_key(key) { self.bool(key) } else { Ok(default) }
    }

    fn float(&self, key: &str) -> Result<f64> {
        let v = self.raw(key)?;
        v.parse().map_err(|_| self.error(format!("has `{key}={v}`, not a number")))
    }

    fn ints(&self, key: &str) -> Result<Vec<i64>> {
        let v = self.raw(key)?;
        let inner = v.trim_start_matches(['(', '[']).trim_end_matches([')', ']']);
        inner
            .split(',')
            .filter(|t| !t.is_empty())
            .map(|t| t.parse::<i64>().map_err(|_| self.error(format!("has `{key}={v}`, not integers"))))
            .collect()
    }

    fn int(&self, key: &str) -> Result<i64> {
        match self.ints(key)?[..] {
            [v] => Ok(v),
            _ => Err(self.error(format!("has `{key}={}`, not one integer", self.raw(key)?))),
        }
    }

    fn usize(&self, key: &str) -> Result<usize> {
        let v = self.int(key)?;
        usize::try_from(v).map_err(|_| self.error(format!("has `{key}={v}`")))
    }

    /// A pair such as `kernel_size=(3,3)` (a single number stands for both).
    fn pair(&self, key: &str) -> Result<[usize; 2]> {
        let v = self.ints(key)?;
        let u = |x: i64| usize::try_from(x).map_err(|_| self.error(format!("has `{key}` {v:?}")));
        match v[..] {
            [a] => Ok([u(a)?, u(a)?]),
            [a, b] => Ok([u(a)?, u(b)?]),
            _ => Err(self.error(format!("has `{key}` {v:?}, not one or two sizes"))),
        }
    }

    fn require(&self, key: &str, wanted: &str) -> Result<()> {
        match self.0.params.get(key) {
            Some(v) if v != wanted => Err(self.error(format!("has `{key}={v}`; ember supports only {wanted}"))),
            _ => Ok(()),
        }
    }
}

/// Copies the operator's weights into `layer`'s parameters and buffers (named as in its
/// `state_dict`); a declared weight the layer does not have is an error.
fn load_weights(op: &Operator, layer: &dyn Module, weights: &mut Weights<'_>) -> Result<()> {
    let bad = |msg: String| Error::invalid("pnnx", msg);
    let state = layer.state_dict();
    for name in op.weights.keys() {
        if state.get(name).is_none() {
            return Err(bad(format!("{} has weight `{name}`, which ember's layer does not have", op.describe())));
        }
    }
    for (name, dst) in state.iter() {
        if name == "num_batches_tracked" {
            continue;
        }
        let src = weights.get(op, name).map_err(bad)?;
        if src.shape() != dst.shape() {
            return Err(bad(format!(
                "{}: weight `{name}` has shape {:?}, the layer needs {:?}",
                op.describe(),
                src.shape(),
                dst.shape()
            )));
        }
        no_grad(|| dst.copy_(&src))?;
    }
    Ok(())
}

/// The step for `op`, its weights read from `weights`.
pub(crate) fn build(op: &Operator, weights: &mut Weights<'_>) -> Result<Step> {
    let p = Params(op);
    let layer = |m: Box<dyn Module>, weights: &mut Weights<'_>| -> Result<Step> {
        load_weights(op, m.as_ref(), weights)?;
        m.eval();
        Ok(Step::Layer(m))
    };
    Ok(match op.kind.as_str() {
        "nn.Linear" => {
            let o = LinearOptions { bias: p.bool("bias")?, ..Default::default() };
            layer(Box::new(Linear::with_options(p.usize("in_features")?, p.usize("out_features")?, o)?), weights)?
        }
        "nn.Conv2d" => {
            p.require("padding_mode", "zeros")?;
            let padding = match p.raw("padding")? {
                "same" => Padding::Same,
                "valid" => Padding::Valid,
                _ => Padding::Explicit(p.pair("padding")?),
            };
            let o = Conv2dOptions {
                stride: p.pair("stride")?,
                padding,
                dilation: p.pair("dilation")?,
                groups: p.usize("groups")?,
                bias: p.bool("bias")?,
                ..Default::default()
            };
            let conv =
                Conv2d::with_options(p.usize("in_channels")?, p.usize("out_channels")?, p.pair("kernel_size")?, o)?;
            layer(Box::new(conv), weights)?
        }
        kind @ ("nn.BatchNorm1d" | "nn.BatchNorm2d") => {
            let o = BatchNormOptions { eps: p.float("eps")?, affine: p.bool("affine")?, ..Default::default() };
            let n = p.usize("num_features")?;
            let m: Box<dyn Module> = if kind == "nn.BatchNorm1d" {
                Box::new(BatchNorm1d::with_options(n, o)?)
            } else {
                Box::new(BatchNorm2d::with_options(n, o)?)
            };
            layer(m, weights)?
        }
        "nn.LayerNorm" => {
            let shape: Vec<usize> = p
                .ints("normalized_shape")?
                .into_iter()
                .map(|d| usize::try_from(d).map_err(|_| p.error(format!("has normalized_shape dimension {d}"))))
                .collect::<Result<_>>()?;
            let affine = p.bool("elementwise_affine")?;
            let o = LayerNormOptions { eps: p.float("eps")?, elementwise_affine: affine, ..Default::default() };
            layer(Box::new(LayerNorm::with_options(&shape, o)?), weights)?
        }
        "nn.MultiheadAttention" => {
            let embed = p.usize("embed_dim")?;
            for key in ["kdim", "vdim"] {
                if p.0.params.contains_key(key) && p.usize(key)? != embed {
                    return Err(p.error(format!("has {key} != embed_dim; ember loads equal dimensions only")));
                }
            }
            p.require("add_bias_kv", "False")?;
            p.require("add_zero_attn", "False")?;
            let o = MultiheadAttentionOptions {
                bias: p.bool("bias")?,
                batch_first: p.bool_or("batch_first", false)?,
                ..Default::default()
            };
            let mha = MultiheadAttention::with_options(embed, p.usize("num_heads")?, o)?;
            load_weights(op, &mha, weights)?;
            mha.eval();
            if !matches!(op.inputs.len(), 1 | 3) {
                return Err(p.error(format!("has {} inputs; ember runs 1 (self-attention) or 3", op.inputs.len())));
            }
            Step::Attention(mha)
        }
        "nn.ReLU" | "F.relu" => Step::Unary(Var::relu),
        "nn.Sigmoid" | "F.sigmoid" | "torch.sigmoid" => Step::Unary(Var::sigmoid),
        "nn.Tanh" | "F.tanh" | "torch.tanh" => Step::Unary(Var::tanh),
        "nn.GELU" | "F.gelu" => {
            p.require("approximate", "none")?;
            Step::Unary(Var::gelu)
        }
        "nn.Dropout" | "F.dropout" | "nn.Identity" => Step::Unary(Var::clone),
        "nn.Softmax" | "F.softmax" | "torch.softmax" => Step::Softmax { dim: p.int("dim")?, log: false },
        "nn.LogSoftmax" | "F.log_softmax" | "torch.log_softmax" => Step::Softmax { dim: p.int("dim")?, log: true },
        "torch.flatten" | "nn.Flatten" => Step::Flatten { start: p.int("start_dim")?, end: p.int("end_dim")? },
        "Tensor.reshape" | "Tensor.view" | "torch.reshape" => Step::Reshape(p.ints("shape")?),
        "torch.cat" => Step::Cat(p.int("dim")?),
        "nn.MaxPool2d" | "F.max_pool2d" => {
            if p.bool_or("return_indices", false)? {
                return Err(p.error("returns indices; ember loads the pooled values only".into()));
            }
            let mut args = MaxPoolArgs::new(p.pair("kernel_size")?);
            args.stride = Some(p.pair("stride")?);
            args.padding = p.pair("padding")?;
            args.dilation = p.pair("dilation")?;
            args.ceil_mode = p.bool("ceil_mode")?;
            Step::MaxPool(args)
        }
        "nn.AvgPool2d" | "F.avg_pool2d" => {
            p.require("divisor_override", "None")?;
            let mut args = AvgPoolArgs::new(p.pair("kernel_size")?);
            args.stride = Some(p.pair("stride")?);
            args.padding = p.pair("padding")?;
            args.ceil_mode = p.bool("ceil_mode")?;
            args.count_include_pad = p.bool("count_include_pad")?;
            Step::AvgPool(args)
        }
        "nn.AdaptiveAvgPool2d" | "F.adaptive_avg_pool2d" => Step::AdaptiveAvgPool(p.pair("output_size")?),
        "pnnx.Expression" => {
            let text = p.raw("expr")?;
            Step::Expression(expr::parse(text, op.inputs.len()).map_err(|m| p.error(m))?)
        }
        other => {
            return Err(Error::invalid(
                "pnnx",
                format!(
                    "{}: operator `{other}` is not supported (docs/interop.md lists those that are)",
                    op.describe()
                ),
            ));
        }
    })
}

impl Step {
    /// Runs the step on its inputs, giving its outputs.
    pub(crate) fn run(&self, x: &[Var]) -> Result<Vec<Var>> {
        let one = |v: Var| Ok(vec![v]);
        match self {
            Step::Layer(m) => one(m.forward(&x[0])?),
            Step::Attention(mha) => {
                let (q, k, v) = if x.len() == 3 { (&x[0], &x[1], &x[2]) } else { (&x[0], &x[0], &x[0]) };
                let args = MultiheadAttentionArgs { need_weights: false, ..Default::default() };
                one(mha.forward_with(q, k, v, &args)?.output)
            }
            Step::Unary(f) => one(f(&x[0])),
            Step::Softmax { dim, log } => one(if *log { x[0].log_softmax(*dim)? } else { x[0].softmax(*dim)? }),
            Step::Flatten { start, end } => one(x[0].flatten(*start, *end)?),
            Step::Reshape(shape) => one(x[0].reshape(shape.as_slice())?),
            Step::Cat(dim) => one(Var::cat(&x.iter().collect::<Vec<_>>(), *dim)?),
            Step::MaxPool(args) => one(x[0].max_pool2d(args)?),
            Step::AvgPool(args) => one(x[0].avg_pool2d(args)?),
            Step::AdaptiveAvgPool(size) => one(x[0].adaptive_avg_pool2d(*size)?),
            Step::Expression(e) => one(e.eval(x)?),
        }
    }

    /// The layer holding weights, if any.
    pub(crate) fn module(&self) -> Option<&dyn Module> {
        match self {
            Step::Layer(m) => Some(m.as_ref()),
            Step::Attention(m) => Some(m),
            _ => None,
        }
    }
}
