//! Which algorithms the CPU backend's `f32` convolutions may use, PyTorch's
//! `torch.backends.mkldnn` / `torch.backends.cudnn.deterministic`-style switches.
//!
//! By default a 3x3, stride-1, undilated, ungrouped `f32` convolution whose shape measured
//! faster that way runs as a Winograd F(4x4, 3x3) convolution (its forward pass and the
//! gradient with respect to its input): about a quarter of the multiplications of the
//! direct product, at the cost of rounding differences (the transforms add and scale the
//! inputs before multiplying). [`set_conv_winograd`]`(false)` turns it off, so that every
//! convolution takes the column-matrix path and gives the same bits as builds without
//! Winograd; the environment variable `EMBER_CONV_WINOGRAD=0` sets the initial value.
//! The setting is global to the process; reads cost one atomic load.
//!
//! ```
//! use ember_tensor::{conv_winograd, set_conv_winograd};
//!
//! let before = conv_winograd();
//! set_conv_winograd(false);
//! assert!(!conv_winograd());
//! set_conv_winograd(before);
//! ```

use std::sync::atomic::{AtomicU8, Ordering};

/// `UNSET` until the first read or write, then `ON` or `OFF`.
static WINOGRAD: AtomicU8 = AtomicU8::new(UNSET);
const UNSET: u8 = 0;
const ON: u8 = 1;
const OFF: u8 = 2;

/// Allows (`true`, the default) or forbids (`false`) Winograd convolutions for the whole
/// process. With `false` every convolution runs the direct (column-matrix) algorithm and
/// its results are bitwise those of that algorithm.
pub fn set_conv_winograd(enabled: bool) {
    WINOGRAD.store(if enabled { ON } else { OFF }, Ordering::Relaxed);
}

/// Whether convolutions may run as Winograd convolutions: `true` unless turned off by
/// [`set_conv_winograd`] or, before any call to it, by `EMBER_CONV_WINOGRAD=0`.
pub fn conv_winograd() -> bool {
    match WINOGRAD.load(Ordering::Relaxed) {
        ON => true,
        OFF => false,
        _ => {
            let on = std::env::var("EMBER_CONV_WINOGRAD").map_or(true, |v| v.trim() != "0");
            // A concurrent `set_conv_winograd` wins over the environment.
            let _ = WINOGRAD.compare_exchange(UNSET, if on { ON } else { OFF }, Ordering::Relaxed, Ordering::Relaxed);
            WINOGRAD.load(Ordering::Relaxed) == ON
        }
    }
}
