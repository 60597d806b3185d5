//! Saved-tensor hooks that pack to a smaller dtype reduce the memory a forward keeps for
//! backward: values only the graph holds are dropped in favour of their packed copies, and
//! backward unpacks them instead of recomputing them. Alone in its file, since it reads the
//! process-wide storage counters.

use ember_autograd::{Var, saved_tensors_hooks};
use ember_tensor::storage::{memory_stats, reset_peak};
use ember_tensor::{DType, Result, Tensor};

const BATCH: usize = 256;
const WIDTH: usize = 32;
const DEPTH: usize = 16;

/// `sin(h @ w)` per layer: matmul saves its input, sin its input, so every activation is
/// saved exactly once.
fn forward(x: &Var, ws: &[Var]) -> Result<Var> {
    let mut h = x.clone();
    for w in ws {
        h = h.matmul(w)?.sin();
    }
    Ok(h.mean_all())
}

/// Bytes live after the forward, the peak above the starting point during backward, and
/// the weights' gradients.
fn step(x: &Var, ws: &[Var], hooked: bool) -> Result<(usize, usize, Vec<Vec<f64>>)> {
    for w in ws {
        w.zero_grad();
    }
    let base = memory_stats().live_bytes;
    let loss = if hooked {
        saved_tensors_hooks(
            |t: &Tensor| t.to_dtype(DType::F32),
            |p: &Tensor| Ok(p.to_dtype(DType::F64)),
            || forward(x, ws),
        )?
    } else {
        forward(x, ws)?
    };
    let kept = memory_stats().live_bytes - base;
    reset_peak();
    loss.backward()?;
    let peak = memory_stats().peak_bytes - base;
    let grads = ws.iter().map(|w| w.grad().expect("a gradient").to_vec::<f64>()).collect::<Result<_>>()?;
    Ok((kept, peak, grads))
}

#[test]
fn packing_to_f32_halves_what_the_forward_keeps_and_gradients_stay_right() -> Result<()> {
    ember_tensor::manual_seed(7);
    let x = Var::new(Tensor::randn([BATCH, WIDTH])?.to_dtype(DType::F64));
    let ws: Vec<Var> = (0..DEPTH)
        .map(|_| Tensor::randn([WIDTH, WIDTH]).map(|t| Var::param(t.to_dtype(DType::F64).mul_scalar(0.3))))
        .collect::<Result<_>>()?;
    // A first step allocates the gradients.
    step(&x, &ws, false)?;
    let (plain_kept, plain_peak, plain_grads) = step(&x, &ws, false)?;
    let (hooked_kept, hooked_peak, hooked_grads) = step(&x, &ws, true)?;

    let activation = BATCH * WIDTH * 8;
    // Without hooks each layer keeps its matmul and sin outputs, but for the last sin's,
    // which only the mean reads (and its backward does not): that one is released.
    assert!(plain_kept >= (2 * DEPTH - 1) * activation, "plain forward keeps {plain_kept} bytes");
    // With them, half-size copies of the same (and of the weights, which as leaves stay).
    assert!(
        (hooked_kept as f64) < 0.6 * plain_kept as f64,
        "hooked forward keeps {hooked_kept} bytes, plain {plain_kept}"
    );
    // Backward unpacks what it reads instead of recomputing the dropped values up front.
    assert!(
        (hooked_peak as f64) < 0.8 * plain_peak as f64,
        "hooked backward peaks at {hooked_peak} bytes, plain at {plain_peak}"
    );
    // The gradients went through f32 copies: close, not equal.
    for (p, h) in plain_grads.iter().zip(&hooked_grads) {
        for (a, b) in p.iter().zip(h) {
            assert!((a - b).abs() <= 1e-5 * (1.0 + a.abs()), "{a} vs {b}");
        }
    }
    Ok(())
}
