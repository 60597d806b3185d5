//! The fused optimizer steps on LibTorch: the update rules of `ops::optim`, written with
//! PyTorch's elementwise kernels in ember's order of operations (each product and sum
//! rounded once, no fused multiply-adds, the constants rounded to the parameter's dtype),
//! so that a step gives the CPU backend's values. The new values are written into the
//! parameter and its state in place. 16-bit operands are widened by the caller.

use super::storage::torch_err;
use crate::dtype::DType;
use crate::error::Result;
use crate::ops::optim::{AdamStep, RmsPropStep, SgdStep};
use tch::Tensor;

type R<T> = std::result::Result<T, tch::TchError>;

/// A constant rounded to the dtype the update computes in, as a LibTorch scalar.
fn c(dtype: DType, v: f64) -> f64 {
    if dtype == DType::F32 { v as f32 as f64 } else { v }
}

/// ATen's `lerp(start, end, w)` in its two forms (see the CPU backend's).
fn lerp(start: &Tensor, end: &Tensor, w: f64, dtype: DType) -> R<Tensor> {
    let diff = end.f_sub(start)?;
    if w.abs() < 0.5 { start.f_add(&diff.f_mul_scalar(w)?) } else { end.f_sub(&diff.f_mul_scalar(c(dtype, 1.0 - w))?) }
}

/// `g + wd·p` when the decay is on, else `g`.
fn decayed(g: &Tensor, p: &Tensor, wd: f64, on: bool) -> R<Tensor> {
    if on { g.f_add(&p.f_mul_scalar(wd)?) } else { g.f_mul_scalar(1.0) }
}

/// The views as the step reads and writes them: the parameter, the gradient and the state.
pub(crate) struct Views<'a> {
    /// Parameter (written).
    pub param: &'a mut Tensor,
    /// Gradient.
    pub grad: &'a Tensor,
}

/// One SGD step.
pub(crate) fn sgd(v: Views<'_>, buffer: Option<&mut Tensor>, hp: &SgdStep, dtype: DType) -> Result<()> {
    let go = || -> R<()> {
        let neg_lr = c(dtype, -hp.lr);
        let p = v.param.shallow_clone();
        let d = decayed(v.grad, &p, c(dtype, hp.weight_decay), hp.weight_decay != 0.0)?;
        let new_p = match buffer {
            Some(b) => {
                let bv = if hp.fresh_buffer {
                    d.shallow_clone()
                } else {
                    b.f_mul_scalar(c(dtype, hp.momentum))?.f_add(&d.f_mul_scalar(c(dtype, 1.0 - hp.dampening))?)?
                };
                b.f_copy_(&bv)?;
                if hp.nesterov {
                    p.f_add(&d.f_add(&bv.f_mul_scalar(c(dtype, hp.momentum))?)?.f_mul_scalar(neg_lr)?)?
                } else {
                    p.f_add(&bv.f_mul_scalar(neg_lr)?)?
                }
            }
            None => p.f_add(&d.f_mul_scalar(neg_lr)?)?,
        };
        v.param.f_copy_(&new_p)
    };
    go().map_err(torch_err("sgd_step"))
}

/// The state of an Adam step: the two moments and, with AMSGrad, the running maximum.
pub(crate) struct AdamViews<'a> {
    /// Running average of the gradient.
    pub m: &'a mut Tensor,
    /// Running average of the squared gradient.
    pub v: &'a mut Tensor,
    /// Running maximum of `v`.
    pub vmax: Option<&'a mut Tensor>,
}

