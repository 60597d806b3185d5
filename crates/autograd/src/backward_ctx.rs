//! What an operation's backward sees: its inputs and output as `Var`s (version-checked when
//! saved), which inputs need gradients, and the input shapes.
//!
//! An extension may keep what backward reads in place of the values themselves (a packed
//! copy, say): the engine hands each context a [`SavedSource`] to ask, and the context asks
//! only about nodes that carry an extension flag.

use crate::grad_buffer::grad_buffer;
use crate::node::{GRAD_IN_PLACE, NodeRef, VALUE_AWAY};
use crate::var::Var;
use ember_tensor::{Error, Result, Shape, Tensor};
use smallvec::SmallVec;
use std::sync::Arc;

/// What backward reads in place of saved values, for nodes an extension flagged.
pub(crate) trait SavedSource: Sync {
    /// The storage version of a value that was dropped (`VALUE_AWAY`), if a tensor handle
    /// to its storage is still alive (a write through it is still a write to a saved value).
    fn away_version(&self, node: &NodeRef) -> Option<u64>;
    /// What backward reads instead of input `i` of `node` (recorded at `versions`).
    fn saved_input(&self, node: &NodeRef, i: usize, versions: (u64, u64), input: &NodeRef) -> Option<Result<Var>>;
    /// What backward reads instead of `node`'s output.
    fn saved_output(&self, node: &NodeRef) -> Option<Result<Var>>;
}

/// The context of one backward call of one node.
pub struct BackwardCtx<'a> {
    pub(crate) node: &'a NodeRef,
    pub(crate) needs: SmallVec<[bool; 2]>,
    pub(crate) saved: &'a dyn SavedSource,
    /// Per input: it is a leaf whose whole gradient of this backward comes from this node
    /// and is accumulated into its `.grad` (no `create_graph`, no `grad()` targets). Empty
    /// when no input is.
    pub(crate) sole: SmallVec<[bool; 2]>,
    /// The incoming gradient when this backward holds the only handle to it and nothing is
    /// differentiated through it (see [`BackwardCtx::writable_grad`]); `None` otherwise.
    pub(crate) owned_grad: Option<&'a Var>,
}

