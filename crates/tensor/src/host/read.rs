//! Reading host views into vectors: the tensor layer's `to_vec` on CPU tensors and the CPU
//! kernels that need a view's values in logical order.

use super::iter::Runs;
use crate::dtype::Element;
use crate::layout::Layout;
use crate::storage::CpuStorage;
use crate::{Error, Result, cpu_dispatch};

/// An empty vector with room for `n` elements, or an allocation error naming `op`: views
/// read out to a `Vec` may be broadcasts far larger than their storage.
pub(crate) fn vec_with_capacity<T>(op: &'static str, n: usize, what: &'static str) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Error::Alloc { op, elements: n, dtype: what })?;
    Ok(v)
}

/// Reads the view as a `Vec<T>` in logical (row-major) order; `Ok(None)` if `T` is not the
/// storage's dtype, an allocation error if the vector does not fit in memory.
pub(crate) fn view_to_vec<T: Element>(s: &CpuStorage, l: &Layout) -> Result<Option<Vec<T>>> {
    let Some(slice) = s.as_slice::<T>() else { return Ok(None) };
    let mut out = vec_with_capacity("to_vec", l.numel(), T::DTYPE.name())?;
    if let Some(r) = l.contiguous_range() {
        out.extend_from_slice(&slice[r]);
        return Ok(Some(out));
    }
    let runs = Runs::new([l]);
    let st = runs.inner_stride(0);
    runs.for_each(0, l.numel(), |[o], len, _| {
        for i in 0..len {
            out.push(slice[o + i * st]);
        }
    });
    Ok(Some(out))
}

/// Reads the view as `f64` values in logical order, whatever the dtype; an allocation error
/// if the vector does not fit in memory.
pub(crate) fn view_to_f64(s: &CpuStorage, l: &Layout) -> Result<Vec<f64>> {
    fn go<T: Element>(s: &[T], l: &Layout) -> Result<Vec<f64>> {
        let mut out = vec_with_capacity("to_vec_f64", l.numel(), "f64")?;
        let runs = Runs::new([l]);
        let st = runs.inner_stride(0);
        runs.for_each(0, l.numel(), |[o], len, _| {
            for i in 0..len {
                out.push(s[o + i * st].to_f64());
            }
        });
        Ok(out)
    }
    cpu_dispatch!(s, b => go(b, l))
}
