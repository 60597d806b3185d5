//! [`HiddenAct`]: the feed-forward activations transformers' configs name in `hidden_act`
//! (shared by BERT and ViT).

use ember_autograd::Var;
use ember_tensor::{Error, Result};

/// A `hidden_act` of a transformers config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HiddenAct {
    /// `gelu`: the exact (erf) GELU.
    Gelu,
    /// `gelu_new`, `gelu_pytorch_tanh`, `gelu_fast`: GELU's tanh approximation.
    GeluTanh,
    /// `relu`.
    Relu,
    /// `silu` / `swish`.
    Silu,
    /// `tanh`.
    Tanh,
}

impl HiddenAct {
    /// The activation `name` denotes; an unknown name is an error naming `op` (the config).
    pub fn parse(name: &str, op: &'static str) -> Result<HiddenAct> {
        Ok(match name {
            "gelu" => HiddenAct::Gelu,
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => HiddenAct::GeluTanh,
            "relu" => HiddenAct::Relu,
            "silu" | "swish" => HiddenAct::Silu,
            "tanh" => HiddenAct::Tanh,
            other => {
                return Err(Error::invalid(
                    op,
                    format!(
                        "hidden_act {other:?} is not supported (gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, relu, silu, swish, tanh)"
                    ),
                ));
            }
        })
    }

    /// Applies the activation.
    pub fn apply(self, x: &Var) -> Var {
        match self {
            HiddenAct::Gelu => x.gelu(),
            HiddenAct::GeluTanh => x.gelu_tanh(),
            HiddenAct::Relu => x.relu(),
            HiddenAct::Silu => x.silu(),
            HiddenAct::Tanh => x.tanh(),
        }
    }
}
