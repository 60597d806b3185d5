//! Concatenation of views of one dtype along a dimension, by block copies.

use crate::dtype::Element;
use crate::host::iter::Runs;
use crate::layout::Layout;
use crate::shape::Shape;
use crate::storage::{Buffer, CpuStorage};
use crate::{DType, Result};

/// The views joined along `d` into a fresh storage of `shape` (their shapes agree outside
/// `d`, and they share the dtype of the first). Each input fills `outer` blocks of the
/// output: by slice copies when it is contiguous, else by walking its runs.
pub(crate) fn cat(srcs: &[(&CpuStorage, &Layout)], d: usize, shape: &Shape) -> Result<CpuStorage> {
    fn go<T: Element>(srcs: &[(&CpuStorage, &Layout)], d: usize, shape: &Shape) -> Result<CpuStorage> {
        let outer: usize = shape[..d].iter().product();
        let after: usize = shape[d + 1..].iter().product();
        let row = shape[d] * after;
        let mut out = Buffer::<T>::uninit("cat", outer * row)?;
        let mut col = 0;
        for (s, l) in srcs {
            let src = s.as_slice::<T>().unwrap_or(&[]);
            let block = l.shape()[d] * after;
            if block == 0 {
                continue;
            }
            match l.contiguous_range() {
                Some(r) => {
                    let src = &src[r];
                    for o in 0..outer {
                        out[o * row + col..o * row + col + block].copy_from_slice(&src[o * block..(o + 1) * block]);
                    }
                }
                None => {
                    let runs = Runs::new([*l]);
                    let st = runs.inner_stride(0);
                    for o in 0..outer {
                        let (start, dst) = (o * block, &mut out[o * row + col..o * row + col + block]);
                        runs.for_each(start, start + block, |[off], len, pos| {
                            let dst = &mut dst[pos - start..pos - start + len];
                            for (i, v) in dst.iter_mut().enumerate() {
                                *v = src[off + i * st];
                            }
                        });
                    }
                }
            }
            col += block;
        }
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

    /// Strided inputs (which `Tensor::cat` sends down its general path) join like their
    /// contiguous copies.
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
}
