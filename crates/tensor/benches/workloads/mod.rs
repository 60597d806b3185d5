//! The benchmark workloads, shared by the criterion bench (`benches/tensor.rs`) and the
//! plain timing example (`examples/tensor_bench.rs`) that the PyTorch comparison uses.
//!
//! `tools/bench/tensor_torch.py` runs the same workloads under the same names; keep the two
//! lists in step.

// Each of the two targets that include this module uses a different part of it.
#![allow(dead_code)]

use ember_tensor::{DType, Tensor, manual_seed};

/// One timed call of a workload; the tensor it returns is dropped outside the timed region
/// by criterion and inside it by the timing example, which makes no difference to a
/// pool-backed drop.
pub type Step = Box<dyn FnMut() -> Tensor>;

/// What one call of a workload does, for throughput figures.
#[derive(Clone, Copy, Debug)]
pub enum Work {
    /// Floating-point operations (a product of `m x k` and `k x n` is `2mkn`).
    Flops(u64),
    /// Elements of the (larger) input read.
    Elements(u64),
}

/// A named workload.
pub struct Workload {
    /// The name both benchmark scripts print.
    pub name: String,
    /// Its size in one phrase, for tables.
    pub what: String,
    /// The work one call does.
    pub work: Work,
    /// `Some(enabled)` when the workload measures the buffer pool switched on or off.
    pub pool: Option<bool>,
    /// Builds the inputs and returns the timed step.
    pub setup: Box<dyn Fn() -> Step>,
}

/// Matrix sizes of the square matmul benchmarks.
pub const MATMUL_SIZES: [usize; 4] = [256, 512, 1024, 2048];

fn randn(shape: &[usize]) -> Tensor {
    Tensor::randn(shape.to_vec()).unwrap()
}

/// `[n, n] @ [n, n]` in f32.
pub fn matmul(n: usize) -> Workload {
    Workload {
        name: format!("matmul_{n}"),
        what: format!("[{n}, {n}] @ [{n}, {n}] f32"),
        work: Work::Flops(2 * (n as u64).pow(3)),
        pool: None,
        setup: Box::new(move || {
            manual_seed(1);
            let (a, b) = (randn(&[n, n]), randn(&[n, n]));
            Box::new(move || a.matmul(&b).unwrap())
        }),
    }
}

/// A row vector broadcast over a matrix: `[1000, 1000] + [1000]`.
pub fn add_broadcast() -> Workload {
    Workload {
        name: "add_broadcast".into(),
        what: "[1000, 1000] + [1000] f32".into(),
        work: Work::Elements(1_000_000),
        pool: None,
        setup: Box::new(|| {
            manual_seed(2);
            let (a, b) = (randn(&[1000, 1000]), randn(&[1000]));
            Box::new(move || a.add(&b).unwrap())
        }),
    }
}

/// The sum over the last dimension: `[4096, 1024] -> [4096]`.
pub fn sum_last() -> Workload {
    Workload {
        name: "sum_last".into(),
        what: "[4096, 1024].sum(-1) f32".into(),
        work: Work::Elements(4096 * 1024),
        pool: None,
        setup: Box::new(|| {
            manual_seed(3);
            let a = randn(&[4096, 1024]);
            Box::new(move || a.sum(-1, false).unwrap())
        }),
    }
}

/// Softmax over the rows of `[4096, 1024]`.
pub fn softmax_rows() -> Workload {
    Workload {
        name: "softmax_rows".into(),
        what: "[4096, 1024].softmax(-1) f32".into(),
        work: Work::Elements(4096 * 1024),
        pool: None,
        setup: Box::new(|| {
            manual_seed(4);
            let a = randn(&[4096, 1024]);
            Box::new(move || a.softmax(-1).unwrap())
        }),
    }
}

/// Two transposed `[1024, 1024]` views joined along the rows: `cat` of strided inputs, as
/// joining permuted activations does.
pub fn cat_transposed() -> Workload {
    Workload {
        name: "cat_transposed".into(),
        what: "cat([a.t(), b.t()], 0), a, b [1024, 1024] f32".into(),
        work: Work::Elements(2 * 1024 * 1024),
        pool: None,
        setup: Box::new(|| {
            manual_seed(7);
            let (a, b) = (randn(&[1024, 1024]).t().unwrap(), randn(&[1024, 1024]).t().unwrap());
            Box::new(move || Tensor::cat(&[&a, &b], 0).unwrap())
        }),
    }
}

/// A contiguous copy of a transposed `[1024, 1024]` view, as `.t().contiguous()` makes.
pub fn contiguous_transposed() -> Workload {
    Workload {
        name: "contiguous_transposed".into(),
        what: "a.t().contiguous(), a [1024, 1024] f32".into(),
        work: Work::Elements(1024 * 1024),
        pool: None,
        setup: Box::new(|| {
            manual_seed(8);
            let a = randn(&[1024, 1024]).t().unwrap();
            Box::new(move || a.contiguous())
        }),
    }
}

/// An activation-sized elementwise chain, `relu(x * y + bias) * 0.5 + x` on `[256, 1024]`:
/// five fresh 1 MiB results per call, each freed once the next one exists.
pub fn pool_chain(enabled: bool) -> Workload {
    Workload {
        name: format!("pool_chain_{}", if enabled { "on" } else { "off" }),
        what: "relu(x*y+b)*0.5+x, [256, 1024] f32, 5 results/call".into(),
        work: Work::Elements(5 * 256 * 1024),
        pool: Some(enabled),
        setup: Box::new(|| {
            manual_seed(5);
            let (x, y, b) = (randn(&[256, 1024]), randn(&[256, 1024]), randn(&[1024]));
            Box::new(move || x.mul(&y).unwrap().add(&b).unwrap().relu().mul_scalar(0.5).add(&x).unwrap())
        }),
    }
}

/// A hidden layer on an MNIST-sized batch, `relu([64, 784] @ [784, 256] + b)`: three 64 KiB
/// results per call, the smallest size the pool caches.
pub fn pool_layer(enabled: bool) -> Workload {
    Workload {
        name: format!("pool_layer_{}", if enabled { "on" } else { "off" }),
        what: "relu([64, 784] @ [784, 256] + b) f32, 3 results/call".into(),
        work: Work::Flops(2 * 64 * 784 * 256),
        pool: Some(enabled),
        setup: Box::new(|| {
            manual_seed(6);
            let (x, w, b) = (randn(&[64, 784]), randn(&[784, 256]), randn(&[256]));
            Box::new(move || x.matmul(&w).unwrap().add(&b).unwrap().relu())
        }),
    }
}

/// Every workload, in table order.
pub fn all() -> Vec<Workload> {
    let mut v: Vec<Workload> = MATMUL_SIZES.iter().map(|&n| matmul(n)).collect();
    v.extend([
        add_broadcast(),
        sum_last(),
        softmax_rows(),
        cat_transposed(),
        contiguous_transposed(),
        pool_chain(true),
        pool_chain(false),
        pool_layer(true),
        pool_layer(false),
    ]);
    v
}

/// Fixes the thread count both benchmark programs use, so that ember and PyTorch compare at
/// the same parallelism on any machine.
pub fn init(threads: usize) {
    ember_tensor::threading::set_num_threads(threads).unwrap();
    // The workloads rely on `randn` giving f32, PyTorch's default.
    assert_eq!(randn(&[1]).dtype(), DType::F32);
}

/// Worker threads of the benchmarks (PyTorch's side uses `torch.set_num_threads` with it).
pub const THREADS: usize = 2;
