//! The buffer pool's bounds: the limit, idle trimming, explicit trimming and clearing,
//! checked on the pool's own counters. The pool is global, so the tests take turns.

use ember_tensor::storage::{
    DEFAULT_POOL_LIMIT, DEFAULT_TRIM_PERIOD, clear_pool, memory_stats, pool_limit, reset_pool_limit, set_pool_enabled,
    set_pool_limit, set_pool_trim_period, trim_pool,
};
use ember_tensor::{DType, Tensor};
use parking_lot::{Mutex, MutexGuard};

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

static TURN: Mutex<()> = Mutex::new(());

/// Takes this test's turn and starts it from an empty pool with the given settings; the
/// defaults come back when the guard drops.
struct Turn(#[allow(dead_code)] MutexGuard<'static, ()>);

fn turn(limit: usize, period: usize) -> Turn {
    let guard = TURN.lock();
    clear_pool();
    set_pool_limit(limit);
    set_pool_trim_period(period);
    Turn(guard)
}

impl Drop for Turn {
    fn drop(&mut self) {
        set_pool_enabled(true);
        reset_pool_limit();
        set_pool_trim_period(DEFAULT_TRIM_PERIOD);
        clear_pool();
    }
}

/// A tensor whose storage is one pooled block of `bytes` (a multiple of the page size).
fn block(bytes: usize) -> Tensor {
    Tensor::zeros([bytes], DType::U8).unwrap()
}

fn cached() -> usize {
    memory_stats().cached_bytes
}

#[test]
fn the_limit_bounds_what_the_pool_keeps() {
    let _turn = turn(MIB, 0);
    drop((0..4).map(|_| block(512 * KIB)).collect::<Vec<_>>());
    assert_eq!(cached(), MIB, "two blocks kept, two returned");
    // A lower limit returns blocks until the pool fits.
    set_pool_limit(600 * KIB);
    assert_eq!(cached(), 512 * KIB);
    set_pool_limit(0);
    assert_eq!(cached(), 0);
    drop(block(512 * KIB));
    assert_eq!(cached(), 0, "a zero limit caches nothing");
    // Largest blocks go first.
    set_pool_limit(MIB);
    drop((block(256 * KIB), block(512 * KIB), block(64 * KIB)));
    set_pool_limit(400 * KIB);
    assert_eq!(cached(), 320 * KIB);
    assert_eq!(pool_limit(), 400 * KIB);
}

/// By default the pool may keep as much as the tensors ever held at once, so that a
/// training step whose peak passes 512 MiB still reuses the step before's blocks.
#[test]
fn the_default_limit_grows_with_the_most_the_tensors_held() {
    let _turn = turn(DEFAULT_POOL_LIMIT, 0);
    reset_pool_limit();
    assert!(pool_limit() >= DEFAULT_POOL_LIMIT);
    // Past the default and whatever this process held before. A zeroed block fresh from the
    // system is untouched pages: it costs address space, not memory.
    let bytes = pool_limit() + 64 * MIB;
    let big = block(bytes);
    assert!(pool_limit() >= bytes, "the limit follows the high-water mark");
    drop(big);
    assert_eq!(cached(), bytes, "a block as large as the most held at once is kept");
    // An explicit limit wins, and returns what no longer fits.
    set_pool_limit(DEFAULT_POOL_LIMIT);
    assert_eq!((pool_limit(), cached()), (DEFAULT_POOL_LIMIT, 0));
    reset_pool_limit();
    assert!(pool_limit() >= bytes);
}

#[test]
fn blocks_unused_for_a_whole_period_go_back() {
    let _turn = turn(DEFAULT_POOL_LIMIT, 100);
    // A one-off phase leaves three large blocks behind.
    drop((0..3).map(|_| block(MIB)).collect::<Vec<_>>());
    assert_eq!(cached(), 3 * MIB);
    // A loop that reuses one block every step.
    let hits = memory_stats().pool_hits;
    for step in 0..250 {
        drop(block(64 * KIB));
        if step == 150 {
            // The end of the first period saw the large blocks unused only since they were
            // freed; they are still there.
            assert_eq!(cached(), 3 * MIB + 64 * KIB);
        }
    }
    // They sat unused through the second period and went back; the loop's block stays.
    assert_eq!(cached(), 64 * KIB);
    assert_eq!(memory_stats().pool_hits - hits, 249, "every step after the first reused the block");
}

#[test]
fn a_bucket_shrinks_to_what_the_loop_needs() {
    let _turn = turn(DEFAULT_POOL_LIMIT, 100);
    drop((0..5).map(|_| block(64 * KIB)).collect::<Vec<_>>());
    assert_eq!(cached(), 5 * 64 * KIB);
    // Each step needs two blocks of the size at once; three sat unused.
    for _ in 0..250 {
        drop((block(64 * KIB), block(64 * KIB)));
    }
    assert_eq!(cached(), 2 * 64 * KIB);
}

#[test]
fn trimming_by_hand_returns_what_was_not_taken_since_the_last_trim() {
    let _turn = turn(DEFAULT_POOL_LIMIT, 0);
    drop((block(MIB), block(64 * KIB)));
    assert_eq!(trim_pool(), 0, "both were freed during this period");
    drop(block(64 * KIB));
    for _ in 0..1000 {
        drop(block(16 * KIB));
    }
    // With automatic trimming off, only the explicit call returns the idle block.
    assert_eq!(cached(), MIB + 64 * KIB + 16 * KIB);
    assert_eq!(trim_pool(), MIB, "the 1 MiB block was idle since the last trim");
    assert_eq!(cached(), 64 * KIB + 16 * KIB);
    assert_eq!(clear_pool(), 80 * KIB);
    assert_eq!(cached(), 0);
}

#[test]
fn a_disabled_pool_keeps_nothing() {
    let _turn = turn(DEFAULT_POOL_LIMIT, DEFAULT_TRIM_PERIOD);
    drop(block(64 * KIB));
    assert_eq!(cached(), 64 * KIB);
    set_pool_enabled(false);
    assert_eq!(cached(), 0, "switching off empties the pool");
    let misses = memory_stats().pool_misses;
    drop(block(64 * KIB));
    assert_eq!(cached(), 0);
    assert_eq!(memory_stats().pool_misses, misses, "a disabled pool is not consulted");
}
