//! [`Sampler`]: the order in which a loader visits a dataset, when it is not the loader's
//! own (in order, or shuffled).

/// Chooses the sample indices of each epoch (PyTorch's `Sampler`), for a
/// [`DataLoader`](crate::DataLoader) built with
/// [`sampler`](crate::DataLoaderBuilder::sampler): a distributed sampler gives each rank
/// its own shard, for instance.
pub trait Sampler: Send + Sync {
    /// The number of indices each epoch yields.
    fn len(&self) -> usize;

    /// Whether an epoch yields no index.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The indices of `epoch` (the loader's epoch number), [`len`](Sampler::len) of them,
    /// each below the dataset's length.
    fn indices(&self, epoch: u64) -> Vec<usize>;
}
