//! Helpers shared by the ember-nn integration tests.
#![allow(dead_code)] // Each test binary uses a different subset.

use ember_autograd::Var;
use ember_tensor::Tensor;
use std::path::PathBuf;

/// An f64 tensor of `shape` from `data`.
pub fn t64(data: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(data.to_vec(), shape).unwrap()
}

/// An f32 tensor of `shape` from `data`.
pub fn t32(data: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_vec(data.to_vec(), shape).unwrap()
}

/// An i64 tensor of `shape` from `data`.
pub fn idx(data: &[i64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(data.to_vec(), shape).unwrap()
}

/// The values of `v` as f64.
pub fn values(v: &Var) -> Vec<f64> {
    v.value().to_vec_f64().unwrap()
}

/// Asserts `actual` and `expected` agree elementwise within `tol` (absolute plus relative).
#[track_caller]
pub fn assert_close(actual: &[f64], expected: &[f64], tol: f64) {
    assert_eq!(actual.len(), expected.len(), "lengths differ: {actual:?} vs {expected:?}");
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        assert!((a - e).abs() <= tol + tol * e.abs(), "element {i}: {a} vs expected {e}\n{actual:?}\n{expected:?}");
    }
}

/// A path in the temp directory unique to this process and `name`; removed when dropped.
pub struct TempFile(pub PathBuf);

impl TempFile {
    pub fn new(name: &str) -> TempFile {
        TempFile(std::env::temp_dir().join(format!("ember-nn-test-{}-{name}", std::process::id())))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        std::fs::remove_file(&self.0).ok();
    }
}
