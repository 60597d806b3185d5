//! `ember-fuzz`: runs the reader fuzz harnesses for a time or iteration budget.
//!
//! ```text
//! ember-fuzz [--target NAME|all] [--seconds S] [--iterations N] [--seed N] [--make-seeds]
//! ```

use ember_fuzz::alloc_count::CountingAlloc;
use ember_fuzz::{Config, Target, corpus, seeds};
use std::process::ExitCode;
use std::time::Duration;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const USAGE: &str = "usage: ember-fuzz [--target safetensors|optimizer|idx|idx-gz|mnist|torch-pt|onnx|pnnx|all] [--seconds S] \
                     [--iterations N] [--seed N] [--make-seeds]";

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("ember-fuzz: {msg}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Vec<String>) -> Result<ExitCode, String> {
    let mut targets = Target::ALL.to_vec();
    let (mut seconds, mut iterations, mut seed) = (None, None, None);
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--target" | "--reader" => {
                let name = value()?;
                targets = if name == "all" {
                    Target::ALL.to_vec()
                } else {
                    vec![Target::from_name(name).ok_or_else(|| format!("no target {name:?}"))?]
                };
            }
            "--seconds" => seconds = Some(value()?.parse::<f64>().map_err(|e| format!("--seconds: {e}"))?),
            "--iterations" => iterations = Some(value()?.parse::<u64>().map_err(|e| format!("--iterations: {e}"))?),
            "--seed" => seed = Some(value()?.parse::<u64>().map_err(|e| format!("--seed: {e}"))?),
            "--make-seeds" => {
                seeds::write_all(&corpus::default_dir()).map_err(|e| e.to_string())?;
                println!("seeds written under {}", corpus::default_dir().display());
                return Ok(ExitCode::SUCCESS);
            }
            "--help" | "-h" => {
                println!("{USAGE}");
                return Ok(ExitCode::SUCCESS);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if seconds.is_none() && iterations.is_none() {
        seconds = Some(10.0);
    }
    let mut failed = false;
    for target in targets {
        let mut config = Config::new(target, 0);
        config.iterations = iterations;
        config.duration = seconds.map(Duration::from_secs_f64);
        if let Some(s) = seed {
            config.seed = s;
        }
        let report = ember_fuzz::run(&config).map_err(|e| format!("{}: {e}", target.name()))?;
        println!("{:<12} {report}", target.name());
        for f in &report.failures {
            failed = true;
            println!("  FAIL {}: {}", f.saved.display(), f.what);
        }
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}
