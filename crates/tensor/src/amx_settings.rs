//! Whether the CPU backend's bf16 matrix products may use AMX tiles (`tdpbf16ps`) where the
//! processor and operating system allow it, a `conv_settings`-style switch.
//!
//! By default a bf16 product on a processor with AMX-BF16, under an operating system that
//! grants the process the tile registers (Linux 5.16 or later), runs on AMX tiles; else on
//! AVX-512 BF16 (`vdpbf16ps`) where the processor has it, else on operands widened to
//! `f32`. [`set_matmul_amx`]`(false)` forbids AMX, so that products take the `vdpbf16ps`
//! kernel (benchmarks compare the two this way); the environment variable `EMBER_AMX=0`
//! sets the initial value. Both kernels sum exact bf16 products in `f32` in order of the
//! inner dimension; they may differ in the last bits of a sum (see `docs/design.md`,
//! "The 16-bit floats"). The setting is global to the process; reads cost one atomic load.
//!
//! ```
//! use ember_tensor::{matmul_amx, set_matmul_amx};
//!
//! let before = matmul_amx();
//! set_matmul_amx(false);
//! assert!(!matmul_amx());
//! set_matmul_amx(before);
//! ```

use std::sync::atomic::{AtomicU8, Ordering};

/// `UNSET` until the first read or write, then `ON` or `OFF`.
static AMX: AtomicU8 = AtomicU8::new(UNSET);
const UNSET: u8 = 0;
const ON: u8 = 1;
const OFF: u8 = 2;

/// Allows (`true`, the default) or forbids (`false`) AMX bf16 matrix products for the whole
/// process. Allowing them changes nothing on a machine without AMX.
pub fn set_matmul_amx(enabled: bool) {
    AMX.store(if enabled { ON } else { OFF }, Ordering::Relaxed);
}

/// Whether bf16 matrix products may use AMX: `true` unless turned off by
/// [`set_matmul_amx`] or, before any call to it, by `EMBER_AMX=0`. Says nothing about
/// whether this machine has AMX.
pub fn matmul_amx() -> bool {
    match AMX.load(Ordering::Relaxed) {
        ON => true,
        OFF => false,
        _ => {
            let on = std::env::var("EMBER_AMX").map_or(true, |v| v.trim() != "0");
            // A concurrent `set_matmul_amx` wins over the environment.
            let _ = AMX.compare_exchange(UNSET, if on { ON } else { OFF }, Ordering::Relaxed, Ordering::Relaxed);
            AMX.load(Ordering::Relaxed) == ON
        }
    }
}
