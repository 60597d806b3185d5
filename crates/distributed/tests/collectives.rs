//! Every collective of `LocalGroup`, blocking and non-blocking, in f32 and f64, and the
//! errors for ranks that disagree.

use ember_distributed::{LocalGroup, ProcessGroup, ReduceOp};
use ember_tensor::{DType, Result, Tensor};

/// Runs `f` on `n` ranks and returns their results, failing on the first error.
fn on_ranks<R: Send>(n: usize, f: impl Fn(LocalGroup) -> Result<R> + Sync) -> Vec<R> {
    LocalGroup::spawn(n, f)
        .into_iter()
        .enumerate()
        .map(|(r, x)| x.unwrap_or_else(|e| panic!("rank {r}: {e}")))
        .collect()
}

#[test]
fn all_reduce_sums_averages_and_finds_extremes() {
    let out = on_ranks(3, |g| {
        let r = g.rank() as f64;
        let mut res = Vec::new();
        for op in [ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min] {
            let t = Tensor::from_vec(vec![r, -r, 2.0 * r, 1.0], [2, 2])?;
            g.all_reduce(&t, op)?;
            res.push(t.to_vec::<f64>()?);
        }
        Ok(res)
    });
    for ranks in &out {
        assert_eq!(ranks[0], vec![3.0, -3.0, 6.0, 3.0]);
        assert_eq!(ranks[1], vec![1.0, -1.0, 2.0, 1.0]);
        assert_eq!(ranks[2], vec![2.0, 0.0, 4.0, 1.0]);
        assert_eq!(ranks[3], vec![0.0, -2.0, 0.0, 1.0]);
    }
}

#[test]
fn all_reduce_in_f32_keeps_the_dtype() {
    let out = on_ranks(2, |g| {
        let t = Tensor::from_vec(vec![0.5f32 + g.rank() as f32; 4], [4])?;
        g.all_reduce(&t, ReduceOp::Avg)?;
        assert_eq!(t.dtype(), DType::F32);
        t.to_vec::<f32>()
    });
    assert_eq!(out, vec![vec![1.0f32; 4]; 2]);
}

#[test]
fn integer_tensors_reduce_and_broadcast() {
    let out = on_ranks(2, |g| {
        let t = Tensor::from_vec(vec![g.rank() as i64 + 1, 7], [2])?;
        g.all_reduce(&t, ReduceOp::Sum)?;
        let b = Tensor::from_vec(vec![g.rank() as i64], [1])?;
        g.broadcast(&b, 1)?;
        Ok((t.to_vec::<i64>()?, b.to_vec::<i64>()?))
    });
    assert_eq!(out, vec![(vec![3, 14], vec![1]); 2]);
}

#[test]
fn broadcast_copies_the_root_tensor() {
    let out = on_ranks(3, |g| {
        let t = Tensor::from_vec(vec![g.rank() as f32 * 10.0, 1.0], [2])?;
        g.broadcast(&t, 2)?;
        t.to_vec::<f32>()
    });
    assert_eq!(out, vec![vec![20.0f32, 1.0]; 3]);
}

#[test]
fn all_gather_returns_every_rank_tensor_in_rank_order() {
    let out = on_ranks(3, |g| {
        let t = Tensor::from_vec(vec![g.rank() as f64; 2], [1, 2])?;
        let all = g.all_gather(&t)?;
        assert!(all.iter().all(|t| t.shape().dims() == [1, 2]));
        all.iter().map(|t| t.to_vec::<f64>()).collect::<Result<Vec<_>>>()
    });
    for ranks in out {
        assert_eq!(ranks, vec![vec![0.0, 0.0], vec![1.0, 1.0], vec![2.0, 2.0]]);
    }
}

#[test]
fn reduce_scatter_gives_each_rank_its_reduced_chunk() {
    let out = on_ranks(2, |g| {
        let r = g.rank() as f32;
        // Rank r sends [r, r] to rank 0 and [10 + r, 10 + r] to rank 1.
        let inputs = vec![Tensor::from_vec(vec![r; 2], [2])?, Tensor::from_vec(vec![10.0 + r; 2], [2])?];
        let sum = g.reduce_scatter(&inputs, ReduceOp::Sum)?.to_vec::<f32>()?;
        let max = g.reduce_scatter(&inputs, ReduceOp::Max)?.to_vec::<f32>()?;
        Ok((sum, max))
    });
    assert_eq!(out[0], (vec![1.0, 1.0], vec![1.0, 1.0]));
    assert_eq!(out[1], (vec![21.0, 21.0], vec![11.0, 11.0]));
}

