//! Matrix products of bf16 and f16 operands: sums in `f32`, each output element rounded
//! once to the operands' dtype (to nearest, ties to even), as PyTorch's CPU products do.
//!
//! A product is split into blocks over the threads exactly as the `f32` product is
//! (`matmul::gemm_parallel`); each block sums into an `f32` scratch block and rounds it into
//! the output. The sums come from one of two kernels:
//!
//! - [`Kernel::Amx`]: bf16 on processors with AMX-BF16 whose operating system grants the
//!   tile registers (`matmul_amx`), unless `set_matmul_amx(false)` (or `EMBER_AMX=0`)
//!   forbids it.
//! - [`Kernel::NativeBf16`]: bf16 on processors with AVX-512 BF16 (`matmul_bf16`), which
//!   multiplies bf16 pairs directly.
//! - [`Kernel::Widened`]: everywhere else, `KC`-deep slices of both operands are widened to
//!   `f32` and multiplied by `gemm`'s `f32` kernel, adding slice after slice.
//!
//! The CPU backend sends f16 products here only when called with f16 storages directly:
//! its `matmul` widens f16 operands whole instead, which measured faster than the sliced
//! widening on the AVX-512 machine (no AVX512-FP16) this was tuned on.

use super::block::{BlockProduct, Mat, block_product};
use half::{bf16, f16, slice::HalfFloatSliceExt};

/// Depth of the slices the widened kernel converts at once: the two widened slices of a
/// block (`(m + n) * KC` floats) stay small whatever the depth.
const KC: usize = 256;

/// A 16-bit float element of a low-precision product.
pub(super) trait LowpFloat: Copy + Send + Sync + 'static {
    /// Widens a contiguous run.
    fn widen(src: &[Self], dst: &mut [f32]);
    /// Rounds a contiguous run to nearest, ties to even.
    fn narrow(src: &[f32], dst: &mut [Self]);
    /// The fastest kernel this processor has for the dtype.
    fn best_kernel() -> Kernel;
}

impl LowpFloat for bf16 {
    fn widen(src: &[Self], dst: &mut [f32]) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = f32::from_bits((s.to_bits() as u32) << 16);
        }
    }

    fn narrow(src: &[f32], dst: &mut [Self]) {
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = bf16::from_bits(round_bf16(s.to_bits()));
        }
    }

    fn best_kernel() -> Kernel {
        #[cfg(target_arch = "x86_64")]
        if crate::amx_settings::matmul_amx() && super::matmul_amx::available() {
            return Kernel::Amx;
        }
        #[cfg(target_arch = "x86_64")]
        if super::matmul_bf16::available() {
            return Kernel::NativeBf16;
        }
        Kernel::Widened
    }
}

impl LowpFloat for f16 {
    fn widen(src: &[Self], dst: &mut [f32]) {
        src.convert_to_f32_slice(dst);
    }

    fn narrow(src: &[f32], dst: &mut [Self]) {
        dst.convert_from_f32_slice(src);
    }

    fn best_kernel() -> Kernel {
        Kernel::Widened
    }
}

/// The bf16 bits nearest to the `f32` with bits `x`, ties to even; a NaN stays a NaN (quiet).
///
/// Branch-free, so that the rounding loop vectorises; it rounds as `half::bf16::from_f32`.
#[inline(always)]
fn round_bf16(x: u32) -> u16 {
    let rounded = x.wrapping_add(0x7fff + ((x >> 16) & 1)) >> 16;
    let nan = (x & 0x7fff_ffff) > 0x7f80_0000;
    if nan { ((x >> 16) | 0x40) as u16 } else { rounded as u16 }
}

/// Which kernel sums a low-precision product.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kernel {
    /// AMX tiles (`tdpbf16ps`); bf16 only, where the processor and system allow it.
    Amx,
    /// AVX-512 BF16 (`vdpbf16ps`); bf16 only, on processors that have it.
    NativeBf16,
    /// Slices widened to `f32` and multiplied by `gemm`.
    Widened,
}

