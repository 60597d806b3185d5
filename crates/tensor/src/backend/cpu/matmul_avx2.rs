//! The `f32` matrix product on AVX2 and FMA machines without AVX-512, in ember's own
//! register-blocked kernel instead of `gemm`'s.
//!
//! Blocked as usual for such a kernel: a `KC`-deep slice of `NC` columns of `b` is packed
//! into panels of `NR` columns (each step of the depth one 64-byte line), an `MC`-row block
//! of `a` into panels of `MR` rows (each step `MR` adjacent values, broadcast to every
//! lane), and the micro-kernel keeps an `MR x NR` tile of sums in 12 of the 16 vector
//! registers for the whole slice. A block with few rows reads `b` in place where its rows
//! are contiguous ([`B_IN_PLACE_ROWS`]): packing it would cost more than its few reuses
//! save. Packing reads any strides, so transposed operands need no copy first.
//!
//! Why not `gemm`'s AVX2 kernel: on a Zen 3 EPYC it ran at about two thirds of what MKL
//! reaches on one thread (`f32`, `n = 2048`, 89% of its time in its micro-kernel); this
//! kernel, with the tile of `c` prefetched before each slice (worth most of its lead),
//! runs at about MKL's speed there. AVX-512 machines keep `gemm`'s AVX-512 kernels, which
//! were within MKL's.
//!
//! Rounding: each sum is built in order of `k` with one fused multiply-add per step within
//! a slice, and the slices (which start at multiples of `KC` whatever the block) are added
//! into `c` in order, so a product does not depend on how it was cut into blocks, on
//! which thread ran a block, or on whether an operand was read transposed.
//! `EMBER_F32_GEMM=crate` sends every `f32` product to `gemm` instead, so that one build
//! can time both.

use super::mat::Mat;
use core::arch::x86_64::*;
use std::cell::RefCell;
use std::sync::OnceLock;

/// Rows of the micro-kernel's tile.
const MR: usize = 6;
/// Columns of the micro-kernel's tile: two 8-lane vectors.
const NR: usize = 16;
/// Depth of one packed slice: a panel of `b` is `KC * NR * 4` bytes, 24 KiB, which stays in
/// the 32 KiB L1 cache while the kernel walks down a block of `a`.
const KC: usize = 384;
/// Rows of `a` packed at once: `MC * KC * 4` bytes, 144 KiB, stay in L2.
const MC: usize = 96;
/// Columns of `b` packed at once, a whole number of panels: `KC * NC * 4` bytes, 1.5 MiB,
/// stream from L3 panel by panel.
const NC: usize = 64 * NR;
/// Blocks of at most this many rows read a row-major `b` in place instead of packing it:
/// its panels are reused by `m / MR` row panels only.
const B_IN_PLACE_ROWS: usize = 3 * MR;
/// The narrowest block this kernel takes: packing `a` costs about as much per element as
/// [`NR`] columns of multiply-adds, so narrow blocks go to `gemm` ([`takes`]).
const MIN_COLUMNS: usize = 4 * NR;

const _: () = assert!(MC.is_multiple_of(MR) && NC.is_multiple_of(NR));

/// Whether `f32` products use this kernel: on AVX2 and FMA machines without AVX-512 (where
/// `gemm`'s AVX-512 kernels are used), unless `EMBER_F32_GEMM=crate` asks for `gemm`
/// everywhere.
pub(super) fn available() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let asked_for_crate = std::env::var("EMBER_F32_GEMM").is_ok_and(|v| v.trim() == "crate");
        !asked_for_crate && runs_here() && !is_x86_feature_detected!("avx512f")
    })
}

/// Whether this processor can run the kernel at all (AVX2 and FMA).
fn runs_here() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
}

/// Whether a block of `m x n` outputs goes to this kernel rather than to `gemm`: one with at
/// least a tile's rows and [`MIN_COLUMNS`] columns, and, if it has few rows, a `b` it can
/// read in place. `gemm` reads operands in place for the others; this kernel would pack
/// one for too little work (at most [`B_IN_PLACE_ROWS`] rows reuse a packed `b`, too few
/// columns a packed `a`).
pub(super) fn takes(m: usize, n: usize, k: usize, b: &Mat<f32>) -> bool {
    available() && m >= MR && n >= MIN_COLUMNS && k > 0 && (m > B_IN_PLACE_ROWS || b.cs == 1)
}

