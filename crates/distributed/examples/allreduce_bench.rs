//! The time of one `all_reduce` between the ranks of an MPI job, through shared memory
//! (`MpiOptions::shared_memory`, the default on one host) and through MPI's own
//! all-reduce, at several sizes, in alternating rounds (`tools/bench/allreduce.sh`):
//!
//! ```text
//! mpirun -np 2 target/release/examples/allreduce_bench [ROUNDS] [REPS]
//! ```
//!
//! Each round times `REPS` back-to-back `all_reduce(Sum)` of one `f32` tensor per size and
//! path; rank 0 prints the median over the rounds of the time per all-reduce, in µs, and
//! the bandwidth it amounts to (the tensor's bytes over the time).

use ember_distributed::{MpiGroup, MpiOptions, ProcessGroup, ReduceOp};
use ember_tensor::{DType, Error, Result, Tensor};
use std::time::Instant;

fn time_per_op(g: &dyn ProcessGroup, t: &Tensor, reps: usize) -> Result<f64> {
    g.barrier()?;
    let start = Instant::now();
    for _ in 0..reps {
        g.all_reduce(t, ReduceOp::Sum)?;
    }
    Ok(start.elapsed().as_secs_f64() / reps as f64)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>());
    let bad = |e| Error::invalid("allreduce_bench", format!("usage: allreduce_bench [ROUNDS] [REPS]: {e}"));
    let rounds = args.next().transpose().map_err(bad)?.unwrap_or(15);
    let reps = args.next().transpose().map_err(bad)?.unwrap_or(50);
    let shm = MpiGroup::world()?;
    let mpi = shm.duplicate(MpiOptions { shared_memory: false, ..Default::default() })?;
    if shm.rank() == 0 {
        println!(
            "{} ranks, shared memory {}; {rounds} rounds of {reps} all-reduces (f32, sum) per size and path",
            shm.world_size(),
            if shm.uses_shared_memory() { "on" } else { "unavailable" }
        );
        println!("| MB | shared memory µs | MPI µs | MPI / shared memory | shared memory GB/s | MPI GB/s |");
        println!("|---|---|---|---|---|---|");
    }
    for mb in [0.1, 0.25, 0.5, 0.94, 2.0, 8.0] {
        let n = (mb * 1e6 / 4.0) as usize;
        let t = Tensor::full([n], 1.0, DType::F32)?;
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            // Alternate which path goes first.
            if round % 2 == 0 {
                a.push(time_per_op(&shm, &t, reps)?);
                b.push(time_per_op(&mpi, &t, reps)?);
            } else {
                b.push(time_per_op(&mpi, &t, reps)?);
                a.push(time_per_op(&shm, &t, reps)?);
            }
        }
        let (a, b) = (median(a), median(b));
        if shm.rank() == 0 {
            let gbs = |s: f64| mb * 1e-3 / s;
            println!("| {mb} | {:.1} | {:.1} | {:.2}x | {:.2} | {:.2} |", a * 1e6, b * 1e6, b / a, gbs(a), gbs(b));
        }
    }
    drop(mpi);
    Ok(())
}
