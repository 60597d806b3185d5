//! A 20-layer MLP step keeps only the activations a backward reads (a product's output
//! that only feeds a relu goes as soon as its handle drops), and not those after backward:
//! intermediate values no handle holds are freed as backward passes them. Alone in its file, since it
//! reads the process-wide storage counters.

use ember_autograd::Var;
use ember_tensor::storage::memory_stats;
use ember_tensor::{Result, Tensor};

#[test]
fn backward_frees_unheld_activations() -> Result<()> {
    let (batch, width, depth) = (64usize, 256usize, 20usize);
    let layers: Vec<Var> = (0..depth).map(|_| Var::param(Tensor::randn([width, width]).unwrap())).collect();
    let x = Var::new(Tensor::randn([batch, width])?);
    let base = memory_stats().live_bytes;
    let mut h = x.clone();
    for w in &layers {
        h = h.matmul(w)?.relu();
    }
    let loss = h.sum_all();
    drop(h);
    let activation = batch * width * 4;
    let after_forward = memory_stats().live_bytes - base;
    // Each layer keeps its relu output, which relu's backward and the next product's read;
    // its product's output, which no backward reads, went when its last handle dropped.
    assert!(
        (depth * activation..(depth + 1) * activation).contains(&after_forward),
        "forward holds {after_forward} bytes; the relu outputs take {}",
        depth * activation
    );

    loss.backward()?;
    let grads = depth * width * width * 4;
    let after_backward = memory_stats().live_bytes - base;
    assert!(
        after_backward <= grads + 4 * activation,
        "after backward {after_backward} bytes are live; gradients take {grads}, activations {}",
        depth * 2 * activation
    );
    Ok(())
}
