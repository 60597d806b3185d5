//! `StorageCell::untrack`: an untracked storage counts no in-place write, through any of
//! its views, and advances no global epoch; other storages count as before.

use ember_tensor::storage::{inplace_epoch, mutation_epoch};
use ember_tensor::{DType, Result, Tensor};

#[test]
fn untracked_storages_count_no_writes() -> Result<()> {
    let t = Tensor::zeros([2, 3], DType::F32)?;
    t.storage().watch();
    t.storage().untrack();
    assert!(!t.storage().is_tracked());
    let view = t.narrow(1, 1, 2)?;
    let (inplace, mutation) = (inplace_epoch(), mutation_epoch());
    t.add_scalar_(1.0)?;
    view.mul_scalar_(3.0)?;
    assert_eq!((t.version(), view.version()), (0, 0));
    assert_eq!(t.to_vec::<f32>()?, vec![1.0, 3.0, 3.0, 1.0, 3.0, 3.0], "the writes happened");
    // The only test of this binary: nothing else advances the process's epochs.
    assert_eq!((inplace_epoch(), mutation_epoch()), (inplace, mutation), "an untracked write advanced an epoch");

    let tracked = Tensor::zeros([2], DType::F32)?;
    assert!(tracked.storage().is_tracked());
    tracked.storage().watch();
    tracked.add_scalar_(1.0)?;
    assert_eq!(tracked.version(), 1);
    assert!(inplace_epoch() > inplace && mutation_epoch() > mutation, "a watched write advances the epochs");
    Ok(())
}
