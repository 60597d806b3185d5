//! The same seed gives bitwise-identical training on any number of threads. The quick-start
//! MLP trains for 40 steps of batch 64 on MNIST with Adam in child processes of this test,
//! each with its own thread pool size (`RAYON_NUM_THREADS`; a process's pool cannot be
//! resized), and the loss curves and final weights on 2, 3 and 8 threads must agree bit for
//! bit with those on 1. Three threads matter because they split work unevenly, eight
//! because they outnumber the cores.

use ember::mnist;
use ember::nn::Module;
use ember::optim::{Adam, AdamConfig};
use ember::{Result, manual_seed};
use std::process::Command;

/// Set in a child process: the child trains and prints its results instead.
const CHILD: &str = "EMBER_THREAD_DETERMINISM_CHILD";
const TEST: &str = "training_is_bitwise_identical_on_1_2_3_and_8_threads";

/// Trains as the quick start does and returns the loss of every step and a digest of the
/// final parameters, as f32/f64 bit patterns.
fn train() -> Result<(Vec<u64>, Vec<u32>)> {
    manual_seed(0);
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/mnist");
    let train = mnist::load(data, true)?.take(64 * 40)?;
    let model = mnist::mlp()?;
    let mut opt = Adam::new(model.parameters(), AdamConfig::default())?;
    let loader = mnist::loader(&train, 64, 0)?;
    let mut losses = Vec::new();
    mnist::train_epoch(&model, &mut opt, None, &loader, |_, loss| losses.push(loss.to_bits()))?;
    let mut weights = Vec::new();
    for p in model.parameters() {
        weights.extend(p.value().to_vec::<f32>()?.iter().map(|v| v.to_bits()));
    }
    Ok((losses, weights))
}

/// A child's run, as printed: one line of loss bits, one line of a weight digest.
fn run_child(threads: usize) -> (String, String) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = Command::new(exe)
        .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("RAYON_NUM_THREADS", threads.to_string())
        .output()
        .expect("the child test process runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "child on {threads} threads failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let field = |key: &str| {
        text.lines()
            // libtest prints the test's name on the line where its output starts.
            .find_map(|l| l.find(key).map(|i| &l[i + key.len()..]))
            .unwrap_or_else(|| panic!("no {key} line from the child on {threads} threads:\n{text}"))
            .to_string()
    };
    (field("losses="), field("weights="))
}

#[test]
fn training_is_bitwise_identical_on_1_2_3_and_8_threads() -> Result<()> {
    if std::env::var_os(CHILD).is_some() {
        let (losses, weights) = train()?;
        assert_eq!(
            ember::tensor::threading::num_threads(),
            std::env::var("RAYON_NUM_THREADS").map_or(0, |v| v.parse().unwrap_or(0))
        );
        let losses: Vec<String> = losses.iter().map(|b| format!("{b:016x}")).collect();
        // FNV-1a over the weights' bits: equal digests for equal weights.
        let digest = weights.iter().fold(0xcbf29ce484222325u64, |h, &w| (h ^ w as u64).wrapping_mul(0x100000001b3));
        println!("losses={}", losses.join(","));
        println!("weights={digest:016x}/{}", weights.len());
        return Ok(());
    }
    let runs: Vec<(usize, (String, String))> = [1, 2, 3, 8].into_iter().map(|t| (t, run_child(t))).collect();
    let (_, (losses, weights)) = &runs[0];
    assert_eq!(losses.split(',').count(), 40);
    let first = f64::from_bits(u64::from_str_radix(losses.split(',').next().unwrap_or("0"), 16).unwrap_or(0));
    let last = f64::from_bits(u64::from_str_radix(losses.split(',').next_back().unwrap_or("0"), 16).unwrap_or(0));
    assert!(last < first, "the loss falls: {first} -> {last}");
    for (threads, (l, w)) in &runs[1..] {
        assert_eq!(l, losses, "losses on {threads} threads differ from 1 thread");
        assert_eq!(w, weights, "weights on {threads} threads differ from 1 thread");
    }
    Ok(())
}
