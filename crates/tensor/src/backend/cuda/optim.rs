//! Fused optimizer steps: one kernel per parameter, the same arithmetic in the same order
//! as the CPU kernels (backend/cpu/optim.rs), after the checks both share
//! (backend/validate/optim.rs).

use super::launch::{arg, launch_elems};
use super::{sfx, storage_of, storage_of_mut};
use crate::Result;
use crate::backend::validate::optim::{AdamRanges, RmsPropRanges, SgdRanges, check_adam, check_rmsprop, check_sgd};
use crate::backend::{AdamState, RmsPropState, Target, View};
use crate::dtype::DType;
use crate::ops::optim::{AdamStep, RmsPropStep, SgdStep};
use std::ffi::c_void;

/// A constant of the update in the parameter's dtype.
#[derive(Clone, Copy)]
enum F {
    F32(f32),
    F64(f64),
}

impl F {
    fn new(v: f64, dtype: DType) -> F {
        if dtype == DType::F32 { F::F32(v as f32) } else { F::F64(v) }
    }
    fn arg(&self) -> *mut c_void {
        match self {
            F::F32(v) => arg(v),
            F::F64(v) => arg(v),
        }
    }
    /// ATen's `lerp` takes its first form for weights below one half, compared in the
    /// element type.
    fn small(&self) -> i32 {
        match *self {
            F::F32(v) => (v.abs() < 0.5) as i32,
            F::F64(v) => (v.abs() < 0.5) as i32,
        }
    }
}

pub(crate) fn sgd_step((p, lp): Target<'_>, (g, lg): View<'_>, buffer: Option<Target<'_>>, hp: &SgdStep) -> Result<()> {
    let SgdRanges { param: rp, grad: rg, buffer: rb } = check_sgd((p, lp), (g, lg), &buffer, hp)?;
    let dtype = p.dtype();
    let pb = match (&buffer, &rb) {
        (Some((b, _)), Some(r)) => storage_of(b)?.ptr_at(r.start),
        _ => 0,
    };
    let gs = storage_of(g)?;
    let ps = storage_of_mut(p)?;
    let gpu = ps.gpu();
    let f = gpu.func(("sgd", sfx(dtype), ""))?;
    let (n, pp, pg) = (rp.len() as i64, ps.ptr_at(rp.start), gs.ptr_at(rg.start));
    let (neg_lr, wd, momentum, keep) = (
        F::new(-hp.lr, dtype),
        F::new(hp.weight_decay, dtype),
        F::new(hp.momentum, dtype),
        F::new(1.0 - hp.dampening, dtype),
    );
    let (decay, nesterov, fresh) = ((hp.weight_decay != 0.0) as i32, hp.nesterov as i32, hp.fresh_buffer as i32);
    let mut args = [
        arg(&n),
        arg(&pp),
        arg(&pg),
        arg(&pb),
        neg_lr.arg(),
        wd.arg(),
        arg(&decay),
        momentum.arg(),
        keep.arg(),
        arg(&nesterov),
        arg(&fresh),
    ];
    launch_elems(gpu, f, rp.len(), &mut args)
}

