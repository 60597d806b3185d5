//! With two threads configured, a large matrix product's tiles are run by more than one
//! thread: counted by `threading::team_counters`, never timed. Its own test binary, so that
//! it can fix the thread count before any parallel work and no other test's loops touch the
//! counters.

use ember_tensor::{Result, Tensor, threading};

#[test]
fn a_large_products_tiles_are_shared_with_the_helper() -> Result<()> {
    threading::set_num_threads(2)?;
    let a = Tensor::randn([512, 512])?;
    let b = Tensor::randn([512, 512])?;
    // The helper runs tiles only once the system has scheduled it. On a busy machine the
    // caller can finish a product alone before then, so several products are tried; on an
    // idle one the first shares its tiles.
    let mut shared = None;
    for _ in 0..200 {
        let before = threading::team_counters();
        a.matmul(&b)?;
        let after = threading::team_counters();
        let (caller, helpers) = (after.by_caller - before.by_caller, after.by_helpers - before.by_helpers);
        // The product was offered to the helper as one loop of 8 tiles, never run alone.
        assert_eq!(after.loops_alone, before.loops_alone, "a heavy product ran on the caller alone");
        assert_eq!(caller + helpers, 8, "512x512 is cut into 8 tiles");
        if helpers > 0 && caller > 0 {
            shared = Some((caller, helpers));
            break;
        }
    }
    assert!(shared.is_some(), "no product's tiles were shared between the caller and the helper");
    Ok(())
}
