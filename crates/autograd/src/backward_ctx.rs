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
        let var = Var::from_node_ensured(node.clone())?;
        if self.node.op.saves().saves_input(i) {
            let recorded = self.node.state().input_versions.get(i).copied();
            let (vv, sv) = node.state().versions();
            if let Some((rv, rs)) = recorded
                && (rv, rs) != (vv, sv)
            {
                let v = var.value();
                let (now, then) = if rv == vv { (sv, rs) } else { (vv, rv) };
                return Err(self.modified(format!("input {i}"), v.shape_obj(), v.dtype(), now, then));
            }
            // Saved-tensor hooks: the value is checked above, backward reads the unpacked one.
            if self.node.has(HAS_PACKED)
                && let Some(p) = recorded.and_then(|r| crate::saved_hooks::packed_input(self.node, i, r))
            {
                return crate::saved_hooks::unpack(self.node.op.name(), &format!("input {i}"), p, &var);
            }
        }
        Ok(var)
    }

    /// The operation's output as a `Var`, version-checked if the operation saved it.
    pub fn output(&self) -> Result<Var> {
        let var = Var::from_node_ensured(self.node.clone())?;
        if self.node.op.saves().output {
            {
                let st = self.node.state();
                if let Some(v) = &st.value
                    && v.version() != st.storage_version
                {
                    return Err(self.modified(
                        "the output".into(),
                        v.shape_obj(),
                        v.dtype(),
                        v.version(),
                        st.storage_version,
                    ));
                }
            }
            if self.node.has(HAS_PACKED)
                && let Some(p) = crate::saved_hooks::packed_output(self.node)
            {
                return crate::saved_hooks::unpack(self.node.op.name(), "the output", p, &var);
            }
        }
        Ok(var)
    }

    /// The shape of input `i` (recomputing a freed value if needed).
    pub fn input_shape(&self, i: usize) -> Result<Shape> {
        Ok(self.input(i)?.shape())
    }
}
