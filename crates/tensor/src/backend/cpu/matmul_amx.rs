//! The bf16 matrix product on AMX tiles (`tdpbf16ps`): one instruction multiplies a
//! 16 x 32 tile of bf16 by a 32 x 16 one and adds the products into a 16 x 16 tile of
//! `f32` sums, 8192 multiply-adds where `vdpbf16ps` does 32.
//!
//! Blocked like `matmul_bf16`: a `KC`-deep slice of `NC` columns of `b` is packed into
//! panels of 16 columns in the VNNI layout (each `u32` holds one k-pair of one column,
//! `b[2p, j]` low, `b[2p + 1, j]` high), an `MC`-row block of `a` into 16 x 32 tiles; both
//! are padded with zeros to whole tiles (rows of `a`, columns of `b`, depth to a multiple of
//! 32), so every tile the kernel loads is full and the tile configuration never changes.
//! The micro-kernel keeps a 32 x 32 block of sums in four tiles (two tiles of `a` and two of
//! `b` feed them) for the whole slice; a block that overhangs `c` goes through a small
//! buffer, so only its columns and rows inside `c` are read and written. Packing reads any
//! strides, so transposed operands need no copy first. The packed buffers belong to the
//! thread and are reused from product to product.
//!
//! Rounding: every product of two bf16 values is exact in `f32`, and each k-pair's two
//! products are added into the running `f32` sum in order of `k` within a slice and slice
//! by slice (the slices start at multiples of `KC` whatever the block), so a sum is within
//! the usual bound of `k` `f32` additions. How the hardware adds a pair's two products (one
//! rounding or two) is not the same as `vdpbf16ps`'s, so the two kernels may differ in the
//! last bits of a sum. Like `vdpbf16ps`, `tdpbf16ps` ignores MXCSR: subnormal inputs read as
//! zero, subnormal results are flushed, rounding is to nearest even.
//!
//! Linux lends a process the tile registers only when asked (`arch_prctl`, once per
//! process); [`available`] asks, and each product loads the tile configuration on its own
//! thread and releases the tiles at the end, so that a context switch between products
//! does not save them.

use super::matmul_bf16::{Bits, pack_pairs};
use core::arch::asm;
use core::arch::x86_64::*;
use std::cell::RefCell;
use std::sync::OnceLock;

/// Rows of a tile (of `a`, of `b`'s k-pairs and of the sums).
const TILE_ROWS: usize = 16;
/// Depth (bf16 elements along `k`) of one tile of `a`: a 64-byte row.
const TILE_DEPTH: usize = 32;
/// Depth of one packed slice, a whole number of tiles: the sums stay in tiles across it.
/// A packed 32-column pair of panels of `b` is `KC * 32 * 2` bytes, 32 KiB, which stays in
/// the L1 cache while the kernel walks down a block of `a`.
const KC: usize = 512;
/// Rows of `a` packed at once: `MC * KC * 2` bytes, 128 KiB, stay in L2.
const MC: usize = 128;
/// Columns of `b` packed at once: `KC * NC * 2` bytes, 512 KiB, stay in L2 beside `a`'s.
const NC: usize = 512;

const _: () = assert!(KC.is_multiple_of(TILE_DEPTH) && MC.is_multiple_of(TILE_ROWS) && NC.is_multiple_of(TILE_ROWS));

/// One tile's worth of packed operand: 16 rows of 64 bytes, on a cache line.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct TileBuf([u16; TILE_ROWS * TILE_DEPTH]);

impl TileBuf {
    const ZERO: TileBuf = TileBuf([0; TILE_ROWS * TILE_DEPTH]);
}

/// One 16 x 16 tile of `f32` sums, for the blocks that overhang `c`.
#[repr(C, align(64))]
struct SumTile([f32; TILE_ROWS * TILE_ROWS]);

/// Bytes between the rows of a packed tile.
const ROW_BYTES: usize = 64;

