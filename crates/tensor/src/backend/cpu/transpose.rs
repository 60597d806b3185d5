//! Copying a strided matrix of 4-byte elements into row-major order, fast where it reads
//! like a transpose (its columns contiguous): 16 x 16 blocks transposed in AVX-512
//! registers (16 loads, 64 shuffles, 16 stores per block) rather than element by element
//! (the LSTM's `[1024, 256]` weight copy took half the samples of the tiled copy in
//! `unary.rs`). `matmul` uses it to hand `gemm` row-major operands (see `matmul.rs`,
//! `copies_b`), and `Contiguous` and the backend's cast to a tensor's own dtype
//! (`contiguous()`) to copy transposed matrices.

use super::block::Mat;
use crate::host::iter::par_for;

/// Rows (of the destination) per parallel task: bands of whole 16-row blocks.
const BAND_ROWS: usize = 64;

/// Fewest elements (256 KiB of them) whose copy is shared between threads.
const PARALLEL_ELEMENTS: usize = 1 << 16;

/// Side of the blocks transposed in registers.
const BLOCK: usize = 16;

/// Whether this processor runs the register kernel; where it does not, [`to_row_major`]
/// copies element by element and callers should not count on its speed.
pub(super) fn is_fast() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Writes the `rows x cols` matrix `src` (any strides) into `dst`, row-major with rows
/// `cols` apart, sharing bands of rows between the threads when large and `threads > 1`
/// (a caller already running on one of several parallel tasks passes 1).
///
/// # Safety
/// `src` must address `rows x cols` readable elements of a 4-byte type and `dst` must be
/// valid for `rows * cols` writes that nothing else reads or writes meanwhile.
pub(super) unsafe fn to_row_major<T: Copy>(src: &Mat<T>, rows: usize, cols: usize, dst: *mut T, threads: usize) {
    debug_assert_eq!(std::mem::size_of::<T>(), 4);
    let d = SendPtr(dst);
    let band = |b: usize| {
        let d = &d;
        let r0 = b * BAND_ROWS;
        let n = BAND_ROWS.min(rows - r0);
        // SAFETY: band `b` reads rows `r0..r0 + n` of `src` and writes the same rows of `dst`,
        // which no other band writes.
        unsafe {
            let from = Mat { ptr: src.ptr.offset(r0 as isize * src.rs), rs: src.rs, cs: src.cs };
            copy_rows(&from, n, cols, d.0.add(r0 * cols));
        }
    };
    let bands = rows.div_ceil(BAND_ROWS);
    if threads > 1 && rows * cols >= PARALLEL_ELEMENTS && bands > 1 {
        par_for(bands, band);
    } else {
        (0..bands).for_each(band);
    }
}

struct SendPtr<T>(*mut T);
// SAFETY: each band writes its own rows.
unsafe impl<T> Sync for SendPtr<T> {}

/// [`to_row_major`] on one thread.
///
/// # Safety
/// As for [`to_row_major`].
unsafe fn copy_rows<T: Copy>(src: &Mat<T>, rows: usize, cols: usize, dst: *mut T) {
    #[cfg(target_arch = "x86_64")]
    if src.rs == 1 && is_fast() {
        // SAFETY: AVX-512F is present; the caller vouches for the memory, and 4-byte
        // elements copy bit for bit as `f32` lanes.
        return unsafe { avx512::columns_to_rows(src.ptr.cast(), src.cs, rows, cols, dst.cast()) };
    }
    // SAFETY: as the caller vouches.
    unsafe { copy_scalar(src, 0..rows, 0..cols, dst, cols) }
}