/// The low-precision block product of [`BlockProduct`]: sums in `f32` by `kernel`, rounded
/// once into the output.
pub(super) struct Lowp {
    /// The kernel every block uses.
    pub kernel: Kernel,
}

impl Lowp {
    /// The fastest kernel this processor has for `T`.
    pub fn best<T: LowpFloat>() -> Self {
        Lowp { kernel: T::best_kernel() }
    }
}

impl<T: LowpFloat> BlockProduct<T> for Lowp {
    unsafe fn product(&self, m: usize, n: usize, k: usize, dst: *mut T, dst_rs: usize, a: &Mat<T>, b: &Mat<T>) {
        let mut sums = vec![0f32; m * n];
        // SAFETY: guaranteed by the caller; `sums` is a fresh `m x n` matrix.
        unsafe { sum_f32(self.kernel, m, n, k, a, b, &mut sums) };
        for (r, row) in sums.chunks_exact(n).enumerate() {
            // SAFETY: row `r` of `dst` is `n` writable elements that overlap nothing else.
            let out = unsafe { std::slice::from_raw_parts_mut(dst.add(r * dst_rs), n) };
            T::narrow(row, out);
        }
    }
}

/// `sums[m, n] = a[m, k] @ b[k, n]` in `f32` (`sums` row-major, contiguous) by `kernel`.
///
/// # Safety
/// As for [`BlockProduct::product`]; `kernel` must be one that [`LowpFloat::best_kernel`]
/// can return for `T` on this processor, or [`Kernel::Widened`].
pub(super) unsafe fn sum_f32<T: LowpFloat>(
    kernel: Kernel,
    m: usize,
    n: usize,
    k: usize,
    a: &Mat<T>,
    b: &Mat<T>,
    sums: &mut [f32],
) {
    match kernel {
        #[cfg(target_arch = "x86_64")]
        Kernel::NativeBf16 => {
            use super::matmul_bf16::{Bits, product};
            debug_assert_eq!(std::any::TypeId::of::<T>(), std::any::TypeId::of::<bf16>());
            let bits = |x: &Mat<T>| Bits { ptr: x.ptr.cast(), rs: x.rs, cs: x.cs };
            // SAFETY: the kernel is only chosen for bf16 (whose bits are `u16`) where the
            // processor has it; the matrices are valid as the caller guarantees.
            unsafe { product(m, n, k, bits(a), bits(b), sums.as_mut_ptr(), n) }
        }
        #[cfg(target_arch = "x86_64")]
        Kernel::Amx => {
            use super::matmul_amx::product;
            use super::matmul_bf16::Bits;
            debug_assert_eq!(std::any::TypeId::of::<T>(), std::any::TypeId::of::<bf16>());
            let bits = |x: &Mat<T>| Bits { ptr: x.ptr.cast(), rs: x.rs, cs: x.cs };
            // SAFETY: as for the native kernel; AMX is only chosen where it is available.
            unsafe { product(m, n, k, bits(a), bits(b), sums.as_mut_ptr(), n) }
        }
        // Never chosen off x86-64; the portable kernel would stand in if it were.
        #[cfg(not(target_arch = "x86_64"))]
        // SAFETY: guaranteed by the caller.
        Kernel::NativeBf16 | Kernel::Amx => unsafe { sum_widened(m, n, k, a, b, sums) },
        // SAFETY: guaranteed by the caller.
        Kernel::Widened => unsafe { sum_widened(m, n, k, a, b, sums) },
    }
}