/// The layout of the eight tiles every product uses (`ldtilecfg`'s 64-byte operand):
/// palette 1, tiles 0-3 the sums, 4-5 `a`, 6-7 `b`, each 16 rows of 64 bytes.
#[repr(C, align(64))]
struct TileConfig {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    bytes_per_row: [u16; 16],
    rows: [u8; 16],
}

static CONFIG: TileConfig = TileConfig {
    palette: 1,
    start_row: 0,
    reserved: [0; 14],
    bytes_per_row: [64, 64, 64, 64, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0],
    rows: [16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0],
};

/// Whether this processor and operating system run the kernel: the processor has AMX-BF16
/// and AMX-TILE (and the AVX-512 the packing uses), and the operating system granted the
/// process the tile registers. Asked once per process.
pub(super) fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| processor_has_amx() && os_grants_tiles())
}

/// CPUID leaf 7: EDX bit 22 is AMX-BF16, bit 24 AMX-TILE.
fn processor_has_amx() -> bool {
    #[allow(unused_unsafe)]
    // SAFETY: `cpuid` exists on every x86-64 processor; leaf 7 is asked only where leaf 0
    // says it exists.
    let edx = unsafe {
        if __cpuid(0).eax < 7 {
            return false;
        }
        __cpuid_count(7, 0).edx
    };
    edx & (1 << 22) != 0
        && edx & (1 << 24) != 0
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
}

/// Asks Linux for the tile registers' state for the whole process
/// (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`); `false` where it refuses.
#[cfg(target_os = "linux")]
fn os_grants_tiles() -> bool {
    const SYS_ARCH_PRCTL: isize = 158;
    const ARCH_REQ_XCOMP_PERM: usize = 0x1023;
    const XFEATURE_XTILEDATA: usize = 18;
    let ret: isize;
    // SAFETY: the `arch_prctl` system call only changes which state the kernel saves for
    // this process; the instruction clobbers `rcx` and `r11`, declared so.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") SYS_ARCH_PRCTL => ret,
            in("rdi") ARCH_REQ_XCOMP_PERM,
            in("rsi") XFEATURE_XTILEDATA,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        )
    };
    ret == 0
}

/// Other systems are not asked: the kernel is not used there.
#[cfg(not(target_os = "linux"))]
fn os_grants_tiles() -> bool {
    false
}

/// The packed operands of the thread's last product, kept for its next.
#[derive(Default)]
struct Packed {
    a: Vec<TileBuf>,
    b: Vec<TileBuf>,
}

thread_local! {
    static PACKED: RefCell<Packed> = RefCell::default();
}

/// The tile configuration loaded on this thread for as long as the value lives.
struct Tiles;

impl Tiles {
    /// # Safety
    /// [`available`] must be true.
    unsafe fn load() -> Tiles {
        // SAFETY: the process holds the tile state (`available`) and `CONFIG` is a valid
        // palette-1 configuration.
        unsafe { asm!("ldtilecfg [{}]", in(reg) &CONFIG, options(nostack, readonly)) };
        Tiles
    }
}

impl Drop for Tiles {
    fn drop(&mut self) {
        // SAFETY: only reached after `ldtilecfg` succeeded on this thread.
        unsafe { asm!("tilerelease", options(nostack, nomem)) };
    }
}

