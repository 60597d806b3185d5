//! `unfold` (im2col) and `fold` (col2im): linear maps that are each other's adjoint, so
//! each one's backward is the other.

use super::apply;
use crate::backward_ctx::BackwardCtx;
use crate::op::{Grads, Op, Saves};
use crate::var::Var;
use ember_tensor::ops::conv::{SlidingWindow, UnfoldArgs, WindowPlan, fold_plan, unfold_plan};
use ember_tensor::{Result, Tensor};
use smallvec::smallvec;

/// `[N, C, h, w]` to its blocks as columns, `[N, C * kh * kw, L]`.
struct Unfold {
    window: SlidingWindow,
}

impl Op for Unfold {
    fn name(&self) -> &str {
        "unfold"
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].unfold_resolved(&self.window)
    }
    fn backward(&self, _: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        Ok(smallvec![Some(apply(Fold { window: self.window }, &[g])?)])
    }
    fn saves(&self) -> Saves {
        Saves::NONE
    }
}

/// Columns `[N, C * kh * kw, L]` summed back into `[N, C, h, w]`.
struct Fold {
    window: SlidingWindow,
}

impl Op for Fold {
    fn name(&self) -> &str {
        "fold"
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].fold_resolved(&self.window)
    }
    fn backward(&self, _: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        Ok(smallvec![Some(apply(Unfold { window: self.window }, &[g])?)])
    }
    fn saves(&self) -> Saves {
        Saves::NONE
    }
}

/// Applies `op` to `x` viewed as the plan's batched input, and shapes the result as planned.
#[track_caller]
fn run<O: Op>(x: &Var, plan: &WindowPlan, op: O) -> Result<Var> {
    apply(op, &[&x.reshape(&plan.input)?])?.reshape(&plan.output)
}

impl Var {
    /// The sliding blocks of `self` (`[N, C, h, w]` or `[C, h, w]`) as columns, PyTorch's
    /// `torch.nn.functional.unfold` (see [`Tensor::im2col`](ember_tensor::Tensor::im2col)).
    ///
    /// ```
    /// use ember_autograd::Var;
    /// use ember_tensor::{Tensor, UnfoldArgs};
    /// let x = Var::param(Tensor::randn([1, 2, 4, 4])?);
    /// let cols = x.im2col(&UnfoldArgs::new(3))?;
    /// assert_eq!(cols.shape().dims(), &[1, 18, 4]);
    /// cols.sum_all().backward()?;
    /// // Each pixel's gradient counts the blocks that contain it.
    /// assert_eq!(x.grad().unwrap().to_vec::<f32>()?[..4], [1.0, 2.0, 2.0, 1.0]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    #[track_caller]
    pub fn im2col(&self, args: &UnfoldArgs) -> Result<Var> {
        let plan = unfold_plan(&self.shape(), args)?;
        run(self, &plan, Unfold { window: plan.window })
    }

    /// Columns of blocks summed into an image of `output_size`, PyTorch's
    /// `torch.nn.functional.fold` (see [`Tensor::col2im`](ember_tensor::Tensor::col2im)).
    #[track_caller]
    pub fn col2im(&self, output_size: [usize; 2], args: &UnfoldArgs) -> Result<Var> {
        let plan = fold_plan(&self.shape(), output_size, args)?;
        run(self, &plan, Fold { window: plan.window })
    }
}
