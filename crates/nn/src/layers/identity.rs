//! [`Identity`]: the layer that returns its input.

use super::activation::stateless_module;
use crate::module::Module;
use ember_autograd::Var;
use ember_tensor::Result;

/// Returns its input unchanged (the same `Var`), like PyTorch's `nn.Identity`: a placeholder
/// where an architecture may or may not have a layer.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Identity;
stateless_module!(Identity, |self, x| Ok(x.clone()));