/// Element-by-element copy of the block `rows x cols` of `src` into `dst` (row stride
/// `ld`, indexed from the block's origin), walking `BLOCK`-square tiles.
///
/// # Safety
/// As for [`to_row_major`], for the block given.
unsafe fn copy_scalar<T: Copy>(
    src: &Mat<T>,
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
    dst: *mut T,
    ld: usize,
) {
    for r0 in rows.clone().step_by(BLOCK) {
        for c0 in cols.clone().step_by(BLOCK) {
            for r in r0..(r0 + BLOCK).min(rows.end) {
                for c in c0..(c0 + BLOCK).min(cols.end) {
                    // SAFETY: `(r, c)` lies inside the matrix, and its destination inside
                    // `dst` (the caller's contract).
                    unsafe {
                        *dst.add(r * ld + c) = *src.ptr.offset(r as isize * src.rs + c as isize * src.cs);
                    }
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{BLOCK, Mat, copy_scalar};
    use std::arch::x86_64::*;

    /// Copies the `rows x cols` matrix whose columns are contiguous (element `(r, c)` at
    /// `src + r + c * cs`) into `dst`, row-major: full 16 x 16 blocks in registers, the
    /// edges element by element.
    ///
    /// # Safety
    /// AVX-512F must be present; `src` must address the matrix and `dst` hold `rows * cols`
    /// writable elements.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn columns_to_rows(src: *const f32, cs: isize, rows: usize, cols: usize, dst: *mut f32) {
        let (full_r, full_c) = (rows / BLOCK * BLOCK, cols / BLOCK * BLOCK);
        for c0 in (0..full_c).step_by(BLOCK) {
            for r0 in (0..full_r).step_by(BLOCK) {
                // SAFETY: the block's 16 source columns (16 contiguous elements each) and 16
                // destination rows lie inside the matrices.
                unsafe { block(src.offset(r0 as isize + c0 as isize * cs), cs, dst.add(r0 * cols + c0), cols) };
            }
        }
        let m = Mat { ptr: src, rs: 1, cs };
        // SAFETY: the edges lie inside the matrices.
        unsafe {
            copy_scalar(&m, full_r..rows, 0..cols, dst, cols);
            copy_scalar(&m, 0..full_r, full_c..cols, dst, cols);
        }
    }

    /// One 16 x 16 block: source column `j` (16 contiguous values at `src + j * cs`, the
    /// block's rows' element `j`) is loaded into register `j`, and the transposed registers
    /// are the destination rows.
    ///
    /// # Safety
    /// AVX-512F; 16 readable values at each `src + j * cs`, 16 writable at each `dst + i * ld`.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn block(src: *const f32, cs: isize, dst: *mut f32, ld: usize) {
        // SAFETY: the caller vouches for the addresses.
        let x: [__m512; 16] = std::array::from_fn(|j| unsafe { _mm512_loadu_ps(src.offset(j as isize * cs)) });
        let t = transpose(x);
        for (i, row) in t.iter().enumerate() {
            // SAFETY: as above.
            unsafe { _mm512_storeu_ps(dst.add(i * ld), *row) };
        }
    }

    /// Transposes 16 registers of 16 lanes: lane `j` of output `i` is lane `i` of input `j`.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn transpose(x: [__m512; 16]) -> [__m512; 16] {
        // Pairs of inputs interleaved within each 128-bit lane.
        let a: [__m512; 16] = std::array::from_fn(|i| {
            let (p, q) = (x[i / 2 * 2], x[i / 2 * 2 + 1]);
            if i % 2 == 0 { _mm512_unpacklo_ps(p, q) } else { _mm512_unpackhi_ps(p, q) }
        });
        // Groups of four inputs: `c[4g + q]` holds, in 128-bit lane `l`, element `4l + q` of
        // inputs `4g..4g + 4`.
        let c: [__m512; 16] = std::array::from_fn(|i| {
            let (g, q) = (i / 4, i % 4);
            let (lo, hi) = (a[4 * g + q / 2], a[4 * g + 2 + q / 2]);
            let (lo, hi) = (_mm512_castps_pd(lo), _mm512_castps_pd(hi));
            _mm512_castpd_ps(if q % 2 == 0 { _mm512_unpacklo_pd(lo, hi) } else { _mm512_unpackhi_pd(lo, hi) })
        });
        // A 4 x 4 transpose of 128-bit lanes over the four groups, for each `q`.
        let mut out = [_mm512_setzero_ps(); 16];
        for q in 0..4 {
            let y0 = _mm512_shuffle_f32x4::<0x88>(c[q], c[4 + q]);
            let y1 = _mm512_shuffle_f32x4::<0xDD>(c[q], c[4 + q]);
            let y2 = _mm512_shuffle_f32x4::<0x88>(c[8 + q], c[12 + q]);
            let y3 = _mm512_shuffle_f32x4::<0xDD>(c[8 + q], c[12 + q]);
            out[q] = _mm512_shuffle_f32x4::<0x88>(y0, y2);
            out[4 + q] = _mm512_shuffle_f32x4::<0x88>(y1, y3);
            out[8 + q] = _mm512_shuffle_f32x4::<0xDD>(y0, y2);
            out[12 + q] = _mm512_shuffle_f32x4::<0xDD>(y1, y3);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Copies the `rows x cols` matrix at `data + offset` with strides `(rs, cs)` and checks
    /// every element, on the thread counts given.
    fn check(rows: usize, cols: usize, rs: isize, cs: isize, threads: usize) {
        let span = (rows as isize - 1) * rs + (cols as isize - 1) * cs + 1;
        let data: Vec<f32> = (0..span).map(|i| i as f32 * 0.5 - 3.0).collect();
        let src = Mat { ptr: data.as_ptr(), rs, cs };
        let mut out = vec![f32::NAN; rows * cols];
        // SAFETY: the strides address `span` elements, all inside `data`.
        unsafe { to_row_major(&src, rows, cols, out.as_mut_ptr(), threads) };
        for r in 0..rows {
            for c in 0..cols {
                let want = data[(r as isize * rs + c as isize * cs) as usize];
                assert_eq!(
                    out[r * cols + c].to_bits(),
                    want.to_bits(),
                    "({r}, {c}) of {rows}x{cols}, strides ({rs}, {cs})"
                );
            }
        }
    }

    #[test]
    fn transposed_views_copy_to_row_major_exactly_at_every_edge() {
        for (rows, cols) in [(16, 16), (32, 48), (17, 16), (16, 33), (70, 130), (1, 40), (40, 1), (5, 3)] {
            // A transposed view (columns contiguous), with and without a gap between columns.
            check(rows, cols, 1, rows as isize, 1);
            check(rows, cols, 1, rows as isize + 3, 2);
        }
    }

    #[test]
    fn other_strides_and_large_matrices_copy_exactly_on_any_threads() {
        check(20, 30, 30, 1, 1);
        check(20, 30, 2, 45, 2);
        for threads in [1, 2, 3] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            pool.install(|| check(300, 260, 1, 300, threads));
        }
    }
}
