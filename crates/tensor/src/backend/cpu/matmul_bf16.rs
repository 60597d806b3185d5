//! The bf16 matrix product on AVX-512 BF16: `vdpbf16ps` multiplies 16 pairs of bf16 values
//! and adds each pair's two products into one `f32` lane, twice the multiply-adds per
//! instruction of an `f32` FMA.
//!
//! The product is blocked as usual for a register-blocked kernel: a `KC`-deep slice of `b`
//! is packed into panels of `NR` columns in which each `f32`-sized slot holds the two values
//! of one k-pair (`b[2p, j]` low, `b[2p + 1, j]` high), the layout `vdpbf16ps` multiplies;
//! an `MC`-row block of `a` is copied into a contiguous buffer whose rows are `KC` long (so
//! each row's k-pairs are adjacent `u32`s, broadcast to every lane); the micro-kernel keeps
//! an `MR x NR` tile of `f32` sums in 24 registers. Packing reads any strides, so transposed
//! operands need no copy first. An odd depth is padded with a zero pair element in both
//! packed operands.
//!
//! `vdpbf16ps` ignores MXCSR: it reads subnormal inputs as zero, flushes subnormal results
//! and rounds to nearest even, which is what ember's kernels do by default (see
//! `docs/design.md`, "Subnormal numbers"). The `f32` sums are exact products of the bf16
//! values (8-bit significands multiply exactly in `f32`) added in `f32`, in order of `k`
//! within a `KC` slice and slice by slice.

use core::arch::x86_64::*;
use std::ptr;

/// Rows of the micro-kernel's tile.
const MR: usize = 8;
/// 16-lane vectors across the micro-kernel's tile.
const NV: usize = 3;
/// Columns of the micro-kernel's tile.
const NR: usize = NV * 16;
/// Depth of one packed slice (even, so that only the last slice can have an odd depth). A
/// packed panel of `b` is `KC * NR * 2` bytes, 24 KiB, which stays in a 32 KiB L1 cache
/// while the kernel walks down a block of `a`.
const KC: usize = 256;
/// Rows of `a` packed at once: `MC * KC * 2` bytes, 64 KiB, stay in L2.
const MC: usize = 128;
/// Columns of `b` packed at once, a whole number of panels: `KC * NC * 2` bytes, 504 KiB,
/// stay in L2 beside `a`'s.
const NC: usize = 21 * NR;

// A panel of `b` is a whole number of 16-lane vectors, and only the last slice of a depth
// can be odd.
const _: () = assert!(NR.is_multiple_of(16) && KC.is_multiple_of(2));

/// Whether this processor runs the kernel.
pub(super) fn available() -> bool {
    is_x86_feature_detected!("avx512bf16") && is_x86_feature_detected!("avx512f")
}

/// A matrix of bf16 values (as their bits) addressed by strides in elements.
#[derive(Clone, Copy)]
pub(super) struct Bits {
    pub ptr: *const u16,
    pub rs: isize,
    pub cs: isize,
}

/// One cache line of packed `b`: packed panels start on a line, so the kernel's loads of
/// `b` never straddle two.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u32; 16]);

