//! Times the three matrix products of a Linear layer's training step with the operand
//! layouts the layer really passes, on a given number of threads (2 by default):
//!
//! - `forward`: `x @ w^T`, `[tokens, in] @ [in, out]` with `w^T` a transposed view of the
//!   row-major `[out, in]` weight;
//! - `input`: the input gradient `g @ w`, `[tokens, out] @ [out, in]`, both row-major;
//! - `weight`: the weight gradient `g^T @ x`, `[out, tokens] @ [tokens, in]` with `g^T` a
//!   transposed view of the row-major `[tokens, out]` output gradient.
//!
//! ```text
//! cargo run --release -p ember-tensor --example linear_products -- --threads 2 --reps 11
//! ```
//!
//! The default shapes are the Transformer's at d_model 256 (in-projection 256 -> 768, output
//! projection 256 -> 256, feed-forward 256 -> 1024 and 1024 -> 256) over 2048 and 16384
//! tokens (`--tokens`, `--layers in:out,...` change them). Prints one tab-separated line per
//! product: `ember  threads  product  tokens  in  out  median GFLOP/s  GFLOP per CPU-s`,
//! over `--reps` timed products after one untimed one; *GFLOP per CPU-s* is the work over
//! the process's user and system time (`getrusage`), which a busy machine changes far less
//! than the wall time.

use ember_tensor::{Result, Tensor, threading};
use std::time::Instant;
#[path = "bench_util/mod.rs"]
mod bench_util;
use bench_util::{median, process_cpu};

struct Args {
    threads: usize,
    tokens: Vec<usize>,
    layers: Vec<(usize, usize)>,
    reps: usize,
}

fn parse() -> std::result::Result<Args, String> {
    let mut args = Args {
        threads: 2,
        tokens: vec![2048, 16384],
        layers: vec![(256, 768), (256, 256), (256, 1024), (1024, 256)],
        reps: 11,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let number = |v: &str| v.trim().parse::<usize>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--threads" => args.threads = number(&value)?.max(1),
            "--reps" => args.reps = number(&value)?.max(1),
            "--tokens" => args.tokens = value.split(',').map(number).collect::<std::result::Result<_, _>>()?,
            "--layers" => {
                args.layers = value
                    .split(',')
                    .map(|pair| {
                        let (i, o) = pair.split_once(':').ok_or(format!("{flag} {pair}: want in:out"))?;
                        Ok((number(i)?, number(o)?))
                    })
                    .collect::<std::result::Result<_, String>>()?
            }
            _ => {
                return Err(format!(
                    "unknown flag {flag} (flags: --threads N, --tokens N,..., --layers IN:OUT,..., --reps N)"
                ));
            }
        }
    }
    Ok(args)
}

/// One of the timed products, over tensors made beforehand.
type Product<'a> = Box<dyn Fn() -> Result<Tensor> + 'a>;

/// (median GFLOP/s, GFLOP per CPU-second) of `reps` runs of `product` after one untimed.
fn time(flops: f64, reps: usize, product: impl Fn() -> Result<Tensor>) -> Result<(f64, f64)> {
    product()?;
    let cpu0 = process_cpu();
    let mut gflops = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        product()?;
        gflops.push(flops / t.elapsed().as_secs_f64() / 1e9);
    }
    let cpu = process_cpu() - cpu0;
    Ok((median(gflops), flops * reps as f64 / cpu / 1e9))
}

fn main() -> Result<()> {
    let args = parse().map_err(|e| ember_tensor::Error::invalid("linear_products", e))?;
    threading::set_num_threads(args.threads)?;
    for &tokens in &args.tokens {
        for &(inn, out) in &args.layers {
            let x = Tensor::randn([tokens, inn])?;
            let w = Tensor::randn([out, inn])?;
            let g = Tensor::randn([tokens, out])?;
            let flops = 2.0 * (tokens * inn * out) as f64;
            let products: [(&str, Product); 3] = [
                ("forward", Box::new(|| x.matmul(&w.t()?))),
                ("input", Box::new(|| g.matmul(&w))),
                ("weight", Box::new(|| g.t()?.matmul(&x))),
            ];
            for (name, product) in products {
                let (gflops, per_cpu) = time(flops, args.reps, product)?;
                println!("ember\t{}\t{name}\t{tokens}\t{inn}\t{out}\t{gflops:.2}\t{per_cpu:.2}", args.threads);
            }
        }
    }
    Ok(())
}
