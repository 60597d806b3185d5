//! `Var` is `Send + Sync`: graphs built on one thread are differentiated on another, and
//! several threads may read and differentiate one shared graph.

use ember_autograd::Var;
use ember_tensor::{Result, Tensor};
use std::sync::Arc;

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn var_is_send_and_sync() {
    assert_send_sync::<Var>();
    assert_send_sync::<Arc<Var>>();
}

/// A graph recorded on the main thread is differentiated on a spawned one; the gradient
/// lands in the parameter that the main thread still holds.
#[test]
fn backward_on_another_thread() -> Result<()> {
    let w = Var::param(Tensor::from_vec(vec![0.5f64, -1.0], [2])?);
    let x = Var::new(Tensor::from_vec(vec![2.0f64, 3.0], [2])?);
    let loss = x.mul(&w)?.tanh().sum_all();
    let handle = std::thread::spawn(move || loss.backward());
    handle.join().expect("the backward thread does not panic")?;
    let g = w.grad().expect("a gradient").to_vec::<f64>()?;
    let expected = [2.0 * (1.0 - 1.0f64.tanh().powi(2)), 3.0 * (1.0 - 3.0f64.tanh().powi(2))];
    for (a, b) in g.iter().zip(expected) {
        assert!((a - b).abs() < 1e-12, "{g:?}");
    }
    Ok(())
}

/// Four threads each build a loss on a shared parameter and backpropagate at once: leaf
/// accumulation is serialised, so the sum is exact.
#[test]
fn concurrent_backward_calls_accumulate_into_one_parameter() -> Result<()> {
    let w = Var::param(Tensor::from_vec(vec![1.0f64, 2.0], [2])?);
    let threads: Vec<_> = (0..4)
        .map(|k| {
            let w = w.clone();
            std::thread::spawn(move || -> Result<()> {
                for _ in 0..25 {
                    w.mul_scalar(k as f64 + 1.0).sum_all().backward()?;
                }
                Ok(())
            })
        })
        .collect();
    for t in threads {
        t.join().expect("no thread panics")?;
    }
    // Each thread adds 25 * (k + 1) per element: 25 * (1 + 2 + 3 + 4) = 250.
    assert_eq!(w.grad().expect("a gradient").to_vec::<f64>()?, vec![250.0, 250.0]);
    Ok(())
}
