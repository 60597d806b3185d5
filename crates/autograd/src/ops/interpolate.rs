//! Interpolation (`nearest`, `linear`, `bilinear`): a separable linear map of the input's
//! planes, so its backward is the transposed map and its second backward the map again
//! (see `pool.rs`).

use super::pool::run_linear;
use crate::autocast::{self, policy};
use crate::export::{ExportAttr, OpExport};
use crate::var::Var;
use ember_tensor::Result;
use ember_tensor::ops::pool::{InterpolateArgs, interpolate_plan};

/// How an exporter sees an interpolation (beside the map's matrices, which the linear map
/// adds): the mode, `align_corners`, and the scale factors on the planned planes when the
/// source positions come from them (otherwise from the sizes).
fn describe(args: &InterpolateArgs, nearest: bool, rank: usize) -> OpExport {
    let mut d = OpExport::new(if nearest { "upsample_nearest" } else { "upsample_linear" })
        .attr("mode", ExportAttr::Int(i64::from(!nearest)))
        .attr("align_corners", ExportAttr::Int(i64::from(args.align_corners.unwrap_or(false))));
    if let (Some(f), false) = (&args.scale_factor, args.recompute_scale_factor.unwrap_or(false)) {
        let at = |i: usize| f.get(i).or(f.first()).copied().unwrap_or(1.0);
        let scales = if rank == 3 { vec![1.0, at(0)] } else { vec![at(0), at(1)] };
        d = d.attr("scales", ExportAttr::Floats(scales));
    }
    d
}

impl Var {
    /// Resamples `[N, C, L]` or `[N, C, H, W]` inputs with PyTorch's `F.interpolate`
    /// semantics (see [`Tensor::interpolate`](ember_tensor::Tensor::interpolate)).
    ///
    /// ```
    /// use ember_autograd::Var;
    /// use ember_tensor::{InterpolateArgs, InterpolateMode, Tensor};
    /// let x = Var::param(Tensor::ones([1, 1, 2, 2], ember_tensor::DType::F64)?);
    /// let y = x.interpolate(&InterpolateArgs::scale_factor([2.0]).mode(InterpolateMode::Bilinear))?;
    /// assert_eq!(y.shape().dims(), &[1, 1, 4, 4]);
    /// y.sum_all().backward()?;
    /// assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![4.0; 4]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    #[track_caller]
    pub fn interpolate(&self, args: &InterpolateArgs) -> Result<Var> {
        if let Some([x]) = autocast::cast(&policy::INTERPOLATE, [self]) {
            return x.interpolate(args);
        }
        let plan = interpolate_plan(&self.shape(), args, self.dtype())?;
        let nearest = args.mode == ember_tensor::InterpolateMode::Nearest;
        let name = if nearest {
            ("upsample_nearest", "upsample_nearest_backward")
        } else {
            ("upsample_linear", "upsample_linear_backward")
        };
        run_linear(self, name, plan, Some(describe(args, nearest, self.shape().rank())))
    }
}
