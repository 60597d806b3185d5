//! How steady the machine's cores are, with no framework involved: `--threads` threads each
//! spin on register-only arithmetic and count their loops per window. Threads that share
//! nothing can only slow down when the machine takes time away from them. Each runs one
//! dependent chain, though, which leaves most of a core's arithmetic units idle, so they miss
//! what slows a matrix product down: `--throughput` below is the floor for the slowest /
//! fastest window of compute-bound work such as training (`tools/bench/long_run.sh` runs it
//! before each round). Run one of them before judging a long run's spread.
//!
//! ```text
//! cargo run --release --example host_steadiness -- [--seconds 60] [--window 0.5] [--threads 2]
//!     [--pingpong | --throughput]
//! ```
//!
//! Prints, for each thread and for their sum, the slowest / fastest window, the median /
//! fastest and how many windows fell below 90% of the fastest.
//!
//! With `--pingpong` two threads instead pass a cache line back and forth and it prints the
//! round trip of each window in nanoseconds: it shows where the host puts the two vCPUs,
//! on cores that share a cache (tens of nanoseconds) or on cores that do not (hundreds),
//! which changes how fast threads that share data run, but not the spinning threads above.
//!
//! With `--throughput` two threads instead keep many independent vector multiply-adds in
//! flight, as a matrix product's kernel does, for the first 80% of each window, and pass a
//! cache line for the rest. It prints each window's multiply-adds relative to the fastest
//! window next to the round trip, then both threads' rate in the median and the fastest
//! window, so that probes taken at different times can be compared. Unlike the spinning
//! threads, these slow down when something else shares their cores' arithmetic units.

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
    /// Measure two threads' arithmetic throughput and the round trip in the same windows.
    #[arg(long)]
    throughput: bool,
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

/// The partner's side of a round trip: turns the ball even whenever it is odd, while
/// `go()` holds.
fn answer(ball: &AtomicU64, go: impl Fn() -> bool) {
    while go() {
        let b = ball.load(Ordering::Acquire);
        if b % 2 == 1 {
            ball.store(b + 1, Ordering::Release);
        }
    }
}

/// This thread's side: makes the ball odd and waits for the partner to make it even, until
/// `stop`; returns the round trip in nanoseconds. A partner that stops answering ends the
/// wait after a second, and the ball is left even for the next call.
fn round_trips(ball: &AtomicU64, stop: Instant) -> f64 {
    let (begun, mut trips) = (Instant::now(), 0u64);
    while Instant::now() < stop {
        for _ in 0..50 {
            let b = ball.fetch_add(1, Ordering::AcqRel) + 1;
            let wait = Instant::now();
            while ball.load(Ordering::Acquire) == b && wait.elapsed() < Duration::from_secs(1) {
                std::hint::spin_loop();
            }
        }
        trips += 50;
    }
    if ball.load(Ordering::Acquire) % 2 == 1 {
        ball.fetch_add(1, Ordering::AcqRel);
    }
    begun.elapsed().as_secs_f64() * 1e9 / trips.max(1) as f64
}

/// The round trip of a cache line between this thread and a partner, in nanoseconds, for
/// each of `windows` windows of `window`.
fn pingpong(window: Duration, windows: usize) -> Vec<f64> {
    let ball = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| answer(&ball, || !stop.load(Ordering::Relaxed)));
        let start = Instant::now();
        let trips = (1..=windows as u32).map(|w| round_trips(&ball, start + window * w)).collect();
        stop.store(true, Ordering::Relaxed);
        trips
    })
}

/// Runs blocks of independent multiply-adds until `end`; returns the blocks run.
fn multiply_adds(end: Instant, acc: &mut [f32; 256]) -> u64 {
    let mut blocks = 0;
    while Instant::now() < end {
        for _ in 0..64 {
            // 256 independent lanes: the loop is bound by the multiply and add units, not by
            // the latency of one chain.
            for a in acc.iter_mut() {
                *a = *a * 0.999_999 + 1e-7;
            }
            std::hint::black_box(&mut *acc);
        }
        blocks += 1;
    }
    blocks
}

/// Per window: each thread's multiply-add blocks in the first 80%, then the round trip of a
/// cache line between them in the rest (nanoseconds).
fn throughput(window: Duration, windows: usize) -> Vec<(u64, u64, f64)> {
    let ball = AtomicU64::new(0);
    let start = Instant::now();
    let phase = |w: u32| (start + window * (w - 1) + window.mul_f64(0.8), start + window * w);
    std::thread::scope(|s| {
        let partner = s.spawn(|| {
            let mut acc = [1.0f32; 256];
            (1..=windows as u32)
                .map(|w| {
                    let (pass, end) = phase(w);
                    let blocks = multiply_adds(pass, &mut acc);
                    answer(&ball, || Instant::now() < end);
                    blocks
                })
                .collect::<Vec<u64>>()
        });
        let mut acc = [1.0f32; 256];
        let mine: Vec<(u64, f64)> = (1..=windows as u32)
            .map(|w| {
                let (pass, end) = phase(w);
                let blocks = multiply_adds(pass, &mut acc);
                // Stop before the partner leaves its side.
                let ns = round_trips(&ball, end - window.mul_f64(0.02));
                while Instant::now() < end {
                    std::hint::spin_loop();
                }
                (blocks, ns)
            })
            .collect();
        let theirs = partner.join().unwrap_or_default();
        mine.iter().zip(theirs.iter().chain(std::iter::repeat(&0))).map(|(&(b, ns), &t)| (b, t, ns)).collect()
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
    if args.throughput {
        let per = throughput(window, windows);
        let top = |f: fn(&(u64, u64, f64)) -> u64| per.iter().map(f).max().unwrap_or(1).max(1) as f64;
        let (top0, top1, top_sum) = (top(|p| p.0), top(|p| p.1), top(|p| p.0 + p.1));
        for (w, (a, b, ns)) in per.iter().enumerate() {
            println!(
                "window {w}: multiply-adds {:.2} of the fastest (threads {:.2} {:.2}), round trip {ns:.0} ns",
                (a + b) as f64 / top_sum,
                *a as f64 / top0,
                *b as f64 / top1
            );
        }
        // Each block is 64 passes over 256 lanes, in 80% of a window.
        let rate = |blocks: u64| blocks as f64 * 64.0 * 256.0 / (0.8 * window.as_secs_f64()) / 1e9;
        let mut sums: Vec<u64> = per.iter().map(|p| p.0 + p.1).collect();
        sums.sort_unstable();
        println!(
            "both threads: {:.2} billion multiply-adds/s in the median window, {:.2} in the fastest",
            rate(sums.get(sums.len() / 2).copied().unwrap_or(0)),
            rate(top_sum as u64)
        );
        describe("thread 0", &per.iter().map(|p| p.0).collect::<Vec<_>>());
        describe("thread 1", &per.iter().map(|p| p.1).collect::<Vec<_>>());
        describe("sum", &per.iter().map(|p| p.0 + p.1).collect::<Vec<_>>());
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
