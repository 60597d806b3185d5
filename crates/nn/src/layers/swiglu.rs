//! [`SwiGlu`]: the gated feed-forward block of LLaMA-family transformers.

use super::linear::{Linear, LinearOptions};
use crate::Module;
use ember_autograd::Var;
use ember_tensor::Result;
use std::fmt;

/// The SwiGLU feed-forward block, `down_proj(silu(gate_proj(x)) * up_proj(x))`, with the
/// parameter names of Hugging Face's `LlamaMLP` (`gate_proj`, `up_proj`: `hidden ->
/// intermediate`; `down_proj`: `intermediate -> hidden`), so that a checkpoint's `mlp.*`
/// keys load as they are.
///
/// ```
/// use ember_autograd::Var;
/// use ember_nn::{LinearOptions, Module, SwiGlu};
/// use ember_tensor::Tensor;
/// let mlp = SwiGlu::with_options(8, 20, LinearOptions { bias: false, ..Default::default() })?;
/// assert_eq!(mlp.forward(&Var::new(Tensor::randn([2, 3, 8])?))?.shape().dims(), &[2, 3, 8]);
/// assert_eq!(
///     mlp.state_dict().keys().collect::<Vec<_>>(),
///     ["gate_proj.weight", "up_proj.weight", "down_proj.weight"]
/// );
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Module)]
pub struct SwiGlu {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
}

impl SwiGlu {
    /// A block from `hidden` to `intermediate` and back, with biases, in `f32`.
    pub fn new(hidden: usize, intermediate: usize) -> Result<SwiGlu> {
        Self::with_options(hidden, intermediate, LinearOptions::default())
    }

    /// A block whose three projections are built with `options` (LLaMA has no biases).
    pub fn with_options(hidden: usize, intermediate: usize, options: LinearOptions) -> Result<SwiGlu> {
        Ok(SwiGlu {
            gate_proj: Linear::with_options(hidden, intermediate, options)?,
            up_proj: Linear::with_options(hidden, intermediate, options)?,
            down_proj: Linear::with_options(intermediate, hidden, options)?,
        })
    }

    /// The block over existing projections (`gate_proj` and `up_proj` of the same shape,
    /// `down_proj` back).
    pub fn from_parts(gate_proj: Linear, up_proj: Linear, down_proj: Linear) -> SwiGlu {
        SwiGlu { gate_proj, up_proj, down_proj }
    }

    /// The gate projection, `hidden -> intermediate`.
    pub fn gate_proj(&self) -> &Linear {
        &self.gate_proj
    }

    /// The up projection, `hidden -> intermediate`.
    pub fn up_proj(&self) -> &Linear {
        &self.up_proj
    }

    /// The down projection, `intermediate -> hidden`.
    pub fn down_proj(&self) -> &Linear {
        &self.down_proj
    }

    /// `down_proj(silu(gate_proj(x)) * up_proj(x))` over the last dimension of `x`.
    fn forward(&self, x: &Var) -> Result<Var> {
        let gated = self.gate_proj.forward(x)?.silu().mul(&self.up_proj.forward(x)?)?;
        self.down_proj.forward(&gated)
    }
}

impl fmt::Debug for SwiGlu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = self.gate_proj.weight().shape();
        write!(f, "SwiGlu(hidden={}, intermediate={})", w[1], w[0])
    }
}
