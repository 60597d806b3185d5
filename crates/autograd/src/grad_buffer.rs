//! A leaf's gradient buffer ([`Var::set_grad_buffer`]): storage that the leaf's first
//! gradient of a backward is written into, instead of a new tensor, and that then is its
//! `.grad`. Data-parallel training gives each parameter a view of its communication bucket,
//! so that the gradients land where the all-reduce reads them.

use crate::node::{GRAD_IN_PLACE, NodeRef};
use crate::var::Var;
use ember_tensor::{Error, Result, Tensor};

/// The buffer, kept in the node's extras.
#[derive(Default)]
struct GradBuffer(Option<Var>);

/// The gradient buffer of `node`, if it has one.
pub(crate) fn grad_buffer(node: &NodeRef) -> Option<Var> {
    node.extras().as_ref().and_then(|e| e.slot::<GradBuffer>()).and_then(|b| b.0.clone())
}

impl Var {
    /// Gives this leaf a gradient buffer (PyTorch's DDP `gradient_as_bucket_view` builds on
    /// the same idea): whenever backward gives the leaf a gradient while its `.grad` is none
    /// (the first backward after [`Var::zero_grad`]), the gradient is written into `buffer`,
    /// which becomes `.grad`; later gradients are added into it in place, as with
    /// [`Var::set_grad_in_place`], which this turns on. An operation that produces the
    /// gradient can write it into the buffer directly
    /// ([`BackwardCtx::grad_destination`](crate::BackwardCtx::grad_destination)), so that no
    /// copy is made at all. `None` removes the buffer (in-place accumulation stays as it is).
    ///
    /// `buffer` must have the leaf's shape, dtype and device and be contiguous; it usually is a
    /// view of a larger tensor. Under `create_graph` the gradient keeps its graph and the
    /// buffer is not used.
    ///
    /// ```
    /// use ember_autograd::Var;
    /// use ember_tensor::{DType, Tensor};
    /// let w = Var::param(Tensor::ones([2], DType::F32)?);
    /// let bucket = Tensor::zeros([4], DType::F32)?;
    /// w.set_grad_buffer(Some(Var::new(bucket.narrow(0, 2, 2)?)))?;
    /// w.mul_scalar(3.0).sum_all().backward()?;
    /// assert_eq!(bucket.to_vec::<f32>()?, vec![0.0, 0.0, 3.0, 3.0]);
    /// assert!(w.grad().is_some_and(|g| g.shares_storage(&bucket)));
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn set_grad_buffer(&self, buffer: Option<Var>) -> Result<&Var> {
        const OP: &str = "set_grad_buffer";
        if !self.is_leaf() {
            return Err(Error::autograd(format!(
                "{OP}: only a leaf accumulates a gradient, and this Var was computed by {}",
                self.op_name()
            )));
        }
        if let Some(b) = &buffer {
            let t = b.value();
            self.check_grad(OP, &t)?;
            if t.dtype() != self.dtype() || !t.is_contiguous() {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "the buffer must be a contiguous {} tensor, got a {}contiguous {} one",
                        self.dtype(),
                        if t.is_contiguous() { "" } else { "non-" },
                        t.dtype()
                    ),
                ));
            }
            self.node.set(GRAD_IN_PLACE, true);
        }
        let mut extras = self.node.extras();
        match buffer {
            Some(b) => extras.get_or_insert_with(Default::default).slot_or_default::<GradBuffer>().0 = Some(b),
            None => {
                if let Some(slot) = extras.as_mut().and_then(|e| e.slot_mut::<GradBuffer>()) {
                    slot.0 = None;
                }
            }
        }
        Ok(self)
    }

    /// The buffer set by [`Var::set_grad_buffer`].
    pub fn grad_buffer(&self) -> Option<Tensor> {
        grad_buffer(&self.node).map(|b| b.value())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ember_tensor::DType;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn weight() -> Result<Var> {
        Ok(Var::param(Tensor::from_vec((0..6).map(|k| k as f32 * 0.25 - 0.5).collect(), [2, 3])?))
    }

    fn input() -> Result<Var> {
        Ok(Var::new(Tensor::from_vec((0..12).map(|k| 1.0 - k as f32 / 7.0).collect(), [4, 3])?))
    }

    /// The gradient of `weight()` in `loss`, computed without a buffer.
    fn plain_grad(loss: impl Fn(&Var) -> Result<Var>) -> Result<Vec<f32>> {
        let w = weight()?;
        loss(&w)?.backward()?;
        w.grad().ok_or_else(|| Error::autograd("no gradient"))?.to_vec::<f32>()
    }

    /// A leaf with a buffer that is a view into the middle of `bucket`.
    fn with_buffer(bucket: &Tensor) -> Result<Var> {
        let w = weight()?;
        w.set_grad_buffer(Some(Var::new(bucket.narrow(0, 1, 6)?.reshape([2, 3])?)))?;
        Ok(w)
    }

    /// A linear layer writes its weight's gradient straight into the buffer (the gradient
    /// reaching the leaf already is the buffer), with the bits of the plain gradient; a
    /// second backward adds into it in place; after `zero_grad` the next one writes it again.
    #[test]
    fn a_linear_layer_writes_its_weight_gradient_into_the_buffer() -> Result<()> {
        let loss = |w: &Var| Ok(input()?.linear(w, None)?.square().sum_all());
        let want = plain_grad(loss)?;
        let bucket = Tensor::full([8], 9.0, DType::F32)?;
        let w = with_buffer(&bucket)?;
        let written = Arc::new(AtomicBool::new(false));
        let seen = written.clone();
        let view = bucket.clone();
        w.register_hook(move |g| {
            seen.store(g.value().shares_storage(&view), Ordering::SeqCst);
            Ok(None)
        })?;
        loss(&w)?.backward()?;
        assert!(written.load(Ordering::SeqCst), "the gradient was made elsewhere and copied");
        let grad = w.grad().ok_or_else(|| Error::autograd("no gradient"))?;
        assert!(grad.shares_storage(&bucket));
        assert_eq!(grad.to_vec::<f32>()?, want);
        let b = bucket.to_vec::<f32>()?;
        assert_eq!((b[0], b[7]), (9.0, 9.0));
        loss(&w)?.backward()?;
        let twice: Vec<f32> = want.iter().map(|g| g + g).collect();
        assert_eq!(bucket.to_vec::<f32>()?[1..7], twice[..]);
        w.zero_grad();
        loss(&w)?.backward()?;
        assert_eq!(bucket.to_vec::<f32>()?[1..7], want[..]);
        assert!(w.grad().is_some_and(|g| g.shares_storage(&bucket)));
        Ok(())
    }

    /// A leaf that gets gradients from two operations, or from an operation that does not
    /// write into buffers, ends with the right sum in the buffer (the engine copies it in).
    #[test]
    fn other_gradients_are_copied_into_the_buffer() -> Result<()> {
        let twice = |w: &Var| Ok(input()?.linear(w, None)?.add(&input()?.linear(w, None)?)?.square().sum_all());
        let scaled = |w: &Var| Ok(w.mul_scalar(3.0).square().sum_all());
        for loss in [&twice as &dyn Fn(&Var) -> Result<Var>, &scaled] {
            let want = plain_grad(loss)?;
            let bucket = Tensor::zeros([8], DType::F32)?;
            let w = with_buffer(&bucket)?;
            loss(&w)?.backward()?;
            assert!(w.grad().is_some_and(|g| g.shares_storage(&bucket)));
            assert_eq!(bucket.to_vec::<f32>()?[1..7], want[..]);
        }
        Ok(())
    }

    /// Under `create_graph` the gradient keeps its graph and the buffer stays untouched;
    /// removing the buffer makes backward give new tensors again.
    #[test]
    fn create_graph_and_a_removed_buffer_leave_the_buffer_alone() -> Result<()> {
        let bucket = Tensor::zeros([8], DType::F32)?;
        let w = with_buffer(&bucket)?;
        input()?.linear(&w, None)?.square().sum_all().backward_full(None, false, true)?;
        assert!(w.grad_var().is_some_and(|g| g.requires_grad()));
        assert_eq!(bucket.to_vec::<f32>()?, vec![0.0; 8]);
        w.zero_grad();
        w.set_grad_buffer(None)?;
        assert!(w.grad_buffer().is_none());
        input()?.linear(&w, None)?.square().sum_all().backward()?;
        assert!(w.grad().is_some_and(|g| !g.shares_storage(&bucket)));
        assert_eq!(bucket.to_vec::<f32>()?, vec![0.0; 8]);
        // A buffer of the wrong shape, dtype or layout, or on a computed Var, is refused.
        assert!(w.set_grad_buffer(Some(Var::new(Tensor::zeros([3, 2], DType::F32)?))).is_err());
        assert!(w.set_grad_buffer(Some(Var::new(Tensor::zeros([2, 3], DType::F64)?))).is_err());
        assert!(w.set_grad_buffer(Some(Var::new(Tensor::zeros([3, 2], DType::F32)?.t()?))).is_err());
        assert!(w.mul_scalar(2.0).set_grad_buffer(None).is_err());
        Ok(())
    }
}
