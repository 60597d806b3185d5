//! The chains of the `overhead` example (`y = y * 1.0001 + 0.0001`, 2,000 recorded ops and
//! their `sum_all`), each phase in a function of its own, for counting instructions per
//! phase under callgrind. Wall-clock figures come from `overhead`; instruction counts do not
//! depend on the machine's load, so they show what a change removed even where the timing
//! noise of a shared machine hides it.
//!
//! ```sh
//! cargo build --release -p ember-autograd --example overhead_phase
//! for reps in 1 11; do
//!     valgrind --tool=callgrind --toggle-collect='*overhead_phase::forward*' \
//!         target/release/examples/overhead_phase 64 $reps
//! done
//! ```
//!
//! Arguments: the numel of the chain's values (default 1) and the number of repetitions
//! (default 11). The phases are `forward` (the recorded chain), `backward`, `teardown`
//! (dropping the graph) and `no_grad_forward`. The first repetition fills the thread's
//! caches of nodes, storage cells and blocks; the difference between the counts of 11 and
//! of 1 repetitions, divided by 20,000, is the steady cost of one op.

use ember_autograd::{Var, no_grad};
use ember_tensor::{DType, Error, Result, Tensor};

const STEPS: usize = 1000;

fn chain(x: &Var) -> Var {
    let mut y = x.clone();
    for _ in 0..STEPS {
        y = y.mul_scalar(1.0001).add_scalar(0.0001);
    }
    y
}

#[inline(never)]
fn forward(x: &Var) -> Var {
    chain(x).sum_all()
}

#[inline(never)]
fn backward(y: &Var) -> Result<()> {
    y.backward()
}

#[inline(never)]
fn teardown(y: Var) {
    drop(y);
}

#[inline(never)]
fn no_grad_forward(x: &Var) -> Var {
    no_grad(|| chain(x))
}

/// The `i`-th argument as a number, or `default` when it is absent.
fn arg(i: usize, default: usize) -> Result<usize> {
    match std::env::args().nth(i) {
        None => Ok(default),
        Some(s) => s.parse().map_err(|_| Error::invalid("overhead_phase", format!("'{s}' is not a count"))),
    }
}

fn main() -> Result<()> {
    ember_tensor::threading::set_num_threads(2)?;
    let (numel, reps) = (arg(1, 1)?, arg(2, 11)?);
    let x = Var::param(Tensor::ones([numel], DType::F32)?);
    for _ in 0..reps {
        let y = forward(&x);
        backward(&y)?;
        x.zero_grad();
        teardown(y);
        drop(no_grad_forward(&x));
    }
    Ok(())
}
