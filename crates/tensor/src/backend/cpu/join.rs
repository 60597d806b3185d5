//! Concatenation of views of one dtype along a dimension, by block copies.

use crate::dtype::Element;
use crate::host::iter::{GRAIN_CHEAP, Runs, fill_chunks};
use crate::layout::Layout;
use crate::shape::Shape;
use crate::storage::{Buffer, CpuStorage};
use crate::{DType, Result};

/// One input's place in every row of the output (a row: one index of the dimensions
/// before the joined one).
struct Part<'a, T> {
    /// Where the input's block starts in a row, and its length.
    col: usize,
    block: usize,
    src: &'a [T],
    read: Read,
}

/// How a [`Part`] reads its input's elements in order.
enum Read {
    /// A contiguous input whose elements start at this index.
    Contiguous(usize),
    /// A strided input: its runs and their inner stride.
    Strided(Runs<1>, usize),
}

impl<T: Copy> Part<'_, T> {
    /// Copies the input's elements `from..from + dst.len()` (in row-major order) into `dst`.
    fn copy(&self, from: usize, dst: &mut [T]) {
        match &self.read {
            Read::Contiguous(start) => dst.copy_from_slice(&self.src[start + from..start + from + dst.len()]),
            Read::Strided(runs, st) => runs.for_each(from, from + dst.len(), |[off], len, pos| {
                for (i, v) in dst[pos - from..pos - from + len].iter_mut().enumerate() {
                    *v = self.src[off + i * st];
                }
            }),
        }
    }
}

/// The views joined along `d` into a fresh storage of `shape` (their shapes agree outside
/// `d`, and they share the dtype of the first). The output is written once, in chunks split
/// over the threads when it is large: each chunk walks its rows and, within a row, the
/// inputs' blocks, copying slices of contiguous inputs and walking the runs of strided ones,
/// so no input needs a zero-filled output or a copy of its own first.
pub(crate) fn cat(srcs: &[(&CpuStorage, &Layout)], d: usize, shape: &Shape) -> Result<CpuStorage> {
    fn go<T: Element>(srcs: &[(&CpuStorage, &Layout)], d: usize, shape: &Shape) -> Result<CpuStorage> {
        let after: usize = shape[d + 1..].iter().product();
        let row = shape[d] * after;
        let mut out = Buffer::<T>::uninit("cat", shape.numel())?;
        let mut parts = Vec::with_capacity(srcs.len());
        let mut col = 0;
        for (s, l) in srcs {
            let block = l.shape()[d] * after;
            if block == 0 {
                continue;
            }
            let read = match l.contiguous_range() {
                Some(r) => Read::Contiguous(r.start),
                None => {
                    let runs = Runs::new([*l]);
                    let st = runs.inner_stride(0);
                    Read::Strided(runs, st)
                }
            };
            parts.push(Part { col, block, src: s.as_slice::<T>().unwrap_or(&[]), read });
            col += block;
        }
        if parts.is_empty() {
            return Ok(T::into_storage(out));
        }
        fill_chunks(&mut out, GRAIN_CHEAP, |start, chunk| {
            let (mut pos, end) = (start, start + chunk.len());
            // The part holding the chunk's first element; later ones follow in order.
            let mut p = parts.partition_point(|part| part.col + part.block <= start % row);
            while pos < end {
                let (o, c) = (pos / row, pos % row);
                let part = &parts[p];
                let len = (part.col + part.block - c).min(end - pos);
                part.copy(o * part.block + c - part.col, &mut chunk[pos - start..pos - start + len]);
                pos += len;
                p = (p + 1) % parts.len();
            }
        });
        Ok(T::into_storage(out))
    }
    match srcs.first().map(|(s, _)| s.dtype()) {
        Some(DType::U8) => go::<u8>(srcs, d, shape),
        Some(DType::I64) => go::<i64>(srcs, d, shape),
        Some(DType::F16) => go::<half::f16>(srcs, d, shape),
        Some(DType::BF16) => go::<half::bf16>(srcs, d, shape),
        Some(DType::F32) => go::<f32>(srcs, d, shape),
        // Nothing to join gives an empty f64 storage (the backend refuses that case first).
        _ => go::<f64>(srcs, d, shape),
    }
}

