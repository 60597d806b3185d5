//! [`Gpt2Block`]: one pre-norm transformer block of GPT-2, and its [`Gpt2Mlp`].

use super::activation::Activation;
use super::attention::{Gpt2Attention, Visibility};
use super::config::Gpt2Config;
use crate::generation::KvCache;
use ember_autograd::Var;
use ember_nn::functional::dropout;
use ember_nn::{LayerNorm, LayerNormOptions, Linear, LinearOptions, Module, TrainingFlag};
use ember_tensor::{DType, Result};

/// GPT-2's feed-forward part (transformers' `GPT2MLP`): `c_fc` to the inner width, the
/// activation, `c_proj` back, dropout.
#[derive(Module)]
pub struct Gpt2Mlp {
    c_fc: Linear,
    c_proj: Linear,
    #[module(skip)]
    activation: Activation,
    #[module(skip)]
    resid_pdrop: f64,
    training: TrainingFlag,
}

impl Gpt2Mlp {
    /// The MLP of a model of `config`, with parameters of `dtype`.
    pub fn new(config: &Gpt2Config, dtype: DType) -> Result<Gpt2Mlp> {
        let options = LinearOptions { bias: true, dtype };
        Ok(Gpt2Mlp {
            c_fc: Linear::with_options(config.n_embd, config.inner_dim(), options)?,
            c_proj: Linear::with_options(config.inner_dim(), config.n_embd, options)?,
            activation: Activation::from_name(&config.activation_function)?,
            resid_pdrop: config.resid_pdrop,
            training: TrainingFlag::new(),
        })
    }

    fn forward(&self, x: &Var) -> Result<Var> {
        let h = self.activation.apply(&self.c_fc.forward(x)?)?;
        dropout(&self.c_proj.forward(&h)?, self.resid_pdrop, self.training.get())
    }
}

/// One block: `x + attn(ln_1(x))`, then `x + mlp(ln_2(x))` (transformers' `GPT2Block`).
#[derive(Module)]
pub struct Gpt2Block {
    ln_1: LayerNorm,
    attn: Gpt2Attention,
    ln_2: LayerNorm,
    mlp: Gpt2Mlp,
}

impl Gpt2Block {
    /// Block `layer` of a model of `config`, with parameters of `dtype`.
    pub fn new(config: &Gpt2Config, layer: usize, dtype: DType) -> Result<Gpt2Block> {
        let norm = || {
            LayerNorm::with_options(
                &[config.n_embd],
                LayerNormOptions { eps: config.layer_norm_epsilon, dtype, ..Default::default() },
            )
        };
        Ok(Gpt2Block {
            ln_1: norm()?,
            attn: Gpt2Attention::new(config, layer, dtype)?,
            ln_2: norm()?,
            mlp: Gpt2Mlp::new(config, dtype)?,
        })
    }

    fn forward(&self, x: &Var) -> Result<Var> {
        self.step(x, &Visibility::Causal, None)
    }

    /// The block over new positions `x`, attending as `visibility` says, through `cache`
    /// when given.
    pub(crate) fn step(&self, x: &Var, visibility: &Visibility, cache: Option<(&mut KvCache, usize)>) -> Result<Var> {
        let x = x.add(&self.attn.attend(&self.ln_1.forward(x)?, visibility, cache)?)?;
        x.add(&self.mlp.forward(&self.ln_2.forward(&x)?)?)
    }
}
