//! The entry points of backward: `Var::backward*` and the functional [`grad`].

use crate::engine::{Run, execute};
use crate::var::Var;
use ember_tensor::{Error, Result, Tensor};

fn root_grad(root: &Var, grad_output: Option<&Var>, op: &str) -> Result<Var> {
    match grad_output {
        Some(g) => {
            let ((gs, gd), (rs, rd)) = (g.shape_and_dtype(), root.shape_and_dtype());
            if gs != rs {
                return Err(Error::autograd(format!(
                    "{op}: grad_output of shape {gs:?} does not match the output's shape {rs:?}"
                )));
            }
            let (gdev, rdev) = (g.device(), root.device());
            if gdev != rdev {
                return Err(Error::autograd(format!(
                    "{op}: grad_output is on {gdev} but the output is on {rdev}; expected one device"
                )));
            }
            // Like PyTorch's validate_outputs, a gradient of another dtype is converted to
            // the output's (differentiably, should it carry a graph).
            Ok(if gd != rd { g.to_dtype(rd) } else { g.clone() })
        }
        None => {
            if root.numel() != 1 {
                return Err(Error::autograd(format!(
                    "{op}: a gradient can only be created implicitly for a scalar output, but the output has shape \
                     {:?}; pass grad_output",
                    root.shape()
                )));
            }
            Ok(Var::new(root.value().ones_like()))
        }
    }
}

impl Var {
    /// Backpropagates from this scalar: accumulates `d self / d leaf` into the `.grad` of
    /// every leaf that requires grad, then frees what only backward needed.
    pub fn backward(&self) -> Result<()> {
        self.backward_full(None, false, false)
    }

    /// Backpropagates `grad_output` (required for a non-scalar output). With
    /// `retain_graph`, intermediate values stay and intermediate gradients are readable
    /// until the next backward.
    pub fn backward_with(&self, grad_output: Option<&Tensor>, retain_graph: bool) -> Result<()> {
        let g = grad_output.map(|t| Var::new(t.clone()));
        self.backward_full(g.as_ref(), retain_graph, false)
    }

    /// The general form: with `create_graph`, the backward computation is itself recorded,
    /// so that the gradients can be differentiated again (it implies `retain_graph`).
    ///
    /// Under `create_graph` a leaf's `.grad` (and a [`Var::retain_grad`] node's) carries
    /// the graph of its computation, which usually refers back to the leaf: as in PyTorch,
    /// leaf and gradient then hold each other until [`Var::zero_grad`] (or prefer [`grad`],
    /// which touches no `.grad`). Other intermediate nodes keep only the value of their
    /// gradient, so they never hold their own graph.
    pub fn backward_full(&self, grad_output: Option<&Var>, retain_graph: bool, create_graph: bool) -> Result<()> {
        if !self.requires_grad() {
            return Err(Error::autograd(
                "backward: the output does not require grad (no parameter or input with requires_grad reaches it)",
            ));
        }
        let g = root_grad(self, grad_output, "backward")?;
        execute(Run {
            roots: vec![(self.node.clone(), g)],
            targets: None,
            retain_graph,
            create_graph,
            target_hooks: true,
        })?;
        Ok(())
    }
}

/// The gradients of `outputs` with respect to `inputs`, without touching any `.grad`
/// (PyTorch's `torch.autograd.grad`).
///
/// `grad_outputs` is empty (every output must then be a scalar) or holds one gradient per
/// output. The result has one entry per input: `None` when the input does not influence the
/// outputs. With `create_graph` the returned gradients carry their own graph.
///
/// ```
/// use ember_autograd::{grad, Var};
/// use ember_tensor::Tensor;
/// let x = Var::param(Tensor::scalar(2.0f64));
/// let y = x.pow_scalar(3.0)?; // y = x^3
/// let dy = grad(&[&y], &[&x], &[], false, true)?[0].clone().unwrap(); // 3x^2 = 12
/// let d2y = grad(&[&dy], &[&x], &[], false, false)?[0].clone().unwrap(); // 6x = 12
/// assert_eq!((dy.item()?, d2y.item()?), (12.0, 12.0));
/// assert!(x.grad().is_none());
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub fn grad(
    outputs: &[&Var],
    inputs: &[&Var],
    grad_outputs: &[&Var],
    retain_graph: bool,
    create_graph: bool,
) -> Result<Vec<Option<Var>>> {
    grad_with(outputs, inputs, grad_outputs, retain_graph, create_graph, true)
}

/// [`grad`], optionally without running the grad hooks of `inputs` (for a backward nested
/// in another that runs them; see `engine::Run::target_hooks`).
pub(crate) fn grad_with(
    outputs: &[&Var],
    inputs: &[&Var],
    grad_outputs: &[&Var],
    retain_graph: bool,
    create_graph: bool,
    target_hooks: bool,
) -> Result<Vec<Option<Var>>> {
    if outputs.is_empty() {
        return Err(Error::autograd("grad: no outputs given"));
    }
    if !grad_outputs.is_empty() && grad_outputs.len() != outputs.len() {
        return Err(Error::autograd(format!(
            "grad: {} grad_outputs for {} outputs",
            grad_outputs.len(),
            outputs.len()
        )));
    }
    for (i, x) in inputs.iter().enumerate() {
        if !x.requires_grad() {
            return Err(Error::autograd(format!("grad: input {i} does not require grad")));
        }
    }
    let mut roots = Vec::with_capacity(outputs.len());
    for (i, y) in outputs.iter().enumerate() {
        if !y.requires_grad() {
            return Err(Error::autograd(format!("grad: output {i} does not require grad")));
        }
        let g = root_grad(y, grad_outputs.get(i).copied(), "grad")?;
        roots.push((y.node.clone(), g));
    }
    let targets: Vec<_> = inputs.iter().map(|v| v.node.clone()).collect();
    execute(Run { roots, targets: Some(&targets), retain_graph, create_graph, target_hooks })
}
