//! Helpers shared by the integration tests: temporary directories and synthetic IDX files.

// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use ember_data::checksum::{sha256, to_hex};
use flate2::Compression;
use flate2::write::GzEncoder;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The real MNIST files of the repository.
pub fn mnist_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/mnist")
}

/// A fresh directory under the system's temporary directory, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let unique = format!("ember-data-{tag}-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let path = std::env::temp_dir().join(unique);
        // A leftover from a crashed run with the same process id would hold stale files.
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `bytes` to `name` in the directory and returns the file's path.
    pub fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A raw IDX image file of `n` images of `rows x cols`, pixel `(i, r, c)` = `(i + r + c) % 256`.
pub fn idx_images(n: usize, rows: usize, cols: usize) -> Vec<u8> {
    let mut out = vec![0, 0, 8, 3];
    for d in [n, rows, cols] {
        out.extend((d as u32).to_be_bytes());
    }
    for i in 0..n {
        for r in 0..rows {
            for c in 0..cols {
                out.push(((i + r + c) % 256) as u8);
            }
        }
    }
    out
}

/// A raw IDX label file.
pub fn idx_labels(labels: &[u8]) -> Vec<u8> {
    let mut out = vec![0, 0, 8, 1];
    out.extend((labels.len() as u32).to_be_bytes());
    out.extend_from_slice(labels);
    out
}

/// `bytes` gzip-compressed.
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = GzEncoder::new(Vec::new(), Compression::fast());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

/// A `SHA256SUMS` line for `bytes` named `name`.
pub fn sums_line(name: &str, bytes: &[u8]) -> String {
    format!("{}  {name}\n", to_hex(&sha256(bytes)))
}

/// Writes a small MNIST-format training split (`n` 28x28 images, labels `i % 10`),
/// gzip-compressed, with a matching `SHA256SUMS`; returns the image and label file bytes.
pub fn write_train_split(dir: &TempDir, n: usize) -> (Vec<u8>, Vec<u8>) {
    let images = gzip(&idx_images(n, 28, 28));
    let labels = gzip(&idx_labels(&(0..n).map(|i| (i % 10) as u8).collect::<Vec<_>>()));
    dir.write("train-images-idx3-ubyte.gz", &images);
    dir.write("train-labels-idx1-ubyte.gz", &labels);
    let sums = sums_line("train-images-idx3-ubyte.gz", &images) + &sums_line("train-labels-idx1-ubyte.gz", &labels);
    dir.write("SHA256SUMS", sums.as_bytes());
    (images, labels)
}
