//! Times the three convolution kernels of LeNet-5's two layers on their own: the forward
//! pass, the weight gradient and the input gradient (the transposed convolution), as the
//! median over 30 calls of the calling thread's CPU time, in ms. CPU time rather than wall
//! time, so that other work on a shared machine distorts the figures less; run with one
//! thread for the same reason (`EMBER_CONV_DIRECT=0` selects the `gemm` path on the same
//! build).
//!
//! `cargo run --release -p ember-tensor --example conv_kernels -- [BATCH] [THREADS]`
//! (defaults 256 and 1).
use ember_tensor::ops::conv::{ConvGeometry, SlidingWindow};
use ember_tensor::{Error, Result, Tensor};

/// The calling thread's CPU time in seconds.
fn cpu_seconds() -> Result<f64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec for the call to write.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Err(Error::invalid("conv_kernels", "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed"));
    }
    Ok(ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9)
}

/// The median CPU time of `f` over 30 calls, in ms.
fn time(mut f: impl FnMut() -> Result<Tensor>) -> Result<f64> {
    let mut v = Vec::with_capacity(30);
    for _ in 0..30 {
        let start = cpu_seconds()?;
        drop(f()?);
        v.push(cpu_seconds()? - start);
    }
    v.sort_by(f64::total_cmp);
    Ok(v[v.len() / 2] * 1e3)
}

fn main() -> Result<()> {
    let arg = |i: usize, default: usize| std::env::args().nth(i).and_then(|s| s.parse().ok()).unwrap_or(default);
    let (batch, threads) = (arg(1, 256), arg(2, 1));
    ember_tensor::threading::set_num_threads(threads)?;
    ember_tensor::manual_seed(0);
    for (c, o, hw) in [(1usize, 6usize, 28usize), (6, 16, 12)] {
        let out = hw - 4;
        let window = SlidingWindow {
            input: [hw, hw],
            output: [out, out],
            kernel: [5, 5],
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
        };
        let g = ConvGeometry { in_channels: c, out_channels: o, groups: 1, window };
        let x = Tensor::randn([batch, c, hw, hw])?;
        let w = Tensor::randn([o, c, 5, 5])?;
        let gy = Tensor::randn([batch, o, out, out])?;
        let forward = time(|| x.conv2d_resolved(&w, None, &g))?;
        let weight_grad = time(|| x.conv2d_weight_grad(&gy, &g))?;
        let input_grad = time(|| gy.conv_transpose2d_resolved(&w, None, &g))?;
        println!(
            "conv {c}->{o} 5x5 on {hw}x{hw} batch={batch} threads={threads}: forward_ms={forward:.3} weight_grad_ms={weight_grad:.3} input_grad_ms={input_grad:.3}"
        );
    }
    Ok(())
}
