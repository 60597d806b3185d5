//! Times the benchmark workloads without criterion and prints one tab-separated line per
//! workload, for `tools/bench/tensor_compare.sh` to set beside PyTorch's numbers.
//!
//! ```sh
//! cargo run --release -p ember-tensor --example tensor_bench -- [--samples N] [--iters N] [--threads N] [NAME_FILTER...]
//! ```
//!
//! Each workload is warmed up, then timed in `N` samples (default 15) of enough calls to
//! last about 50 ms; the line gives the median and the fastest sample's time per call, minor
//! page faults per call (from `/proc/self/stat`, Linux only) and pool hits/misses per call.
//! `--iters N` fixes the calls per sample instead, for counting cycles with `perf stat`,
//! which a loaded machine disturbs less than it disturbs wall-clock time. `--threads`
//! changes the worker count from the default 2.

#[path = "../benches/workloads/mod.rs"]
mod workloads;

use ember_tensor::storage::{memory_stats, set_pool_enabled};
use std::hint::black_box;
use std::time::{Duration, Instant};
use workloads::Work;

/// Minor page faults of this process so far (0 where `/proc` is missing).
fn minor_faults() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name: state is field 3, minflt field 10.
    stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(7)).and_then(|f| f.parse().ok()).unwrap_or(0)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

/// The positive number following `flag` on the command line.
fn count(flag: &'static str, value: Option<String>) -> ember_tensor::Result<usize> {
    value
        .and_then(|s| s.parse().ok())
        .filter(|&n: &usize| n > 0)
        .ok_or_else(|| ember_tensor::Error::invalid("tensor_bench", format!("{flag} takes a positive number")))
}

fn main() -> ember_tensor::Result<()> {
    let mut samples = 15usize;
    let mut fixed_iters = None;
    let mut threads = workloads::THREADS;
    let mut filters = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--samples" {
            samples = count("--samples", args.next())?;
        } else if a == "--threads" {
            threads = count("--threads", args.next())?;
        } else if a == "--iters" {
            fixed_iters = Some(count("--iters", args.next())?);
        } else {
            filters.push(a);
        }
    }
    workloads::init(threads);
    println!("# name\tmedian_s\tmin_s\twork_kind\twork\tminflt_per_call\tpool_hits_per_call\tpool_misses_per_call");
    for w in workloads::all() {
        if !filters.is_empty() && !filters.iter().any(|f| w.name.contains(f.as_str())) {
            continue;
        }
        set_pool_enabled(w.pool.unwrap_or(true));
        let mut step = (w.setup)();
        // Warm-up: caches, the thread pool, gemm's packing buffers, the buffer pool.
        let warm = Instant::now();
        let mut calls = 0u32;
        while calls < 3 || (fixed_iters.is_none() && warm.elapsed() < Duration::from_millis(300)) {
            black_box(step());
            calls += 1;
        }
        let per_call = warm.elapsed().as_secs_f64() / calls as f64;
        let iters = fixed_iters.unwrap_or(((0.05 / per_call).ceil() as usize).max(1));
        let (faults0, mem0) = (minor_faults(), memory_stats());
        let mut times = Vec::with_capacity(samples);
        for _ in 0..samples {
            let t = Instant::now();
            for _ in 0..iters {
                black_box(step());
            }
            times.push(t.elapsed().as_secs_f64() / iters as f64);
        }
        let total = (samples * iters) as f64;
        let (faults1, mem1) = (minor_faults(), memory_stats());
        let min = times.iter().copied().fold(f64::INFINITY, f64::min);
        let med = median(&mut times);
        let (kind, work) = match w.work {
            Work::Flops(f) => ("flops", f),
            Work::Elements(e) => ("elements", e),
        };
        println!(
            "{}\t{med:.9}\t{min:.9}\t{kind}\t{work}\t{:.2}\t{:.2}\t{:.2}",
            w.name,
            (faults1 - faults0) as f64 / total,
            (mem1.pool_hits - mem0.pool_hits) as f64 / total,
            (mem1.pool_misses - mem0.pool_misses) as f64 / total,
        );
        set_pool_enabled(true);
    }
    Ok(())
}