#[test]
fn non_blocking_collectives_complete_in_issue_order() {
    let out = on_ranks(2, |g| {
        let a = Tensor::from_vec(vec![1.0f64 + g.rank() as f64], [1])?;
        let b = Tensor::from_vec(vec![g.rank() as f64], [1])?;
        let wa = g.all_reduce_async(&a, ReduceOp::Sum)?;
        let wb = g.broadcast_async(&b, 1)?;
        let c = Tensor::from_vec(vec![10.0 * g.rank() as f64], [1])?;
        let wc = g.all_gather_async(&c)?;
        let wd = g.barrier_async()?;
        // Waiting out of order is fine: they ran in issue order.
        wd.wait()?;
        let gathered = wc.wait()?;
        wb.wait()?;
        let (r, took) = wa.wait_timed();
        r?;
        assert!(took.as_secs() < 60);
        Ok((a.to_vec::<f64>()?, b.to_vec::<f64>()?, gathered[1].to_vec::<f64>()?))
    });
    assert_eq!(out, vec![(vec![3.0], vec![1.0], vec![10.0]); 2]);
}

#[test]
fn sub_groups_reduce_over_their_members_only() {
    let out = on_ranks(4, |g| {
        let odd = g.new_group(&[3, 1])?;
        let even = g.new_group(&[0, 2])?;
        let mine = if g.rank() % 2 == 1 { odd } else { even };
        let sub = mine.expect("every rank is in one of the two groups");
        let t = Tensor::from_vec(vec![g.rank() as f32], [1])?;
        sub.all_reduce(&t, ReduceOp::Sum)?;
        Ok((sub.rank(), sub.world_size(), t.to_vec::<f32>()?[0]))
    });
    // The order of the list sets the ranks: rank 3 is rank 0 of [3, 1].
    assert_eq!(out, vec![(0, 2, 2.0), (1, 2, 4.0), (1, 2, 2.0), (0, 2, 4.0)]);
}

#[test]
fn mismatched_shapes_are_an_error_on_every_rank_naming_both() {
    let out = LocalGroup::spawn(2, |g| {
        let t = Tensor::zeros([2 + g.rank()], DType::F32)?;
        g.all_reduce(&t, ReduceOp::Sum)
    });
    for (rank, r) in out.into_iter().enumerate() {
        let e = r.expect_err("shapes differ").to_string();
        assert!(e.starts_with("all_reduce:"), "{e}");
        assert!(e.contains(&format!("rank {rank} of 2")), "{e}");
        assert!(e.contains("shape [2]") && e.contains("shape [3]"), "{e}");
    }
}

#[test]
fn mismatched_dtypes_and_collectives_are_errors() {
    let out = LocalGroup::spawn(2, |g| {
        let dtype = if g.rank() == 0 { DType::F32 } else { DType::F64 };
        let e = g.broadcast(&Tensor::zeros([2], dtype)?, 0).expect_err("dtypes differ").to_string();
        assert!(e.contains("f32") && e.contains("f64"), "{e}");
        Ok(())
    });
    out.into_iter().for_each(|r| r.expect("both ranks saw the error"));
    let out = LocalGroup::spawn(2, |g| {
        let t = Tensor::zeros([2], DType::F32)?;
        if g.rank() == 0 { g.all_reduce(&t, ReduceOp::Sum) } else { g.broadcast(&t, 0) }
    });
    for r in out {
        let e = r.expect_err("collectives differ").to_string();
        assert!(e.contains("rank 0 runs all_reduce") && e.contains("rank 1 runs broadcast"), "{e}");
    }
}

#[test]
fn bad_arguments_are_refused_before_anything_is_sent() {
    let out = on_ranks(2, |g| {
        let t = Tensor::zeros([2], DType::F32)?;
        let root = g.broadcast(&t, 5).expect_err("root out of range").to_string();
        let bytes = g.all_reduce(&Tensor::zeros([2], DType::U8)?, ReduceOp::Sum).expect_err("u8").to_string();
        let avg = g.all_reduce(&Tensor::zeros([2], DType::I64)?, ReduceOp::Avg).expect_err("i64 avg").to_string();
        let count =
            g.reduce_scatter(std::slice::from_ref(&t), ReduceOp::Sum).expect_err("one input for two ranks").to_string();
        let ranks = g.new_group(&[0, 0]).expect_err("repeated rank").to_string();
        // The group still works: nothing was sent.
        g.all_reduce(&t, ReduceOp::Sum)?;
        Ok((root, bytes, avg, count, ranks))
    });
    let (root, bytes, avg, count, ranks) = &out[0];
    assert!(root.contains("root 5 is not a rank of a group of 2"), "{root}");
    assert!(bytes.contains("f32, f64, f16, bf16 or i64") && bytes.contains("u8"), "{bytes}");
    assert!(avg.contains("avg needs a float tensor, got i64"), "{avg}");
    assert!(count.contains("one input per rank (2), got 1"), "{count}");
    assert!(ranks.contains("distinct"), "{ranks}");
}
