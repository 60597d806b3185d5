//! Reductions on LibTorch: the rows of the reduction table, softmax and the power sums of
//! gradient norms.

use super::storage::{dims, torch_err};
use crate::backend::ReduceOp;
use crate::dtype::DType;
use crate::error::Result;
use tch::{Kind, Tensor};

/// `op` over `axes` (sorted, unique) of `x`, keeping them as dimensions of extent 1, in
/// `x`'s dtype (an arg reduction's in `i64`). Sums and products of integers wrap in the
/// dtype, as ember's do; no axes reduce nothing.
pub(crate) fn reduce(op: ReduceOp, x: &Tensor, dtype: DType, axes: &[usize]) -> Result<Tensor> {
    let name = op.name();
    let e = torch_err(name);
    let k = x.kind();
    if axes.is_empty() && !matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin) {
        return x.f_to_dtype(k, false, true).map_err(e);
    }
    let ax = dims(axes);
    let r = match op {
        ReduceOp::Sum => x.f_sum_dim_intlist(ax.as_slice(), true, k),
        ReduceOp::Prod => {
            // ATen's product takes one dimension at a time.
            let mut t = x.f_to_dtype(k, false, true).map_err(&e)?;
            for &a in ax.iter().rev() {
                t = t.f_prod_dim_int(a, true, k).map_err(&e)?;
            }
            Ok(t)
        }
        ReduceOp::Max => x.f_amax(ax.as_slice(), true),
        ReduceOp::Min => x.f_amin(ax.as_slice(), true),
        ReduceOp::ArgMax => x.f_argmax(ax[0], true),
        ReduceOp::ArgMin => x.f_argmin(ax[0], true),
    };
    let _ = dtype;
    r.map_err(e)
}

/// Softmax or log-softmax along `dim`, in `x`'s dtype.
pub(crate) fn softmax(x: &Tensor, dim: usize, log: bool) -> Result<Tensor> {
    let e = torch_err("softmax");
    let k = x.kind();
    if log { x.f_log_softmax(dim as i64, k) } else { x.f_softmax(dim as i64, k) }.map_err(e)
}

/// `Σ|x|^p` accumulated in `f64` (`max |x|` for `p = inf`, NaN if any element is NaN).
pub(crate) fn power_sum(x: &Tensor, p: f64) -> Result<f64> {
    let e = torch_err("power_sum");
    if x.numel() == 0 {
        return Ok(0.0);
    }
    let a = x.f_to_dtype(Kind::Double, false, false).and_then(|t| t.f_abs()).map_err(&e)?;
    let total = if p == f64::INFINITY {
        // amax ignores nothing: a NaN element makes the maximum NaN.
        a.f_max()
    } else if p == 1.0 {
        a.f_sum(Kind::Double)
    } else if p == 2.0 {
        a.f_mul(&a).and_then(|t| t.f_sum(Kind::Double))
    } else {
        a.f_pow_tensor_scalar(p).and_then(|t| t.f_sum(Kind::Double))
    }
    .map_err(&e)?;
    total.f_double_value(&[]).map_err(e)
}
