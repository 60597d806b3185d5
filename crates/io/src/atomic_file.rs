//! Replacing a file so that readers see the old content or the new, never a part: the bytes
//! go to a temporary file beside the target, are flushed to the disk, and the temporary file
//! is then renamed over the target (an atomic step on the file systems ember runs on). A
//! failure at any point leaves the target as it was and removes the temporary file.

use ember_tensor::{Error, Result};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Distinguishes the temporary files of concurrent writes from one process.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to `path`, replacing any file there only once they are all on disk.
/// Errors name `path`.
pub(crate) fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    let temp = temporary_beside(path);
    let written = (|| {
        let mut file = std::fs::File::create(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    written.map_err(|e| {
        // The target is untouched; only the partial temporary file is left to clean up.
        let _ = std::fs::remove_file(&temp);
        Error::io(path, e)
    })
}

/// A name in `path`'s directory that no other write uses: `.<name>.<pid>.<n>.tmp`.
fn temporary_beside(path: &Path) -> PathBuf {
    let name = path.file_name().map_or_else(|| "checkpoint".into(), |n| n.to_string_lossy().into_owned());
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{name}.{}.{n}.tmp", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ember-atomic-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    }

    #[test]
    fn a_write_replaces_the_file_and_leaves_nothing_else() {
        let dir = scratch_dir("ok");
        let path = dir.join("model.safetensors");
        write(&path, b"old").unwrap();
        write(&path, b"new content").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new content");
        assert_eq!(entries(&dir), ["model.safetensors"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_write_leaves_the_target_and_no_temporary_file() {
        let dir = scratch_dir("fail");
        // The target is a non-empty directory: the rename, the last step, fails.
        let target = dir.join("model.safetensors");
        std::fs::create_dir_all(target.join("inside")).unwrap();
        let err = write(&target, b"bytes").unwrap_err().to_string();
        assert!(err.contains("model.safetensors"), "{err}");
        assert!(target.join("inside").is_dir());
        assert_eq!(entries(&dir), ["model.safetensors"]);
        // A directory that does not exist: the first step fails, naming the path.
        let missing = dir.join("no-such-dir").join("model.safetensors");
        let err = write(&missing, b"bytes").unwrap_err().to_string();
        assert!(err.contains("no-such-dir"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
