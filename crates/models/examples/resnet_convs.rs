//! The forward speed of every distinct convolution of ResNet-50 (batch 8, 224x224, f32),
//! against a plain matrix product of the same size: where the convolutions lose time.
//!
//! For each shape it prints the convolution's median milliseconds, its GFLOP/s and its mean
//! CPU milliseconds (summed over the process's threads, steadier than wall-clock on a
//! loaded machine), the same three of `[out, in * kh * kw] @ [in * kh * kw, batch * positions]`
//! (one `Tensor::matmul`, the product a convolution cannot beat), how often the shape occurs
//! in the network, and the time it takes in all (`count * conv_ms`).
//!
//! The last line times the stem's max pool the same way.
//!
//! Run: `cargo run --release -p ember-models --example resnet_convs [-- [pool] REPS]` (default 5;
//! `RAYON_NUM_THREADS` or the machine's cores set the threads).

use ember_tensor::{ConvArgs, Error, MaxPoolArgs, Result, Tensor};
use std::time::Instant;

/// `(in, out, kernel, stride, input extent, count in ResNet-50)`.
const SHAPES: [(usize, usize, usize, usize, usize, usize); 20] = [
    (3, 64, 7, 2, 224, 1),
    (64, 64, 1, 1, 56, 1),
    (64, 64, 3, 1, 56, 3),
    (64, 256, 1, 1, 56, 4),
    (256, 64, 1, 1, 56, 2),
    (256, 128, 1, 1, 56, 1),
    (128, 128, 3, 2, 56, 1),
    (128, 512, 1, 1, 28, 4),
    (256, 512, 1, 2, 56, 1),
    (512, 128, 1, 1, 28, 3),
    (128, 128, 3, 1, 28, 3),
    (512, 256, 1, 1, 28, 1),
    (256, 256, 3, 2, 28, 1),
    (256, 1024, 1, 1, 14, 6),
    (512, 1024, 1, 2, 28, 1),
    (1024, 256, 1, 1, 14, 5),
    (256, 256, 3, 1, 14, 5),
    (1024, 512, 1, 1, 14, 1),
    (512, 512, 3, 2, 14, 1),
    (512, 2048, 1, 1, 7, 3),
];

/// The rest of ResNet-50's convolutions, which the table above leaves out to keep it short:
/// `(in, out, kernel, stride, input extent, count)`.
const MORE: [(usize, usize, usize, usize, usize, usize); 3] =
    [(1024, 2048, 1, 2, 14, 1), (2048, 512, 1, 1, 7, 2), (512, 512, 3, 1, 7, 2)];

const BATCH: usize = 8;

/// The CPU time of all the process's threads in milliseconds, from
/// `/proc/self/task/*/schedstat` (nanoseconds on a CPU); 0 where it is missing.
fn cpu_ms() -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return 0.0 };
    let ns: u64 = tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()))
        .sum();
    ns as f64 / 1e6
}

/// The median wall-clock milliseconds of `reps` runs after one warm-up, and the mean CPU
/// milliseconds per run (steadier than wall-clock on a loaded machine; at one thread it is
/// the work itself).
fn median_ms(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<(f64, f64)> {
    f()?;
    let mut ms = Vec::with_capacity(reps);
    let cpu = cpu_ms();
    for _ in 0..reps {
        let start = Instant::now();
        f()?;
        ms.push(start.elapsed().as_secs_f64() * 1e3);
    }
    let cpu = (cpu_ms() - cpu) / reps as f64;
    ms.sort_by(f64::total_cmp);
    Ok((ms[ms.len() / 2], cpu))
}

fn main() -> Result<()> {
    // `pool` as the first argument times the max pool alone.
    let pool_only = std::env::args().nth(1).as_deref() == Some("pool");
    let reps = match std::env::args().nth(if pool_only { 2 } else { 1 }) {
        None => 5,
        Some(r) => r.parse().map_err(|_| Error::invalid("resnet_convs", format!("REPS must be a count, got {r}")))?,
    };
    let (mut total, mut total_cpu) = (0.0, 0.0);
    println!(
        "| in | out | k | stride | hw | count | conv ms | GFLOP/s | conv cpu ms | matmul ms | GFLOP/s | matmul cpu ms | all ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for &(cin, cout, k, stride, hw, count) in SHAPES.iter().chain(&MORE).filter(|_| !pool_only) {
        let x = Tensor::randn([BATCH, cin, hw, hw])?;
        let w = Tensor::randn([cout, cin, k, k])?;
        let args = ConvArgs::default().stride(stride).padding(k / 2);
        let out = (hw + 2 * (k / 2) - k) / stride + 1;
        let flop = 2.0 * (BATCH * cout * out * out * cin * k * k) as f64;
        let (conv, conv_cpu) = median_ms(reps, || {
            std::hint::black_box(x.conv2d(&w, None, &args)?);
            Ok(())
        })?;
        let a = Tensor::randn([cout, cin * k * k])?;
        let b = Tensor::randn([cin * k * k, BATCH * out * out])?;
        let (product, product_cpu) = median_ms(reps, || {
            std::hint::black_box(a.matmul(&b)?);
            Ok(())
        })?;
        total += count as f64 * conv;
        total_cpu += count as f64 * conv_cpu;
        println!(
            "| {cin} | {cout} | {k} | {stride} | {hw} | {count} | {conv:.2} | {:.0} | {conv_cpu:.1} | {product:.2} | {:.0} | {product_cpu:.1} | {:.1} |",
            flop / conv / 1e6,
            flop / product / 1e6,
            count as f64 * conv
        );
    }
    println!("\nall convolutions: {total:.1} ms, {total_cpu:.1} ms of CPU time");
    // The stem's max pool, on its input's shape.
    let x = Tensor::randn([BATCH, 64, 112, 112])?;
    let args = MaxPoolArgs::new(3).stride(2).padding(1);
    let (pool, pool_cpu) = median_ms(reps, || {
        std::hint::black_box(x.max_pool2d(&args)?);
        Ok(())
    })?;
    println!("max pool 3x3 stride 2 on [8, 64, 112, 112]: {pool:.2} ms, {pool_cpu:.1} ms of CPU time");
    Ok(())
}
