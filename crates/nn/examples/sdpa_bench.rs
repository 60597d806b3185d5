//! Scaled dot-product attention speed and memory: forward + backward of `[B, H, L, E]`
//! queries, keys and values (f32 or bf16, E = 64 unless given, self-attention L = S) at 2
//! threads, either on the
//! blocked kernel (`kernel`, what `scaled_dot_product_attention` uses) or the plain
//! composition (`composed`). The counterpart of tools/bench/sdpa_torch.py;
//! tools/bench/sdpa_compare.sh runs both, one process per measurement so that each peak
//! RSS belongs to one configuration.
//!
//! Prints one line, the median of repeated runs in milliseconds:
//!
//!     path=kernel b=4 h=8 l=2048 forward_backward_ms=...
//!
//! Run: `cargo run --release -p ember-nn --example sdpa_bench -- kernel 4 8 2048 [reps]
//! [f32|bf16] [E]` (the Transformer bench's attention under bf16 autocast is
//! `kernel 32 4 64 50 bf16 32`).

use ember_autograd::Var;
use ember_nn::functional::{SdpaArgs, scaled_dot_product_attention};
use ember_tensor::{Attention, DType, Error, Result, Tensor, manual_seed};
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn arg(args: &[String], i: usize, default: usize) -> Result<usize> {
    match args.get(i) {
        None => Ok(default),
        Some(s) => s.parse().map_err(|_| Error::invalid("sdpa_bench", format!("expected a number, got {s}"))),
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).cloned().unwrap_or_else(|| "kernel".into());
    let (b, h, l) = (arg(&args, 2, 1)?, arg(&args, 3, 4)?, arg(&args, 4, 512)?);
    let reps = arg(&args, 5, 5)?;
    let dtype = match args.get(6).map(String::as_str) {
        None | Some("f32") => DType::F32,
        Some("bf16") => DType::BF16,
        Some(other) => return Err(Error::invalid("sdpa_bench", format!("expected f32 or bf16, got {other}"))),
    };
    let e = arg(&args, 7, 64)?;
    ember_tensor::threading::set_num_threads(2)?;
    manual_seed(0);
    let [q, k, v] = [0; 3].map(|_| Tensor::randn([b, h, l, e]).map(|t| Var::param(t.to_dtype(dtype))));
    let (q, k, v) = (q?, k?, v?);
    let gy = Tensor::randn([b, h, l, e])?.to_dtype(dtype);
    let spec = Attention { scale: Attention::default_scale(e), causal: false };
    let mut times = vec![];
    for rep in 0..reps + 1 {
        let start = Instant::now();
        let y = match path.as_str() {
            "kernel" => scaled_dot_product_attention(&q, &k, &v, &SdpaArgs::default())?,
            "composed" => q.attention_composed(&k, &v, None, &spec)?,
            other => return Err(Error::invalid("sdpa_bench", format!("unknown path {other}"))),
        };
        y.backward_with(Some(&gy), false)?;
        let done = start.elapsed().as_secs_f64();
        for x in [&q, &k, &v] {
            x.zero_grad();
        }
        // The first run warms up the allocator and the threads.
        if rep > 0 {
            times.push(done);
        }
    }
    println!("path={path} b={b} h={h} l={l} forward_backward_ms={:.3}", median(times) * 1e3);
    Ok(())
}
