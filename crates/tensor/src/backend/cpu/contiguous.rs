//! A view's elements in row-major order, for kernels that read their operands as plain
//! slices: the storage itself when the view is contiguous, else a copy.

use super::block::Mat;
use super::transpose;
use super::unary::map;
use crate::Result;
use crate::dtype::Element;
use crate::host::iter::threads;
use crate::layout::Layout;
use crate::storage::Buffer;

/// A view's elements in row-major order: borrowed when contiguous, else copied.
pub(super) enum Contiguous<'a, T: Element> {
    Borrowed(&'a [T]),
    Copied(Buffer<T>),
}

impl<T: Element> Contiguous<'_, T> {
    /// `src` read through `l`: borrowed when `l` is one contiguous range, else copied in
    /// parallel pieces of at least `grain` elements (`op` names a failed allocation).
    pub(super) fn of<'a>(op: &'static str, src: &'a [T], l: &Layout, grain: usize) -> Result<Contiguous<'a, T>> {
        Ok(match l.contiguous_range() {
            Some(r) => Contiguous::Borrowed(&src[r]),
            None => match transposed_copy(op, src, l)? {
                Some(copy) => Contiguous::Copied(copy),
                None => Contiguous::Copied(map(op, src, l, grain, |v| v)?),
            },
        })
    }

    /// The elements.
    pub(super) fn slice(&self) -> &[T] {
        match self {
            Contiguous::Borrowed(s) => s,
            Contiguous::Copied(b) => b,
        }
    }
}

/// The copy of a matrix view whose rows are adjacent (a transposed `[r, c]`, the LSTM's
/// `W_hh^T`, `contiguous()` of a transposed matrix) of 4-byte elements and at least 16 x 16,
/// by the register transpose where it runs (the element-by-element tiled copy took
/// 0.35-1.9 ns per element). `None` for any other view.
pub(super) fn transposed_copy<T: Element>(op: &'static str, src: &[T], l: &Layout) -> Result<Option<Buffer<T>>> {
    let (shape, strides) = (l.shape(), l.strides());
    if std::mem::size_of::<T>() != 4
        || l.rank() != 2
        || strides[0] != 1
        || shape[0] < 16
        || shape[1] < 16
        || !transpose::is_fast()
    {
        return Ok(None);
    }
    let (rows, cols) = (shape[0], shape[1]);
    let mut out = Buffer::<T>::uninit(op, rows * cols)?;
    let m = Mat { ptr: src[l.offset()..].as_ptr(), rs: 1, cs: strides[1] as isize };
    // SAFETY: the layout was validated against `src`, so element `(r, c)` at `offset + r +
    // c * strides[1]` lies inside it; `out` holds `rows * cols` elements of a 4-byte type.
    unsafe { transpose::to_row_major(&m, rows, cols, out.as_mut_ptr(), threads()) };
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shape::Shape;

    #[test]
    fn transposed_matrices_copy_like_the_elementwise_map() {
        // Square and ragged, at and below the register blocks, and a strided operand's
        // transpose whose columns are not packed.
        for (rows, cols) in [(16, 16), (40, 70), (15, 64), (64, 15), (33, 17)] {
            let data: Vec<f32> = (0..rows * cols * 2).map(|i| i as f32 * 0.25 - 7.0).collect();
            let plain = Layout::contiguous(Shape::from([cols, rows])).transposed(0, 1);
            let wide = Layout::contiguous(Shape::from([cols, rows * 2])).sliced(1, 1, rows, 1).transposed(0, 1);
            for l in [plain, wide] {
                let want = map("test", &data, &l, 1, |v| v).unwrap();
                let got = Contiguous::of("test", &data, &l, 1).unwrap();
                assert_eq!(got.slice(), &want[..], "{rows}x{cols}");
            }
        }
    }

    #[test]
    fn contiguous_copies_of_transposed_tensors_hold_the_transpose() {
        // `Tensor::contiguous` reaches the same copy through the backend's cast to its own
        // dtype; f32 takes the register transpose, f64 and i64 the elementwise copy.
        let (rows, cols) = (40, 70);
        let values: Vec<f32> = (0..rows * cols).map(|i| i as f32 - 100.5).collect();
        let t = crate::Tensor::from_vec(values.clone(), [rows, cols]).unwrap();
        for dtype in [crate::DType::F32, crate::DType::F64, crate::DType::I64] {
            let copy = t.to_dtype(dtype).t().unwrap().contiguous();
            assert!(copy.is_contiguous());
            let got = copy.to_dtype(crate::DType::F64).to_vec::<f64>().unwrap();
            for c in 0..cols {
                for r in 0..rows {
                    let want = values[r * cols + c] as f64;
                    let want = if dtype == crate::DType::I64 { want.trunc() } else { want };
                    assert_eq!(got[c * rows + r], want, "{dtype} ({c}, {r})");
                }
            }
        }
    }
}
