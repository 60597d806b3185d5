//! The operation trait: what a graph node computes, forward and backward.

use crate::backward_ctx::BackwardCtx;
use crate::var::Var;
use ember_tensor::{Result, Tensor};
use smallvec::SmallVec;

/// The gradients an operation's backward returns, one per input (`None`: no gradient).
pub type Grads = SmallVec<[Option<Var>; 2]>;

/// Which values an operation's backward reads: a bit per input, plus the output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Saves {
    /// Bit `i` set: backward reads the value of input `i`.
    pub inputs: u32,
    /// Backward reads the operation's own output.
    pub output: bool,
}

impl Saves {
    /// Backward reads nothing (addition, views, ...).
    pub const NONE: Saves = Saves { inputs: 0, output: false };
    /// Backward reads every input.
    pub const INPUTS: Saves = Saves { inputs: u32::MAX, output: false };
    /// Backward reads the output only (exp, sigmoid, softmax, ...).
    pub const OUTPUT: Saves = Saves { inputs: 0, output: true };

    /// Backward reads input `i`.
    pub const fn input(i: usize) -> Saves {
        Saves { inputs: 1 << i, output: false }
    }

    pub(crate) fn saves_input(self, i: usize) -> bool {
        i < 32 && self.inputs & (1 << i) != 0
    }
}

/// A differentiable (or at least re-executable) operation: its forward computation on
/// tensors and its backward formula, written with `Var` operations so that it can itself be
/// differentiated when `create_graph` is set.
///
/// `Any` is a supertrait so that a feature can recognise its own operations in a graph
/// (`(&node.op as &dyn Any).downcast_ref::<MyOp>()`) without the trait growing a method
/// per feature.
pub trait Op: std::any::Any + Send + Sync + 'static {
    /// A short lowercase name (`mul`, `matmul`, ...), used in errors, graphs and profiles.
    fn name(&self) -> &str;
    /// Computes the output from the input values. Called when the node is created and
    /// whenever its value must be recomputed (after it was freed, or its inputs changed).
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor>;
    /// Gradients with respect to each input, given the gradient of the output.
    fn backward(&self, ctx: &BackwardCtx<'_>, grad: &Var) -> Result<Grads>;
    /// Which values backward reads; those are version-checked, the others may be freed or
    /// modified freely.
    fn saves(&self) -> Saves {
        Saves::INPUTS
    }
    /// Whether the forward can be run again to recompute a freed value. Operations that are
    /// not (they draw random numbers, say) keep their values after backward. Read once, when
    /// the operation's node is made.
    fn recomputable(&self) -> bool {
        true
    }
    /// Whether the engine checks, in release builds too, that backward's gradients have the
    /// inputs' shapes (debug builds always check). Built-in operations are verified by
    /// gradcheck tests and skip the check; custom functions opt in. Read once, when the
    /// operation's node is made.
    fn validates_grads(&self) -> bool {
        false
    }
    /// Whether backward computes with `Var` operations, so that under `create_graph` its
    /// own computation is recorded and higher-order gradients through it are right. An
    /// operation whose backward calls non-differentiable kernels on raw tensors (or runs a
    /// nested backward) returns false, and the engine refuses `create_graph` through it
    /// with an error naming it instead of returning wrong higher-order gradients. Constant
    /// masks and coefficients (a relu mask, a max's tie shares) are fine: their derivative
    /// is zero.
    fn backward_differentiable(&self) -> bool {
        true
    }
    /// What this operation computes, for exporters (see [`crate::export`]). The default
    /// says the operation has no export description, naming it.
    fn export(&self) -> Result<crate::export::OpExport> {
        Err(ember_tensor::Error::invalid("export", format!("operation '{}' has no export description", self.name())))
    }
}

/// The operation of a leaf: it has no inputs and is never recomputed.
pub(crate) struct Leaf;

impl Op for Leaf {
    fn name(&self) -> &str {
        "leaf"
    }
    fn forward(&self, _: &[&Tensor]) -> Result<Tensor> {
        Err(ember_tensor::Error::autograd("a leaf has no forward computation"))
    }
    fn backward(&self, _: &BackwardCtx<'_>, _: &Var) -> Result<Grads> {
        Ok(Grads::new())
    }
    fn saves(&self) -> Saves {
        Saves::NONE
    }
}