pub(crate) fn adam_step((p, lp): Target<'_>, (g, lg): View<'_>, st: AdamState<'_>, hp: &AdamStep) -> Result<()> {
    let AdamRanges { param: rp, grad: rg, exp_avg: rm, exp_avg_sq: rv, max_exp_avg_sq: rmax } =
        check_adam((p, lp), (g, lg), &st, hp)?;
    let dtype = p.dtype();
    let AdamState { exp_avg: (m, _), exp_avg_sq: (v, _), max_exp_avg_sq } = st;
    let pmax = match (&max_exp_avg_sq, &rmax) {
        (Some((x, _)), Some(r)) => storage_of(x)?.ptr_at(r.start),
        _ => 0,
    };
    let (pm, pv, pg) =
        (storage_of(m)?.ptr_at(rm.start), storage_of(v)?.ptr_at(rv.start), storage_of(g)?.ptr_at(rg.start));
    let ps = storage_of_mut(p)?;
    let gpu = ps.gpu();
    let f = gpu.func(("adam", sfx(dtype), ""))?;
    // The constants as the CPU kernel computes them: bias corrections in f64, as PyTorch
    // computes them in Python floats.
    let t = hp.step as f64;
    let step_size = hp.lr / (1.0 - hp.beta1.powf(t));
    let w1 = F::new(1.0 - hp.beta1, dtype);
    let small = w1.small();
    let (wd, b2, w2) = (F::new(hp.weight_decay, dtype), F::new(hp.beta2, dtype), F::new(1.0 - hp.beta2, dtype));
    let bc2_sqrt = F::new((1.0 - hp.beta2.powf(t)).sqrt(), dtype);
    let (neg_step, eps) = (F::new(-step_size, dtype), F::new(hp.eps, dtype));
    let shrink = F::new(1.0 - hp.lr * hp.weight_decay, dtype);
    let coupled = (hp.weight_decay != 0.0 && !hp.decoupled) as i32;
    let shrink_on = (hp.decoupled && hp.weight_decay != 0.0) as i32;
    let (n, pp) = (rp.len() as i64, ps.ptr_at(rp.start));
    let mut args = [
        arg(&n),
        arg(&pp),
        arg(&pg),
        arg(&pm),
        arg(&pv),
        arg(&pmax),
        wd.arg(),
        arg(&coupled),
        w1.arg(),
        arg(&small),
        b2.arg(),
        w2.arg(),
        bc2_sqrt.arg(),
        neg_step.arg(),
        eps.arg(),
        arg(&shrink_on),
        shrink.arg(),
    ];
    launch_elems(gpu, f, rp.len(), &mut args)
}

pub(crate) fn rmsprop_step(
    (p, lp): Target<'_>,
    (g, lg): View<'_>,
    st: RmsPropState<'_>,
    hp: &RmsPropStep,
) -> Result<()> {
    let RmsPropRanges { param: rp, grad: rg, square_avg: rs, grad_avg: rga, momentum_buffer: rb } =
        check_rmsprop((p, lp), (g, lg), &st, hp)?;
    let dtype = p.dtype();
    let RmsPropState { square_avg: (s, _), grad_avg, momentum_buffer } = st;
    let pga = match (&grad_avg, &rga) {
        (Some((a, _)), Some(r)) => storage_of(a)?.ptr_at(r.start),
        _ => 0,
    };
    let pb = match (&momentum_buffer, &rb) {
        (Some((b, _)), Some(r)) => storage_of(b)?.ptr_at(r.start),
        _ => 0,
    };
    let (psq, pg) = (storage_of(s)?.ptr_at(rs.start), storage_of(g)?.ptr_at(rg.start));
    let ps = storage_of_mut(p)?;
    let gpu = ps.gpu();
    let f = gpu.func(("rmsprop", sfx(dtype), ""))?;
    let w = F::new(1.0 - hp.alpha, dtype);
    let small = w.small();
    let (wd, alpha, eps) = (F::new(hp.weight_decay, dtype), F::new(hp.alpha, dtype), F::new(hp.eps, dtype));
    let (momentum, neg_lr) = (F::new(hp.momentum, dtype), F::new(-hp.lr, dtype));
    let decay = (hp.weight_decay != 0.0) as i32;
    let (n, pp) = (rp.len() as i64, ps.ptr_at(rp.start));
    let mut args = [
        arg(&n),
        arg(&pp),
        arg(&pg),
        arg(&psq),
        arg(&pga),
        arg(&pb),
        wd.arg(),
        arg(&decay),
        alpha.arg(),
        w.arg(),
        arg(&small),
        eps.arg(),
        momentum.arg(),
        neg_lr.arg(),
    ];
    launch_elems(gpu, f, rp.len(), &mut args)
}