/// One Adam or AdamW step.
pub(crate) fn adam(v: Views<'_>, s: AdamViews<'_>, hp: &AdamStep, dtype: DType) -> Result<()> {
    let go = || -> R<()> {
        let t = hp.step as f64;
        let step_size = hp.lr / (1.0 - hp.beta1.powf(t));
        let p = v.param.shallow_clone();
        let coupled = hp.weight_decay != 0.0 && !hp.decoupled;
        let d = decayed(v.grad, &p, c(dtype, hp.weight_decay), coupled)?;
        let w1 = c(dtype, 1.0 - hp.beta1);
        let mv = lerp(s.m, &d, w1, dtype)?;
        let vv = s.v.f_mul_scalar(c(dtype, hp.beta2))?.f_add(&d.f_mul_scalar(c(dtype, 1.0 - hp.beta2))?.f_mul(&d)?)?;
        let second = match s.vmax {
            Some(x) => {
                let m = x.f_maximum(&vv)?;
                x.f_copy_(&m)?;
                m
            }
            None => vv.shallow_clone(),
        };
        s.m.f_copy_(&mv)?;
        s.v.f_copy_(&vv)?;
        let q = if hp.decoupled && hp.weight_decay != 0.0 {
            p.f_mul_scalar(c(dtype, 1.0 - hp.lr * hp.weight_decay))?
        } else {
            p.shallow_clone()
        };
        let bc2_sqrt = c(dtype, (1.0 - hp.beta2.powf(t)).sqrt());
        let denom = second.f_sqrt()?.f_div_scalar(bc2_sqrt)?.f_add_scalar(c(dtype, hp.eps))?;
        let upd = mv.f_mul_scalar(c(dtype, -step_size))?.f_div(&denom)?;
        v.param.f_copy_(&q.f_add(&upd)?)
    };
    go().map_err(torch_err("adam_step"))
}

/// The state of an RMSprop step.
pub(crate) struct RmsPropViews<'a> {
    /// Running average of the squared gradient.
    pub square_avg: &'a mut Tensor,
    /// Running average of the gradient (centered).
    pub grad_avg: Option<&'a mut Tensor>,
    /// Momentum buffer.
    pub momentum: Option<&'a mut Tensor>,
}

/// One RMSprop step.
pub(crate) fn rmsprop(v: Views<'_>, s: RmsPropViews<'_>, hp: &RmsPropStep, dtype: DType) -> Result<()> {
    let go = || -> R<()> {
        let p = v.param.shallow_clone();
        let d = decayed(v.grad, &p, c(dtype, hp.weight_decay), hp.weight_decay != 0.0)?;
        let w = c(dtype, 1.0 - hp.alpha);
        let sv = s.square_avg.f_mul_scalar(c(dtype, hp.alpha))?.f_add(&d.f_mul_scalar(w)?.f_mul(&d)?)?;
        let avg = match s.grad_avg {
            Some(ga) => {
                let a = lerp(ga, &d, w, dtype)?;
                ga.f_copy_(&a)?;
                sv.f_add(&a.f_neg()?.f_mul(&a)?)?.f_sqrt()?.f_add_scalar(c(dtype, hp.eps))?
            }
            None => sv.f_sqrt()?.f_add_scalar(c(dtype, hp.eps))?,
        };
        s.square_avg.f_copy_(&sv)?;
        let neg_lr = c(dtype, -hp.lr);
        let new_p = match s.momentum {
            Some(b) => {
                let bv = b.f_mul_scalar(c(dtype, hp.momentum))?.f_add(&d.f_div(&avg)?)?;
                b.f_copy_(&bv)?;
                p.f_add(&bv.f_mul_scalar(neg_lr)?)?
            }
            None => p.f_add(&d.f_mul_scalar(neg_lr)?.f_div(&avg)?)?,
        };
        v.param.f_copy_(&new_p)
    };
    go().map_err(torch_err("rmsprop_step"))
}

/// Gradient unscaling of the view `g` in place: whether any element was infinite or NaN,
/// then each element times `inv_scale`, computed in `f32` (`f64` for an `f64` view) and
/// rounded back (ATen's `_amp_foreach_non_finite_check_and_unscale_` for one tensor,
/// which tch does not bind).
pub(crate) fn unscale(mut g: Tensor, inv_scale: f32, dtype: DType) -> Result<bool> {
    let e = torch_err("non_finite_check_and_unscale");
    let found = if g.numel() == 0 {
        false
    } else {
        g.f_isfinite().and_then(|f| f.f_all()).and_then(|a| a.f_int64_value(&[])).map_err(&e)? == 0
    };
    if inv_scale != 1.0 {
        let wide = if dtype == DType::F64 { tch::Kind::Double } else { tch::Kind::Float };
        let scaled = g.f_to_dtype(wide, false, false).and_then(|w| w.f_mul_scalar(inv_scale as f64)).map_err(&e)?;
        g.f_copy_(&scaled).map_err(&e)?;
    }
    Ok(found)
}
