//! f16 and bf16 tensors through every collective of `LocalGroup` on 2 ranks, and
//! DistributedDataParallel on a bf16 model: values reduce in f32 and round once into the
//! tensor's dtype, which they keep.

use ember_autograd::Var;
use ember_distributed::{DistributedDataParallel, LocalGroup, ProcessGroup, ReduceOp};
use ember_nn::{Linear, LinearOptions, Module, StateDict};
use ember_tensor::{DType, Result, Tensor, bf16, f16};
use std::sync::Arc;

/// Runs `f` on `n` ranks and returns their results, failing on the first error.
fn on_ranks<R: Send>(n: usize, f: impl Fn(LocalGroup) -> Result<R> + Sync) -> Vec<R> {
    LocalGroup::spawn(n, f)
        .into_iter()
        .enumerate()
        .map(|(r, x)| x.unwrap_or_else(|e| panic!("rank {r}: {e}")))
        .collect()
}

fn h(v: f32) -> f16 {
    f16::from_f32(v)
}

fn b(v: f32) -> bf16 {
    bf16::from_f32(v)
}

#[test]
fn half_all_reduce_sums_in_f32_and_rounds_once() {
    let out = on_ranks(2, |g| {
        let r = g.rank() as f32;
        // 60000 twice: the f16 sum overflows (to inf, as a 16-bit sum would), but the
        // average of the f32 sum is 60000 again. 1 + 3 * 2^-9 is no bf16: the bf16 sum of
        // rank 0's 1 and rank 1's 3 * 2^-9 rounds once, to 1 + 2^-7.
        let x = Tensor::from_vec(vec![h(60000.0), h(-1.5 * (r + 1.0)), h(0.1)], [3])?;
        let sum = x.copy();
        g.all_reduce(&sum, ReduceOp::Sum)?;
        g.all_reduce(&x, ReduceOp::Avg)?;
        let y = Tensor::from_vec(vec![b(if r == 0.0 { 1.0 } else { 3.0 * 2f32.powi(-9) }), b(r - 4.0)], [2])?;
        let (max, min) = (y.copy(), y.copy());
        g.all_reduce(&y, ReduceOp::Sum)?;
        g.all_reduce(&max, ReduceOp::Max)?;
        g.all_reduce(&min, ReduceOp::Min)?;
        assert!([&x, &sum].iter().all(|t| t.dtype() == DType::F16));
        assert!([&y, &max, &min].iter().all(|t| t.dtype() == DType::BF16));
        Ok((
            x.to_vec::<f16>()?,
            sum.to_vec::<f16>()?,
            y.to_vec::<bf16>()?,
            max.to_vec::<bf16>()?,
            min.to_vec::<bf16>()?,
        ))
    });
    for (avg, sum, y, max, min) in out {
        assert_eq!(avg, vec![h(60000.0), h(-2.25), h(0.1)]);
        assert!(sum[0].is_infinite());
        assert_eq!(&sum[1..], &[h(-4.5), h(2.0 * h(0.1).to_f32())]);
        assert_eq!(y, vec![b(1.0 + 2f32.powi(-7)), b(-7.0)]);
        assert_eq!((max, min), (vec![b(1.0), b(-3.0)], vec![b(3.0 * 2f32.powi(-9)), b(-4.0)]));
    }
}

#[test]
fn half_broadcast_all_gather_and_reduce_scatter_keep_dtype_and_bits() {
    let out = on_ranks(2, |g| {
        let r = g.rank() as f32;
        let t = Tensor::from_vec(vec![b(r + 0.1), b(-1e-38 * (r + 1.0)), b(f32::INFINITY)], [3])?;
        g.broadcast(&t, 1)?;
        let gathered = g.all_gather(&Tensor::from_vec(vec![h(r * 1e-7), h(-r)], [1, 2])?)?;
        let chunks =
            [Tensor::from_vec(vec![h(r), h(0.5)], [2])?, Tensor::from_vec(vec![h(10.0 * r), h(65504.0)], [2])?];
        let mine = g.reduce_scatter(&chunks, ReduceOp::Avg)?;
        assert!(gathered.iter().chain([&mine]).all(|t| t.dtype() == DType::F16));
        let gathered = gathered.iter().map(|t| t.to_vec::<f16>()).collect::<Result<Vec<_>>>()?;
        Ok((g.rank(), t.to_vec::<bf16>()?, gathered, mine.to_vec::<f16>()?))
    });
    for (rank, t, gathered, mine) in out {
        assert_eq!(t, vec![b(1.1), b(-2e-38), b(f32::INFINITY)]);
        assert_eq!(gathered, vec![vec![h(0.0), h(-0.0)], vec![h(1e-7), h(-1.0)]]);
        let want = if rank == 0 { vec![h(0.5), h(0.5)] } else { vec![h(5.0), h(65504.0)] };
        assert_eq!(mine, want, "rank {rank}");
    }
}

/// A bf16 linear layer's state, the same on every rank.
fn init() -> Result<StateDict> {
    let w: Vec<f32> = (0..18).map(|k| ((k * 37 % 19) as f32 - 9.0) / 13.0).collect();
    let mut sd = StateDict::new();
    sd.insert("weight", Tensor::from_vec(w, [3, 6])?.to_dtype(DType::BF16));
    sd.insert("bias", Tensor::from_vec(vec![0.25f32, -0.5, 0.125], [3])?.to_dtype(DType::BF16));
    Ok(sd)
}

fn layer() -> Result<Linear> {
    let l = Linear::with_options(6, 3, LinearOptions { bias: true, dtype: DType::BF16 })?;
    l.load_state_dict(&init()?)?;
    Ok(l)
}

/// Rank `rank`'s loss on its own batch.
fn loss(model: &dyn Module, rank: usize) -> Result<Var> {
    let x: Vec<f32> = (0..4 * 6).map(|k| (((k + 5 * rank) * 7919 % 101) as f32 / 101.0 - 0.5) * 3.0).collect();
    let x = Var::new(Tensor::from_vec(x, [4, 6])?.to_dtype(DType::BF16));
    Ok(model.forward(&x)?.square().mean_all())
}

#[test]
fn ddp_averages_bf16_gradients_in_f32_and_keeps_them_bf16() -> Result<()> {
    let out = on_ranks(2, |g| {
        let rank = g.rank();
        // This rank's own gradients, without DDP.
        let alone = layer()?;
        loss(&alone, rank)?.backward()?;
        let own: Vec<Tensor> = alone.parameters().iter().filter_map(Var::grad).collect();
        let ddp = DistributedDataParallel::new(layer()?, Arc::new(g))?;
        loss(&ddp, rank)?.backward()?;
        let averaged: Vec<Tensor> = ddp.module().parameters().iter().filter_map(Var::grad).collect();
        Ok((own, averaged))
    });
    let (own0, _) = &out[0];
    let (own1, _) = &out[1];
    assert_eq!(own0.len(), 2);
    for (_, averaged) in &out {
        for ((g0, g1), avg) in own0.iter().zip(own1).zip(averaged) {
            assert_eq!(avg.dtype(), DType::BF16);
            // The mean of the two ranks' bf16 gradients, taken in f32 and rounded once.
            let want = g0.to_dtype(DType::F32).add(&g1.to_dtype(DType::F32))?.mul_scalar(0.5).to_dtype(DType::BF16);
            assert_eq!(avg.to_vec::<bf16>()?, want.to_vec::<bf16>()?);
            assert_ne!(g0.to_vec::<bf16>()?, g1.to_vec::<bf16>()?, "the ranks' batches differ");
        }
    }
    Ok(())
}
