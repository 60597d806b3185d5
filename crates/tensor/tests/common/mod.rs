//! Reference helpers shared by the ember-tensor integration tests: deterministic data,
//! multi-index walks and the NaN rules of PyTorch's extrema, written plainly so that the
//! kernels are checked against code that shares nothing with them.
#![allow(dead_code)] // Each test binary uses a different subset.

/// Turns off flushing subnormals to zero (on by default, see docs/design.md "Subnormal
/// numbers"), for tests that compare kernels with IEEE results down to the subnormal range.
/// The setting is global: the tests of a binary that call this all set the same value, and
/// the binary's other tests pass with flushing on or off.
pub fn ieee_subnormals() {
    ember_tensor::threading::set_flush_denormal(false);
}

/// SplitMix64: deterministic pseudo-random bits from a seed and a position, so that data
/// follows from one seed.
pub fn mix(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The number of elements of `shape`.
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Every multi-index of `shape` in row-major order.
pub fn indices(shape: &[usize]) -> Vec<Vec<usize>> {
    let mut out = Vec::with_capacity(numel(shape));
    let mut idx = vec![0; shape.len()];
    for _ in 0..numel(shape) {
        out.push(idx.clone());
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

/// Equal as values, with NaN equal to NaN (and +0 equal to -0).
pub fn same(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

/// The NaN-propagating maximum of `torch.maximum` (the first operand wins ties).
pub fn max_nan(a: f64, b: f64) -> f64 {
    if a.is_nan() || a > b {
        a
    } else if b.is_nan() || b > a {
        b
    } else {
        a
    }
}

/// The NaN-propagating minimum of `torch.minimum` (the first operand wins ties).
pub fn min_nan(a: f64, b: f64) -> f64 {
    if a.is_nan() || a < b {
        a
    } else if b.is_nan() || b < a {
        b
    } else {
        a
    }
}

/// The index of the first extreme value (`argmax` when `max`, else `argmin`), where a NaN
/// counts as the extreme, as PyTorch has it.
pub fn arg_extreme(v: &[f64], max: bool) -> f64 {
    let mut best = 0;
    for i in 1..v.len() {
        if v[best].is_nan() {
            break;
        }
        if v[i].is_nan() || (max && v[i] > v[best]) || (!max && v[i] < v[best]) {
            best = i;
        }
    }
    best as f64
}
