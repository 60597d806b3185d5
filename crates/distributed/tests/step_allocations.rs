//! A training step wrapped in DistributedDataParallel over one rank allocates exactly what
//! the plain step does: the buckets, their views and the reduction's bookkeeping are made
//! once, at construction, and reused. Counted with a global allocator that counts the
//! allocations of the thread under test (its own binary: the allocator is process-wide).

use ember_autograd::Var;
use ember_distributed::{DistributedDataParallel, LocalGroup};
use ember_nn::{CrossEntropyOptions, Linear, Module, ReLU, Sequential, cross_entropy};
use ember_optim::{Optimizer, Sgd, SgdConfig};
use ember_tensor::{Error, Result, Tensor};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counts the allocations made while the current thread's flag is on.
struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

fn count() {
    // Off during thread teardown, when the flag is gone.
    if COUNTING.try_with(Cell::get).unwrap_or(false) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: forwards every call to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract is System's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// A small MLP: its kernels stay on the calling thread (below the parallel grain), so every
/// allocation of a step is counted.
fn mlp() -> Result<Sequential> {
    Ok(Sequential::new().add(Linear::new(12, 16)?).add(ReLU).add(Linear::new(16, 8)?).add(ReLU).add(Linear::new(8, 4)?))
}

/// The allocations of `steps` training steps of `model`, after three untimed ones (the
/// optimizer's state, the buckets' first use).
fn allocations(model: &dyn Module, steps: usize) -> Result<u64> {
    let x = Tensor::from_vec((0..5 * 12).map(|k| ((k * 37) % 11) as f32 / 11.0 - 0.5).collect(), [5, 12])?;
    let y = Tensor::from_vec(vec![0i64, 1, 2, 3, 1], [5])?;
    let mut opt = Sgd::new(model.parameters(), SgdConfig { lr: 0.01, momentum: 0.9, ..Default::default() })?;
    let mut step = || -> Result<()> {
        let loss = cross_entropy(&model.forward(&Var::new(x.clone()))?, &y, CrossEntropyOptions::default())?;
        opt.zero_grad();
        loss.backward()?;
        opt.step()
    };
    for _ in 0..3 {
        step()?;
    }
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    COUNTING.set(true);
    let run = (0..steps).try_for_each(|_| step());
    COUNTING.set(false);
    run?;
    Ok(ALLOCATIONS.load(Ordering::Relaxed) - before)
}

#[test]
fn a_one_rank_ddp_step_allocates_exactly_what_the_plain_step_does() -> Result<()> {
    const STEPS: usize = 10;
    let plain = allocations(&mlp()?, STEPS)?;
    let group = LocalGroup::new_world(1)?.pop().ok_or_else(|| Error::invalid("test", "one rank"))?;
    let ddp = DistributedDataParallel::new(mlp()?, Arc::new(group))?;
    let wrapped = allocations(&ddp, STEPS)?;
    assert!(plain > 0, "the counter counted nothing");
    assert_eq!(wrapped, plain, "{STEPS} DDP steps allocated {wrapped} times, {STEPS} plain steps {plain}");
    Ok(())
}
