//! The seed corpora under `corpus/<target>/`: small valid files the mutations start from,
//! and invalid ones kept as regression cases (every one is also read unmutated).

use crate::target::{Input, Target};
use std::path::{Path, PathBuf};

/// The corpus folder of the source tree.
pub fn default_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus")
}

/// The inputs in `root/<target>/`, sorted by file name so that a seeded run is
/// reproducible. For MNIST, `NAME.images` and `NAME.labels` make one input; for PNNX,
/// `NAME.param` and `NAME.bin`.
pub fn load(root: &Path, target: Target) -> std::io::Result<Vec<(String, Input)>> {
    let dir = root.join(target.name());
    let mut names: Vec<String> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    let mut inputs = Vec::new();
    for name in &names {
        if let Some((first, second)) = target.pair_suffixes() {
            let Some(stem) = name.strip_suffix(first) else { continue };
            let labels = std::fs::read(dir.join(format!("{stem}{second}")))?;
            let main = std::fs::read(dir.join(name))?;
            inputs.push((stem.to_string(), Input { main, labels, gzip: false }));
        } else {
            inputs.push((name.clone(), Input { main: std::fs::read(dir.join(name))?, ..Input::default() }));
        }
    }
    if inputs.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{}: no seed inputs (run `cargo run -p ember-fuzz -- --make-seeds`)", dir.display()),
        ));
    }
    Ok(inputs)
}