/// `c[m, n] = a[m, k] @ b[k, n]` in `f32` (`c` row-major with rows `c_rs` apart), for
/// `k > 0`.
///
/// # Safety
/// [`available`] must be true; `a` and `b` must address valid `m x k` and `k x n` matrices
/// and `c` a writable `m x n` one that overlaps neither.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn product(m: usize, n: usize, k: usize, a: Bits, b: Bits, c: *mut f32, c_rs: usize) {
    PACKED.with(|packed| {
        let mut packed = packed.borrow_mut();
        let Packed { a: packed_a, b: packed_b } = &mut *packed;
        let depth_tiles = KC.min(k).div_ceil(TILE_DEPTH);
        let a_tiles = MC.min(m).div_ceil(TILE_ROWS) * depth_tiles;
        let b_tiles = NC.min(n).div_ceil(TILE_ROWS) * depth_tiles;
        if packed_a.len() < a_tiles {
            packed_a.resize(a_tiles, TileBuf::ZERO);
        }
        if packed_b.len() < b_tiles {
            packed_b.resize(b_tiles, TileBuf::ZERO);
        }
        // SAFETY: `available` holds (the caller's contract).
        let _tiles = unsafe { Tiles::load() };
        for jc in (0..n).step_by(NC) {
            let nc = (n - jc).min(NC);
            let panels = nc.div_ceil(TILE_ROWS);
            for pc in (0..k).step_by(KC) {
                let kc = (k - pc).min(KC);
                let kt = kc.div_ceil(TILE_DEPTH);
                let bs = Bits { ptr: b.ptr.wrapping_offset(pc as isize * b.rs + jc as isize * b.cs), ..b };
                // SAFETY: the slice of `b` lies inside `b`; `packed_b` holds `kt` tiles of
                // every panel.
                unsafe { pack_b(packed_b.as_mut_ptr(), bs, kc, nc) };
                for ic in (0..m).step_by(MC) {
                    let mc = (m - ic).min(MC);
                    let groups = mc.div_ceil(TILE_ROWS);
                    let as_ = Bits { ptr: a.ptr.wrapping_offset(ic as isize * a.rs + pc as isize * a.cs), ..a };
                    // SAFETY: as for `b`; `packed_a` holds `kt` tiles of every row group.
                    unsafe { pack_a(packed_a.as_mut_ptr(), as_, mc, kc) };
                    for jr in (0..panels).step_by(2) {
                        for ir in (0..groups).step_by(2) {
                            let block = Block {
                                c: c.wrapping_add((ic + ir * TILE_ROWS) * c_rs + jc + jr * TILE_ROWS),
                                c_rs,
                                rows: mc - ir * TILE_ROWS,
                                cols: nc - jr * TILE_ROWS,
                                accumulate: pc > 0,
                            };
                            let a_tiles = packed_a.as_ptr().wrapping_add(ir * kt);
                            let b_tiles = packed_b.as_ptr().wrapping_add(jr * kt);
                            // SAFETY: the row groups and panels hold `kt` tiles each (a
                            // second one only where the counts below say so), and the block
                            // lies inside `c` where its `rows` and `cols` say.
                            unsafe {
                                match ((groups - ir).min(2), (panels - jr).min(2)) {
                                    (1, 1) => kernel::<1, 1>(kt, a_tiles, b_tiles, &block),
                                    (1, _) => kernel::<1, 2>(kt, a_tiles, b_tiles, &block),
                                    (_, 1) => kernel::<2, 1>(kt, a_tiles, b_tiles, &block),
                                    _ => kernel::<2, 2>(kt, a_tiles, b_tiles, &block),
                                }
                            }
                        }
                    }
                }
            }
        }
    })
}

