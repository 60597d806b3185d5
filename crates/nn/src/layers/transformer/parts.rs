//! What the encoder and decoder layers and stacks share: the checks of their options, the
//! construction of their sublayers, the feed-forward block, a block's residual connection,
//! a call of an attention sublayer, and copies of layers.

use super::options::{TransformerActivation, TransformerLayerOptions};
use crate::Module;
use crate::layers::param_alloc::{reserve_total, within};
use crate::layers::{
    Dropout, LayerNorm, LayerNormOptions, Linear, LinearOptions, MultiheadAttention, MultiheadAttentionArgs,
    MultiheadAttentionOptions, dropout,
};
use ember_autograd::Var;
use ember_tensor::{DType, Error, Result, Tensor};

/// The constructors both layers have: `new`, with PyTorch's defaults, and `with_options`,
/// which checks the options before the layer's own `build` makes its sublayers.
macro_rules! layer_constructors {
    ($Layer:ident) => {
        impl $Layer {
            /// A layer over `d_model` features with `nhead` heads and PyTorch's defaults
            /// (`dim_feedforward` 2048, dropout 0.1, ReLU, post-norm, sequence first).
            pub fn new(d_model: usize, nhead: usize) -> Result<$Layer> {
                Self::with_options(d_model, nhead, TransformerLayerOptions::default())
            }

            /// A layer with the given options.
            pub fn with_options(d_model: usize, nhead: usize, options: TransformerLayerOptions) -> Result<$Layer> {
                parts::check(stringify!($Layer), d_model, nhead, &options)?;
                Self::build(d_model, nhead, &options)
            }
        }
    };
}

pub(super) use layer_constructors;

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

/// An attention sublayer with the layer's dropout, bias and layout; a parameter too large
/// to hold is refused naming the layer's sublayer (`name`).
pub(super) fn attention(
    d_model: usize,
    nhead: usize,
    o: &TransformerLayerOptions,
    name: &'static str,
) -> Result<MultiheadAttention> {
    let options = MultiheadAttentionOptions {
        dropout: o.dropout,
        bias: o.bias,
        batch_first: o.batch_first,
        dtype: o.dtype,
        ..Default::default()
    };
    MultiheadAttention::with_options(d_model, nhead, options).map_err(within(name))
}

/// A layer norm over `d_model` with the layer's epsilon and bias; a refusal names the
/// layer's norm (`name`).
pub(super) fn norm(d_model: usize, o: &TransformerLayerOptions, name: &'static str) -> Result<LayerNorm> {
    let options = LayerNormOptions { eps: o.layer_norm_eps, bias: o.bias, dtype: o.dtype, ..Default::default() };
    LayerNorm::with_options(&[d_model], options).map_err(within(name))
}

/// A copy of `norm` with its own parameters holding the same values, in the same mode.
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
fn copy_linear(linear: &Linear) -> Result<Linear> {
    Linear::from_parts(linear.weight().value().copy(), linear.bias().map(|b| b.value().copy()))
}

/// The position-wise feed-forward block `linear2(dropout(activation(linear1(x))))`, whose
/// parts a layer takes as its own (`linear1.*`, `linear2.*`).
#[derive(Module)]
pub(super) struct FeedForward {
    pub linear1: Linear,
    dropout: Dropout,
    pub linear2: Linear,
    #[module(skip)]
    activation: TransformerActivation,
}

