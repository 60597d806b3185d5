//! [`DistributedSampler`]: each rank's shard of a dataset, for `ember-data`'s `DataLoader`.

use crate::group::ProcessGroup;
use ember_data::Sampler;
use ember_tensor::{Error, Result};
use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Gives each of `num_replicas` ranks a disjoint shard of a dataset of `len` samples
/// (PyTorch's `DistributedSampler`), for
/// [`DataLoaderBuilder::sampler`](ember_data::DataLoaderBuilder::sampler).
///
/// Each epoch every rank builds the same order, shuffled from `seed + epoch` when shuffling
/// (the default), and takes every `num_replicas`-th index starting at its rank. So that every
/// rank gets the same number of samples, the order is padded by repeating its first
/// indices, or with `drop_last` cut to a multiple of `num_replicas`, exactly as PyTorch
/// does. The loader passes its epoch number, so the shards are reshuffled every epoch
/// without calling [`set_epoch`](DistributedSampler::set_epoch); `set_epoch` pins the epoch
/// for code that drives the sampler itself, as in PyTorch.
///
/// ```
/// use ember_distributed::DistributedSampler;
/// use ember_data::Sampler;
/// // 10 samples over 3 ranks, in order: padded to 12 with samples 0 and 1.
/// let shards: Vec<Vec<usize>> = (0..3)
///     .map(|rank| Ok(DistributedSampler::new(10, 3, rank)?.shuffle(false).indices(0)))
///     .collect::<Result<_, ember_tensor::Error>>()?;
/// assert_eq!(shards, vec![vec![0, 3, 6, 9], vec![1, 4, 7, 0], vec![2, 5, 8, 1]]);
/// // drop_last cuts to 9 instead.
/// let s = DistributedSampler::new(10, 3, 2)?.shuffle(false).drop_last(true);
/// assert_eq!(s.indices(0), vec![2, 5, 8]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Debug)]
pub struct DistributedSampler {
    len: usize,
    num_replicas: usize,
    rank: usize,
    shuffle: bool,
    seed: u64,
    drop_last: bool,
    epoch: AtomicU64,
    pinned: AtomicBool,
}

impl DistributedSampler {
    /// The shard of `rank` among `num_replicas` of a dataset of `len` samples: shuffled
    /// with seed 0, padded (PyTorch's defaults).
    pub fn new(len: usize, num_replicas: usize, rank: usize) -> Result<DistributedSampler> {
        if rank >= num_replicas {
            return Err(Error::invalid(
                "DistributedSampler",
                format!("invalid rank {rank}, rank should be in the interval [0, {}]", num_replicas.saturating_sub(1)),
            ));
        }
        Ok(DistributedSampler {
            len,
            num_replicas,
            rank,
            shuffle: true,
            seed: 0,
            drop_last: false,
            epoch: AtomicU64::new(0),
            pinned: AtomicBool::new(false),
        })
    }

    /// The shard of this rank of `group`.
    pub fn for_group(len: usize, group: &dyn ProcessGroup) -> Result<DistributedSampler> {
        DistributedSampler::new(len, group.world_size(), group.rank())
    }

    /// Whether each epoch shuffles (on by default).
    pub fn shuffle(mut self, shuffle: bool) -> Self {
        self.shuffle = shuffle;
        self
    }

    /// The shuffling seed (0 by default); every rank must use the same.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Cut the order to a multiple of `num_replicas` instead of padding it.
    pub fn drop_last(mut self, drop_last: bool) -> Self {
        self.drop_last = drop_last;
        self
    }

    /// Pins the epoch whose order [`indices`](Sampler::indices) builds, whatever epoch the
    /// loader asks for (PyTorch's `set_epoch`).
    pub fn set_epoch(&self, epoch: u64) {
        self.epoch.store(epoch, Ordering::Relaxed);
        self.pinned.store(true, Ordering::Relaxed);
    }

    /// The samples per rank and epoch (PyTorch's `num_samples`).
    pub fn num_samples(&self) -> usize {
        let (n, p) = (self.len, self.num_replicas);
        if self.drop_last && n % p != 0 { (n - p.min(n)).div_ceil(p) } else { n.div_ceil(p) }
    }

    /// The samples of all ranks per epoch (PyTorch's `total_size`).
    pub fn total_size(&self) -> usize {
        self.num_samples() * self.num_replicas
    }

    /// The order of `epoch` shared by all ranks, before padding.
    fn order(&self, epoch: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.len).collect();
        if self.shuffle {
            let mut rng = Pcg64::seed_from_u64(self.seed.wrapping_add(epoch));
            for i in (1..order.len()).rev() {
                order.swap(i, rng.random_range(0..=i));
            }
        }
        order
    }
}

impl Sampler for DistributedSampler {
    fn len(&self) -> usize {
        self.num_samples()
    }

    fn indices(&self, epoch: u64) -> Vec<usize> {
        let epoch = if self.pinned.load(Ordering::Relaxed) { self.epoch.load(Ordering::Relaxed) } else { epoch };
        let mut order = self.order(epoch);
        let total = self.total_size();
        if order.len() < total && !order.is_empty() {
            let base = order.clone();
            while order.len() < total {
                let take = (total - order.len()).min(base.len());
                order.extend_from_slice(&base[..take]);
            }
        }
        order.truncate(total);
        order.into_iter().skip(self.rank).step_by(self.num_replicas).collect()
    }
}