/// `c[m, n] = a[m, k] @ b[k, n]` in `f32` (`c` row-major with rows `c_rs` apart), for
/// `k > 0`.
///
/// # Safety
/// [`available`] must be true; `a` and `b` must address valid `m x k` and `k x n` matrices
/// and `c` a writable `m x n` one that overlaps neither.
#[target_feature(enable = "avx512bf16,avx512f,avx512bw")]
pub(super) unsafe fn product(m: usize, n: usize, k: usize, a: Bits, b: Bits, c: *mut f32, c_rs: usize) {
    // Packing writes every element the kernel reads (padding included) before it reads it,
    // so the buffers start uninitialised: zeroing them cost more than a small product's
    // packing.
    let mut packed_b: Vec<Line> = Vec::with_capacity(KC / 2 * NC.min(n).next_multiple_of(NR) / 16);
    let mut packed_a: Vec<u16> = Vec::with_capacity(MC.min(m).next_multiple_of(MR) * KC.min(k).next_multiple_of(2));
    for jc in (0..n).step_by(NC) {
        let nc = (n - jc).min(NC);
        for pc in (0..k).step_by(KC) {
            let kc = (k - pc).min(KC);
            let (kp, kcp) = (kc.div_ceil(2), kc.next_multiple_of(2));
            let bs = Bits { ptr: b.ptr.wrapping_offset(pc as isize * b.rs + jc as isize * b.cs), ..b };
            // SAFETY: the slice of `b` lies inside `b`, and `packed_b` holds `kp` pairs of
            // every panel of `nc` columns.
            unsafe { pack_b(packed_b.as_mut_ptr().cast(), bs, kc, nc) };
            for ic in (0..m).step_by(MC) {
                let mc = (m - ic).min(MC);
                let as_ = Bits { ptr: a.ptr.wrapping_offset(ic as isize * a.rs + pc as isize * a.cs), ..a };
                // SAFETY: as for `b`; `packed_a` holds `mc` rows padded to `MR` of `kcp`.
                unsafe { pack_a(packed_a.as_mut_ptr(), as_, mc, kc, kcp) };
                for jr in (0..nc).step_by(NR) {
                    let panel = packed_b.as_ptr().cast::<u32>().wrapping_add(jr / NR * kp * NR);
                    for ir in (0..mc).step_by(MR) {
                        let tile = Tile {
                            c: c.wrapping_add((ic + ir) * c_rs + jc + jr),
                            c_rs,
                            rows: (mc - ir).min(MR),
                            cols: (nc - jr).min(NR),
                            accumulate: pc > 0,
                        };
                        let a_rows = packed_a.as_ptr().wrapping_add(ir * kcp);
                        // SAFETY: the packed rows and panel hold `kp` pairs, and the tile
                        // lies inside `c`. The last panel of a block narrower than `NR`
                        // runs a kernel as narrow as its columns, which wastes no products
                        // on its zero padding.
                        unsafe {
                            match tile.cols.div_ceil(16) {
                                1 => kernel::<1>(kp, a_rows, kcp, panel, tile),
                                2 => kernel::<2>(kp, a_rows, kcp, panel, tile),
                                _ => kernel::<NV>(kp, a_rows, kcp, panel, tile),
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Packs `kc` rows and `nc` columns of `b` into panels of `NR` columns, each `kc.div_ceil(2)`
/// rows of `NR` k-pairs; columns past `nc` and the high half of an odd depth's last pair
/// are zero.
///
/// # Safety
/// `b` must address a valid `kc x nc` matrix and `dst` must hold every panel.
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn pack_b(dst: *mut u32, b: Bits, kc: usize, nc: usize) {
    let kp = kc.div_ceil(2);
    for (q, j0) in (0..nc).step_by(NR).enumerate() {
        let width = (nc - j0).min(NR);
        for p in 0..kp {
            // SAFETY: every address below is an element of `b`'s `kc x nc` block or of
            // panel `q` of `dst`, as the caller guarantees.
            unsafe {
                let out = dst.add((q * kp + p) * NR);
                let r0 = b.ptr.offset(2 * p as isize * b.rs + j0 as isize * b.cs);
                let pair = 2 * p + 1 < kc;
                if pair && width == NR && b.cs == 1 {
                    // Rows 2p and 2p + 1 interleaved 16 columns at a time.
                    let r1 = r0.offset(b.rs);
                    for v in 0..NV {
                        let lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256(r0.add(16 * v).cast()));
                        let hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256(r1.add(16 * v).cast()));
                        let both = _mm512_or_si512(lo, _mm512_slli_epi32::<16>(hi));
                        _mm512_storeu_si512(out.add(16 * v).cast(), both);
                    }
                    continue;
                }
                pack_pairs(out, r0, b, pair, width, NR);
            }
        }
    }
}

/// Writes one row of k-pairs of a packed panel, element by element: `width` columns of `b`
/// from `r0` (row `2p`; row `2p + 1` is the high half when `pair`, else zero), then zeros
/// up to `panel` columns. The vector paths of the packers handle the common layouts; this
/// handles the rest (transposed or strided `b`, a partial panel, an odd depth's last pair).
///
/// # Safety
/// `r0` must address `width` elements `b.cs` apart (and, when `pair`, the row `b.rs` below
/// them), and `out` must hold `panel >= width` `u32`s.
pub(super) unsafe fn pack_pairs(out: *mut u32, r0: *const u16, b: Bits, pair: bool, width: usize, panel: usize) {
    // SAFETY: every address is inside the rows or the panel the caller guarantees.
    unsafe {
        if pair && b.rs == 1 {
            // A transposed `b`: each column's pair is already one `u32` (the low half first,
            // on this little-endian target).
            for j in 0..width {
                *out.add(j) = ptr::read_unaligned(r0.offset(j as isize * b.cs).cast::<u32>());
            }
        } else {
            for j in 0..width {
                let at = r0.offset(j as isize * b.cs);
                let lo = *at as u32;
                let hi = if pair { *at.offset(b.rs) as u32 } else { 0 };
                *out.add(j) = lo | hi << 16;
            }
        }
        for j in width..panel {
            *out.add(j) = 0;
        }
    }
}

/// Copies `mc` rows and `kc` columns of `a` into `dst`, rows `kcp` (`kc` rounded up to even)
/// apart, padding each row to `kcp` and the rows to a multiple of `MR` with zeros.
///
/// # Safety
/// `a` must address a valid `mc x kc` matrix and `dst` must hold `mc.next_multiple_of(MR)`
/// rows of `kcp`.
unsafe fn pack_a(dst: *mut u16, a: Bits, mc: usize, kc: usize, kcp: usize) {
    // SAFETY: every address is an element of `a`'s block or of `dst`, as the caller guarantees.
    unsafe {
        if a.cs == 1 {
            for i in 0..mc {
                ptr::copy_nonoverlapping(a.ptr.offset(i as isize * a.rs), dst.add(i * kcp), kc);
            }
        } else {
            // Down each column, which is where a transposed `a` is contiguous.
            for kk in 0..kc {
                let col = a.ptr.offset(kk as isize * a.cs);
                for i in 0..mc {
                    *dst.add(i * kcp + kk) = *col.offset(i as isize * a.rs);
                }
            }
        }
        if kcp > kc {
            for i in 0..mc {
                *dst.add(i * kcp + kc) = 0;
            }
        }
        ptr::write_bytes(dst.add(mc * kcp), 0, (mc.next_multiple_of(MR) - mc) * kcp);
    }
}

/// Where a micro-kernel's tile goes: `rows x cols` of `c` (at most `MR x NR`), added to what
/// `c` holds when `accumulate`.
struct Tile {
    c: *mut f32,
    c_rs: usize,
    rows: usize,
    cols: usize,
    accumulate: bool,
}

/// The `MR x 16W` tile of `kp` k-pairs (`W <= NV` vectors of the panel): `a` holds `MR` rows
/// `a_rs` apart (k-pair `p` of row `i` is the `u32` at `a + i * a_rs + 2 * p`), `panel` `kp`
/// rows of `NR` pairs.
///
/// # Safety
/// `a` and `panel` must hold `kp` pairs of every row; `tile` (at most `16W` columns wide)
/// must lie inside a writable `c`.
#[target_feature(enable = "avx512bf16,avx512f")]
unsafe fn kernel<const W: usize>(kp: usize, a: *const u16, a_rs: usize, panel: *const u32, tile: Tile) {
    if tile.accumulate {
        // The tile's sums so far are far away (the kernel last touched them a whole block
        // of `a` ago): asking for them now hides the wait behind the products.
        for i in 0..tile.rows {
            for v in 0..W {
                _mm_prefetch::<_MM_HINT_T0>(tile.c.wrapping_add(i * tile.c_rs + 16 * v).cast());
            }
        }
    }
    let mut acc = [[_mm512_setzero_ps(); W]; MR];
    for p in 0..kp {
        // SAFETY: pair `p` of each row and row `p` of the panel are inside the packed buffers.
        unsafe {
            let bv: [__m512bh; W] =
                std::array::from_fn(|v| m512bh(_mm512_loadu_si512(panel.add(p * NR + v * 16).cast())));
            for (i, row) in acc.iter_mut().enumerate() {
                let pair = ptr::read_unaligned(a.add(i * a_rs + 2 * p).cast::<i32>());
                let av = m512bh(_mm512_set1_epi32(pair));
                for (sum, &bv) in row.iter_mut().zip(&bv) {
                    *sum = _mm512_dpbf16_ps(*sum, av, bv);
                }
            }
        }
    }
    for (i, row) in acc.iter().enumerate().take(tile.rows) {
        for (v, &sum) in row.iter().enumerate() {
            let lanes = tile.cols.saturating_sub(16 * v).min(16);
            if lanes == 0 {
                break;
            }
            let mask = (u32::MAX >> (32 - lanes)) as __mmask16;
            // SAFETY: the masked lanes are columns of the tile, inside `c`.
            unsafe {
                let at = tile.c.add(i * tile.c_rs + 16 * v);
                let sum = if tile.accumulate { _mm512_add_ps(_mm512_maskz_loadu_ps(mask, at), sum) } else { sum };
                _mm512_mask_storeu_ps(at, mask, sum);
            }
        }
    }
}

/// The 32 bf16 values a 512-bit integer vector holds.
#[inline(always)]
fn m512bh(v: __m512i) -> __m512bh {
    // SAFETY: both are 64 bytes of plain data; every bit pattern is a bf16 vector.
    unsafe { std::mem::transmute(v) }
}
