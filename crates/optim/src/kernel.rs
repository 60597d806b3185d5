//! Elementwise pieces of the update rules, written to round exactly like ATen's CPU
//! kernels (same operations, same order), so that f32 trajectories track PyTorch's closely
//! and f64 ones agree to the last few bits.

use ember_tensor::FloatElement;

/// ATen's `lerp(start, end, weight)`: `start + w (end - start)` when `|w| < 0.5`, otherwise
/// `end - (end - start)(1 - w)`, which is more accurate for weights near one. `small` is
/// `|w| < 0.5`, decided once per update rather than per element.
#[inline(always)]
pub(crate) fn lerp<T: FloatElement>(start: T, end: T, w: T, small: bool) -> T {
    if small { start + w * (end - start) } else { end - (end - start) * (T::ONE - w) }
}

/// Whether [`lerp`] takes its first form for weight `w`, compared in `T` as ATen does.
#[inline]
pub(crate) fn lerp_small<T: FloatElement>(w: T) -> bool {
    w.abs() < T::from_f64(0.5)
}

/// PyTorch's `grad.add(param, alpha=weight_decay)` when `decay` is on, else the gradient
/// untouched (PyTorch skips the addition for a zero decay, so an infinite parameter does not
/// turn the gradient into NaN).
#[inline(always)]
pub(crate) fn decayed<T: FloatElement>(g: T, p: T, wd: T, decay: bool) -> T {
    if decay { g + wd * p } else { g }
}