/// Packs `kc` rows and `nc` columns of `b` into panels of 16 columns, each
/// `kc.div_ceil(32)` tiles of 16 k-pair rows of 16 `u32`s: panel `q` is tiles
/// `q * kt .. (q + 1) * kt`. Columns past `nc` and pairs past `kc` are zero.
///
/// # Safety
/// `b` must address a valid `kc x nc` matrix and `dst` must hold every panel's tiles.
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn pack_b(dst: *mut TileBuf, b: Bits, kc: usize, nc: usize) {
    let pairs = kc.div_ceil(TILE_DEPTH) * TILE_ROWS;
    for (q, j0) in (0..nc).step_by(TILE_ROWS).enumerate() {
        let width = (nc - j0).min(TILE_ROWS);
        let panel = dst.wrapping_add(q * pairs / TILE_ROWS).cast::<u32>();
        for p in 0..pairs {
            // SAFETY: every address below is an element of `b`'s `kc x nc` block or of
            // panel `q` of `dst`, as the caller guarantees.
            unsafe {
                let out = panel.add(p * TILE_ROWS);
                if 2 * p >= kc {
                    _mm512_storeu_si512(out.cast(), _mm512_setzero_si512());
                    continue;
                }
                let r0 = b.ptr.offset(2 * p as isize * b.rs + j0 as isize * b.cs);
                let pair = 2 * p + 1 < kc;
                if pair && width == TILE_ROWS && b.cs == 1 {
                    // Rows 2p and 2p + 1 interleaved.
                    let lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256(r0.cast()));
                    let hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256(r0.offset(b.rs).cast()));
                    _mm512_storeu_si512(out.cast(), _mm512_or_si512(lo, _mm512_slli_epi32::<16>(hi)));
                    continue;
                }
                if pair && b.rs == 1 && width == TILE_ROWS && b.cs.unsigned_abs() < (i32::MAX as usize) / TILE_ROWS {
                    // A transposed `b`: each column's pair is already one `u32` (the low
                    // half first, on this little-endian target), gathered 16 at once.
                    let columns = _mm512_mullo_epi32(_mm512_set1_epi32(b.cs as i32), column_numbers());
                    let pairs = _mm512_i32gather_epi32::<2>(columns, r0.cast());
                    _mm512_storeu_si512(out.cast(), pairs);
                    continue;
                }
                pack_pairs(out, r0, b, pair, width, TILE_ROWS);
            }
        }
    }
}

/// Packs `mc` rows and `kc` columns of `a` into groups of 16 rows, each `kc.div_ceil(32)`
/// tiles of 16 rows of 32 values: group `g` is tiles `g * kt .. (g + 1) * kt`. Rows past
/// `mc` (to a whole group) and columns past `kc` are zero.
///
/// # Safety
/// `a` must address a valid `mc x kc` matrix and `dst` must hold every group's tiles.
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn pack_a(dst: *mut TileBuf, a: Bits, mc: usize, kc: usize) {
    let kt = kc.div_ceil(TILE_DEPTH);
    let groups = mc.div_ceil(TILE_ROWS);
    let row_of = |i: usize, t: usize| {
        dst.wrapping_add((i / TILE_ROWS) * kt + t).cast::<u16>().wrapping_add((i % TILE_ROWS) * TILE_DEPTH)
    };
    // SAFETY: every address is an element of `a`'s block or of `dst`, as the caller
    // guarantees.
    unsafe {
        if a.cs == 1 {
            for i in 0..mc {
                let src = a.ptr.offset(i as isize * a.rs);
                for t in 0..kt {
                    let len = (kc - t * TILE_DEPTH).min(TILE_DEPTH);
                    let mask = u32::MAX >> (TILE_DEPTH - len);
                    let run = _mm512_maskz_loadu_epi16(mask, src.add(t * TILE_DEPTH).cast());
                    _mm512_storeu_si512(row_of(i, t).cast(), run);
                }
            }
        } else if a.rs == 1 && a.cs.unsigned_abs() < (i32::MAX as usize) / TILE_ROWS {
            // A transposed `a`: 16 rows of a column are contiguous. Columns `2q` and
            // `2q + 1` of a group make one `u32` per row, scattered down the tile's rows.
            let rows = _mm512_mullo_epi32(_mm512_set1_epi32(TILE_DEPTH as i32 / 2), column_numbers());
            let mut run = [0u16; 2 * TILE_ROWS];
            for g in 0..groups {
                let height = (mc - g * TILE_ROWS).min(TILE_ROWS);
                let load = |col: *const u16, run: &mut [u16; 2 * TILE_ROWS]| {
                    if height == TILE_ROWS {
                        _mm512_cvtepu16_epi32(_mm256_loadu_si256(col.cast()))
                    } else {
                        std::ptr::copy_nonoverlapping(col, run.as_mut_ptr(), height);
                        run[height..TILE_ROWS].fill(0);
                        _mm512_cvtepu16_epi32(_mm256_loadu_si256(run.as_ptr().cast()))
                    }
                };
                for t in 0..kt {
                    let tile = dst.wrapping_add(g * kt + t).cast::<u32>();
                    for q in 0..TILE_DEPTH / 2 {
                        let kk = t * TILE_DEPTH + 2 * q;
                        let col = a.ptr.offset(g as isize * TILE_ROWS as isize + kk as isize * a.cs);
                        let lo = if kk < kc { load(col, &mut run) } else { _mm512_setzero_si512() };
                        let hi = if kk + 1 < kc { load(col.offset(a.cs), &mut run) } else { _mm512_setzero_si512() };
                        let pairs = _mm512_or_si512(lo, _mm512_slli_epi32::<16>(hi));
                        _mm512_i32scatter_epi32::<4>(tile.add(q).cast(), rows, pairs);
                    }
                }
            }
            // The scattered groups are whole, padding rows included.
            return;
        } else {
            if !kc.is_multiple_of(TILE_DEPTH) {
                for i in 0..mc {
                    _mm512_storeu_si512(row_of(i, kt - 1).cast(), _mm512_setzero_si512());
                }
            }
            // Down each column, which is where a transposed `a` is contiguous.
            for kk in 0..kc {
                let col = a.ptr.offset(kk as isize * a.cs);
                let t = kk / TILE_DEPTH;
                for i in 0..mc {
                    *row_of(i, t).add(kk % TILE_DEPTH) = *col.offset(i as isize * a.rs);
                }
            }
        }
        for i in mc..groups * TILE_ROWS {
            for t in 0..kt {
                _mm512_storeu_si512(row_of(i, t).cast(), _mm512_setzero_si512());
            }
        }
    }
}

