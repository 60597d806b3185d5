//! [`Gpt2Attention`]: GPT-2's causal self-attention, one fused query/key/value projection
//! and an output projection, reading and extending a [`KvCache`] when generating.

use super::config::Gpt2Config;
use crate::generation::KvCache;
use ember_autograd::Var;
use ember_nn::functional::{SdpaArgs, dropout, scaled_dot_product_attention};
use ember_nn::{Linear, LinearOptions, Module, TrainingFlag};
use ember_tensor::{DType, Result};

/// Which positions a query may attend to in one forward pass.
#[derive(Clone, Debug)]
pub(crate) enum Visibility {
    /// Each query sees itself and the positions before it (no cache, no padding).
    Causal,
    /// Each query sees every key (a single new position after the cached ones).
    All,
    /// A boolean mask `[batch, 1, new, past + new]` (padding, or several new positions
    /// after cached ones).
    Mask(Var),
}

/// GPT-2's multi-head causal self-attention (transformers' `GPT2Attention`): `c_attn`
/// projects to queries, keys and values at once, `c_proj` mixes the heads' outputs.
/// The checkpoint's `Conv1D` weights are stored transposed here, as [`Linear`] weights
/// (`[out, in]`).
#[derive(Module)]
pub struct Gpt2Attention {
    c_attn: Linear,
    c_proj: Linear,
    #[module(skip)]
    n_head: usize,
    #[module(skip)]
    scale: f64,
    #[module(skip)]
    attn_pdrop: f64,
    #[module(skip)]
    resid_pdrop: f64,
    training: TrainingFlag,
}

impl Gpt2Attention {
    /// The attention of block `layer` of a model of `config`, with parameters of `dtype`.
    pub fn new(config: &Gpt2Config, layer: usize, dtype: DType) -> Result<Gpt2Attention> {
        let e = config.n_embd;
        let options = LinearOptions { bias: true, dtype };
        let mut scale = if config.scale_attn_weights { 1.0 / (config.head_dim() as f64).sqrt() } else { 1.0 };
        if config.scale_attn_by_inverse_layer_idx {
            scale /= (layer + 1) as f64;
        }
        Ok(Gpt2Attention {
            c_attn: Linear::with_options(e, 3 * e, options)?,
            c_proj: Linear::with_options(e, e, options)?,
            n_head: config.n_head,
            scale,
            attn_pdrop: config.attn_pdrop,
            resid_pdrop: config.resid_pdrop,
            training: TrainingFlag::new(),
        })
    }

    /// Causal attention over `x` `[batch, positions, n_embd]` alone.
    fn forward(&self, x: &Var) -> Result<Var> {
        self.attend(x, &Visibility::Causal, None)
    }

    /// Attention of the new positions `x` `[batch, new, n_embd]`; with `cache`, over the
    /// cached positions of layer `cache.1` too, whose keys and values are extended by the
    /// new ones (and then carry no gradient).
    pub(crate) fn attend(&self, x: &Var, visibility: &Visibility, cache: Option<(&mut KvCache, usize)>) -> Result<Var> {
        let dims = x.shape().dims().to_vec();
        let (batch, new, embd) = (dims[0], dims[1], dims[2]);
        let heads = self.n_head;
        let split_heads = |t: &Var| -> Result<Var> { t.reshape([batch, new, heads, embd / heads])?.transpose(1, 2) };
        let qkv = self.c_attn.forward(x)?.chunk(3, 2)?;
        let q = split_heads(&qkv[0])?;
        let mut k = split_heads(&qkv[1])?;
        let mut v = split_heads(&qkv[2])?;
        if let Some((cache, layer)) = cache {
            let (all_k, all_v) = cache.append(layer, &k.value(), &v.value())?;
            k = Var::new(all_k);
            v = Var::new(all_v);
        }
        let training = self.training.get();
        let mut args = SdpaArgs::default().scale(self.scale).dropout(if training { self.attn_pdrop } else { 0.0 });
        match visibility {
            Visibility::Causal => args = args.causal(),
            Visibility::All => {}
            Visibility::Mask(m) => args = args.mask(m.clone()),
        }
        let out = scaled_dot_product_attention(&q, &k, &v, &args)?.transpose(1, 2)?.reshape([batch, new, embd])?;
        dropout(&self.c_proj.forward(&out)?, self.resid_pdrop, training)
    }
}
