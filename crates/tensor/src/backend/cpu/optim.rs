//! Fused optimizer updates: one pass over a parameter, its gradient and its state, writing
//! the parameter and every state tensor in place, with no temporaries. Large tensors are
//! split into ranges that the worker threads update in parallel.
//!
//! The per-element arithmetic rounds exactly like ATen's CPU kernels (the same operations in
//! the same order, no fused multiply-adds), so that f32 trajectories track PyTorch's closely
//! and f64 ones agree to the last few bits. Fusing the passes changes nothing there: every
//! value an element's update reads comes from the same element.

use crate::backend::validate::optim::{AdamRanges, RmsPropRanges, SgdRanges, check_adam, check_rmsprop, check_sgd};
use crate::backend::{AdamState, RmsPropState, Target, View};
use crate::dtype::{DType, Element, FloatElement};
use crate::host::iter::{par_for, threads};
use crate::ops::optim::{AdamStep, RmsPropStep, SgdStep};
use crate::storage::Storage;
use crate::{Error, Result};
use std::ops::Range;

/// Elements per parallel task: an update is a few flops per element, so smaller tasks would
/// cost more in scheduling than they save.
const GRAIN: usize = 1 << 16;

/// ATen's `lerp(start, end, weight)`: `start + w (end - start)` when `|w| < 0.5`, otherwise
/// `end - (end - start)(1 - w)`, which is more accurate for weights near one. `small` is
/// `|w| < 0.5`, decided once per update rather than per element.
#[inline(always)]
fn lerp<T: FloatElement>(start: T, end: T, w: T, small: bool) -> T {
    if small { start + w * (end - start) } else { end - (end - start) * (T::ONE - w) }
}

/// Whether [`lerp`] takes its first form for weight `w`, compared in `T` as ATen does.
#[inline]
fn lerp_small<T: FloatElement>(w: T) -> bool {
    w.abs() < T::from_f64(0.5)
}

/// PyTorch's `grad.add(param, alpha=weight_decay)` when `decay` is on, else the gradient
/// untouched (PyTorch skips the addition for a zero decay, so an infinite parameter does not
/// turn the gradient into NaN).
#[inline(always)]
fn decayed<T: FloatElement>(g: T, p: T, wd: T, decay: bool) -> T {
    if decay { g + wd * p } else { g }
}

/// A written stream of one update as a raw pointer, so that parallel tasks can each take
/// their own range of it. The length is 0 for a state the update does not have.
struct Stream<T>(*mut T, usize);

// Not derived: the derive would require `T: Copy`.
impl<T> Clone for Stream<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Stream<T> {}

// SAFETY: a stream is only used by `for_ranges`, which gives every range to exactly one task
// while the slice it was made from stays mutably borrowed.
unsafe impl<T: Send> Send for Stream<T> {}
unsafe impl<T: Send> Sync for Stream<T> {}

impl<T> Stream<T> {
    fn new(s: &mut [T]) -> Self {
        Stream(s.as_mut_ptr(), s.len())
    }

    fn absent() -> Self {
        Stream(std::ptr::NonNull::dangling().as_ptr(), 0)
    }

    /// The elements `r` of the stream (nothing for an absent one).
    ///
    /// # Safety
    /// `r` lies inside the stream, no other live slice overlaps it, and the slice the stream
    /// was made from outlives the result.
    unsafe fn range<'a>(self, r: Range<usize>) -> &'a mut [T] {
        if self.1 == 0 {
            return &mut [];
        }
        // SAFETY: see the contract above.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(r.start), r.len()) }
    }
}

/// Calls `f` on consecutive ranges covering `0..n`, in parallel when `n` is large.
fn for_ranges(n: usize, f: impl Fn(Range<usize>) + Sync) {
    // Small work never asks rayon for its thread count (a thread-local lookup per call).
    if n < GRAIN {
        f(0..n);
        return;
    }
    let threads = threads();
    if threads <= 1 {
        f(0..n);
        return;
    }
    let chunks = (n / GRAIN).clamp(1, threads * 4);
    let chunk = n.div_ceil(chunks);
    par_for(n.div_ceil(chunk), |i| f(i * chunk..n.min((i + 1) * chunk)));
}

fn slice<'a, T: FloatElement>(op: &'static str, s: &'a Storage, r: Range<usize>) -> Result<&'a [T]> {
    let c = super::cpu(s)?.as_slice::<T>();
    c.map(|c| &c[r]).ok_or_else(|| Error::dtype(op, format!("expected {}, got {}", T::DTYPE, s.dtype())))
}

