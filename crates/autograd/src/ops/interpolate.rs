//! Interpolation (`nearest`, `linear`, `bilinear`): a separable linear map of the input's
//! planes, so its backward is the transposed map and its second backward the map again
//! (see `pool.rs`).

use super::pool::run_linear;
use crate::var::Var;
use ember_tensor::Result;
use ember_tensor::pool::{InterpolateArgs, interpolate_plan};

impl Var {
    /// Resamples `[N, C, L]` or `[N, C, H, W]` inputs with PyTorch's `F.interpolate`
    /// semantics (see [`Tensor::interpolate`](ember_tensor::Tensor::interpolate)).
    ///
    /// ```
    /// use ember_autograd::Var;
    /// use ember_tensor::{pool::{InterpolateArgs, InterpolateMode}, Tensor};
    /// let x = Var::param(Tensor::ones([1, 1, 2, 2], ember_tensor::DType::F64)?);
    /// let y = x.interpolate(&InterpolateArgs::scale_factor([2.0]).mode(InterpolateMode::Bilinear))?;
    /// assert_eq!(y.shape().dims(), &[1, 1, 4, 4]);
    /// y.sum_all().backward()?;
    /// assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![4.0; 4]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn interpolate(&self, args: &InterpolateArgs) -> Result<Var> {
        let plan = interpolate_plan(&self.shape(), args, self.dtype())?;
        let name = match args.mode {
            ember_tensor::InterpolateMode::Nearest => ("upsample_nearest", "upsample_nearest_backward"),
            _ => ("upsample_linear", "upsample_linear_backward"),
        };
        run_linear(self, name, plan, None)
    }
}
