//! `Σ|x|^p` in `f64`, the per-tensor part of a total norm (gradient clipping adds them up).

use crate::dtype::Element;
use crate::host::read::view_to_vec;
use crate::layout::Layout;
use crate::storage::CpuStorage;
use crate::{Error, Result};

/// `Σ|x|^p` over the view in `f64` whatever its float dtype, or `max |x|` for
/// `p = f64::INFINITY` (NaN if any element is NaN). The elements are taken in logical order.
pub(crate) fn power_sum(s: &CpuStorage, l: &Layout, p: f64) -> Result<f64> {
    fn go<T: Element + Into<f64>>(s: &CpuStorage, l: &Layout, p: f64) -> Result<f64> {
        let slice = s.as_slice::<T>().unwrap_or(&[]);
        if let Some(r) = l.contiguous_range() {
            return Ok(sum(&slice[r], p));
        }
        // A strided view (rare for a gradient) is read out in logical order first, so that
        // the lanes see the same values as for a contiguous copy.
        let v = view_to_vec::<T>(s, l)?.unwrap_or_default();
        Ok(sum(&v, p))
    }
    match s {
        CpuStorage::F32(_) => go::<f32>(s, l, p),
        CpuStorage::F64(_) => go::<f64>(s, l, p),
        _ => Err(Error::dtype("power_sum", format!("expected a float tensor, got {}", s.dtype()))),
    }
}

fn sum<T: Copy + Into<f64>>(s: &[T], p: f64) -> f64 {
    if p == f64::INFINITY {
        lanes(s, |acc, x| nan_max(acc, x.abs())).into_iter().fold(0.0, nan_max)
    } else if p == 2.0 {
        lanes(s, |acc, x| acc + x * x).iter().sum()
    } else if p == 1.0 {
        lanes(s, |acc, x| acc + x.abs()).iter().sum()
    } else {
        lanes(s, |acc, x| acc + x.abs().powf(p)).iter().sum()
    }
}

/// Folds `f` over the values into eight accumulators, so that the loop is not one long
/// chain of dependent additions and can use vector registers.
fn lanes<T: Copy + Into<f64>>(s: &[T], f: impl Fn(f64, f64) -> f64) -> [f64; 8] {
    let mut acc = [0.0f64; 8];
    let mut chunks = s.chunks_exact(8);
    for c in &mut chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a = f(*a, x.into());
        }
    }
    for (a, &x) in acc.iter_mut().zip(chunks.remainder()) {
        *a = f(*a, x.into());
    }
    acc
}

/// The larger of two values, NaN if either is (`f64::max` would drop the NaN).
fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() { f64::NAN } else { a.max(b) }
}

#[cfg(test)]
mod tests {
    use crate::Tensor;

    /// A strided view sums like its contiguous copy, in every norm.
    #[test]
    fn strided_views_sum_like_contiguous_ones() {
        let t = Tensor::arange(-7.0, 10.0).unwrap().narrow(0, 0, 15).unwrap().reshape([3, 5]).unwrap();
        let s = t.t().unwrap();
        for p in [1.0, 2.0, 3.5, f64::INFINITY] {
            assert_eq!(s.power_sum(p).unwrap(), s.contiguous().power_sum(p).unwrap(), "p = {p}");
        }
        assert_eq!(s.power_sum(f64::INFINITY).unwrap(), 7.0);
        assert_eq!(s.power_sum(1.0).unwrap(), (-7..8).map(|v: i32| v.abs() as f64).sum::<f64>());
        let nan = Tensor::from_vec(vec![1.0f64, f64::NAN], [2]).unwrap();
        assert!(nan.power_sum(f64::INFINITY).unwrap().is_nan());
        assert!(Tensor::arange(0, 3).unwrap().power_sum(2.0).is_err());
    }
}
