//! Gradient unscaling for loss scaling: one pass that multiplies a float view by the
//! inverse scale in place and notes whether any element was infinite or NaN, as PyTorch's
//! `_amp_foreach_non_finite_check_and_unscale_` does for each gradient. Contiguous views are
//! split into chunks that the worker threads take in parallel; strided views are walked run
//! by run.

use super::cpu_mut;
use crate::backend::validate::unscale::{OP, check};
use crate::host::iter::{GRAIN_CHEAP, Runs, fill_chunks};
use crate::layout::Layout;
use crate::storage::{CpuStorage, Storage};
use crate::{Error, Result};
use std::sync::atomic::{AtomicBool, Ordering};

/// The inverse scale, as the kernels multiply by it.
#[derive(Clone, Copy)]
struct Inverse {
    narrow: f32,
    wide: f64,
}

impl Inverse {
    /// `inv_scale` and its exact `f64` value. The inverse of a scale above 2^126 is subnormal
    /// in `f32`, which the kernels' float mode reads as zero (see docs/design.md, "Subnormal
    /// numbers"); widened from its bits instead, it is an ordinary `f64`.
    fn new(inv_scale: f32) -> Inverse {
        let wide = if inv_scale.is_subnormal() {
            // A subnormal f32 is its 23-bit fraction times 2^-149.
            let magnitude = f64::from(inv_scale.to_bits() & 0x007f_ffff) * 2f64.powi(-149);
            if inv_scale.is_sign_negative() { -magnitude } else { magnitude }
        } else {
            f64::from(inv_scale)
        };
        Inverse { narrow: inv_scale, wide }
    }

    /// Whether products must be taken in `f64`: the `f32` inverse would read as zero.
    fn needs_wide(&self) -> bool {
        self.narrow.is_subnormal()
    }
}

/// An element type gradients can have, with the arithmetic of unscaling it.
trait Unscale: Copy + Send + Sync {
    /// The element times the inverse scale, rounded once to `f32` (to `f64` for `f64`) and
    /// then to the element's dtype, and whether the element was not finite. With `WIDE` the
    /// product is taken in `f64`, where it is exact, so it rounds to the same `f32`.
    fn unscale<const WIDE: bool>(self, inv: Inverse) -> (Self, bool);
}

impl Unscale for f32 {
    #[inline(always)]
    fn unscale<const WIDE: bool>(self, inv: Inverse) -> (f32, bool) {
        let v = if WIDE { (f64::from(self) * inv.wide) as f32 } else { self * inv.narrow };
        (v, !self.is_finite())
    }
}

impl Unscale for f64 {
    #[inline(always)]
    fn unscale<const WIDE: bool>(self, inv: Inverse) -> (f64, bool) {
        (self * inv.wide, !self.is_finite())
    }
}

/// One stretch of elements: unscaled in place, and whether one was not finite. The flag is
/// or-ed over the stretch (no early exit), so the loop stays a straight vector loop.
#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw", "x86_64+avx2+fma"))]
fn unscale_run<T: Unscale, const WIDE: bool>(xs: &mut [T], inv: Inverse) -> bool {
    let mut found = false;
    for x in xs.iter_mut() {
        let (v, bad) = x.unscale::<WIDE>(inv);
        *x = v;
        found |= bad;
    }
    found
}

/// The elements of `dst` that `layout` addresses, unscaled; whether one was not finite.
fn unscale_view<T: Unscale, const WIDE: bool>(dst: &mut [T], layout: &Layout, inv: Inverse) -> bool {
    if let Some(r) = layout.contiguous_range() {
        let found = AtomicBool::new(false);
        fill_chunks(&mut dst[r], GRAIN_CHEAP, |_, chunk| {
            if unscale_run::<T, WIDE>(chunk, inv) {
                found.store(true, Ordering::Relaxed);
            }
        });
        return found.into_inner();
    }
    let runs = Runs::new([layout]);
    let s = runs.inner_stride(0);
    let mut found = false;
    runs.for_each(0, layout.numel(), |[o], len, _| {
        if s == 1 {
            found |= unscale_run::<T, WIDE>(&mut dst[o..o + len], inv);
        } else {
            for i in 0..len {
                let x = &mut dst[o + i * s];
                let (v, bad) = x.unscale::<WIDE>(inv);
                *x = v;
                found |= bad;
            }
        }
    });
    found
}

/// [`unscale_view`] with the product taken where the inverse scale needs it.
fn unscale_any<T: Unscale>(dst: &mut [T], layout: &Layout, inv: Inverse) -> bool {
    if inv.needs_wide() {
        unscale_view::<T, true>(dst, layout, inv)
    } else {
        unscale_view::<T, false>(dst, layout, inv)
    }
}

/// See [`crate::backend::Backend::non_finite_check_and_unscale`].
pub(crate) fn non_finite_check_and_unscale(dst: &mut Storage, layout: &Layout, inv_scale: f32) -> Result<bool> {
    let l = check(dst, layout)?;
    let inv = Inverse::new(inv_scale);
    match cpu_mut(dst)? {
        CpuStorage::F32(b) => Ok(unscale_any::<f32>(b, &l, inv)),
        CpuStorage::F64(b) => Ok(unscale_any::<f64>(b, &l, inv)),
        other => Err(Error::dtype(OP, format!("gradients to unscale must be float, got {}", other.dtype()))),
    }
}