/// The lane numbers 0..16 as `i32`s.
#[target_feature(enable = "avx512f")]
fn column_numbers() -> __m512i {
    _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
}

/// Where a micro-kernel's block of sums goes: `rows x cols` of `c` (cut to the kernel's
/// `32 x 32` at most), added to what `c` holds when `accumulate`.
struct Block {
    c: *mut f32,
    c_rs: usize,
    rows: usize,
    cols: usize,
    accumulate: bool,
}

impl Block {
    /// Rows and columns of sum tile `(i, j)` inside `c`.
    fn extent(&self, i: usize, j: usize) -> (usize, usize) {
        (self.rows.saturating_sub(i * TILE_ROWS).min(TILE_ROWS), self.cols.saturating_sub(j * TILE_ROWS).min(TILE_ROWS))
    }

    fn at(&self, i: usize, j: usize) -> *mut f32 {
        self.c.wrapping_add(i * TILE_ROWS * self.c_rs + j * TILE_ROWS)
    }
}

/// Loads tile register `tmm$n` from `$ptr`, rows `$stride` bytes apart.
macro_rules! tile_load {
    ($n:literal, $ptr:expr, $stride:expr) => {
        asm!(concat!("tileloadd tmm", $n, ", [{p} + {s} * 1]"), p = in(reg) $ptr, s = in(reg) $stride, options(nostack, readonly))
    };
}

/// Stores tile register `tmm$n` to `$ptr`, rows `$stride` bytes apart.
macro_rules! tile_store {
    ($n:literal, $ptr:expr, $stride:expr) => {
        asm!(concat!("tilestored [{p} + {s} * 1], tmm", $n), p = in(reg) $ptr, s = in(reg) $stride, options(nostack))
    };
}

/// Sum tile `t` (0-3) from `ptr`, rows `stride` bytes apart; zero when `ptr` is null.
///
/// # Safety
/// The tiles must be configured; a non-null `ptr` must address 16 rows of 64 readable bytes.
#[inline(always)]
unsafe fn load_sums(t: usize, ptr: *const f32, stride: usize) {
    // SAFETY: as the caller guarantees.
    unsafe {
        match (t, ptr.is_null()) {
            (0, true) => asm!("tilezero tmm0", options(nostack, nomem)),
            (1, true) => asm!("tilezero tmm1", options(nostack, nomem)),
            (2, true) => asm!("tilezero tmm2", options(nostack, nomem)),
            (_, true) => asm!("tilezero tmm3", options(nostack, nomem)),
            (0, false) => tile_load!("0", ptr, stride),
            (1, false) => tile_load!("1", ptr, stride),
            (2, false) => tile_load!("2", ptr, stride),
            _ => tile_load!("3", ptr, stride),
        }
    }
}

