//! GPU benchmarks of ember, the counterpart of `tools/bench/cuda/torch_gpu.py`: the same
//! four measurements on the same GPU, printed as JSON with the same keys, so that
//! `tools/bench/cuda/compare.py` can set them side by side.
//!
//! ```text
//! cargo run --release --example cuda_bench --features cuda -- --device cuda [--out ember_gpu.json]
//!     [--sizes 1024,2048,4096,8192] [--mlp-steps 500] [--cnn-steps 300] [--warmup 50]
//!     [--data data/mnist] [--gpu-name NAME]
//! ```
//!
//! 1. `matmul_tflops`: square f32 products (`a.matmul(&b)`), a batch of products between two
//!    `Device::synchronize` calls timed on the host clock, the median batch of 10 after 3
//!    warm-up batches, as TFLOP/s (`2 n^3` per product).
//! 2. `add_us_per_call`: `a.add(&b)` called many times in a row on 1-element and on
//!    1M-element tensors, one synchronize at the end: the time per call, which for the
//!    small tensor is the launch and dispatch overhead of one op.
//! 3. `mnist_mlp` and `mnist_cnn`: training throughput of the `mnist` and `mnist_cnn`
//!    examples, exactly as they train (the model of [`ember::mnist`], Adam at lr 1e-3 with the
//!    cosine schedule over 3 epochs, batches of 64 from the shuffling loader over the
//!    standardised host images, each batch copied to the device, the loss read back every
//!    step): samples/s over `--mlp-steps` / `--cnn-steps` steps after `--warmup` steps.
//! 4. `peak_memory_bytes`: the most device memory ember's tensors held during training (the
//!    caching allocator's `Device::memory_stats`, like `torch.cuda.max_memory_allocated`);
//!    `device_run.sh` also samples each process's GPU memory with `nvidia-smi`.
//!
//! `--device cpu` runs the same measurements on the CPU (for trying the program without a
//! GPU; use small `--sizes` and step counts there).

