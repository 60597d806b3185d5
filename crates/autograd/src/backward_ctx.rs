//! What an operation's backward sees: its inputs and output as `Var`s (version-checked when
//! saved), which inputs need gradients, and the input shapes.

use crate::node::{HAS_PACKED, NodeRef};
use crate::var::Var;
use ember_tensor::{Error, Result, Shape};
use smallvec::SmallVec;

/// The context of one backward call of one node.
pub struct BackwardCtx<'a> {
    pub(crate) node: &'a NodeRef,
    pub(crate) needs: SmallVec<[bool; 2]>,
}

impl BackwardCtx<'_> {
    /// Whether input `i` needs a gradient; an operation may skip computing the others.
    pub fn needs_input_grad(&self, i: usize) -> bool {
        self.needs.get(i).copied().unwrap_or(false)
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
            // Versions are compared without the value itself, which saved-tensor hooks may
            // have dropped in favour of a packed copy.
            let recorded = self.node.state().input_versions.get(i).copied();
            let (vv, mut sv) = node.state().versions();
            if let Some(now) = crate::saved_hooks::away_version(node) {
                sv = now;
            }
            if let Some((rv, rs)) = recorded
                && (rv, rs) != (vv, sv)
            {
                let v = Var::from_node_ensured(node.clone())?.value();
                let (now, then) = if rv == vv { (sv, rs) } else { (vv, rv) };
                return Err(self.modified(format!("input {i}"), v.shape_obj(), v.dtype(), now, then));
            }
            // Saved-tensor hooks: backward reads the unpacked value, and never needs the
            // original (which is then not recomputed if it was dropped).
            if self.node.has(HAS_PACKED)
                && let Some(p) = recorded.and_then(|r| crate::saved_hooks::packed_input(self.node, i, r))
            {
                return crate::saved_hooks::unpack(self.node.op.name(), &format!("input {i}"), p, Some(node));
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
                        .then(|| (v.shape_obj().clone(), v.dtype(), v.version(), st.storage_version)),
                    None => None,
                }
            };
            let written = match written {
                Some(w) => Some(w),
                None => match crate::saved_hooks::away_version(self.node) {
                    Some(now) if now != self.node.state().storage_version => {
                        let v = Var::from_node_ensured(self.node.clone())?.value();
                        Some((v.shape_obj().clone(), v.dtype(), now, self.node.state().storage_version))
                    }
                    _ => None,
                },
            };
            if let Some((shape, dtype, now, then)) = written {
                return Err(self.modified("the output".into(), &shape, dtype, now, then));
            }
            if self.node.has(HAS_PACKED)
                && let Some(p) = crate::saved_hooks::packed_output(self.node)
            {
                return crate::saved_hooks::unpack(self.node.op.name(), "the output", p, Some(self.node));
            }
        }
        Var::from_node_ensured(self.node.clone())
    }

    /// The shape of input `i` (recomputing a freed value if needed).
    pub fn input_shape(&self, i: usize) -> Result<Shape> {
        Ok(self.input(i)?.shape())
    }
}
