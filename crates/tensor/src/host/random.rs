//! Random tensors on the host, drawn from the global generator ([`crate::random`]) in the
//! order of the elements, so that a seeded program produces the same numbers everywhere.

use crate::dtype::{DType, Element};
use crate::random::{Distribution, with_rng};
use crate::storage::{Buffer, CpuStorage};
use crate::{Error, Result};
use rand::RngExt;
use rand_distr::{Distribution as _, StandardNormal};
use rand_pcg::Pcg64;

/// `v` moved into `[low, high)` when rounding to the element type carried it to `high` or
/// beyond (`keep` is `(low, high, largest value below high)` in that type; `None` keeps `v`).
fn half_open<T: Element>(v: T, keep: Option<(T, T, T)>) -> T {
    match keep {
        Some((low, high, below)) if v >= high => {
            if below < low {
                low
            } else {
                below
            }
        }
        _ => v,
    }
}

/// `n` samples of `dist` in the float `dtype`. Each sample is drawn in `f64` and rounded to
/// the element type.
pub(crate) fn random(n: usize, dist: Distribution, dtype: DType) -> Result<CpuStorage> {
    match dist {
        Distribution::Uniform { low, high } => {
            let below = (low < high).then_some((low, high));
            fill("uniform", n, dtype, below, |r| low + (high - low) * r.random::<f64>())
        }
        Distribution::Normal { mean, std } => fill("normal", n, dtype, None, |r| {
            let z: f64 = StandardNormal.sample(r);
            mean + std * z
        }),
    }
}

/// `n` values of `draw` rounded to `dtype`, kept below the upper bound of `below` (see
/// [`half_open`]). One closure per distribution, so that the loop holds no branch on it.
fn fill(
    op: &'static str,
    n: usize,
    dtype: DType,
    below: Option<(f64, f64)>,
    mut draw: impl FnMut(&mut Pcg64) -> f64,
) -> Result<CpuStorage> {
    if !dtype.is_float() {
        return Err(Error::dtype(op, format!("random tensors must be float, got {dtype}")));
    }
    with_rng(|rng| -> Result<CpuStorage> {
        Ok(match dtype {
            DType::F64 => {
                let keep = below.map(|(low, high)| (low, high, high.next_down()));
                Buffer::<f64>::from_fn(op, n, |_| half_open(draw(rng), keep))?.into()
            }
            _ => {
                let keep = below.map(|(low, high)| (low as f32, high as f32, (high as f32).next_down()));
                Buffer::<f32>::from_fn(op, n, |_| half_open(draw(rng) as f32, keep))?.into()
            }
        })
    })
}

/// A random permutation of `0..n` as `i64` (a Fisher-Yates shuffle from the back).
pub(crate) fn randperm(n: usize) -> Result<CpuStorage> {
    let mut buf = Buffer::<i64>::from_fn("randperm", n, |i| i as i64)?;
    with_rng(|r| {
        for i in (1..n).rev() {
            let j = r.random_range(0..=i);
            buf.swap(i, j);
        }
    });
    Ok(buf.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_samples_never_round_up_to_high() {
        // The largest f64 draw below 1 rounds to 1.0 in f32, and to `high` in f64 arithmetic.
        let u = 1.0 - f64::EPSILON / 2.0;
        assert_eq!(u as f32, 1.0);
        assert_eq!(half_open(u as f32, Some((0.0, 1.0, 1f32.next_down()))), 1f32.next_down());
        let v = 1.0 + (2.0 - 1.0) * u;
        assert_eq!(v, 2.0);
        assert_eq!(half_open(v, Some((1.0, 2.0, 2f64.next_down()))), 2f64.next_down());
        // Bounds that one f32 cannot separate leave only `low`.
        let (low, high) = (1.0f32, 1.0f32);
        assert_eq!(half_open(1.0f32, Some((low, high, high.next_down()))), 1.0);
        assert_eq!(half_open(0.25f32, Some((0.0, 1.0, 1f32.next_down()))), 0.25);
        assert_eq!(half_open(7.0f64, None), 7.0);
    }
}
