//! Whether ember's kernels flush subnormal floats to zero, and the register work that makes
//! every thread running a kernel follow that setting (see `docs/design.md`, "Subnormal
//! numbers").
//!
//! The flush modes live in a per-thread control register: MXCSR's flush-to-zero (FTZ, bit
//! 15) and denormals-are-zero (DAZ, bit 6) on x86-64, FPCR's FZ (bit 24) on AArch64. They
//! reach the threads that run kernels in three ways:
//!
//! - **The calling thread** enters a [`Scope`] in every CPU backend method that computes:
//!   where the thread's own flush bits differ from the setting, the scope writes the
//!   setting's into the register and the thread's own back when the method returns, so the
//!   program's own code between kernels keeps its own mode.
//! - **ember's helper threads** (`team`) run nothing but kernels: each applies the setting
//!   when it picks up a loop and the setting changed since its last one ([`follow`]), and
//!   never restores it.
//! - **`rayon`'s threads** may also run the program's own work, so each parallel task ember
//!   hands to them enters a scope of its own ([`enter_task`]), which reads the register,
//!   since the task may run on its own caller, already inside a kernel.
//!
//! A backend method's scope does not read the register each time: reading it (`STMXCSR`)
//! beside the writes added 2-5% (about 5 ns) per operation to the autograd overhead
//! benchmark on the AMD development machine, where remembering the value kept the cost
//! within the benchmark's noise. Each
//! thread's own register is read once, at its first scope, and remembered. That is exact
//! for every Rust program: Rust assumes the default rounding, masking and denormal modes
//! and makes changing them undefined behaviour (see `core::arch::x86_64::_mm_setcsr`), so a
//! program's own mode cannot legitimately change between kernels; a mode set before `main`
//! (a C library built with fast-math sets FTZ and DAZ when it loads) is read and kept. The
//! exception flags (MXCSR's low six bits) come back as they were at that first read; Rust
//! gives them no meaning either.
//!
//! Two moments inside a kernel need the thread's own register back ([`outside`]): starting
//! `rayon`'s pool, since a thread inherits the register of the thread that starts it (Linux
//! copies it) and the pool's threads would keep the kernels' mode for the program's own work
//! ever after; and waiting for `rayon` tasks, since `rayon` may run the program's own work on
//! a waiting thread.
//!
//! Rust's compiler assumes IEEE arithmetic, so a value it computes at compile time is not
//! flushed; nothing in the kernels' memory safety depends on how subnormals round.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};

/// The setting before it is first read (the environment decides then), and a thread's
/// register before its first scope. No register value has every bit set: MXCSR's and
/// FPCR's high bits are reserved zeros.
const UNSET: u32 = u32::MAX;

/// The flush bits the kernels want (0 for none), or `UNSET`.
static WANT: AtomicU32 = AtomicU32::new(UNSET);

/// Whether kernels flush subnormals unless told otherwise: they do (measured in
/// `docs/design.md`, "Subnormal numbers").
const DEFAULT_FLUSH: bool = true;

/// The register bits of the flush modes, whether or not this processor has all of them.
const MASK: u32 = arch::MASK;

thread_local! {
    /// The thread's own register, read at its first scope (`UNSET` before).
    static OWN: Cell<u32> = const { Cell::new(UNSET) };
    /// The flush bits this helper thread last applied (`UNSET` before its first loop).
    static APPLIED: Cell<u32> = const { Cell::new(UNSET) };
}

/// Whether kernels flush subnormals to zero.
pub(crate) fn flush() -> bool {
    want() != 0
}

/// Sets whether kernels flush subnormals to zero; returns whether the processor supports it
/// (where it does not, the setting stays off).
pub(crate) fn set_flush(on: bool) -> bool {
    let bits = arch::flush_bits();
    WANT.store(if on { bits } else { 0 }, Ordering::Relaxed);
    bits != 0
}

/// The flush bits kernels want, reading `EMBER_FLUSH_DENORMAL` on first use.
#[inline(always)]
fn want() -> u32 {
    let w = WANT.load(Ordering::Relaxed);
    if w != UNSET {
        return w;
    }
    want_from_env()
}

