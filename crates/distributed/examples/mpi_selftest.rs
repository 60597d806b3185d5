//! The MPI checks that `.ci/run` launches with `mpirun -np 2`:
//!
//! * `mpi_selftest` runs every collective over `MpiGroup`, checks that mismatched shapes
//!   are an error on every rank, and trains the MNIST MLP (784-256-128-10, f64) for a few
//!   steps data-parallel with per-rank batch B, comparing with one process trained with
//!   batch 2B on the same samples (parameters agree to 1e-6, and are bit-identical across
//!   ranks). All of it twice: through the shared-memory all-reduce (the default when the
//!   ranks share a host, which `mpirun` on one machine gives) and through MPI's
//!   (`MpiOptions::shared_memory` off). The shared-memory all-reduce is also checked
//!   element by element against a reduction in rank order, for sums, maxima and minima of
//!   `f32`, `f64` and `i64`, at odd lengths and lengths many times its buffer. Exits 0 on
//!   success.
//! * `mpi_selftest fail` makes rank 1 exit with an error while rank 0 waits in an
//!   all-reduce: `mpirun` must end the whole job with a non-zero status instead of
//!   hanging (the caller bounds it with a timeout).

use ember_autograd::Var;
use ember_distributed::{DdpOptions, DistributedDataParallel, MpiGroup, MpiOptions, ProcessGroup, ReduceOp};
use ember_nn::{CrossEntropyOptions, Linear, LinearOptions, Module, ReLU, Sequential, StateDict, cross_entropy};
use ember_optim::{Optimizer, Sgd, SgdConfig};
use ember_tensor::{DType, Error, Result, Tensor, manual_seed};
use std::sync::Arc;

fn check(cond: bool, what: &str) -> Result<()> {
    if cond { Ok(()) } else { Err(Error::invalid("mpi_selftest", what.to_string())) }
}

fn collectives(g: &dyn ProcessGroup) -> Result<()> {
    let (r, n) = (g.rank() as f64, g.world_size() as f64);
    let t = Tensor::from_vec(vec![r, 1.0], [2])?;
    g.all_reduce(&t, ReduceOp::Sum)?;
    check(t.to_vec::<f64>()? == vec![n * (n - 1.0) / 2.0, n], "all_reduce sum")?;
    let t = Tensor::from_vec(vec![r as f32], [1])?;
    g.all_reduce(&t, ReduceOp::Max)?;
    check(t.to_vec::<f32>()? == vec![(n - 1.0) as f32], "all_reduce max")?;
    let t = Tensor::from_vec(vec![r + 1.0], [1])?;
    g.all_reduce_async(&t, ReduceOp::Avg)?.wait()?;
    check(t.to_vec::<f64>()? == vec![(n + 1.0) / 2.0], "all_reduce avg")?;
    let t = Tensor::from_vec(vec![r; 3], [3])?;
    g.broadcast(&t, g.world_size() - 1)?;
    check(t.to_vec::<f64>()? == vec![n - 1.0; 3], "broadcast")?;
    let all = g.all_gather(&Tensor::from_vec(vec![r], [1])?)?;
    let gathered: Vec<f64> = all.iter().map(|t| t.to_vec::<f64>().map(|v| v[0])).collect::<Result<_>>()?;
    check(gathered == (0..g.world_size()).map(|i| i as f64).collect::<Vec<_>>(), "all_gather")?;
    let inputs: Vec<Tensor> =
        (0..g.world_size()).map(|i| Tensor::from_vec(vec![i as f64 + r], [1])).collect::<Result<_>>()?;
    let mine = g.reduce_scatter(&inputs, ReduceOp::Sum)?.to_vec::<f64>()?;
    check(mine == vec![n * r + n * (n - 1.0) / 2.0], "reduce_scatter")?;
    g.barrier()?;
    let ranks: Vec<usize> = (0..g.world_size()).rev().collect();
    let sub = g.new_group(&ranks)?.ok_or_else(|| Error::invalid("mpi_selftest", "not in the reversed group"))?;
    check(sub.rank() == g.world_size() - 1 - g.rank(), "new_group rank order")?;
    let e = g.all_reduce(&Tensor::zeros([1 + g.rank()], DType::F32)?, ReduceOp::Sum);
    if g.world_size() > 1 {
        let msg = e.err().map(|e| e.to_string()).unwrap_or_default();
        check(msg.contains("shape [1]") && msg.contains("shape [2]"), "mismatched shapes are an error")?;
    }
    Ok(())
}

