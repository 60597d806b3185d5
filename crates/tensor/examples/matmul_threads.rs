//! Times square `f32` matrix products `[n, n] @ [n, n]` on a given number of threads (2 by
//! default) and shows whether every thread worked while they ran.
//!
//! ```text
//! cargo run --release -p ember-tensor --example matmul_threads -- --threads 2 --sizes 1024 --reps 11
//! ```
//!
//! Prints one tab-separated line per size:
//!
//! `ember  threads  n  median GFLOP/s  slowest GFLOP/s  user/wall  GFLOP per CPU-s  helper CPU share  helper blocks share  others' CPU  steal`
//!
//! over `--reps` timed products after one untimed one. *user/wall* is the process's user
//! and system time (`getrusage`) over the wall time of the timed products: near the thread
//! count when every thread computed throughout, near 1 when one did. *GFLOP per CPU-s* is
//! the work done per second of that CPU time: the threads' own speed, which a busy machine
//! changes far less than the wall time (time waiting for a CPU does not count), and which
//! falls where threads spin waiting for each other. The *helper CPU share* is the part of
//! that CPU time spent on ember's helper threads (`/proc/self/task/*/schedstat`, nanoseconds
//! per thread): about `(threads - 1) / threads` when the work is shared evenly.
//! The *helper blocks share* is the part of the parallel loops' indices the helpers claimed
//! ([`threading::team_counters`]), a count that does not depend on timing. *Others' CPU* is
//! the CPU time other processes took meanwhile, and *steal* the time the hypervisor ran
//! something else on this machine's vCPUs, both as a share of all vCPUs' time
//! (`/proc/stat`, in 10 ms ticks, so coarse for short runs): a run with either high
//! measured a busy machine, not ember. Linux only (the CPU columns read `/proc`; elsewhere
//! they print `nan`).

use ember_tensor::{Result, Tensor, threading};
use std::time::Instant;
#[path = "bench_util/mod.rs"]
mod bench_util;
use bench_util::{median, process_cpu};

struct Args {
    threads: usize,
    sizes: Vec<usize>,
    reps: usize,
}

fn parse() -> std::result::Result<Args, String> {
    // Two threads unless told: asking `threading::num_threads` here would start the pool.
    let mut args = Args { threads: 2, sizes: vec![256, 512, 1024, 2048], reps: 11 };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let number = |v: &str| v.trim().parse::<usize>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--threads" => args.threads = number(&value)?.max(1),
            "--reps" => args.reps = number(&value)?.max(1),
            "--sizes" => args.sizes = value.split(',').map(number).collect::<std::result::Result<_, _>>()?,
            _ => return Err(format!("unknown flag {flag} (flags: --threads N, --sizes N,N,..., --reps N)")),
        }
    }
    Ok(args)
}

/// Per thread of this process: (whether it is one of ember's helpers, nanoseconds on a CPU),
/// from `/proc/self/task/*/{comm,schedstat}`.
fn thread_times() -> Vec<(bool, u64)> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
    tasks
        .flatten()
        .filter_map(|task| {
            let path = task.path();
            let comm = std::fs::read_to_string(path.join("comm")).ok()?;
            let stat = std::fs::read_to_string(path.join("schedstat")).ok()?;
            let on_cpu = stat.split_whitespace().next()?.parse::<u64>().ok()?;
            Some((comm.starts_with("ember-helper"), on_cpu))
        })
        .collect()
}

/// (helper CPU ns, all CPU ns) summed over the process's threads.
fn split(times: &[(bool, u64)]) -> (u64, u64) {
    times.iter().fold((0, 0), |(h, all), &(helper, cpu)| (h + if helper { cpu } else { 0 }, all + cpu))
}

/// The machine's (busy, steal, vCPUs) so far, busy and steal in seconds summed over the
/// vCPUs, from the first line of `/proc/stat` (`user nice system idle iowait irq softirq
/// steal ...`, in 1/100 s).
fn machine_times() -> (f64, f64, f64) {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else { return (f64::NAN, f64::NAN, f64::NAN) };
    let mut lines = stat.lines();
    let ticks: Vec<f64> =
        lines.next().unwrap_or_default().split_whitespace().skip(1).filter_map(|f| f.parse().ok()).collect();
    let vcpus = lines.filter(|l| l.starts_with("cpu")).count() as f64;
    if ticks.len() < 8 {
        return (f64::NAN, f64::NAN, vcpus);
    }
    let busy = ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6];
    (busy / 100.0, ticks[7] / 100.0, vcpus)
}

fn main() -> Result<()> {
    let args = parse().map_err(|e| ember_tensor::Error::invalid("matmul_threads", e))?;
    threading::set_num_threads(args.threads)?;
    for &n in &args.sizes {
        let a = Tensor::randn([n, n])?;
        let b = Tensor::randn([n, n])?;
        a.matmul(&b)?;
        let flops = 2.0 * (n as f64).powi(3);
        let (cpu0, threads0, counters0) = (process_cpu(), split(&thread_times()), threading::team_counters());
        let machine0 = machine_times();
        let start = Instant::now();
        let mut gflops = Vec::with_capacity(args.reps);
        for _ in 0..args.reps {
            let t = Instant::now();
            a.matmul(&b)?;
            gflops.push(flops / t.elapsed().as_secs_f64() / 1e9);
        }
        let wall = start.elapsed().as_secs_f64();
        let (cpu1, threads1, counters1) = (process_cpu(), split(&thread_times()), threading::team_counters());
        let machine1 = machine_times();
        let (helper_ns, all_ns) = (threads1.0 - threads0.0, (threads1.1 - threads0.1) as f64);
        let capacity = wall * machine1.2;
        let others = ((machine1.0 - machine0.0) - (cpu1 - cpu0)).max(0.0) / capacity;
        let steal = (machine1.1 - machine0.1) / capacity;
        let (by_caller, by_helpers) =
            (counters1.by_caller - counters0.by_caller, counters1.by_helpers - counters0.by_helpers);
        let slowest = gflops.iter().copied().fold(f64::INFINITY, f64::min);
        println!(
            "ember\t{}\t{n}\t{:.2}\t{:.2}\t{:.3}\t{:.2}\t{:.3}\t{:.3}\t{:.3}\t{:.3}",
            args.threads,
            median(gflops),
            slowest,
            (cpu1 - cpu0) / wall,
            flops * args.reps as f64 / (cpu1 - cpu0) / 1e9,
            helper_ns as f64 / all_ns,
            by_helpers as f64 / (by_caller + by_helpers).max(1) as f64,
            others,
            steal,
        );
    }
    Ok(())
}
