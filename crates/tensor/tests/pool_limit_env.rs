//! `EMBER_POOL_LIMIT` sets the pool's limit when the program has not set one. In a test
//! binary of its own: the variable is read once per process.

use ember_tensor::storage::{memory_stats, pool_limit, set_pool_limit};
use ember_tensor::{DType, Tensor};

#[test]
fn the_environment_sets_the_limit_until_the_program_does() {
    // SAFETY: this binary's only test, so no other thread reads or writes the environment.
    unsafe { std::env::set_var("EMBER_POOL_LIMIT", "1M") };
    let blocks: Vec<Tensor> = (0..4).map(|_| Tensor::zeros([512 << 10], DType::U8).unwrap()).collect();
    drop(blocks);
    assert_eq!(pool_limit(), 1 << 20);
    assert_eq!(memory_stats().cached_bytes, 1 << 20);
    set_pool_limit(2 << 20);
    assert_eq!(pool_limit(), 2 << 20);
}
