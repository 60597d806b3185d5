//! Very deep graphs: a chain of a million additions is built, backpropagated and dropped on
//! a thread with a 256 KiB stack. Recursion over the graph's depth in the backward engine
//! or in the nodes' destructors would overflow that stack (and abort the test process).

use ember_autograd::Var;
use ember_tensor::{DType, Result, Tensor};
use std::sync::mpsc;
use std::time::Duration;

/// Nodes in the chain.
const DEPTH: usize = 1_000_000;

/// A stack far smaller than the depth could ever fit a frame per node in.
const STACK: usize = 256 * 1024;

/// Runs `f` on a thread with a small stack and waits for it, failing after a generous
/// timeout rather than hanging the test run.
fn on_small_stack(f: impl FnOnce() -> Result<()> + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::Builder::new()
        .stack_size(STACK)
        .spawn(move || {
            let _ = tx.send(f());
        })
        .unwrap();
    let result = rx.recv_timeout(Duration::from_secs(600)).expect("the deep-graph thread did not finish");
    handle.join().unwrap();
    result.unwrap();
}

/// `x + x + ... + x` with `DEPTH` additions: each addition is one node holding the
/// previous one.
fn chain(x: &Var) -> Result<Var> {
    let mut y = x.clone();
    for _ in 0..DEPTH {
        y = y.add(x)?;
    }
    Ok(y)
}

#[test]
fn million_node_chain_backpropagates_and_drops_on_a_small_stack() {
    on_small_stack(|| {
        let x = Var::param(Tensor::ones([1], DType::F64)?);
        let y = chain(&x)?;
        y.sum_all().backward()?;
        // d/dx of (DEPTH + 1) x.
        assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![(DEPTH + 1) as f64]);
        drop(y);
        // A second graph dropped without a backward pass: its nodes still hold each other.
        let z = chain(&x)?;
        assert_eq!(z.value().to_vec::<f64>()?, vec![(DEPTH + 1) as f64]);
        drop(z);
        Ok(())
    });
}