/// [`Kernel::Widened`]: each `KC`-deep slice of `a` and `b` widened to contiguous `f32` and
/// multiplied by `gemm`, added to the slices before.
///
/// # Safety
/// As for [`sum_f32`].
unsafe fn sum_widened<T: LowpFloat>(m: usize, n: usize, k: usize, a: &Mat<T>, b: &Mat<T>, sums: &mut [f32]) {
    let depth = k.min(KC);
    let mut wa = vec![0f32; m * depth];
    let mut wb = vec![0f32; depth * n];
    let mut run = Vec::new();
    for pc in (0..k).step_by(KC) {
        let kc = (k - pc).min(KC);
        let (wa, wb) = (&mut wa[..m * kc], &mut wb[..kc * n]);
        // SAFETY: the slices `a[.., pc..pc + kc]` and `b[pc..pc + kc, ..]` lie inside the
        // matrices the caller guarantees.
        unsafe {
            widen_block(a.ptr.wrapping_offset(pc as isize * a.cs), m, kc, a.rs, a.cs, wa, &mut run);
            widen_block(b.ptr.wrapping_offset(pc as isize * b.rs), kc, n, b.rs, b.cs, wb, &mut run);
        }
        block_product(m, n, kc, sums, n, pc > 0, (wa, kc, 1), (wb, n, 1), 1.0);
    }
}