/// One cache line: packed panels of `b` start on a line and each depth step of a panel is
/// one line, so the kernel's loads of `b` never straddle two.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; NR]);

thread_local! {
    /// The packed operands, kept per thread from product to product (taken out while a
    /// product runs, so a nested product on the same thread packs into its own).
    static PACKED: RefCell<(Vec<Line>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// `c[m, n] = scale * a[m, k] @ b[k, n]`, or with `accumulate` `c += scale * a @ b`, `c`
/// row-major with rows `c_rs` apart.
///
/// # Safety
/// The processor must have AVX2 and FMA ([`available`] implies it), `m`, `n` and `k`
/// positive; `a` and `b` must address valid `m x k` and `k x n` matrices and `c` a
/// writable `m x n` one that overlaps neither.
pub(super) unsafe fn product(
    (m, n, k): (usize, usize, usize),
    (c, c_rs): (*mut f32, usize),
    a: &Mat<f32>,
    b: &Mat<f32>,
    accumulate: bool,
    scale: f32,
) {
    // `try_with`: a product run while the thread's locals are being torn down packs into
    // fresh buffers instead of failing.
    let (mut packed_b, mut packed_a) = PACKED.try_with(|p| std::mem::take(&mut *p.borrow_mut())).unwrap_or_default();
    let b_in_place = m <= B_IN_PLACE_ROWS && b.cs == 1;
    let panels = NC.min(n).div_ceil(NR);
    // Packing writes every element the kernel reads (padding included) before it reads it,
    // so only the capacity matters.
    packed_b.clear();
    packed_b.reserve(if b_in_place { KC.min(k) } else { KC.min(k) * panels });
    packed_a.clear();
    packed_a.reserve(MC.min(m).next_multiple_of(MR) * KC.min(k) + A_SLACK);
    let work = Work { c, c_rs, scale, accumulate, b_in_place };
    // SAFETY: the caller's contract, and both buffers hold a block's packed operands.
    unsafe { work.run((m, n, k), a, b, packed_b.as_mut_ptr(), packed_a.as_mut_ptr()) };
    let _ = PACKED.try_with(|p| *p.borrow_mut() = (packed_b, packed_a));
}

/// What one product writes, and how.
struct Work {
    c: *mut f32,
    c_rs: usize,
    scale: f32,
    accumulate: bool,
    b_in_place: bool,
}

impl Work {
    /// The blocked loops of [`product`] over packing buffers of the sizes it reserves
    /// (`pa` with [`A_SLACK`] values to spare).
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run(&self, (m, n, k): (usize, usize, usize), a: &Mat<f32>, b: &Mat<f32>, pb: *mut Line, pa: *mut f32) {
        for jc in (0..n).step_by(NC) {
            let nc = (n - jc).min(NC);
            for pc in (0..k).step_by(KC) {
                let kc = (k - pc).min(KC);
                let bs = Mat { ptr: b.ptr.wrapping_offset(pc as isize * b.rs + jc as isize * b.cs), ..*b };
                if !self.b_in_place {
                    // SAFETY: the slice lies inside `b`; `pb` holds `kc` lines of every panel.
                    unsafe { pack_b(pb.cast(), &bs, kc, nc) };
                }
                for ic in (0..m).step_by(MC) {
                    let mc = (m - ic).min(MC);
                    let as_ = Mat { ptr: a.ptr.wrapping_offset(ic as isize * a.rs + pc as isize * a.cs), ..*a };
                    // SAFETY: as for `b`; `pa` holds `mc` rows padded to `MR` of `kc`.
                    unsafe { pack_a(pa, &as_, mc, kc) };
                    for jr in (0..nc).step_by(NR) {
                        let cols = (nc - jr).min(NR);
                        let panel = if !self.b_in_place {
                            (pb.cast::<f32>().wrapping_add(jr * kc).cast_const(), NR)
                        } else if cols == NR {
                            (bs.ptr.wrapping_add(jr), b.rs as usize)
                        } else {
                            // The last, narrower panel of a block read in place is packed
                            // alone (padded with zeros), so the kernel loads whole lines.
                            let last = Mat { ptr: bs.ptr.wrapping_add(jr), ..bs };
                            // SAFETY: the panel lies inside `b`; `pb` holds `kc` lines.
                            unsafe { pack_b(pb.cast(), &last, kc, cols) };
                            (pb.cast::<f32>().cast_const(), NR)
                        };
                        for ir in (0..mc).step_by(MR) {
                            let tile = Tile {
                                c: self.c.wrapping_add((ic + ir) * self.c_rs + jc + jr),
                                c_rs: self.c_rs,
                                rows: (mc - ir).min(MR),
                                cols,
                                add: self.accumulate || pc > 0,
                                scale: self.scale,
                            };
                            // SAFETY: the packed rows hold `kc` steps of `MR` values, the
                            // panel `kc` rows of `NR` values `panel.1` apart, and the tile
                            // lies inside `c`.
                            unsafe { kernel(kc, pa.wrapping_add(ir * kc), panel, &tile) };
                        }
                    }
                }
            }
        }
    }
}

/// Packs `kc` rows and `nc` columns of `b` into panels of `NR` columns, each `kc` rows of
/// `NR` values; columns past `nc` are zero.
#[target_feature(enable = "avx2,fma")]
unsafe fn pack_b(dst: *mut f32, b: &Mat<f32>, kc: usize, nc: usize) {
    let mut out = dst;
    for jr in (0..nc).step_by(NR) {
        let cols = (nc - jr).min(NR);
        let src = b.ptr.wrapping_offset(jr as isize * b.cs);
        for p in 0..kc {
            let row = src.wrapping_offset(p as isize * b.rs);
            // SAFETY: row `p` of the panel lies inside `b` (the caller's contract), and
            // `out` has room for `NR` values.
            unsafe {
                if b.cs == 1 && cols == NR {
                    _mm256_store_ps(out, _mm256_loadu_ps(row));
                    _mm256_store_ps(out.add(8), _mm256_loadu_ps(row.add(8)));
                } else {
                    for j in 0..NR {
                        *out.add(j) = if j < cols { *row.offset(j as isize * b.cs) } else { 0.0 };
                    }
                }
                out = out.add(NR);
            }
        }
    }
}

/// Packs `mc` rows and `kc` columns of `a` into panels of `MR` rows, each `kc` steps of
/// `MR` values; rows past `mc` are zero. Whole panels of a row-major `a` go eight steps at a
/// time through a register transpose, of a column-major one a step at a time through one
/// masked load; each step is stored as a whole vector whose last two lanes the next step
/// overwrites (the buffer has [`A_SLACK`] values to spare for the last).
#[target_feature(enable = "avx2,fma")]
unsafe fn pack_a(dst: *mut f32, a: &Mat<f32>, mc: usize, kc: usize) {
    let mut out = dst;
    for ir in (0..mc).step_by(MR) {
        let rows = (mc - ir).min(MR);
        let src = a.ptr.wrapping_offset(ir as isize * a.rs);
        let mut p = 0;
        // SAFETY (both fast paths): the rows and steps read lie inside `a` (the caller's
        // contract), and `out` has room for the panel plus `A_SLACK` values.
        if rows == MR && a.cs == 1 {
            let row: [*const f32; MR] = core::array::from_fn(|i| src.wrapping_offset(i as isize * a.rs));
            while p + 8 <= kc {
                unsafe {
                    let mut v = [_mm256_setzero_ps(); 8];
                    for (vi, r) in v.iter_mut().zip(row) {
                        *vi = _mm256_loadu_ps(r.add(p));
                    }
                    for (q, column) in transpose_8x8(v).into_iter().enumerate() {
                        _mm256_storeu_ps(out.add(q * MR), column);
                    }
                    out = out.add(8 * MR);
                }
                p += 8;
            }
        } else if rows == MR && a.rs == 1 {
            let first_six = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, 0, 0);
            while p < kc {
                unsafe {
                    let step = _mm256_maskload_ps(src.offset(p as isize * a.cs), first_six);
                    _mm256_storeu_ps(out, step);
                    out = out.add(MR);
                }
                p += 1;
            }
        }
        for p in p..kc {
            let step = src.wrapping_offset(p as isize * a.cs);
            // SAFETY: as above.
            unsafe {
                for i in 0..MR {
                    *out.add(i) = if i < rows { *step.offset(i as isize * a.rs) } else { 0.0 };
                }
                out = out.add(MR);
            }
        }
    }
}

/// Values past the packed `a` that [`pack_a`]'s whole-vector stores may write.
const A_SLACK: usize = 8 - MR;

/// The transpose of the 8 x 8 matrix whose rows `v` holds: element `q` of the result is
/// lane `q` of every row.
#[target_feature(enable = "avx2,fma")]
fn transpose_8x8(v: [__m256; 8]) -> [__m256; 8] {
    let t = [
        _mm256_unpacklo_ps(v[0], v[1]),
        _mm256_unpackhi_ps(v[0], v[1]),
        _mm256_unpacklo_ps(v[2], v[3]),
        _mm256_unpackhi_ps(v[2], v[3]),
        _mm256_unpacklo_ps(v[4], v[5]),
        _mm256_unpackhi_ps(v[4], v[5]),
        _mm256_unpacklo_ps(v[6], v[7]),
        _mm256_unpackhi_ps(v[6], v[7]),
    ];
    // Lanes `q` and `q + 4` of rows 0-3 (`s[q]`) and of rows 4-7 (`s[q + 4]`).
    let s = [
        _mm256_shuffle_ps::<0x44>(t[0], t[2]),
        _mm256_shuffle_ps::<0xEE>(t[0], t[2]),
        _mm256_shuffle_ps::<0x44>(t[1], t[3]),
        _mm256_shuffle_ps::<0xEE>(t[1], t[3]),
        _mm256_shuffle_ps::<0x44>(t[4], t[6]),
        _mm256_shuffle_ps::<0xEE>(t[4], t[6]),
        _mm256_shuffle_ps::<0x44>(t[5], t[7]),
        _mm256_shuffle_ps::<0xEE>(t[5], t[7]),
    ];
    [
        _mm256_permute2f128_ps::<0x20>(s[0], s[4]),
        _mm256_permute2f128_ps::<0x20>(s[1], s[5]),
        _mm256_permute2f128_ps::<0x20>(s[2], s[6]),
        _mm256_permute2f128_ps::<0x20>(s[3], s[7]),
        _mm256_permute2f128_ps::<0x31>(s[0], s[4]),
        _mm256_permute2f128_ps::<0x31>(s[1], s[5]),
        _mm256_permute2f128_ps::<0x31>(s[2], s[6]),
        _mm256_permute2f128_ps::<0x31>(s[3], s[7]),
    ]
}

/// Where the micro-kernel's tile of sums goes: `rows x cols` of `c` from `c`, rows `c_rs`
/// apart; `add` adds it to what `c` holds.
struct Tile {
    c: *mut f32,
    c_rs: usize,
    rows: usize,
    cols: usize,
    add: bool,
    scale: f32,
}

/// One `MR x NR` tile of sums over `kc` steps: `a` is a packed row panel, `b.0` the first
/// of `kc` rows of `NR` values, `b.1` apart.
#[target_feature(enable = "avx2,fma")]
unsafe fn kernel(kc: usize, a: *const f32, (b, b_rs): (*const f32, usize), tile: &Tile) {
    // SAFETY: the caller guarantees the panels and the tile (see [`Work::run`]).
    unsafe {
        // The tile's rows are written once at the end of the slice; asking for them now
        // hides their cache misses behind the slice's arithmetic (rows of a large `c` are
        // far apart, so the hardware prefetcher does not find them).
        for i in 0..tile.rows {
            _mm_prefetch::<_MM_HINT_T0>(tile.c.add(i * tile.c_rs).cast());
            _mm_prefetch::<_MM_HINT_T0>(tile.c.add(i * tile.c_rs + NR - 1).cast());
        }
        let mut acc = [[_mm256_setzero_ps(); 2]; MR];
        let (mut ap, mut bp) = (a, b);
        for _ in 0..kc {
            let (b0, b1) = (_mm256_loadu_ps(bp), _mm256_loadu_ps(bp.add(8)));
            for (i, sums) in acc.iter_mut().enumerate() {
                let ai = _mm256_broadcast_ss(&*ap.add(i));
                sums[0] = _mm256_fmadd_ps(ai, b0, sums[0]);
                sums[1] = _mm256_fmadd_ps(ai, b1, sums[1]);
            }
            ap = ap.add(MR);
            bp = bp.add(b_rs);
        }
        let s = _mm256_set1_ps(tile.scale);
        if tile.rows == MR && tile.cols == NR {
            for (i, sums) in acc.iter().enumerate() {
                let d = tile.c.add(i * tile.c_rs);
                let (mut v0, mut v1) = (_mm256_mul_ps(sums[0], s), _mm256_mul_ps(sums[1], s));
                if tile.add {
                    v0 = _mm256_add_ps(_mm256_loadu_ps(d), v0);
                    v1 = _mm256_add_ps(_mm256_loadu_ps(d.add(8)), v1);
                }
                _mm256_storeu_ps(d, v0);
                _mm256_storeu_ps(d.add(8), v1);
            }
        } else {
            let mut sums = [0f32; MR * NR];
            for (i, v) in acc.iter().enumerate() {
                _mm256_storeu_ps(sums.as_mut_ptr().add(i * NR), _mm256_mul_ps(v[0], s));
                _mm256_storeu_ps(sums.as_mut_ptr().add(i * NR + 8), _mm256_mul_ps(v[1], s));
            }
            for i in 0..tile.rows {
                for j in 0..tile.cols {
                    let d = tile.c.add(i * tile.c_rs + j);
                    *d = if tile.add { *d + sums[i * NR + j] } else { sums[i * NR + j] };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic pseudo-random matrix of `len` values in `[-0.5, 0.5)`.
    fn values(len: usize, seed: u32) -> Vec<f32> {
        let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..len)
            .map(|_| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (state >> 8) as f32 / (1u32 << 24) as f32 - 0.5
            })
            .collect()
    }

    /// `a @ b` in `f64` for row-major `m x k` and `k x n` operands.
    fn reference(m: usize, n: usize, k: usize, a: &[f32], b: &[f32]) -> Vec<f64> {
        let mut c = vec![0f64; m * n];
        for i in 0..m {
            for p in 0..k {
                for j in 0..n {
                    c[i * n + j] += a[i * k + p] as f64 * b[p * n + j] as f64;
                }
            }
        }
        c
    }

    /// The kernel's product of row-major `a` and `b`, each read either as stored or through
    /// a transposed copy (so that packing reads the other stride), into a row-major `c` with
    /// a padded row stride.
    fn run(
        (m, n, k): (usize, usize, usize),
        a: &[f32],
        b: &[f32],
        transposed: (bool, bool),
        c: &mut [f32],
        c_rs: usize,
    ) {
        let transpose = |x: &[f32], rows: usize, cols: usize| -> Vec<f32> {
            (0..rows * cols).map(|i| x[(i % rows) * cols + i / rows]).collect()
        };
        let at = transpose(a, m, k);
        let bt = transpose(b, k, n);
        let am = if transposed.0 {
            Mat { ptr: at.as_ptr(), rs: 1, cs: m as isize }
        } else {
            Mat { ptr: a.as_ptr(), rs: k as isize, cs: 1 }
        };
        let bm = if transposed.1 {
            Mat { ptr: bt.as_ptr(), rs: 1, cs: k as isize }
        } else {
            Mat { ptr: b.as_ptr(), rs: n as isize, cs: 1 }
        };
        assert!(c.len() >= (m - 1) * c_rs + n);
        // SAFETY: the operands and `c` hold the matrices their strides address.
        unsafe { product((m, n, k), (c.as_mut_ptr(), c_rs), &am, &bm, false, 1.0) };
    }

    #[test]
    fn products_of_every_shape_and_stride_match_the_reference() {
        if !runs_here() {
            return;
        }
        // Edges of every kind: rows and columns past whole tiles, few rows (`b` read in
        // place, its last panel narrow), depths past one slice, widths past one block.
        let shapes =
            [(6, 16, 1), (7, 17, 5), (13, 40, 300), (18, 33, 2 * KC + 7), (37, 70, 129), (MC + 5, NC + 21, KC + 1)];
        for (s, &(m, n, k)) in shapes.iter().enumerate() {
            let (a, b) = (values(m * k, 2 * s as u32), values(k * n, 2 * s as u32 + 1));
            let want = reference(m, n, k, &a, &b);
            for transposed in [(false, false), (true, false), (false, true), (true, true)] {
                let c_rs = n + 3;
                let mut c = vec![f32::NAN; m * c_rs];
                run((m, n, k), &a, &b, transposed, &mut c, c_rs);
                for i in 0..m {
                    for j in 0..n {
                        let (got, want) = (c[i * c_rs + j] as f64, want[i * n + j]);
                        let bound = 1e-5 * (k as f64).sqrt() * 4.0;
                        assert!(
                            (got - want).abs() <= bound,
                            "{m}x{n}x{k} {transposed:?} at ({i}, {j}): {got} vs {want}"
                        );
                    }
                    // The padding between rows is never written.
                    assert!(c[i * c_rs + n..(i * c_rs + c_rs).min(c.len())].iter().all(|v| v.is_nan()));
                }
            }
        }
    }

    #[test]
    fn accumulating_with_a_scale_adds_to_what_c_holds() {
        if !runs_here() {
            return;
        }
        let (m, n, k) = (9, 20, KC + 3);
        let (a, b) = (values(m * k, 7), values(k * n, 8));
        let start = values(m * n, 9);
        let mut c = start.clone();
        let am = Mat { ptr: a.as_ptr(), rs: k as isize, cs: 1 };
        let bm = Mat { ptr: b.as_ptr(), rs: n as isize, cs: 1 };
        // SAFETY: the operands and `c` hold the matrices their strides address.
        unsafe { product((m, n, k), (c.as_mut_ptr(), n), &am, &bm, true, -0.5) };
        let want = reference(m, n, k, &a, &b);
        for i in 0..m * n {
            let expected = start[i] as f64 - 0.5 * want[i];
            assert!((c[i] as f64 - expected).abs() <= 1e-4, "element {i}: {} vs {expected}", c[i]);
        }
    }

    #[test]
    fn a_product_cut_into_blocks_gives_the_same_bits_as_in_one_piece() {
        if !runs_here() {
            return;
        }
        let (m, n, k) = (50, 70, 2 * KC + 11);
        let (a, b) = (values(m * k, 3), values(k * n, 4));
        let mut whole = vec![0f32; m * n];
        run((m, n, k), &a, &b, (false, false), &mut whole, n);
        // Row blocks that start off a tile boundary, column blocks likewise, and the
        // transposed product `(b^T a^T)^T`: each element's sum is the same chain of
        // multiply-adds.
        let mut pieces = vec![0f32; m * n];
        for (r0, r1) in [(0, 7), (7, 20), (20, m)] {
            for (c0, c1) in [(0, 16), (16, 35), (35, n)] {
                let am = Mat { ptr: a[r0 * k..].as_ptr(), rs: k as isize, cs: 1 };
                let bm = Mat { ptr: b[c0..].as_ptr(), rs: n as isize, cs: 1 };
                let dst = pieces[r0 * n + c0..].as_mut_ptr();
                // SAFETY: the block lies inside the operands and `pieces`.
                unsafe { product((r1 - r0, c1 - c0, k), (dst, n), &am, &bm, false, 1.0) };
            }
        }
        assert_eq!(
            whole.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            pieces.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        let mut transposed = vec![0f32; n * m];
        let bt = Mat { ptr: b.as_ptr(), rs: 1, cs: n as isize };
        let at = Mat { ptr: a.as_ptr(), rs: 1, cs: k as isize };
        // SAFETY: `b^T` and `a^T` address `b` and `a`; `transposed` is `n x m`.
        unsafe { product((n, m, k), (transposed.as_mut_ptr(), m), &bt, &at, false, 1.0) };
        for i in 0..m {
            for j in 0..n {
                assert_eq!(whole[i * n + j].to_bits(), transposed[j * m + i].to_bits(), "({i}, {j})");
            }
        }
    }
}
