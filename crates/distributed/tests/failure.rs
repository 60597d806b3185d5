//! A rank that fails, panics or leaves makes the others' collectives fail promptly with an
//! error naming it, instead of hanging.

use ember_distributed::{LocalGroup, ProcessGroup, ReduceOp};
use ember_tensor::{DType, Error, Result, Tensor};
use std::time::{Duration, Instant};

/// Far longer than any collective here needs: the failures must come from the departure,
/// long before it.
const TIMEOUT: Duration = Duration::from_secs(120);

#[test]
fn a_rank_that_returns_an_error_fails_the_others_collectives() {
    let start = Instant::now();
    let out = LocalGroup::spawn_with_timeout(3, TIMEOUT, |g| {
        if g.rank() == 1 {
            return Err(Error::invalid("train", "rank 1 ran out of data"));
        }
        let t = Tensor::ones([4], DType::F32)?;
        g.all_reduce(&t, ReduceOp::Sum)
    });
    assert!(start.elapsed() < TIMEOUT / 2, "the failure was noticed by departure, not timeout");
    assert!(out[1].as_ref().unwrap_err().to_string().contains("ran out of data"));
    for r in [0, 2] {
        let e = out[r].as_ref().expect_err("rank 1 never joined").to_string();
        assert!(e.contains("rank 1 left the group"), "{e}");
        assert!(e.contains("all_reduce"), "{e}");
    }
}

#[test]
fn a_rank_that_panics_fails_the_others_and_is_reported() {
    let out = LocalGroup::spawn_with_timeout(2, TIMEOUT, |g| {
        let t = Tensor::ones([2], DType::F64)?;
        g.all_reduce(&t, ReduceOp::Sum)?;
        if g.rank() == 0 {
            panic!("boom");
        }
        g.barrier()
    });
    let e0 = out[0].as_ref().unwrap_err().to_string();
    assert!(e0.contains("rank 0 panicked: boom"), "{e0}");
    let e1 = out[1].as_ref().unwrap_err().to_string();
    assert!(e1.contains("barrier") && e1.contains("rank 0 left the group"), "{e1}");
}

#[test]
fn a_broken_group_fails_later_collectives_at_once() {
    let out = LocalGroup::spawn_with_timeout(2, TIMEOUT, |g| -> Result<()> {
        if g.rank() == 1 {
            return Ok(()); // leaves early
        }
        let t = Tensor::ones([2], DType::F32)?;
        let first = g.all_reduce(&t, ReduceOp::Sum).expect_err("rank 1 left").to_string();
        let second = g.barrier().expect_err("the group is broken").to_string();
        assert!(first.contains("rank 1 left"), "{first}");
        assert!(second.contains("the group is broken") && second.contains("rank 1 left"), "{second}");
        Ok(())
    });
    out.into_iter().for_each(|r| r.expect("the assertions ran"));
}

#[test]
fn a_rank_that_never_arrives_times_out_with_the_missing_rank() {
    let timeout = Duration::from_millis(300);
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let rx = parking_lot::Mutex::new(rx);
    let out = LocalGroup::spawn_with_timeout(2, timeout, |g| {
        if g.rank() == 1 {
            // Alive but stuck elsewhere until rank 0 gave up.
            let _ = rx.lock().recv();
            return Ok(());
        }
        let res = g.all_reduce(&Tensor::ones([1], DType::F32)?, ReduceOp::Sum);
        let _ = tx.send(());
        res
    });
    let e = out[0].as_ref().expect_err("timed out").to_string();
    assert!(e.contains("timed out") && e.contains("[1]"), "{e}");
}

#[test]
fn a_rank_that_fails_before_backward_fails_the_others_backward() {
    use ember_autograd::Var;
    use ember_distributed::DistributedDataParallel;
    use ember_nn::{Linear, Module};
    use std::sync::Arc;
    let out = LocalGroup::spawn_with_timeout(2, TIMEOUT, |g| {
        let rank = g.rank();
        let ddp = DistributedDataParallel::new(Linear::new(4, 2)?, Arc::new(g))?;
        let loss = ddp.forward(&Var::new(Tensor::ones([3, 4], DType::F32)?))?.sum_all();
        if rank == 1 {
            return Err(Error::invalid("train", "rank 1 hit a bad batch"));
        }
        loss.backward()
    });
    let e = out[0].as_ref().expect_err("rank 1 never reduced").to_string();
    assert!(e.contains("all_reduce") && e.contains("rank 1 left the group"), "{e}");
}
