//! The flags every example takes: the seed, the MNIST directory and the output directory.

use clap::Args;
use std::path::{Path, PathBuf};

/// `--seed`, `--data` and `--out`, flattened into each example's own arguments.
#[derive(Args, Clone, Debug)]
pub struct Common {
    /// Seed of the global generator (initial weights, shuffling, noise, environments).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The directory with the MNIST IDX files (and SHA256SUMS).
    #[arg(long, default_value = "data/mnist")]
    pub data: PathBuf,
    /// Where the example writes its files (default `runs/<example>`).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

impl Common {
    /// Seeds the global generator and creates the output directory (`--out`, else
    /// `runs/<name>`); returns that directory.
    pub fn start(&self, name: &str) -> ember::Result<PathBuf> {
        ember::manual_seed(self.seed);
        let out = self.out.clone().unwrap_or_else(|| Path::new("runs").join(name));
        std::fs::create_dir_all(&out).map_err(|e| ember::Error::io(&out, e))?;
        Ok(out)
    }
}