use clap::Parser;
use ember::mnist;
use ember::nn::Module;
use ember::optim::{Adam, AdamConfig, CosineAnnealingLR, LrScheduler};
use ember::{Device, Result, Tensor};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Parser)]
struct Args {
    /// `cpu`, `cuda` or `cuda:N`.
    #[arg(long, default_value = "cuda")]
    device: String,
    /// Square matmul sizes, comma-separated.
    #[arg(long, default_value = "1024,2048,4096,8192", value_delimiter = ',')]
    sizes: Vec<usize>,
    /// Timed training steps of the MLP.
    #[arg(long, default_value_t = 500)]
    mlp_steps: usize,
    /// Timed training steps of the CNN.
    #[arg(long, default_value_t = 300)]
    cnn_steps: usize,
    /// Untimed training steps before each timed run.
    #[arg(long, default_value_t = 50)]
    warmup: usize,
    /// Calls of `a + b` per timing of the launch overhead (a tenth for the 1M-element add).
    #[arg(long, default_value_t = 10_000)]
    add_calls: usize,
    /// The MNIST IDX files.
    #[arg(long, default_value = "data/mnist")]
    data: PathBuf,
    /// Where to write the JSON (it is printed to stdout as well).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The GPU's name for the report (ember does not query it; device_run.sh passes
    /// nvidia-smi's).
    #[arg(long)]
    gpu_name: Option<String>,
    /// Seed of the global generator (initial weights) and of the loader's shuffling.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// Products per timed batch: enough work per batch that the two synchronizes and the
/// host clock are small beside it (the same table as torch_gpu.py).
fn matmul_batch(n: usize) -> usize {
    match n {
        0..=1024 => 20,
        1025..=2048 => 10,
        2049..=4096 => 3,
        _ => 1,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn matmul_tflops(dev: Device, n: usize) -> Result<f64> {
    let a = Tensor::randn([n, n])?.to_device(dev)?;
    let b = Tensor::randn([n, n])?.to_device(dev)?;
    let batch = matmul_batch(n);
    let mut times = Vec::new();
    for rep in 0..13 {
        dev.synchronize()?;
        let start = Instant::now();
        for _ in 0..batch {
            let c = a.matmul(&b)?;
            drop(c);
        }
        dev.synchronize()?;
        if rep >= 3 {
            times.push(start.elapsed().as_secs_f64() / batch as f64);
        }
    }
    Ok(2.0 * (n as f64).powi(3) / median(times) / 1e12)
}

fn add_us_per_call(dev: Device, numel: usize, calls: usize) -> Result<f64> {
    let a = Tensor::randn([numel])?.to_device(dev)?;
    let b = Tensor::randn([numel])?.to_device(dev)?;
    for _ in 0..calls.min(100) {
        a.add(&b)?;
    }
    dev.synchronize()?;
    let start = Instant::now();
    for _ in 0..calls {
        a.add(&b)?;
    }
    dev.synchronize()?;
    Ok(start.elapsed().as_secs_f64() / calls as f64 * 1e6)
}

/// Samples per second of the quick start's training loop for `build`'s model.
struct Training {
    samples_per_s: f64,
    steps: usize,
    last_loss: f64,
}

fn train(
    dev: Device,
    train: &mnist::Data,
    build: fn() -> Result<ember::nn::Sequential>,
    warmup: usize,
    steps: usize,
    seed: u64,
) -> Result<Training> {
    const BATCH: usize = 64;
    const EPOCHS: usize = 3;
    let model = build()?;
    model.to_device(dev)?;
    let mut opt = Adam::new(model.parameters(), AdamConfig { lr: 1e-3, ..Default::default() })?;
    let loader = mnist::loader(train, BATCH, seed)?;
    let mut cosine = CosineAnnealingLR::new(&mut opt, EPOCHS * loader.len(), 0.0)?;
    model.train();
    if loader.is_empty() {
        return Err(ember::Error::invalid("cuda_bench", "no training images"));
    }
    let mut done = 0usize;
    let mut last_loss;
    let mut start = Instant::now();
    'epochs: loop {
        for batch in loader.iter() {
            let batch = batch?;
            let [x, y] = batch.as_slice() else {
                return Err(ember::Error::invalid("cuda_bench", "expected batches of (images, labels)"));
            };
            if done == warmup {
                dev.synchronize()?;
                start = Instant::now();
            }
            // The example's step: forward, cross-entropy, zero_grad, backward, Adam, and the
            // loss read back to the host (which waits for the step to finish).
            last_loss = mnist::train_step(&model, &mut opt, &x.to_device(dev)?, &y.to_device(dev)?)?;
            cosine.step(&mut opt);
            done += 1;
            if done == warmup + steps {
                break 'epochs;
            }
        }
    }
    dev.synchronize()?;
    let secs = start.elapsed().as_secs_f64();
    Ok(Training { samples_per_s: (steps * BATCH) as f64 / secs, steps, last_loss })
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_num(v: f64) -> String {
    if v.is_finite() { format!("{v}") } else { "null".into() }
}

/// A measurement's result, or `None` after printing why it failed: one failing workload
/// must not cost the others their numbers (the GPU run is short and rare).
fn measured<T>(what: &str, r: Result<T>) -> Option<T> {
    r.map_err(|e| eprintln!("  {what}: FAILED: {e}")).ok()
}

/// The measurements so far. The JSON file is rewritten after each one, so that a run cut
/// short by a timeout still leaves the numbers it took.
struct Report {
    device: Device,
    gpu: Option<String>,
    tflops: Vec<(usize, Option<f64>)>,
    adds: Vec<(usize, Option<f64>)>,
    runs: Vec<(&'static str, Option<Training>)>,
    peak_memory_bytes: Option<usize>,
}

impl Report {
    fn render(&self) -> String {
        let num = |v: Option<f64>| v.map_or("null".to_string(), json_num);
        let mut j = String::from("{\n");
        let _ = writeln!(j, "  \"framework\": \"ember\",");
        let _ = writeln!(j, "  \"device\": {},", json_str(&self.device.to_string()));
        let _ = writeln!(j, "  \"gpu\": {},", self.gpu.as_deref().map_or("null".into(), json_str));
        let m: Vec<String> = self.tflops.iter().map(|(n, t)| format!("\"{n}\": {}", num(*t))).collect();
        let _ = writeln!(j, "  \"matmul_tflops\": {{{}}},", m.join(", "));
        let a: Vec<String> = self.adds.iter().map(|(n, us)| format!("\"{n}\": {}", num(*us))).collect();
        let _ = writeln!(j, "  \"add_us_per_call\": {{{}}},", a.join(", "));
        for (key, t) in &self.runs {
            match t {
                Some(t) => {
                    let _ = writeln!(
                        j,
                        "  \"{key}\": {{\"samples_per_s\": {}, \"steps\": {}, \"batch_size\": 64, \"last_loss\": {}}},",
                        json_num(t.samples_per_s),
                        t.steps,
                        json_num(t.last_loss)
                    );
                }
                None => {
                    let _ = writeln!(j, "  \"{key}\": null,");
                }
            }
        }
        let peak = self.peak_memory_bytes.map_or("null".into(), |b| b.to_string());
        let _ = writeln!(j, "  \"peak_memory_bytes\": {peak}");
        j.push('}');
        j
    }

    fn save(&self, out: Option<&PathBuf>) -> Result<()> {
        match out {
            Some(path) => std::fs::write(path, format!("{}\n", self.render())).map_err(|e| ember::Error::io(path, e)),
            None => Ok(()),
        }
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    let dev: Device = args.device.parse()?;
    dev.check_available()?;
    ember::manual_seed(args.seed);
    eprintln!("cuda_bench: ember on {dev}");
    let out = args.out.as_ref();
    let mut report = Report {
        device: dev,
        gpu: args.gpu_name.clone(),
        tflops: Vec::new(),
        adds: Vec::new(),
        runs: Vec::new(),
        peak_memory_bytes: None,
    };

    for &n in &args.sizes {
        let t = measured(&format!("matmul {n}"), matmul_tflops(dev, n));
        if let Some(t) = t {
            eprintln!("  matmul {n}x{n} f32: {t:.2} TFLOP/s");
        }
        report.tflops.push((n, t));
        report.save(out)?;
    }
    for (numel, calls) in [(1usize, args.add_calls), (1 << 20, (args.add_calls / 10).max(1))] {
        let us = measured(&format!("add of {numel}"), add_us_per_call(dev, numel, calls));
        if let Some(us) = us {
            eprintln!("  add of {numel} elements: {us:.2} us per call ({calls} calls)");
        }
        report.adds.push((numel, us));
        report.save(out)?;
    }

    let train_set = mnist::load(&args.data, true)?;
    ember::tensor::storage::reset_peak();
    dev.reset_peak_memory()?;
    for (key, build, steps) in
        [("mnist_mlp", mnist::mlp as fn() -> _, args.mlp_steps), ("mnist_cnn", mnist::cnn, args.cnn_steps)]
    {
        let t = measured(key, train(dev, &train_set, build, args.warmup, steps, args.seed));
        if let Some(t) = &t {
            eprintln!("  {key}: {:.0} samples/s, loss {:.4}", t.samples_per_s, t.last_loss);
        }
        report.runs.push((key, t));
        report.save(out)?;
    }
    // A GPU's allocator counts its own memory; the host pool counts CPU storages.
    report.peak_memory_bytes = match dev.memory_stats()? {
        Some(m) => Some(m.peak_allocated),
        None if dev == Device::Cpu => Some(ember::tensor::storage::memory_stats().peak_bytes),
        None => None,
    };
    report.save(out)?;
    println!("{}", report.render());
    Ok(())
}