#[cfg(test)]
mod tests {
    use crate::Tensor;
    use crate::backend::{Backend, cpu::CpuBackend};

    /// Strided inputs join like their contiguous copies.
    #[test]
    fn strided_views_join_like_contiguous_ones() {
        let a = Tensor::arange(0, 12).unwrap().reshape([3, 4]).unwrap().t().unwrap(); // [4, 3]
        let b = Tensor::arange(100, 108).unwrap().reshape([4, 2]).unwrap();
        let c = Tensor::arange(200, 212).unwrap().reshape([4, 3]).unwrap().narrow(1, 1, 1).unwrap();
        for dim in [0usize, 1] {
            let parts: Vec<Tensor> = match dim {
                0 => vec![a.clone(), a.narrow(0, 1, 2).unwrap(), a.contiguous()],
                _ => vec![a.clone(), b.clone(), c.clone()],
            };
            let (ga, gb) = (parts[0].storage().read(), parts[1].storage().read());
            let gc = parts[2].storage().read();
            let views = [(&*ga, parts[0].layout()), (&*gb, parts[1].layout()), (&*gc, parts[2].layout())];
            let joined = CpuBackend.cat(&views, dim).unwrap();
            let copies: Vec<Tensor> = parts.iter().map(|t| t.contiguous()).collect();
            let want = Tensor::cat(&copies.iter().collect::<Vec<_>>(), dim).unwrap().to_vec::<i64>().unwrap();
            assert_eq!(joined.as_cpu().unwrap().as_slice::<i64>().unwrap(), &want[..], "dim {dim}");
        }
        // Views of different dtypes or mismatched shapes are refused.
        let f = a.to_dtype(crate::DType::F32);
        let (ga, gf) = (a.storage().read(), f.storage().read());
        assert!(CpuBackend.cat(&[(&*ga, a.layout()), (&*gf, f.layout())], 0).is_err());
        let gb = b.storage().read();
        assert!(CpuBackend.cat(&[(&*ga, a.layout()), (&*gb, b.layout())], 0).is_err());
        assert!(CpuBackend.cat(&[], 0).is_err());
    }

    /// Inputs large enough that the output is written in parallel chunks, whose boundaries
    /// fall inside rows and inside the inputs' blocks, join like their contiguous copies:
    /// transposed, expanded (stride 0) and narrowed views beside a contiguous one.
    #[test]
    fn large_strided_views_join_like_contiguous_ones() {
        let t = Tensor::arange(0, 300 * 211).unwrap().reshape([211, 300]).unwrap().t().unwrap(); // [300, 211]
        let e = Tensor::arange(5, 305).unwrap().reshape([300, 1]).unwrap().expand([300, 7]).unwrap();
        let n = Tensor::arange(0, 300 * 150).unwrap().reshape([300, 150]).unwrap().narrow(1, 3, 101).unwrap();
        let c = Tensor::arange(-900, 0).unwrap().reshape([300, 3]).unwrap();
        let parts = [&t, &e, &n, &c];
        let copies: Vec<Tensor> = parts.iter().map(|p| p.contiguous()).collect();
        let joined = Tensor::cat(&parts, 1).unwrap();
        let want = Tensor::cat(&copies.iter().collect::<Vec<_>>(), 1).unwrap();
        assert_eq!(joined.shape().dims(), &[300, 322]);
        assert_eq!(joined.to_vec::<i64>().unwrap(), want.to_vec::<i64>().unwrap());
        let rows = [&t, &t.narrow(0, 17, 120).unwrap(), &n.narrow(1, 0, 1).unwrap().expand([300, 211]).unwrap()];
        let copies: Vec<Tensor> = rows.iter().map(|p| p.contiguous()).collect();
        let joined = Tensor::cat(&rows, 0).unwrap();
        let want = Tensor::cat(&copies.iter().collect::<Vec<_>>(), 0).unwrap();
        assert_eq!(joined.to_vec::<i64>().unwrap(), want.to_vec::<i64>().unwrap());
    }
}