/// Sum tile `t` (0-3) to `ptr`, rows `stride` bytes apart.
///
/// # Safety
/// The tiles must be configured; `ptr` must address 16 rows of 64 writable bytes.
#[inline(always)]
unsafe fn store_sums(t: usize, ptr: *mut f32, stride: usize) {
    // SAFETY: as the caller guarantees.
    unsafe {
        match t {
            0 => tile_store!("0", ptr, stride),
            1 => tile_store!("1", ptr, stride),
            2 => tile_store!("2", ptr, stride),
            _ => tile_store!("3", ptr, stride),
        }
    }
}

/// The `16R x 16C` block of sums over `kt` depth tiles: `a` holds `R` row groups and `b`
/// `C` panels, each `kt` tiles long. Sum tile `(i, j)` is register `tmm(2i + j)`.
///
/// # Safety
/// The tiles must be configured; `a` and `b` must hold the tiles said; `block` must lie
/// inside a writable `c` where its extents say.
#[target_feature(enable = "avx512f")]
unsafe fn kernel<const R: usize, const C: usize>(kt: usize, a: *const TileBuf, b: *const TileBuf, block: &Block) {
    let c_stride = block.c_rs * size_of::<f32>();
    let mut edge = SumTile([0.0; TILE_ROWS * TILE_ROWS]);
    for i in 0..R {
        for j in 0..C {
            let (rows, cols) = block.extent(i, j);
            // SAFETY: a full tile lies inside `c`; an overhanging one is copied into `edge`
            // (zero outside `c`), which `tileloadd` copies into the register at once.
            unsafe {
                if !block.accumulate {
                    load_sums(2 * i + j, std::ptr::null(), 0);
                } else if rows == TILE_ROWS && cols == TILE_ROWS {
                    load_sums(2 * i + j, block.at(i, j), c_stride);
                } else {
                    edge.0.fill(0.0);
                    for r in 0..rows {
                        let src = block.at(i, j).add(r * block.c_rs);
                        std::ptr::copy_nonoverlapping(src, edge.0.as_mut_ptr().add(r * TILE_ROWS), cols);
                    }
                    load_sums(2 * i + j, edge.0.as_ptr(), ROW_BYTES);
                }
            }
        }
    }
    for t in 0..kt {
        // SAFETY: tile `t` of each row group and panel is inside the packed buffers; the
        // registers named are configured 16 x 64 bytes.
        unsafe {
            tile_load!("4", a.add(t), ROW_BYTES);
            tile_load!("6", b.add(t), ROW_BYTES);
            if C == 2 {
                tile_load!("7", b.add(kt + t), ROW_BYTES);
            }
            asm!("tdpbf16ps tmm0, tmm4, tmm6", options(nostack, nomem));
            if C == 2 {
                asm!("tdpbf16ps tmm1, tmm4, tmm7", options(nostack, nomem));
            }
            if R == 2 {
                tile_load!("5", a.add(kt + t), ROW_BYTES);
                asm!("tdpbf16ps tmm2, tmm5, tmm6", options(nostack, nomem));
                if C == 2 {
                    asm!("tdpbf16ps tmm3, tmm5, tmm7", options(nostack, nomem));
                }
            }
        }
    }
    for i in 0..R {
        for j in 0..C {
            let (rows, cols) = block.extent(i, j);
            // SAFETY: as for the loads.
            unsafe {
                if rows == TILE_ROWS && cols == TILE_ROWS {
                    store_sums(2 * i + j, block.at(i, j), c_stride);
                } else {
                    store_sums(2 * i + j, edge.0.as_mut_ptr(), ROW_BYTES);
                    for r in 0..rows {
                        let dst = block.at(i, j).add(r * block.c_rs);
                        std::ptr::copy_nonoverlapping(edge.0.as_ptr().add(r * TILE_ROWS), dst, cols);
                    }
                }
            }
        }
    }
}
