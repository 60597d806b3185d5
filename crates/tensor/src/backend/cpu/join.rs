//! Concatenation of views of one dtype along a dimension, by block copies.

use super::iter::Runs;
use crate::dtype::Element;
use crate::layout::Layout;
use crate::shape::Shape;
use crate::storage::{Buffer, CpuStorage};
use crate::{DType, Result};

/// The views joined along `d` into a fresh storage of `shape` (their shapes agree outside
/// `d`, and they share the dtype of the first). Each contiguous input is copied as `outer`
/// blocks; a strided one is walked in runs and scattered into the same blocks.
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
                    runs.for_each(0, l.numel(), |[off], len, pos| {
                        for i in 0..len {
                            let k = pos + i;
                            out[(k / block) * row + col + k % block] = src[off + i * st];
                        }
                    });
                }
            }
            col += block;
        }
        Ok(T::into_storage(out))
    }
    match srcs.first().map(|(s, _)| s.dtype()) {
        Some(DType::U8) => go::<u8>(srcs, d, shape),
        Some(DType::I64) => go::<i64>(srcs, d, shape),
        Some(DType::F32) => go::<f32>(srcs, d, shape),
        // Nothing to join gives an empty f64 storage (the backend refuses that case first).
        _ => go::<f64>(srcs, d, shape),
    }
}
