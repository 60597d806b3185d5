//! What the encoder tests (BERT, ResNet, ViT) share: fixture paths, the comparison, and
//! scratch checkpoints broken on purpose.

#![allow(dead_code)]

use ember_io::{StateDict, load_safetensors, save_safetensors};
use ember_tensor::Tensor;
use std::path::{Path, PathBuf};

/// `tools/parity/fixtures/models/<rel>`.
pub fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/parity/fixtures/models").join(rel)
}

/// The tensors PyTorch computed, `<dir>/expected.safetensors`.
pub fn expected(dir: &Path) -> StateDict {
    load_safetensors(dir.join("expected.safetensors")).unwrap()
}

/// Asserts that `actual` has `expected`'s shape and values within `tol` (absolute), naming
/// `what` and the worst element.
pub fn assert_close(what: &str, actual: &Tensor, expected: &Tensor, tol: f64) {
    assert_eq!(actual.shape().dims(), expected.shape().dims(), "{what}: shape");
    let a = actual.to_vec_f64().unwrap();
    let e = expected.to_vec_f64().unwrap();
    let (i, worst) = a
        .iter()
        .zip(&e)
        .map(|(x, y)| (x - y).abs())
        .enumerate()
        .fold((0, 0.0f64), |m, (i, d)| if d > m.1 || d.is_nan() { (i, d) } else { m });
    assert!(worst <= tol, "{what}: |actual - expected| = {worst} at {i} (actual {}, expected {}) > {tol}", a[i], e[i]);
}

/// A fresh scratch directory for this test.
pub fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ember-models-enc-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Copies the files of `src` (one level) into a fresh scratch directory.
pub fn copy_dir(src: &Path, tag: &str) -> PathBuf {
    let dir = scratch(tag);
    for entry in std::fs::read_dir(src).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    dir
}

/// Rewrites the safetensors file `path` with `edit` applied to its tensors.
pub fn edit_safetensors(path: &Path, edit: impl FnOnce(&mut StateDict)) {
    let mut state = load_safetensors(path).unwrap();
    edit(&mut state);
    save_safetensors(path, &state).unwrap();
}

/// `state` with `from` renamed to `to`, the order kept.
pub fn renamed(state: &StateDict, from: &str, to: &str) -> StateDict {
    let mut out = StateDict::new();
    for (k, t) in state.iter() {
        out.insert(if k == from { to } else { k }, t.clone());
    }
    out
}