impl FeedForward {
    /// The block of a layer; a parameter too large to hold is refused naming the layer's
    /// `linear1` or `linear2` (`names`).
    pub fn new(d_model: usize, o: &TransformerLayerOptions, names: [&'static str; 2]) -> Result<FeedForward> {
        let options = LinearOptions { bias: o.bias, dtype: o.dtype };
        Ok(FeedForward {
            linear1: Linear::with_options(d_model, o.dim_feedforward, options).map_err(within(names[0]))?,
            dropout: Dropout::new(o.dropout)?,
            linear2: Linear::with_options(o.dim_feedforward, d_model, options).map_err(within(names[1]))?,
            activation: o.activation,
        })
    }

    /// A copy with its own parameters holding the same values, in the same mode.
    pub fn deep_copy(&self) -> Result<FeedForward> {
        let copy = FeedForward {
            linear1: copy_linear(&self.linear1)?,
            dropout: Dropout::new(self.dropout.p())?,
            linear2: copy_linear(&self.linear2)?,
            activation: self.activation,
        };
        copy.set_training(self.dropout.is_training());
        Ok(copy)
    }

    /// The block's output before the layer's residual dropout.
    pub fn forward(&self, x: &Var) -> Result<Var> {
        self.linear2.forward(&self.dropout.forward(&self.activation.apply(&self.linear1.forward(x)?))?)
    }
}

/// How a layer wraps each block: dropout after it, then the residual sum, with the block's
/// norm before (`norm_first`) or after.
#[derive(Clone, Copy)]
pub(super) struct Residual {
    dropout: f64,
    norm_first: bool,
}

impl Residual {
    /// The wrapping the options ask for.
    pub fn new(o: &TransformerLayerOptions) -> Residual {
        Residual { dropout: o.dropout, norm_first: o.norm_first }
    }

    /// The dropout probability.
    pub fn dropout(&self) -> f64 {
        self.dropout
    }

    /// `x + dropout(block(norm(x)))` (pre-norm) or `norm(x + dropout(block(x)))`.
    pub fn apply(
        &self,
        x: &Var,
        norm: &LayerNorm,
        training: bool,
        block: impl FnOnce(&Var) -> Result<Var>,
    ) -> Result<Var> {
        if self.norm_first {
            x.add(&dropout(&block(&norm.forward(x)?)?, self.dropout, training)?)
        } else {
            norm.forward(&x.add(&dropout(&block(x)?, self.dropout, training)?)?)
        }
    }
}

/// The masks of one attention call, in [`MultiheadAttentionArgs`]'s terms.
pub(super) struct AttentionMasks<'a> {
    pub attn_mask: Option<&'a Tensor>,
    pub key_padding_mask: Option<&'a Tensor>,
    pub is_causal: bool,
}

/// The output of `attn` for queries `x` over `memory` (`x` itself for self-attention),
/// without the weights.
pub(super) fn attend(attn: &MultiheadAttention, x: &Var, memory: &Var, masks: AttentionMasks<'_>) -> Result<Var> {
    let args = MultiheadAttentionArgs {
        key_padding_mask: masks.key_padding_mask,
        need_weights: false,
        attn_mask: masks.attn_mask,
        average_attn_weights: true,
        is_causal: masks.is_causal,
    };
    Ok(attn.forward_with(x, memory, memory, &args)?.output)
}

/// `num_layers` independent copies of `layer` for a stack named `op`, refused before any is
/// made unless all can be held: `num_layers` costs nothing to pass, and copying layer after
/// layer would run the process out of memory rather than refuse.
pub(super) fn copies<L: Module>(
    op: &'static str,
    layer: &L,
    num_layers: usize,
    deep_copy: impl Fn(&L) -> Result<L>,
) -> Result<Vec<L>> {
    if num_layers == 0 {
        return Err(Error::invalid(op, "num_layers must be positive, got 0"));
    }
    let params = layer.parameters();
    let dtype = params.first().map_or(DType::F32, Var::dtype);
    let per_layer = params.iter().try_fold(0usize, |a, p| a.checked_add(p.shape().numel()));
    reserve_total(op, per_layer.and_then(|n| n.checked_mul(num_layers)), dtype)?;
    (0..num_layers).map(|_| deep_copy(layer)).collect()
}

/// `x` through a stack's final norm, if it has one.
pub(super) fn final_norm(norm: Option<&LayerNorm>, x: Var) -> Result<Var> {
    match norm {
        Some(n) => n.forward(&x),
        None => Ok(x),
    }
}
