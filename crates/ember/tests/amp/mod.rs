//! The quick starts' `--amp` smoke runs, shared by their tests: the examples' own driver
//! (`examples/common`) run with a short command line, and the checks on what it printed.

#[path = "../../examples/common/mod.rs"]
pub mod driver;

use driver::quick_start::{self, Args, Example, Outcome};
use ember::Result;

/// The MNIST directory of the repository.
pub const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/mnist");

/// Runs `example`'s quick start with `flags` after `--data` and a temporary `--out`; the
/// output directory is removed afterwards. Each call gets its own directory: the tests of
/// one file run in parallel in one process, and one removing a shared directory would pull
/// it from under another one's checkpoint.
pub fn quick_start<M: ember::nn::Module>(example: Example<M>, flags: &[&str]) -> Result<Outcome> {
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let out = std::env::temp_dir().join(format!("ember-{}-amp-smoke-{}-{call}", example.name, std::process::id()));
    let out_flag = out.display().to_string();
    let mut argv = vec![example.name, "--data", DATA, "--out", out_flag.as_str()];
    argv.extend_from_slice(flags);
    let args = <Args as clap::Parser>::try_parse_from(argv)
        .map_err(|e| ember::Error::invalid(example.name, format!("command line: {e}")))?;
    let outcome = quick_start::run(example, args);
    std::fs::remove_dir_all(&out).ok();
    outcome
}

/// The line of `outcome`'s log that starts with `prefix` (the header starts `model: `).
pub fn line<'a>(log: &'a [String], prefix: &str) -> &'a str {
    let found = log.iter().find(|l| l.starts_with(prefix));
    assert!(found.is_some(), "no line starting {prefix:?} in {log:#?}");
    found.map_or("", String::as_str)
}

/// Asserts that every loss is finite and that the mean of the last `n` is below `fraction`
/// of the mean of the first `n`.
pub fn assert_falls(losses: &[f64], n: usize, fraction: f64) {
    assert!(losses.len() >= 2 * n, "{} losses", losses.len());
    assert!(losses.iter().all(|l| l.is_finite()), "losses {losses:?}");
    let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
    let (first, last) = (mean(&losses[..n]), mean(&losses[losses.len() - n..]));
    assert!(last < fraction * first, "mean loss of the first {n} steps {first}, of the last {n} {last}");
}
