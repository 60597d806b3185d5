//! Criterion benchmarks of the CPU backend: matmul, a broadcast add, a last-dim sum, a row
//! softmax, and the buffer pool switched on and off.
//!
//! `cargo bench -p ember-tensor` runs them all on 2 worker threads. Matmul throughput is
//! reported as elements/s where one element is one floating-point operation, so criterion's
//! `Gelem/s` reads as GFLOP/s. The PyTorch comparison uses `examples/tensor_bench.rs` on the
//! same workloads (see BENCHMARKS.md).

mod workloads;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ember_tensor::storage::{memory_stats, set_pool_enabled};
use std::hint::black_box;
use std::time::Duration;
use workloads::{Work, Workload};

fn run_group(c: &mut Criterion, group: &str, list: Vec<Workload>) {
    workloads::init(workloads::THREADS);
    let mut g = c.benchmark_group(group);
    for w in list {
        let (Work::Flops(n) | Work::Elements(n)) = w.work;
        g.throughput(Throughput::Elements(n));
        // Big products take tens of milliseconds; fewer samples keep `cargo bench` short.
        if let Work::Flops(f) = w.work
            && f > 1 << 30
        {
            g.sample_size(20);
        } else {
            g.sample_size(50);
        }
        if let Some(enabled) = w.pool {
            set_pool_enabled(enabled);
        }
        let before = memory_stats();
        let mut step = (w.setup)();
        g.bench_function(&w.name, |b| b.iter(|| black_box(step())));
        if w.pool.is_some() {
            let after = memory_stats();
            println!(
                "{}: pool hits {}, misses {} over the whole run",
                w.name,
                after.pool_hits - before.pool_hits,
                after.pool_misses - before.pool_misses
            );
            set_pool_enabled(true);
        }
    }
    g.finish();
}

fn matmul(c: &mut Criterion) {
    run_group(c, "matmul_f32", workloads::MATMUL_SIZES.iter().map(|&n| workloads::matmul(n)).collect());
}

fn elementwise(c: &mut Criterion) {
    run_group(c, "elementwise", vec![workloads::add_broadcast(), workloads::sum_last(), workloads::softmax_rows()]);
}

fn pool(c: &mut Criterion) {
    run_group(
        c,
        "buffer_pool",
        vec![
            workloads::pool_chain(true),
            workloads::pool_chain(false),
            workloads::pool_layer(true),
            workloads::pool_layer(false),
        ],
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(3));
    targets = matmul, elementwise, pool
}
criterion_main!(benches);
