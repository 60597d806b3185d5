//! `EMBER_SPIN_US` sets the helpers' watch time when the program has not set one. In a test
//! binary of its own: the variable is read once per process.

use std::time::Duration;

#[test]
fn the_environment_sets_the_watch_time_until_the_program_does() {
    // SAFETY: this binary's only test, so no other thread reads or writes the environment.
    unsafe { std::env::set_var("EMBER_SPIN_US", "35") };
    assert_eq!(ember_tensor::threading::spin_wait(), Duration::from_micros(35));
    // Kernels still run with it.
    let x = ember_tensor::Tensor::ones([100_000], ember_tensor::DType::F32).unwrap();
    assert_eq!(x.sum_all().to_vec::<f32>().unwrap(), vec![100_000.0]);
    ember_tensor::threading::set_spin_wait(Duration::ZERO);
    assert_eq!(ember_tensor::threading::spin_wait(), Duration::ZERO);
}