#[cold]
fn want_from_env() -> u32 {
    let on = match std::env::var("EMBER_FLUSH_DENORMAL").as_deref().map(str::trim) {
        Ok("0") | Ok("false") | Ok("off") => false,
        Ok("1") | Ok("true") | Ok("on") => true,
        _ => DEFAULT_FLUSH,
    };
    let bits = if on { arch::flush_bits() } else { 0 };
    // A concurrent `set_flush` wins over the environment.
    let _ = WANT.compare_exchange(UNSET, bits, Ordering::Relaxed, Ordering::Relaxed);
    WANT.load(Ordering::Relaxed)
}

/// The thread's own register, read on first use.
#[inline(always)]
fn own() -> u32 {
    let own = OWN.get();
    if own != UNSET {
        return own;
    }
    let own = arch::read();
    OWN.set(own);
    own
}

/// A thread inside a kernel: the register holds the setting's flush bits until the scope
/// ends, then the value it held before.
#[must_use = "the mode holds only while the scope lives"]
pub(crate) struct Scope {
    /// The register to write back; `UNSET` where the scope changed nothing.
    back: u32,
}

impl Scope {
    /// The scope over a register that held `cur`.
    #[inline(always)]
    fn over(cur: u32) -> Scope {
        let want = want();
        if cur & MASK == want {
            return Scope { back: UNSET };
        }
        arch::write((cur & !MASK) | want);
        Scope { back: cur }
    }
}

/// Enters a [`Scope`] on a program's thread that is in no kernel, so that its register holds
/// its own value (the backend methods, which never call each other, start here).
#[inline(always)]
pub(crate) fn enter() -> Scope {
    Scope::over(own())
}

/// Enters a [`Scope`] on a `rayon` thread for one parallel task, which may run on a thread
/// already inside a kernel (the task's own caller): the register is read, not assumed.
#[inline]
pub(crate) fn enter_task() -> Scope {
    Scope::over(arch::read())
}

impl Drop for Scope {
    #[inline(always)]
    fn drop(&mut self) {
        if self.back != UNSET {
            arch::write(self.back);
        }
    }
}

/// Applies the setting on a helper thread, which runs only kernels, when it changed since
/// this thread last applied it.
#[inline]
pub(crate) fn follow() {
    let want = want();
    if APPLIED.get() != want {
        arch::write((arch::read() & !MASK) | want);
        APPLIED.set(want);
    }
}

/// Runs `f` with the thread's own register where a [`Scope`] has changed it: threads that
/// `f` starts inherit the program's mode rather than the kernels', and the program's work
/// that `rayon` runs on this thread while `f` waits sees its own mode.
pub(crate) fn outside<R>(f: impl FnOnce() -> R) -> R {
    let own = OWN.get();
    let cur = arch::read();
    if own == UNSET || cur & MASK == own & MASK {
        return f();
    }
    /// Puts the kernel's register back, also if `f` unwinds (the scope is still open and
    /// writes the thread's own value back itself when it ends).
    struct Back(u32);
    impl Drop for Back {
        fn drop(&mut self) {
            arch::write(self.0);
        }
    }
    arch::write((cur & !MASK) | (own & MASK));
    let _back = Back(cur);
    f()
}

#[cfg(target_arch = "x86_64")]
mod arch {
    use std::arch::asm;
    use std::sync::OnceLock;

    /// Flush-to-zero (results) and denormals-are-zero (operands).
    const FTZ: u32 = 1 << 15;
    const DAZ: u32 = 1 << 6;
    pub(super) const MASK: u32 = FTZ | DAZ;

    /// The flush bits this processor has: FTZ always (SSE has it), DAZ where MXCSR_MASK
    /// says so (a few early x86-64 processors lack it, and setting it there faults).
    pub(super) fn flush_bits() -> u32 {
        static BITS: OnceLock<u32> = OnceLock::new();
        *BITS.get_or_init(|| if mxcsr_mask() & DAZ != 0 { FTZ | DAZ } else { FTZ })
    }