/// Rank `r`'s element `i`: distinct per rank, spread so that a float sum's order shows.
fn value(r: usize, i: usize) -> f64 {
    ((i * 31 + r * 17) % 97) as f64 * 1e-3 + ((r + i) % 7) as f64 * 1e5 - 3e5
}

/// `all_reduce` of every rank's [`value`]s against the same reduction in rank order, bit
/// for bit, for each dtype and op, at lengths around and far above `window` bytes.
/// Errors name the group's path.
fn all_reduce_exact(g: &MpiGroup, window: usize) -> Result<()> {
    let (rank, world) = (g.rank(), g.world_size());
    let path = if g.uses_shared_memory() { "shared memory" } else { "MPI" };
    let longest = 3 * window / 4 + 1; // f32 elements over three windows, odd
    for n in [1, 2, 3, 63, 1001, window / 8 - 1, longest] {
        for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg] {
            let fold = |f: &dyn Fn(f64, f64) -> f64, x: &dyn Fn(usize, usize) -> f64| -> Vec<f64> {
                (0..n).map(|i| (1..world).fold(x(0, i), |a, r| f(a, x(r, i)))).collect()
            };
            let combine = |a: f64, b: f64| match op {
                ReduceOp::Max => a.max(b),
                ReduceOp::Min => a.min(b),
                _ => a + b,
            };
            // f32: combined in f32, in rank order.
            let x32 = |r: usize, i: usize| value(r, i) as f32 as f64;
            let f32_combine = |a: f64, b: f64| combine(a, b) as f32 as f64;
            let mut want32: Vec<f32> = fold(&f32_combine, &x32).into_iter().map(|v| v as f32).collect();
            if op == ReduceOp::Avg {
                want32.iter_mut().for_each(|v| *v = (f64::from(*v) * (1.0 / world as f64)) as f32);
            }
            let t = Tensor::from_vec((0..n).map(|i| x32(rank, i) as f32).collect::<Vec<_>>(), [n])?;
            g.all_reduce(&t, op)?;
            let got: Vec<u32> = t.to_vec::<f32>()?.iter().map(|v| v.to_bits()).collect();
            check(
                got == want32.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                &format!("{path}: all_reduce f32 {op:?} of {n}"),
            )?;
            let mut want64 = fold(&combine, &value);
            if op == ReduceOp::Avg {
                want64.iter_mut().for_each(|v| *v *= 1.0 / world as f64);
            }
            let t = Tensor::from_vec((0..n).map(|i| value(rank, i)).collect::<Vec<_>>(), [n])?;
            g.all_reduce(&t, op)?;
            let got: Vec<u64> = t.to_vec::<f64>()?.iter().map(|v| v.to_bits()).collect();
            check(
                got == want64.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                &format!("{path}: all_reduce f64 {op:?} of {n}"),
            )?;
            if op == ReduceOp::Avg {
                continue;
            }
            let xi = |r: usize, i: usize| value(r, i) as i64;
            let wanti: Vec<i64> = (0..n)
                .map(|i| {
                    (1..world).fold(xi(0, i), |a, r| match op {
                        ReduceOp::Max => a.max(xi(r, i)),
                        ReduceOp::Min => a.min(xi(r, i)),
                        _ => a + xi(r, i),
                    })
                })
                .collect();
            let t = Tensor::from_vec((0..n).map(|i| xi(rank, i)).collect::<Vec<_>>(), [n])?;
            g.all_reduce(&t, op)?;
            check(t.to_vec::<i64>()? == wanti, &format!("{path}: all_reduce i64 {op:?} of {n}"))?;
        }
    }
    Ok(())
}

fn mlp() -> Result<Sequential> {
    let lin = |i, o| Linear::with_options(i, o, LinearOptions { bias: true, dtype: DType::F64 });
    Ok(Sequential::new().add(lin(784, 256)?).add(ReLU).add(lin(256, 128)?).add(ReLU).add(lin(128, 10)?))
}

fn train_step(model: &dyn Module, opt: &mut Sgd, x: &Tensor, y: &Tensor) -> Result<()> {
    let loss = cross_entropy(&model.forward(&Var::new(x.clone()))?, y, CrossEntropyOptions::default())?;
    opt.zero_grad();
    loss.backward()?;
    opt.step()
}

