//! Times square matrix products `[n, n] @ [n, n]` and prints one line per size:
//! `kind<TAB>threads<TAB>n<TAB>median GFLOP/s<TAB>slowest GFLOP/s` over `--reps` timed
//! products after one untimed one.
//!
//! Kinds: `bf16`, `f16`, `f32` (ember's `Tensor::matmul` on tensors of that dtype, on
//! `--threads` threads), `f16-via-f32` (f16 operands cast whole to `f32`, multiplied and
//! the product cast back) and `gemm-f16` (`gemm::gemm` on `half::f16` slices on the calling
//! thread, the alternative to ember's own f16 kernel; only with `--threads 1`).
//!
//! `--shapes MxKxN[a][b],...` times `[M, K] @ [K, N]` products of ember's kinds instead of
//! square ones (the line's size column is the shape); a trailing `a` or `b` makes that
//! operand a transposed view (`[K, M]` stored, as the gradient products of a linear layer
//! read theirs). With `EMBER_AMX=0` bf16 products skip the AMX kernel.

use ember_tensor::{DType, Result, Tensor, threading};
use std::time::Instant;

struct Args {
    kind: String,
    threads: usize,
    sizes: Vec<usize>,
    shapes: Vec<Shape>,
    reps: usize,
}

/// One product of `--shapes`: `[m, k] @ [k, n]`, each operand possibly a transposed view.
#[derive(Clone)]
struct Shape {
    spec: String,
    m: usize,
    k: usize,
    n: usize,
    ta: bool,
    tb: bool,
}

fn shape(spec: &str) -> std::result::Result<Shape, String> {
    let dims = spec.trim_end_matches(['a', 'b']);
    let flags = &spec[dims.len()..];
    let parts: Vec<usize> = dims
        .split('x')
        .map(|d| d.parse::<usize>().map_err(|e| format!("--shapes {spec}: {e}")))
        .collect::<std::result::Result<_, _>>()?;
    let [m, k, n] = parts[..] else { return Err(format!("--shapes {spec}: want MxKxN")) };
    Ok(Shape { spec: spec.into(), m, k, n, ta: flags.contains('a'), tb: flags.contains('b') })
}

fn parse() -> std::result::Result<Args, String> {
    let mut args =
        Args { kind: "bf16".into(), threads: 1, sizes: vec![256, 512, 1024, 2048], shapes: Vec::new(), reps: 7 };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let number = |v: &str| v.parse::<usize>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--kind" => args.kind = value,
            "--threads" => args.threads = number(&value)?,
            "--reps" => args.reps = number(&value)?.max(1),
            "--sizes" => args.sizes = value.split(',').map(number).collect::<std::result::Result<_, _>>()?,
            "--shapes" => args.shapes = value.split(',').map(shape).collect::<std::result::Result<_, _>>()?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(args)
}

/// Seconds per product: one untimed product, then `reps` timed ones.
fn time(reps: usize, mut product: impl FnMut() -> Result<()>) -> Result<Vec<f64>> {
    product()?;
    (0..reps)
        .map(|_| {
            let start = Instant::now();
            product()?;
            Ok(start.elapsed().as_secs_f64())
        })
        .collect()
}

fn ember(n: usize, dtype: DType, reps: usize) -> Result<Vec<f64>> {
    let a = Tensor::randn([n, n])?.to_dtype(dtype);
    let b = Tensor::randn([n, n])?.to_dtype(dtype);
    time(reps, || a.matmul(&b).map(drop))
}

/// An `[rows, cols]` operand of `dtype`, stored transposed (`[cols, rows]`) when `transposed`.
fn operand(rows: usize, cols: usize, transposed: bool, dtype: DType) -> Result<Tensor> {
    Ok(if transposed {
        Tensor::randn([cols, rows])?.to_dtype(dtype).t()?
    } else {
        Tensor::randn([rows, cols])?.to_dtype(dtype)
    })
}

fn ember_shape(s: &Shape, dtype: DType, reps: usize) -> Result<Vec<f64>> {
    let a = operand(s.m, s.k, s.ta, dtype)?;
    let b = operand(s.k, s.n, s.tb, dtype)?;
    time(reps, || a.matmul(&b).map(drop))
}

/// f16 operands widened whole to `f32`, multiplied in `f32` and rounded back: what the CPU
/// backend does for the other 16-bit ops, the alternative to the sliced widening.
fn f16_through_f32(n: usize, reps: usize) -> Result<Vec<f64>> {
    let a = Tensor::randn([n, n])?.to_dtype(DType::F16);
    let b = Tensor::randn([n, n])?.to_dtype(DType::F16);
    time(reps, || a.to_dtype(DType::F32).matmul(&b.to_dtype(DType::F32)).map(|c| drop(c.to_dtype(DType::F16))))
}

fn gemm_f16(n: usize, reps: usize) -> Result<Vec<f64>> {
    let a = Tensor::randn([n, n])?.to_vec::<f32>()?;
    let b = Tensor::randn([n, n])?.to_vec::<f32>()?;
    let (a, b): (Vec<half::f16>, Vec<half::f16>) =
        (a.iter().map(|&x| half::f16::from_f32(x)).collect(), b.iter().map(|&x| half::f16::from_f32(x)).collect());
    let mut c = vec![half::f16::ZERO; n * n];
    let s = n as isize;
    time(reps, || {
        // SAFETY: `a`, `b` and `c` are `n x n` row-major matrices, `c` distinct from both.
        unsafe {
            gemm::gemm(
                n,
                n,
                n,
                c.as_mut_ptr(),
                1,
                s,
                false,
                a.as_ptr(),
                1,
                s,
                b.as_ptr(),
                1,
                s,
                half::f16::ZERO,
                half::f16::ONE,
                false,
                false,
                false,
                gemm::Parallelism::None,
            )
        };
        Ok(())
    })
}

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let args = parse()?;
    threading::set_num_threads(args.threads)?;
    for s in &args.shapes {
        let dtype = match args.kind.as_str() {
            "bf16" => DType::BF16,
            "f16" => DType::F16,
            "f32" => DType::F32,
            other => return Err(format!("--shapes needs kind bf16, f16 or f32, not {other}").into()),
        };
        let mut secs = ember_shape(s, dtype, args.reps)?;
        secs.sort_by(f64::total_cmp);
        let gflops = |t: f64| 2.0 * (s.m * s.k * s.n) as f64 / t / 1e9;
        println!(
            "{}\t{}\t{}\t{:.2}\t{:.2}",
            args.kind,
            args.threads,
            s.spec,
            gflops(secs[secs.len() / 2]),
            gflops(secs[secs.len() - 1])
        );
    }
    if !args.shapes.is_empty() {
        return Ok(());
    }
    for &n in &args.sizes {
        let mut secs = match args.kind.as_str() {
            "bf16" => ember(n, DType::BF16, args.reps)?,
            "f16" => ember(n, DType::F16, args.reps)?,
            "f32" => ember(n, DType::F32, args.reps)?,
            "f16-via-f32" => f16_through_f32(n, args.reps)?,
            "gemm-f16" if args.threads == 1 => gemm_f16(n, args.reps)?,
            other => return Err(format!("unknown kind {other} at {} threads", args.threads).into()),
        };
        secs.sort_by(f64::total_cmp);
        let gflops = |s: f64| 2.0 * (n as f64).powi(3) / s / 1e9;
        println!(
            "{}\t{}\t{n}\t{:.2}\t{:.2}",
            args.kind,
            args.threads,
            gflops(secs[secs.len() / 2]),
            gflops(secs[secs.len() - 1])
        );
    }
    Ok(())
}