fn slice_mut<'a, T: FloatElement>(op: &'static str, s: &'a mut Storage, r: Range<usize>) -> Result<&'a mut [T]> {
    let dtype = s.dtype();
    let c = super::cpu_mut(s)?.as_mut_slice::<T>();
    c.map(|c| &mut c[r]).ok_or_else(|| Error::dtype(op, format!("expected {}, got {dtype}", T::DTYPE)))
}

/// Runs `$body` with `$T` bound to the parameter's float element type.
macro_rules! float_dispatch {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            DType::F32 => {
                type $T = f32;
                $body
            }
            _ => {
                type $T = f64;
                $body
            }
        }
    };
}

// ---- SGD ----

/// The constants of an SGD update, in the parameter's dtype.
#[derive(Clone, Copy)]
struct SgdConsts<T> {
    neg_lr: T,
    wd: T,
    decay: bool,
    momentum: T,
    keep: T,
    nesterov: bool,
    fresh: bool,
}

/// `p -= lr·d`.
#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn sgd_plain_chunk<T: FloatElement>(p: &mut [T], g: &[T], k: &SgdConsts<T>) {
    let (neg_lr, wd, decay) = (k.neg_lr, k.wd, k.decay);
    let g = &g[..p.len()];
    for i in 0..p.len() {
        p[i] = p[i] + neg_lr * decayed(g[i], p[i], wd, decay);
    }
}

/// The momentum buffer's update and then the parameter's.
#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn sgd_momentum_chunk<T: FloatElement>(p: &mut [T], g: &[T], b: &mut [T], k: &SgdConsts<T>) {
    let SgdConsts { neg_lr, wd, decay, momentum, keep, nesterov, fresh } = *k;
    let len = p.len();
    let (g, b) = (&g[..len], &mut b[..len]);
    for i in 0..len {
        let d = decayed(g[i], p[i], wd, decay);
        // PyTorch starts the buffer at the (decayed) gradient itself, undampened.
        let bv = if fresh { d } else { b[i] * momentum + keep * d };
        b[i] = bv;
        p[i] = if nesterov { p[i] + neg_lr * (d + momentum * bv) } else { p[i] + neg_lr * bv };
    }
}

/// See [`crate::backend::Backend::sgd_step`].
pub(crate) fn sgd_step((p, lp): Target<'_>, (g, lg): View<'_>, buffer: Option<Target<'_>>, hp: &SgdStep) -> Result<()> {
    let op = "sgd_step";
    let SgdRanges { param: rp, grad: rg, buffer: rb } = check_sgd((p, lp), (g, lg), &buffer, hp)?;
    let dtype = p.dtype();
    float_dispatch!(dtype, T => {
        let k = SgdConsts::<T> {
            neg_lr: T::from_f64(-hp.lr),
            wd: T::from_f64(hp.weight_decay),
            decay: hp.weight_decay != 0.0,
            momentum: T::from_f64(hp.momentum),
            keep: T::from_f64(1.0 - hp.dampening),
            nesterov: hp.nesterov,
            fresh: hp.fresh_buffer,
        };
        let g = slice::<T>(op, g, rg)?;
        let ps = Stream::new(slice_mut::<T>(op, p, rp)?);
        match (buffer, rb) {
            (Some((b, _)), Some(rb)) => {
                let bs = Stream::new(slice_mut::<T>(op, b, rb)?);
                // SAFETY: each range goes to one task; the slices stay borrowed meanwhile.
                for_ranges(g.len(), |r| unsafe {
                    sgd_momentum_chunk(ps.range(r.clone()), &g[r.clone()], bs.range(r), &k)
                });
            }
            // SAFETY: as above.
            _ => for_ranges(g.len(), |r| unsafe { sgd_plain_chunk(ps.range(r.clone()), &g[r], &k) }),
        }
    });
    Ok(())
}

// ---- Adam ----

/// The constants of an Adam update, in the parameter's dtype.
#[derive(Clone, Copy)]
struct AdamConsts<T> {
    wd: T,
    coupled: bool,
    w1: T,
    small: bool,
    b2: T,
    w2: T,
    bc2_sqrt: T,
    neg_step: T,
    eps: T,
    shrink_on: bool,
    shrink: T,
}