/// Widens the `rows x cols` matrix at `src` (strides `rs`, `cs`) into row-major `dst`;
/// `run` is scratch for gathering a strided row.
///
/// # Safety
/// `src` must address a valid `rows x cols` matrix with those strides.
unsafe fn widen_block<T: LowpFloat>(
    src: *const T,
    rows: usize,
    cols: usize,
    rs: isize,
    cs: isize,
    dst: &mut [f32],
    run: &mut Vec<T>,
) {
    for (r, out) in dst.chunks_exact_mut(cols).enumerate().take(rows) {
        let row = src.wrapping_offset(r as isize * rs);
        if cs == 1 {
            // SAFETY: row `r` is `cols` contiguous elements of the matrix.
            T::widen(unsafe { std::slice::from_raw_parts(row, cols) }, out);
        } else {
            run.clear();
            // SAFETY: element `j` of row `r` is inside the matrix.
            run.extend((0..cols).map(|j| unsafe { *row.offset(j as isize * cs) }));
            T::widen(run, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::matmul::gemm_parallel;

    /// A deterministic stream of values in [-2, 2) with every bf16-representable spacing.
    fn values(len: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0
            })
            .collect()
    }

    /// Operands in a given layout: `(data, rs, cs)` for a `rows x cols` matrix stored
    /// row-major or, when `transposed`, column-major.
    struct Operand<T> {
        data: Vec<T>,
        rs: usize,
        cs: usize,
    }

    impl<T: LowpFloat> Operand<T> {
        fn new(rows: usize, cols: usize, transposed: bool, seed: u64, from: fn(f32) -> T) -> Self {
            let data = values(rows * cols, seed).into_iter().map(from).collect();
            let (rs, cs) = if transposed { (1, rows) } else { (cols, 1) };
            Operand { data, rs, cs }
        }

        fn mat(&self) -> Mat<T> {
            Mat { ptr: self.data.as_ptr(), rs: self.rs as isize, cs: self.cs as isize }
        }

        fn at(&self, r: usize, c: usize, to: fn(T) -> f32) -> f64 {
            to(self.data[r * self.rs + c * self.cs]) as f64
        }
    }

    /// Largest error of `sums` against the exact product (in `f64`, exact for these
    /// operands), relative to the bound of `k` additions in `f32`: `k * 2^-24 * sum|a||b|`.
    ///
    /// Every product of two bf16 or f16 values is exact in `f32`, so the only error is the
    /// rounding of the running sums; a sum of `k` terms in any order is within
    /// `gamma_k * sum|a_i b_i|` of the exact one, `gamma_k = k u / (1 - k u)` with
    /// `u = 2^-24`, which for `k <= 300` is below `1.0001 * k * u * sum|a_i b_i|`.
    fn worst_error<T: LowpFloat>(
        m: usize,
        n: usize,
        k: usize,
        a: &Operand<T>,
        b: &Operand<T>,
        to: fn(T) -> f32,
        sums: &[f32],
    ) -> f64 {
        let mut worst = 0f64;
        for i in 0..m {
            for j in 0..n {
                let (mut exact, mut magnitude) = (0f64, 0f64);
                for p in 0..k {
                    let t = a.at(i, p, to) * b.at(p, j, to);
                    exact += t;
                    magnitude += t.abs();
                }
                let bound = 1.0001 * k as f64 * f64::powi(2.0, -24) * magnitude;
                let err = (sums[i * n + j] as f64 - exact).abs();
                if bound == 0.0 {
                    assert_eq!(err, 0.0, "({i}, {j}) of {m}x{k} @ {k}x{n}");
                } else {
                    worst = worst.max(err / bound);
                }
            }
        }
        worst
    }

    const SIZES: [usize; 6] = [1, 3, 17, 33, 100, 257];

    /// Every kernel this processor runs for `T`, whichever the settings choose.
    fn kernels<T: LowpFloat>() -> Vec<Kernel> {
        let mut all = vec![Kernel::Widened];
        #[cfg(target_arch = "x86_64")]
        if std::any::TypeId::of::<T>() == std::any::TypeId::of::<bf16>() {
            if crate::backend::cpu::matmul_bf16::available() {
                all.push(Kernel::NativeBf16);
            }
            if crate::backend::cpu::matmul_amx::available() {
                all.push(Kernel::Amx);
            }
        }
        if !all.contains(&T::best_kernel()) {
            all.push(T::best_kernel());
        }
        all
    }

    fn sums_within_f32_bound<T: LowpFloat>(from: fn(f32) -> T, to: fn(T) -> f32) {
        for kernel in kernels::<T>() {
            for (case, &m) in SIZES.iter().enumerate() {
                for &n in &SIZES {
                    for &k in &SIZES {
                        let (ta, tb) = (case % 2 == 1, (case + n) % 2 == 0);
                        let a = Operand::new(m, k, ta, (m * 7 + k) as u64, from);
                        let b = Operand::new(k, n, tb, (k * 13 + n) as u64, from);
                        let mut sums = vec![f32::NAN; m * n];
                        // SAFETY: the operands are `m x k` and `k x n` with their strides.
                        unsafe { sum_f32(kernel, m, n, k, &a.mat(), &b.mat(), &mut sums) };
                        let worst = worst_error(m, n, k, &a, &b, to, &sums);
                        assert!(worst <= 1.0, "{kernel:?} {m}x{k} @ {k}x{n} (transposed {ta}, {tb}): {worst}");
                    }
                }
            }
        }
    }

    #[test]
    fn bf16_sums_are_within_the_f32_bound_for_odd_sizes_and_transposes() {
        sums_within_f32_bound(bf16::from_f32, bf16::to_f32);
    }

    #[test]
    fn f16_sums_are_within_the_f32_bound_for_odd_sizes_and_transposes() {
        sums_within_f32_bound(f16::from_f32, f16::to_f32);
    }

    #[test]
    fn split_products_round_the_f32_sums_once_on_any_thread_count() {
        // Large enough to cross a `KC` slice and to be split into blocks.
        let (m, n, k) = (300, 200, 600);
        let a = Operand::new(m, k, false, 1, bf16::from_f32);
        let b = Operand::new(k, n, true, 2, bf16::from_f32);
        for kernel in kernels::<bf16>() {
            let lowp = Lowp { kernel };
            let product = |threads: usize| {
                let mut out = vec![bf16::ZERO; m * n];
                // SAFETY: the operands are `m x k` and `k x n`; `out` is `m x n`.
                unsafe { gemm_parallel(m, n, k, out.as_mut_ptr(), &a.mat(), &b.mat(), threads, &lowp) };
                out
            };
            let out = product(2);
            assert_eq!(out, product(1), "{kernel:?}: the blocks depend on the shape alone");
            let mut sums = vec![0f32; m * n];
            // SAFETY: as above.
            unsafe { sum_f32(kernel, m, n, k, &a.mat(), &b.mat(), &mut sums) };
            assert!(worst_error(m, n, k, &a, &b, bf16::to_f32, &sums) <= 1.0, "{kernel:?}");
            if matches!(kernel, Kernel::NativeBf16 | Kernel::Amx) {
                // The native and AMX kernels add each element's terms in the same order whatever the
                // block it falls in, so the split product is exactly the sums rounded once.
                let rounded: Vec<bf16> = sums.iter().map(|&s| bf16::from_f32(s)).collect();
                assert_eq!(out, rounded);
            } else {
                // `gemm` may order a block's additions by the block's shape: each output is
                // within half a bf16 step (2^-9 relative) of sums within the f32 bound.
                for ((o, s), i) in out.iter().zip(&sums).zip(0..) {
                    let (o, s) = (o.to_f32(), *s);
                    let slack = 2f32.powi(-9) * s.abs() * 2.0;
                    assert!((o - s).abs() <= slack, "{kernel:?} element {i}: {o} against {s}");
                }
            }
        }
    }

    #[test]
    fn amx_sums_agree_with_the_native_kernel_across_slices_and_blocks() {
        let available: Vec<Kernel> = kernels::<bf16>().into_iter().filter(|k| *k != Kernel::Widened).collect();
        // Deeper than two AMX slices, wider than one packed block of `b`, with edges in every
        // dimension; both kernels within the f32 bound of the exact sums and so within twice
        // it of each other.
        let (m, n, k) = (70, 530, 1100);
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let a = Operand::new(m, k, ta, 3, bf16::from_f32);
            let b = Operand::new(k, n, tb, 4, bf16::from_f32);
            let mut results = Vec::new();
            for &kernel in &available {
                let mut sums = vec![f32::NAN; m * n];
                // SAFETY: the operands are `m x k` and `k x n` with their strides.
                unsafe { sum_f32(kernel, m, n, k, &a.mat(), &b.mat(), &mut sums) };
                let worst = worst_error(m, n, k, &a, &b, bf16::to_f32, &sums);
                assert!(worst <= 1.0, "{kernel:?} transposed ({ta}, {tb}): {worst}");
                results.push(sums);
            }
            if let [native, amx] = &results[..] {
                for i in 0..m {
                    for j in 0..n {
                        let magnitude: f64 =
                            (0..k).map(|p| (a.at(i, p, bf16::to_f32) * b.at(p, j, bf16::to_f32)).abs()).sum();
                        let bound = 2.0002 * k as f64 * f64::powi(2.0, -24) * magnitude;
                        let (x, y) = (native[i * n + j] as f64, amx[i * n + j] as f64);
                        assert!((x - y).abs() <= bound, "({i}, {j}) transposed ({ta}, {tb}): {x} against {y}");
                    }
                }
            }
        }
    }

    #[test]
    fn rounding_matches_half_on_every_class_of_value() {
        let specials = [0u32, 0x8000_0000, 0x7f80_0000, 0xff80_0000, 0x7fc0_0000, 0x7f80_0001, 0xffff_ffff];
        let ties = [0x3f80_8000, 0x3f81_8000, 0x3f80_8001, 0x3f80_7fff, 0x7f7f_ffff, 0x0000_8000, 0x0001_8000];
        let stream = values(100_000, 9).into_iter().map(f32::to_bits);
        for x in specials.into_iter().chain(ties).chain(stream).chain((0..1 << 16).map(|i| i << 15 | 0x4000_0000)) {
            let ours = round_bf16(x);
            let theirs = bf16::from_f32(f32::from_bits(x)).to_bits();
            assert_eq!(ours, theirs, "{x:#010x}");
        }
    }
}
