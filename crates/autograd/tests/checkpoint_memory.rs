//! Checkpointing every 4 layers of a 16-layer MLP cuts the step's peak memory above the
//! resident parameters and gradients (that is, its activation memory). The plain step holds
//! one activation per layer (values no backward reads are released), so the cut is about a
//! fifth (2,621,440 to 2,097,152 bytes here).
//! Alone in its file, since it reads the process-wide storage counters; the full-size
//! numbers come from `cargo run --release -p ember-autograd --example checkpoint_memory`.

use ember_autograd::Var;
use ember_tensor::storage::{memory_stats, reset_peak};
use ember_tensor::{Result, Tensor};

struct Mlp {
    ws: Vec<Var>,
    bs: Vec<Var>,
}

/// Layers `from..to`: `relu(h @ W + b)` each.
fn segment(ws: &[Var], bs: &[Var], h: &Var) -> Result<Var> {
    let mut h = h.clone();
    for (w, b) in ws.iter().zip(bs) {
        h = h.matmul(w)?.add(b)?.relu();
    }
    Ok(h)
}

impl Mlp {
    fn forward(&self, x: &Var, every: Option<usize>) -> Result<Var> {
        let Some(k) = every else { return segment(&self.ws, &self.bs, x) };
        let mut h = x.clone();
        for start in (0..self.ws.len()).step_by(k) {
            let end = (start + k).min(self.ws.len());
            let (ws, bs) = (self.ws[start..end].to_vec(), self.bs[start..end].to_vec());
            h = h.checkpoint(move |h| segment(&ws, &bs, h))?;
        }
        Ok(h)
    }

    /// One forward and backward; returns the peak bytes above what was live before it
    /// (parameters, and gradients kept from the previous step and zeroed in place).
    fn step_peak(&self, x: &Var, every: Option<usize>) -> Result<usize> {
        for p in self.ws.iter().chain(&self.bs) {
            if let Some(g) = p.grad() {
                g.zero_()?;
            }
        }
        let base = memory_stats().live_bytes;
        reset_peak();
        self.forward(x, every)?.mean_all().backward()?;
        Ok(memory_stats().peak_bytes - base)
    }
}

#[test]
fn checkpointing_cuts_activation_memory() -> Result<()> {
    let _rng = ember_testing::gradcheck::seed_guard(0);
    let (depth, width, batch) = (16usize, 256usize, 128usize);
    let mlp = Mlp {
        ws: (0..depth)
            .map(|_| Tensor::randn([width, width]).map(|t| Var::param(t.mul_scalar(0.06))))
            .collect::<Result<_>>()?,
        bs: (0..depth)
            .map(|_| Tensor::zeros([width], ember_tensor::DType::F32).map(Var::param))
            .collect::<Result<_>>()?,
    };
    let x = Var::new(Tensor::randn([batch, width])?);
    // A first step allocates the gradients, which later steps accumulate into in place.
    mlp.step_peak(&x, None)?;
    let plain = mlp.step_peak(&x, None)?;
    let checkpointed = mlp.step_peak(&x, Some(4))?;
    let activation = batch * width * 4;
    // Plain: one activation per layer (the relu's output, which its backward and the next
    // product read) is alive when backward starts; the product's and the bias's outputs,
    // which no backward reads, were released as the forward went.
    assert!(plain >= depth * activation, "plain step peak {plain} bytes");
    assert!(
        (checkpointed as f64) < 0.9 * plain as f64,
        "checkpointed step peak {checkpointed} bytes, plain {plain} bytes"
    );
    Ok(())
}