impl<T: FloatElement> AdamConsts<T> {
    fn new(hp: &AdamStep) -> Self {
        let w1 = T::from_f64(1.0 - hp.beta1);
        // The bias corrections in f64, as PyTorch computes them in Python floats.
        let t = hp.step as f64;
        let step_size = hp.lr / (1.0 - hp.beta1.powf(t));
        AdamConsts {
            wd: T::from_f64(hp.weight_decay),
            // Adam's L2 penalty goes into the gradient, which both moments read.
            coupled: hp.weight_decay != 0.0 && !hp.decoupled,
            w1,
            small: lerp_small(w1),
            b2: T::from_f64(hp.beta2),
            w2: T::from_f64(1.0 - hp.beta2),
            bc2_sqrt: T::from_f64((1.0 - hp.beta2.powf(t)).sqrt()),
            neg_step: T::from_f64(-step_size),
            eps: T::from_f64(hp.eps),
            // AdamW's param.mul_(1 - lr * weight_decay), folded into the parameter's update.
            shrink_on: hp.decoupled && hp.weight_decay != 0.0,
            shrink: T::from_f64(1.0 - hp.lr * hp.weight_decay),
        }
    }
}

/// Both moments (and with `AMS` their running maximum), then the parameter. `vmax` is empty
/// without `AMS`.
#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn adam_chunk<T: FloatElement, const AMS: bool>(
    p: &mut [T],
    g: &[T],
    m: &mut [T],
    v: &mut [T],
    vmax: &mut [T],
    k: &AdamConsts<T>,
) {
    let AdamConsts { wd, coupled, w1, small, b2, w2, bc2_sqrt, neg_step, eps, shrink_on, shrink } = *k;
    let len = p.len();
    let (g, m, v) = (&g[..len], &mut m[..len], &mut v[..len]);
    let vmax = if AMS { &mut vmax[..len] } else { vmax };
    for i in 0..len {
        let d = decayed(g[i], p[i], wd, coupled);
        // exp_avg.lerp_(grad, 1 - beta1)
        let mv = lerp(m[i], d, w1, small);
        m[i] = mv;
        // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        let vv = v[i] * b2 + w2 * d * d;
        v[i] = vv;
        // torch.maximum(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq), which propagates NaN.
        let second = if AMS {
            let x = vmax[i].max_nan(vv);
            vmax[i] = x;
            x
        } else {
            vv
        };
        // denom = (v.sqrt() / bias_correction2_sqrt).add_(eps);
        // param.addcdiv_(exp_avg, denom, value=-step_size)
        let q = if shrink_on { p[i] * shrink } else { p[i] };
        let denom = second.sqrt() / bc2_sqrt + eps;
        p[i] = q + neg_step * mv / denom;
    }
}

/// See [`crate::backend::Backend::adam_step`].
pub(crate) fn adam_step((p, lp): Target<'_>, (g, lg): View<'_>, st: AdamState<'_>, hp: &AdamStep) -> Result<()> {
    let op = "adam_step";
    let AdamRanges { param: rp, grad: rg, exp_avg: rm, exp_avg_sq: rv, max_exp_avg_sq: rmax } =
        check_adam((p, lp), (g, lg), &st, hp)?;
    let dtype = p.dtype();
    let AdamState { exp_avg: (m, _), exp_avg_sq: (v, _), max_exp_avg_sq } = st;
    float_dispatch!(dtype, T => {
        let k = AdamConsts::<T>::new(hp);
        let g = slice::<T>(op, g, rg)?;
        let ps = Stream::new(slice_mut::<T>(op, p, rp)?);
        let ms = Stream::new(slice_mut::<T>(op, m, rm)?);
        let vs = Stream::new(slice_mut::<T>(op, v, rv)?);
        match (max_exp_avg_sq, rmax) {
            (Some((x, _)), Some(rx)) => {
                let xs = Stream::new(slice_mut::<T>(op, x, rx)?);
                // SAFETY: each range goes to one task; the slices stay borrowed meanwhile.
                for_ranges(g.len(), |r| unsafe {
                    let gr = &g[r.clone()];
                    adam_chunk::<T, true>(ps.range(r.clone()), gr, ms.range(r.clone()), vs.range(r.clone()), xs.range(r), &k)
                });
            }
            _ => {
                let xs = Stream::<T>::absent();
                // SAFETY: as above; the absent stream hands out empty slices.
                for_ranges(g.len(), |r| unsafe {
                    let gr = &g[r.clone()];
                    adam_chunk::<T, false>(ps.range(r.clone()), gr, ms.range(r.clone()), vs.range(r.clone()), xs.range(r), &k)
                });
            }
        }
    });
    Ok(())
}

// ---- RMSprop ----