impl BackwardCtx<'_> {
    /// Whether input `i` needs a gradient; an operation may skip computing the others.
    pub fn needs_input_grad(&self, i: usize) -> bool {
        self.needs.get(i).copied().unwrap_or(false)
    }

    /// Where the gradient of input `i` may be written in place of a new tensor: the
    /// gradient buffer of a leaf ([`Var::set_grad_buffer`]) whose `.grad` is none, when this
    /// node gives the leaf its only gradient of this backward and backward accumulates it
    /// into `.grad`. An operation that writes its gradient for input `i` into the buffer
    /// (overwriting it) and returns the buffer spares the engine copying the gradient in;
    /// one that ignores it loses nothing. `None` otherwise.
    pub fn grad_destination(&self, i: usize) -> Option<Var> {
        if !self.sole.get(i).copied().unwrap_or(false) {
            return None;
        }
        let input = self.node.inputs.get(i)?;
        if !input.has(GRAD_IN_PLACE) || input.grad_slot().is_some() {
            return None;
        }
        grad_buffer(input)
    }

    /// The incoming gradient's value, to overwrite with the gradient this operation passes
    /// on, when nothing else can see it: `g` is the gradient the engine handed to this
    /// backward, the engine holds the only handle to it (no hook, `retain_grad` or
    /// `grad()` target kept one), no other tensor shares its storage, it is a dense float
    /// tensor that does not require grad, and the backward neither runs under
    /// `create_graph` nor under an extension watching the thread (the profiler, anomaly
    /// mode, saved-tensor hooks). An operation whose gradient is an elementwise function of
    /// `g` alone, or `g` times a tensor of its shape and dtype, writes it there and returns
    /// `g` (no buffer is allocated, and no new `Var`); `None` means: compute a new tensor as
    /// usual.
    ///
    /// The gradient a backward passes on is then bitwise the same: the in-place kernels are
    /// the out-of-place ones.
    pub fn writable_grad(&self, g: &Var) -> Option<Tensor> {
        let owned = self.owned_grad?;
        if !Arc::ptr_eq(&owned.node, &g.node) || Arc::strong_count(&g.node) != 1 || g.requires_grad() {
            return None;
        }
        let st = g.node.state();
        let t = st.value.as_ref()?;
        // Only the node's own tensor holds the storage: no view or clone of it exists.
        (Arc::strong_count(t.storage()) == 1 && t.is_contiguous() && t.dtype().is_float()).then(|| t.clone())
    }

    /// The number of inputs.
    pub fn num_inputs(&self) -> usize {
        self.node.inputs.len()
    }

    fn modified(&self, what: String, shape: &Shape, dtype: ember_tensor::DType, now: u64, then: u64) -> Error {
        Error::autograd(format!(
            "one of the variables needed for gradient computation has been modified by an inplace operation: \
             {what} of {} [{dtype} {shape:?}] is at version {now}; expected version {then} instead",
            self.node.op.name(),
        ))
    }

    /// Input `i` as a `Var`. If the operation saved it, an in-place write to it since the
    /// forward is an error naming the operation and both versions.
    pub fn input(&self, i: usize) -> Result<Var> {
        let node = self.node.inputs.get(i).ok_or_else(|| {
            Error::autograd(format!("{}: backward asked for input {i} of {}", self.node.op.name(), self.num_inputs()))
        })?;
        if self.node.op.saves().saves_input(i) {
            // Versions are compared without the value itself, which an extension may have
            // dropped in favour of a copy of its own (`VALUE_AWAY`).
            let recorded = self.node.state().input_versions.get(i).copied();
            let (vv, mut sv) = node.state().versions();
            if node.has(VALUE_AWAY)
                && let Some(now) = self.saved.away_version(node)
            {
                sv = now;
            }
            if let Some((rv, rs)) = recorded
                && (rv, rs) != (vv, sv)
            {
                let v = Var::from_node_ensured(node.clone())?.value();
                let (now, then) = if rv == vv { (sv, rs) } else { (vv, rv) };
                return Err(self.modified(format!("input {i}"), v.shape(), v.dtype(), now, then));
            }
            // An extension's substitute is read instead, and the original is never needed
            // (it is then not recomputed if it was dropped).
            if self.node.extensions() != 0
                && let Some(r) = recorded
                && let Some(v) = self.saved.saved_input(self.node, i, r, node)
            {
                return v;
            }
        }
        Var::from_node_ensured(node.clone())
    }

    /// The operation's output as a `Var`, version-checked if the operation saved it.
    pub fn output(&self) -> Result<Var> {
        if self.node.op.saves().output {
            let written = {
                let st = self.node.state();
                match &st.value {
                    Some(v) => (v.version() != st.storage_version)
                        .then(|| (v.shape().clone(), v.dtype(), v.version(), st.storage_version)),
                    None => None,
                }
            };
            let written = match written {
                Some(w) => Some(w),
                None => match self.node.has(VALUE_AWAY).then(|| self.saved.away_version(self.node)).flatten() {
                    Some(now) if now != self.node.state().storage_version => {
                        let v = Var::from_node_ensured(self.node.clone())?.value();
                        Some((v.shape().clone(), v.dtype(), now, self.node.state().storage_version))
                    }
                    _ => None,
                },
            };
            if let Some((shape, dtype, now, then)) = written {
                return Err(self.modified("the output".into(), &shape, dtype, now, then));
            }
            if self.node.extensions() != 0
                && let Some(v) = self.saved.saved_output(self.node)
            {
                return v;
            }
        }
        Var::from_node_ensured(self.node.clone())
    }

    /// The shape of input `i` (recomputing a freed value if needed).
    pub fn input_shape(&self, i: usize) -> Result<Shape> {
        Ok(self.input(i)?.shape())
    }
}
