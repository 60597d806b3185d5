//! [`Activation`]: the MLP nonlinearities a GPT-2 `activation_function` names.

use ember_autograd::Var;
use ember_tensor::{Error, Result};

/// The nonlinearity of a GPT-2 MLP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// GELU's tanh approximation (`gelu_new`, `gelu_pytorch_tanh`).
    GeluTanh,
    /// The exact GELU (`gelu`).
    Gelu,
    /// `relu`.
    Relu,
    /// `silu` / `swish`.
    Silu,
    /// `tanh`.
    Tanh,
}

impl Activation {
    /// The activation transformers' `ACT2FN[name]` is; other names are an error naming the
    /// field and the value.
    pub fn from_name(name: &str) -> Result<Activation> {
        Ok(match name {
            "gelu_new" | "gelu_pytorch_tanh" => Activation::GeluTanh,
            "gelu" => Activation::Gelu,
            "relu" => Activation::Relu,
            "silu" | "swish" => Activation::Silu,
            "tanh" => Activation::Tanh,
            other => {
                return Err(Error::invalid(
                    "Gpt2Config",
                    format!(
                        "activation_function {other:?} is not supported (gelu_new, gelu_pytorch_tanh, gelu, relu, silu, swish, tanh)"
                    ),
                ));
            }
        })
    }

    /// Applies the activation.
    pub fn apply(self, x: &Var) -> Result<Var> {
        Ok(match self {
            Activation::GeluTanh => x.gelu_tanh(),
            Activation::Gelu => x.gelu(),
            Activation::Relu => x.relu(),
            Activation::Silu => x.silu(),
            Activation::Tanh => x.tanh(),
        })
    }
}