fn ddp_parity(g: Arc<dyn ProcessGroup>) -> Result<f64> {
    const STEPS: usize = 3;
    const B: usize = 8;
    let (rank, world) = (g.rank(), g.world_size());
    let group = g.clone();
    let n = STEPS * B * world;
    let x: Vec<f64> = (0..n * 784).map(|k| ((k * 7919) % 1009) as f64 / 1009.0 - 0.5).collect();
    let x = Tensor::from_vec(x, [n, 784])?;
    let y = Tensor::from_vec((0..n as i64).map(|i| (i * 7) % 10).collect::<Vec<_>>(), [n])?;
    let sgd = |m: &dyn Module| Sgd::new(m.parameters(), SgdConfig { lr: 0.1, momentum: 0.9, ..Default::default() });

    // The reference: one process, batch B * world, from rank 0's initial state.
    manual_seed(rank as u64); // different on each rank: construction must broadcast rank 0's
    let model = mlp()?;
    let init: StateDict = model.state_dict().iter().map(|(k, v)| (k.to_string(), v.copy())).collect();
    let reference = mlp()?;
    let ddp = DistributedDataParallel::with_options(model, g, DdpOptions { bucket_cap_mb: 0.1, ..Default::default() })?;
    // After construction every rank holds rank 0's state; start the reference from it.
    let start: StateDict = ddp.module().state_dict().iter().map(|(k, v)| (k.to_string(), v.copy())).collect();
    reference.load_state_dict(&start)?;
    if rank == 0 {
        check(
            start.iter().zip(init.iter()).all(|((_, a), (_, b))| a.to_vec_f64().ok() == b.to_vec_f64().ok()),
            "rank 0 keeps its state",
        )?;
    }
    let (mut opt, mut ref_opt) = (sgd(&ddp)?, sgd(&reference)?);
    for s in 0..STEPS {
        let global = s * B * world;
        train_step(&ddp, &mut opt, &x.narrow(0, global + rank * B, B)?, &y.narrow(0, global + rank * B, B)?)?;
        train_step(&reference, &mut ref_opt, &x.narrow(0, global, B * world)?, &y.narrow(0, global, B * world)?)?;
    }
    let mut worst = 0.0f64;
    for (a, b) in ddp.module().parameters().iter().zip(reference.parameters()) {
        for (u, v) in a.value().to_vec::<f64>()?.iter().zip(b.value().to_vec::<f64>()?) {
            worst = worst.max((u - v).abs());
        }
        // The replicas are bit-identical: the maximum over the ranks is every rank's value.
        let mine = a.value().copy();
        let most = mine.copy();
        group.all_reduce(&most, ReduceOp::Max)?;
        check(most.to_vec::<f64>()? == mine.to_vec::<f64>()?, "the ranks' parameters are bit-identical")?;
    }
    Ok(worst)
}

fn main() -> Result<()> {
    let group = MpiGroup::world()?;
    let rank = group.rank();
    if std::env::args().nth(1).as_deref() == Some("fail") {
        if rank == 1 {
            eprintln!("mpi_selftest: rank 1 fails on purpose");
            std::process::exit(3);
        }
        // Waits for rank 1, which never comes: mpirun must end the job.
        group.all_reduce(&Tensor::ones([1], DType::F32)?, ReduceOp::Sum)?;
        return Err(Error::invalid("mpi_selftest", "the all-reduce with a dead rank returned"));
    }
    // mpirun on one machine: every rank shares the host, so the default is shared memory.
    check(group.uses_shared_memory(), "the ranks share a host but the shared-memory all-reduce is off")?;
    // A window of one page: the longer all-reduces go through it in many pieces.
    let small = group.duplicate(MpiOptions { shared_memory_bytes: 4096, ..Default::default() })?;
    check(small.uses_shared_memory(), "the one-page window")?;
    let plain = group.duplicate(MpiOptions { shared_memory: false, ..Default::default() })?;
    check(!plain.uses_shared_memory(), "shared memory turned off")?;
    all_reduce_exact(&group, 4 << 20)?;
    all_reduce_exact(&small, 4096)?;
    // MPI sums in an order of its choosing: on more than two ranks, float sums may differ
    // from rank order in the last bits.
    if group.world_size() == 2 {
        all_reduce_exact(&plain, 4096)?;
    }
    let world = group.world_size();
    let plain: Arc<dyn ProcessGroup> = Arc::new(plain);
    let group: Arc<dyn ProcessGroup> = Arc::new(group);
    for (path, g) in [("shared memory", &group), ("MPI", &plain)] {
        collectives(&**g)?;
        let worst = ddp_parity(g.clone())?;
        check(
            worst < 1e-6,
            &format!("rank {rank}, {path}: DDP parameters differ from one process with the whole batch by {worst}"),
        )?;
        if rank == 0 {
            println!("mpi_selftest: {world} ranks, {path}: collectives ok; DDP matches one process to {worst:.1e}");
        }
    }
    drop((small, plain));
    Ok(())
}
