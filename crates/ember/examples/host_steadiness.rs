//! How steady the machine's cores are, with no framework involved: `--threads` threads each
//! spin on register-only arithmetic and count their loops per window. Threads that share
//! nothing can only slow down when the machine takes time away from them, so the spread of
//! these windows is the floor for any benchmark's slowest / fastest window on the machine
//! (`tools/bench/long_run.sh`'s included): run it before judging a long run's spread.
//!
//! ```text
//! cargo run --release --example host_steadiness -- [--seconds 60] [--window 0.5] [--threads 2]
//! ```
//!
//! Prints, for each thread and for their sum, the slowest / fastest window, the median /
//! fastest and how many windows fell below 90% of the fastest.
//!
//! With `--pingpong` two threads instead pass a cache line back and forth and it prints the
//! round trip of each window in nanoseconds: it shows where the host puts the two vCPUs,
//! on cores that share a cache (tens of nanoseconds) or on cores that do not (hundreds),
//! which changes how fast threads that share data run, but not the spinning threads above.

use clap::Parser;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Parser)]
struct Args {
    /// Seconds to run.
    #[arg(long, default_value_t = 60.0)]
    seconds: f64,
    /// Seconds per window.
    #[arg(long, default_value_t = 0.5)]
    window: f64,
    /// Spinning threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Measure the round trip of a cache line between two threads instead.
    #[arg(long)]
    pingpong: bool,
}

/// Loops of a fixed arithmetic body per window, for `windows` windows of `window` from
/// `start`.
fn spin(start: Instant, window: Duration, windows: usize) -> Vec<u64> {
    let mut x = 1.0f64;
    (1..=windows as u32)
        .map(|w| {
            let end = start + window * w;
            let mut loops = 0;
            while Instant::now() < end {
                for _ in 0..1000 {
                    x = std::hint::black_box(x * 1.000_000_1 + 1e-9);
                }
                loops += 1;
            }
            loops
        })
        .collect()
}

/// One line: slowest / fastest, median / fastest, windows below 90% of the fastest.
fn describe(name: &str, counts: &[u64]) {
    let top = counts.iter().copied().max().unwrap_or(0).max(1) as f64;
    let mut sorted = counts.to_vec();
    sorted.sort_unstable();
    let (min, median) = (sorted.first().copied().unwrap_or(0), sorted.get(sorted.len() / 2).copied().unwrap_or(0));
    let slow = counts.iter().filter(|&&c| (c as f64) < 0.9 * top).count();
    println!(
        "{name}: slowest / fastest {:.2}, median / fastest {:.2}, windows below 90%: {slow} of {}",
        min as f64 / top,
        median as f64 / top,
        counts.len()
    );
}

/// The round trip of a cache line between this thread and a partner, in nanoseconds, for
/// each of `windows` windows of `window`: this thread makes the ball odd, the partner even.
fn pingpong(window: Duration, windows: usize) -> Vec<f64> {
    let ball = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let b = ball.load(Ordering::Acquire);
                if b % 2 == 1 {
                    ball.store(b + 1, Ordering::Release);
                }
            }
        });
        let start = Instant::now();
        let trips = (1..=windows as u32)
            .map(|w| {
                let end = start + window * w;
                let (begun, mut trips) = (Instant::now(), 0u64);
                while Instant::now() < end {
                    for _ in 0..100 {
                        let b = ball.fetch_add(1, Ordering::AcqRel) + 1;
                        // The partner may stop answering only when told to, below.
                        while ball.load(Ordering::Acquire) == b {
                            std::hint::spin_loop();
                        }
                    }
                    trips += 100;
                }
                begun.elapsed().as_secs_f64() * 1e9 / trips as f64
            })
            .collect();
        stop.store(true, Ordering::Relaxed);
        trips
    })
}

fn main() {
    let args = Args::parse();
    let window = Duration::from_secs_f64(args.window.max(0.001));
    let windows = (args.seconds / window.as_secs_f64()).floor().max(1.0) as usize;
    if args.pingpong {
        let trips = pingpong(window, windows);
        let line: Vec<String> = trips.iter().map(|t| format!("{t:.0}")).collect();
        println!("round trip per window (ns): {}", line.join(" "));
        return;
    }
    let start = Instant::now();
    let runs: Vec<Vec<u64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..args.threads.max(1)).map(|_| s.spawn(move || spin(start, window, windows))).collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    for (i, counts) in runs.iter().enumerate() {
        describe(&format!("thread {i}"), counts);
    }
    let sum: Vec<u64> = (0..windows).map(|w| runs.iter().map(|c| c[w]).sum()).collect();
    describe("sum", &sum);
}