    /// The MXCSR bits this processor accepts, from the `FXSAVE` image (0 there means the
    /// architectural default, which lacks DAZ).
    fn mxcsr_mask() -> u32 {
        #[repr(C, align(16))]
        struct Area([u8; 512]);
        let mut area = Area([0; 512]);
        // SAFETY: `FXSAVE` (in every x86-64 processor) writes the 512-byte, 16-byte-aligned
        // area it is given and nothing else.
        unsafe { std::arch::x86_64::_fxsave(area.0.as_mut_ptr()) };
        let mask = u32::from_le_bytes([area.0[28], area.0[29], area.0[30], area.0[31]]);
        if mask == 0 { 0xffbf } else { mask }
    }

    /// MXCSR. (`_mm_getcsr` would do, but it is deprecated.)
    #[inline(always)]
    pub(super) fn read() -> u32 {
        let mut csr = 0u32;
        // SAFETY: `STMXCSR` stores the four bytes of MXCSR at the address, a live `u32`.
        unsafe { asm!("stmxcsr [{}]", in(reg) &mut csr, options(nostack, preserves_flags)) };
        csr
    }

    /// Writes MXCSR. Not marked as free of memory effects, so the compiler keeps the
    /// kernel's loads and stores on the side of it where the code puts them.
    #[inline(always)]
    pub(super) fn write(csr: u32) {
        // SAFETY: `LDMXCSR` loads the four bytes at the address, a live `u32`. Every value
        // written is one read from MXCSR with only the flush bits changed, and only bits
        // this processor accepts (`flush_bits`), so it cannot fault.
        unsafe { asm!("ldmxcsr [{}]", in(reg) &csr, options(nostack, preserves_flags)) };
    }
}

#[cfg(target_arch = "aarch64")]
mod arch {
    use std::arch::asm;

    /// FZ: subnormal operands and results of single and double precision are zero.
    const FZ: u32 = 1 << 24;
    pub(super) const MASK: u32 = FZ;

    /// Every AArch64 processor has FZ.
    pub(super) fn flush_bits() -> u32 {
        FZ
    }

    /// FPCR's low half (its upper half is reserved).
    #[inline(always)]
    pub(super) fn read() -> u32 {
        let r: u64;
        // SAFETY: reading FPCR has no other effect.
        unsafe { asm!("mrs {}, fpcr", out(reg) r, options(nostack, preserves_flags)) };
        r as u32
    }

    /// Writes FPCR. Not marked as free of memory effects, so the compiler keeps the
    /// kernel's loads and stores on the side of it where the code puts them.
    #[inline(always)]
    pub(super) fn write(v: u32) {
        // SAFETY: every value written is one read from FPCR with only FZ changed.
        unsafe { asm!("msr fpcr, {}", in(reg) u64::from(v), options(nostack, preserves_flags)) };
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
mod arch {
    //! No flush mode ember knows how to set: the setting stays off and the register is never
    //! touched (0 flush bits always match).
    pub(super) const MASK: u32 = 0;

    pub(super) fn flush_bits() -> u32 {
        0
    }

    #[inline(always)]
    pub(super) fn read() -> u32 {
        0
    }

    #[inline(always)]
    pub(super) fn write(_: u32) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The register without its sticky exception flags (x86's low six bits), which any
    /// arithmetic in between may raise.
    const MODES: u32 = !0x3f;

    #[test]
    fn a_scope_restores_the_callers_register() {
        if arch::flush_bits() == 0 {
            return;
        }
        let before = arch::read();
        {
            let _s = enter();
            assert_eq!(arch::read() & MASK, want());
            {
                // A parallel task run by its own caller leaves the mode on.
                let _inner = enter_task();
                assert_eq!(arch::read() & MASK, want());
            }
            assert_eq!(arch::read() & MASK, want());
            assert_eq!(outside(arch::read) & MODES, before & MODES);
            assert_eq!(arch::read() & MASK, want());
        }
        assert_eq!(arch::read() & MODES, before & MODES);
    }
}
