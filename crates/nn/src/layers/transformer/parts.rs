//! What the encoder and decoder layers share: the feed-forward block, attention and norm
//! construction with the layers' options, and independent copies of sublayers.

use super::options::{TransformerActivation, TransformerLayerOptions};
use crate::layers::param_alloc::{reserve_total, within};
use crate::layers::{
    LayerNorm, LayerNormOptions, Linear, LinearOptions, MultiheadAttention, MultiheadAttentionOptions, dropout,
};
use crate::module::Module;
use ember_autograd::Var;
use ember_tensor::{DType, Error, Result};

/// Checks the options shared by both layers.
pub(super) fn check(op: &'static str, d_model: usize, nhead: usize, o: &TransformerLayerOptions) -> Result<()> {
    if o.dim_feedforward == 0 {
        return Err(Error::invalid(op, "dim_feedforward must be positive, got 0"));
    }
    if !(0.0..=1.0).contains(&o.dropout) {
        return Err(Error::invalid(op, format!("dropout must be in [0, 1], got {}", o.dropout)));
    }
    if d_model == 0 || nhead == 0 || !d_model.is_multiple_of(nhead) {
        return Err(Error::invalid(
            op,
            format!("d_model must be a positive multiple of nhead, got d_model={d_model}, nhead={nhead}"),
        ));
    }
    Ok(())
}

/// An attention sublayer with the layer's dropout, bias and layout.
pub(super) fn attention(d_model: usize, nhead: usize, o: &TransformerLayerOptions) -> Result<MultiheadAttention> {
    let options = MultiheadAttentionOptions {
        dropout: o.dropout,
        bias: o.bias,
        batch_first: o.batch_first,
        dtype: o.dtype,
        ..Default::default()
    };
    MultiheadAttention::with_options(d_model, nhead, options)
}

/// An error naming `op` unless `copies` copies of `layer`'s parameters can be held, before
/// any is made: `num_layers` costs nothing to pass, and copying layer after layer would run
/// the process out of memory rather than refuse.
pub(super) fn reserve_copies(op: &'static str, layer: &impl Module, copies: usize) -> Result<()> {
    let params = layer.parameters();
    let dtype = params.first().map_or(DType::F32, Var::dtype);
    let per_layer = params.iter().try_fold(0usize, |a, p| a.checked_add(p.shape().numel()));
    reserve_total(op, per_layer.and_then(|n| n.checked_mul(copies)), dtype)
}

/// A layer norm over `d_model` with the layer's epsilon and bias.
pub(super) fn norm(d_model: usize, o: &TransformerLayerOptions) -> Result<LayerNorm> {
    let options = LayerNormOptions { eps: o.layer_norm_eps, bias: o.bias, dtype: o.dtype, ..Default::default() };
    LayerNorm::with_options(&[d_model], options)
}

/// A copy of `norm` with its own parameters holding the same values.
pub(super) fn copy_norm(norm: &LayerNorm) -> Result<LayerNorm> {
    let dtype = norm.weight().map_or(DType::F32, Var::dtype);
    let options = LayerNormOptions {
        eps: norm.eps(),
        elementwise_affine: norm.weight().is_some(),
        bias: norm.bias().is_some(),
        dtype,
    };
    let copy = LayerNorm::with_options(norm.normalized_shape(), options)?;
    for ((_, dst), (_, src)) in copy.named_parameters().iter().zip(norm.named_parameters()) {
        dst.value().copy_(&src.value())?;
    }
    copy.set_training(norm.is_training());
    Ok(copy)
}

/// A copy of `linear` with its own parameters holding the same values.
pub(super) fn copy_linear(linear: &Linear) -> Result<Linear> {
    Linear::from_parts(linear.weight().value().copy(), linear.bias().map(|b| b.value().copy()))
}

/// The position-wise feed-forward block `linear2(dropout(activation(linear1(x))))`.
pub(super) struct FeedForward {
    pub linear1: Linear,
    pub linear2: Linear,
    pub activation: TransformerActivation,
}

impl FeedForward {
    /// The block of a layer; a parameter too large to hold is refused naming the layer's
    /// `linear1` or `linear2` (`names`).
    pub fn new(d_model: usize, o: &TransformerLayerOptions, names: [&'static str; 2]) -> Result<FeedForward> {
        let options = LinearOptions { bias: o.bias, dtype: o.dtype };
        Ok(FeedForward {
            linear1: Linear::with_options(d_model, o.dim_feedforward, options).map_err(within(names[0]))?,
            linear2: Linear::with_options(o.dim_feedforward, d_model, options).map_err(within(names[1]))?,
            activation: o.activation,
        })
    }

    pub fn deep_copy(&self) -> Result<FeedForward> {
        Ok(FeedForward {
            linear1: copy_linear(&self.linear1)?,
            linear2: copy_linear(&self.linear2)?,
            activation: self.activation,
        })
    }

    /// The block's output before the layer's residual dropout.
    pub fn forward(&self, x: &Var, p: f64, training: bool) -> Result<Var> {
        let hidden = self.activation.apply(&self.linear1.forward(x)?);
        self.linear2.forward(&dropout(&hidden, p, training)?)
    }

    pub fn named_parameters(&self) -> Vec<(String, Var)> {
        let prefixed = |k: &str, m: &Linear| {
            m.named_parameters().into_iter().map(|(n, p)| (format!("{k}.{n}"), p)).collect::<Vec<_>>()
        };
        let mut params = prefixed("linear1", &self.linear1);
        params.extend(prefixed("linear2", &self.linear2));
        params
    }
}

/// The parameters of named children, under `child.name`.
pub(super) fn prefixed(kids: &[(&str, &dyn Module)]) -> Vec<(String, Var)> {
    kids.iter().flat_map(|(k, m)| m.named_parameters().into_iter().map(move |(n, p)| (format!("{k}.{n}"), p))).collect()
}

/// The parameters of a stack of layers and its optional final norm, named as PyTorch's
/// `TransformerEncoder` / `TransformerDecoder` name them (`layers.{i}.…`, `norm.…`).
pub(super) fn stack_parameters<L: Module>(layers: &[L], norm: Option<&LayerNorm>) -> Vec<(String, Var)> {
    let mut params: Vec<(String, Var)> = layers
        .iter()
        .enumerate()
        .flat_map(|(i, l)| l.named_parameters().into_iter().map(move |(n, p)| (format!("layers.{i}.{n}"), p)))
        .collect();
    if let Some(n) = norm {
        params.extend(prefixed(&[("norm", n)]));
    }
    params
}

/// Switches a stack's layers and final norm to training or evaluation.
pub(super) fn set_stack_training<L: Module>(layers: &[L], norm: Option<&LayerNorm>, on: bool) {
    layers.iter().for_each(|l| l.set_training(on));
    if let Some(n) = norm {
        n.set_training(on);
    }
}