/// The constants of an RMSprop update, in the parameter's dtype.
#[derive(Clone, Copy)]
struct RmsPropConsts<T> {
    wd: T,
    decay: bool,
    alpha: T,
    w: T,
    small: bool,
    eps: T,
    momentum: T,
    neg_lr: T,
}

/// The running averages, then the parameter (through the momentum buffer with
/// `MOMENTUM`). `ga` is empty without `CENTERED`, `b` without `MOMENTUM`.
#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn rmsprop_chunk<T: FloatElement, const CENTERED: bool, const MOMENTUM: bool>(
    p: &mut [T],
    g: &[T],
    s: &mut [T],
    ga: &mut [T],
    b: &mut [T],
    k: &RmsPropConsts<T>,
) {
    let RmsPropConsts { wd, decay, alpha, w, small, eps, momentum, neg_lr } = *k;
    let len = p.len();
    let (g, s) = (&g[..len], &mut s[..len]);
    let ga = if CENTERED { &mut ga[..len] } else { ga };
    let b = if MOMENTUM { &mut b[..len] } else { b };
    for i in 0..len {
        let d = decayed(g[i], p[i], wd, decay);
        // square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
        let sv = s[i] * alpha + w * d * d;
        s[i] = sv;
        // avg = square_avg.addcmul(grad_avg, grad_avg, value=-1).sqrt_().add_(eps) when
        // centered (after grad_avg.lerp_(grad, 1 - alpha)), else square_avg.sqrt().add_(eps)
        let avg = if CENTERED {
            let a = lerp(ga[i], d, w, small);
            ga[i] = a;
            (sv + -a * a).sqrt() + eps
        } else {
            sv.sqrt() + eps
        };
        if MOMENTUM {
            // buf.mul_(momentum).addcdiv_(grad, avg); param.add_(buf, alpha=-lr)
            let bv = b[i] * momentum + d / avg;
            b[i] = bv;
            p[i] = p[i] + neg_lr * bv;
        } else {
            // param.addcdiv_(grad, avg, value=-lr)
            p[i] = p[i] + neg_lr * d / avg;
        }
    }
}

/// See [`crate::backend::Backend::rmsprop_step`].
pub(crate) fn rmsprop_step(
    (p, lp): Target<'_>,
    (g, lg): View<'_>,
    st: RmsPropState<'_>,
    hp: &RmsPropStep,
) -> Result<()> {
    let op = "rmsprop_step";
    let RmsPropRanges { param: rp, grad: rg, square_avg: rs, grad_avg: rga, momentum_buffer: rb } =
        check_rmsprop((p, lp), (g, lg), &st, hp)?;
    let dtype = p.dtype();
    let RmsPropState { square_avg: (s, _), grad_avg, momentum_buffer } = st;
    float_dispatch!(dtype, T => {
        let w = T::from_f64(1.0 - hp.alpha);
        let k = RmsPropConsts::<T> {
            wd: T::from_f64(hp.weight_decay),
            decay: hp.weight_decay != 0.0,
            alpha: T::from_f64(hp.alpha),
            w,
            small: lerp_small(w),
            eps: T::from_f64(hp.eps),
            momentum: T::from_f64(hp.momentum),
            neg_lr: T::from_f64(-hp.lr),
        };
        let g = slice::<T>(op, g, rg)?;
        let ps = Stream::new(slice_mut::<T>(op, p, rp)?);
        let ss = Stream::new(slice_mut::<T>(op, s, rs)?);
        let gas = match (grad_avg, rga) {
            (Some((a, _)), Some(r)) => Stream::new(slice_mut::<T>(op, a, r)?),
            _ => Stream::absent(),
        };
        let bs = match (momentum_buffer, rb) {
            (Some((b, _)), Some(r)) => Stream::new(slice_mut::<T>(op, b, r)?),
            _ => Stream::absent(),
        };
        macro_rules! run {
            ($c:literal, $m:literal) => {
                // SAFETY: each range goes to one task; the slices stay borrowed meanwhile, and
                // an absent stream hands out empty slices.
                for_ranges(g.len(), |r| unsafe {
                    let gr = &g[r.clone()];
                    rmsprop_chunk::<T, $c, $m>(ps.range(r.clone()), gr, ss.range(r.clone()), gas.range(r.clone()), bs.range(r), &k)
                })
            };
        }
        match (hp.centered, hp.momentum > 0.0) {
            (false, false) => run!(false, false),
            (true, false) => run!(true, false),
            (false, true) => run!(false, true),
            (true, true) => run!(true, true),
        }
    });
    Ok(())
}
