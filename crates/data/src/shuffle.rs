//! The sample order of a shuffled epoch, a pure function of the loader's seed and the epoch.

use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64;

/// Weyl increment of SplitMix64 (2^64 / golden ratio).
const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's finaliser: a bijection that spreads every input bit over the output.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A generator for `epoch` of a loader seeded with `seed`. Each epoch gets its own stream,
/// so any epoch's order can be rebuilt without replaying the ones before it (for resuming a
/// run), and consecutive epochs do not share a prefix.
pub(crate) fn epoch_rng(seed: u64, epoch: u64) -> Pcg64 {
    Pcg64::seed_from_u64(mix64(seed.wrapping_add(epoch.wrapping_add(1).wrapping_mul(GOLDEN_GAMMA))))
}

/// A uniformly random permutation of `0..n` for `epoch` (Fisher-Yates).
pub(crate) fn permutation(n: usize, seed: u64, epoch: u64) -> Vec<usize> {
    let mut rng = epoch_rng(seed, epoch);
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        order.swap(i, rng.random_range(0..=i));
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutations_depend_on_seed_and_epoch_only() {
        let a = permutation(100, 7, 0);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..100).collect::<Vec<_>>());
        assert_eq!(a, permutation(100, 7, 0));
        assert_ne!(a, permutation(100, 7, 1));
        assert_ne!(a, permutation(100, 8, 0));
        assert!(permutation(0, 7, 0).is_empty());
        assert_eq!(permutation(1, 7, 3), vec![0]);
    }
}
