//! [`DataLoader`]: batching, seeded shuffling and background prefetch over a [`Dataset`].

use crate::batches::{Batches, BuildBatch, Plan};
use crate::dataset::Dataset;
use crate::sampler::Sampler;
use crate::shuffle::permutation;
use ember_tensor::{Error, Result, Tensor, random};
use rand::Rng;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A per-batch transform run after [`Dataset::get_batch`] (on the prefetch worker when
/// there is one): it takes the batch's fields and returns the fields the loader yields.
pub type Transform = dyn Fn(Vec<Tensor>) -> Result<Vec<Tensor>> + Send + Sync;

/// The number of batches a loader builds ahead of the consumer unless told otherwise.
pub const DEFAULT_PREFETCH: usize = 2;

/// Iterates over a [`Dataset`] in batches, like PyTorch's `DataLoader`.
///
/// * **Batching**: each batch stacks `batch_size` samples (the last one may be shorter
///   unless `drop_last`).
/// * **Shuffling**: each epoch visits the samples in a random order that depends only on
///   the loader's seed and the epoch number, so a run is reproducible and a resumed run can
///   rebuild any epoch's order with [`epoch`](DataLoader::epoch). Without an explicit seed
///   the loader takes one from the global generator when it is built, so
///   [`manual_seed`](ember_tensor::manual_seed) makes it reproducible too.
/// * **Prefetch**: a worker thread builds the next batches (and runs the transform) while
///   the training step runs, at most [`prefetch`](DataLoaderBuilder::prefetch) batches
///   ahead. Prefetching changes when batches are built, never what they hold.
///
/// Each call to [`iter`](DataLoader::iter) (or `for batch in &loader`) walks the next epoch:
/// 0 the first time, then 1, 2, ...
///
/// ```
/// use ember_data::{DataLoader, TensorDataset};
/// use ember_tensor::Tensor;
///
/// let x = Tensor::arange(0, 10)?;
/// let loader = DataLoader::builder(TensorDataset::new(vec![x])?).batch_size(4).shuffle(true).seed(3).build()?;
/// assert_eq!(loader.len(), 3);
/// let mut seen = Vec::new();
/// for batch in &loader {
///     seen.extend(batch?[0].to_vec::<i64>()?);
/// }
/// seen.sort();
/// assert_eq!(seen, (0..10).collect::<Vec<i64>>());
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub struct DataLoader<D: Dataset + ?Sized + 'static> {
    dataset: Arc<D>,
    batch_size: usize,
    /// The shuffling seed; `None` keeps the dataset's order.
    seed: Option<u64>,
    drop_last: bool,
    prefetch: usize,
    transform: Option<Arc<Transform>>,
    sampler: Option<Arc<dyn Sampler>>,
    next_epoch: AtomicU64,
}

/// Settings for a [`DataLoader`]; start with [`DataLoader::builder`].
///
/// Defaults: batches of 1, no shuffling, the last partial batch kept,
/// [`DEFAULT_PREFETCH`] batches built ahead on a worker thread, no transform.
pub struct DataLoaderBuilder<D: Dataset + ?Sized + 'static> {
    dataset: Arc<D>,
    batch_size: usize,
    shuffle: bool,
    seed: Option<u64>,
    drop_last: bool,
    prefetch: usize,
    transform: Option<Arc<Transform>>,
    sampler: Option<Arc<dyn Sampler>>,
}

impl<D: Dataset + 'static> DataLoader<D> {
    /// Settings for a loader over `dataset`.
    pub fn builder(dataset: D) -> DataLoaderBuilder<D> {
        DataLoader::builder_shared(Arc::new(dataset))
    }

    /// A loader over `dataset` in order, in batches of `batch_size`, with the default
    /// prefetch; an error when `batch_size` is 0.
    pub fn new(dataset: D, batch_size: usize) -> Result<DataLoader<D>> {
        DataLoader::builder(dataset).batch_size(batch_size).build()
    }
}

impl<D: Dataset + ?Sized + 'static> DataLoader<D> {
    /// Settings for a loader over a dataset shared with other code (or other loaders);
    /// `D` may be `dyn Dataset`.
    pub fn builder_shared(dataset: Arc<D>) -> DataLoaderBuilder<D> {
        DataLoaderBuilder {
            dataset,
            batch_size: 1,
            shuffle: false,
            seed: None,
            drop_last: false,
            prefetch: DEFAULT_PREFETCH,
            transform: None,
            sampler: None,
        }
    }

    /// The dataset.
    pub fn dataset(&self) -> &Arc<D> {
        &self.dataset
    }

    /// Samples per batch (the last batch may hold fewer unless `drop_last`).
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// The shuffling seed, `None` when the loader keeps the dataset's order.
    pub fn seed(&self) -> Option<u64> {
        self.seed
    }

    /// Whether a last batch shorter than `batch_size` is left out.
    pub fn drop_last(&self) -> bool {
        self.drop_last
    }

    /// How many batches the worker builds ahead (0: no worker).
    pub fn prefetch(&self) -> usize {
        self.prefetch
    }

    /// The number of batches in an epoch.
    pub fn len(&self) -> usize {
        let n = self.sampler.as_ref().map_or(self.dataset.len(), |s| s.len());
        if self.drop_last { n / self.batch_size } else { n.div_ceil(self.batch_size) }
    }

    /// Whether an epoch has no batches.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The epoch that the next call to [`iter`](DataLoader::iter) walks.
    pub fn next_epoch(&self) -> u64 {
        self.next_epoch.load(Ordering::Relaxed)
    }

    /// Makes the next call to [`iter`](DataLoader::iter) walk `epoch` (for resuming a run).
    pub fn set_epoch(&self, epoch: u64) {
        self.next_epoch.store(epoch, Ordering::Relaxed);
    }

    /// The batches of the next epoch (see [`Batches`]).
    pub fn iter(&self) -> Batches {
        self.epoch(self.next_epoch.fetch_add(1, Ordering::Relaxed))
    }

    /// The batches of `epoch`, without moving the epoch counter: the same order every time
    /// for the same loader settings and epoch.
    pub fn epoch(&self, epoch: u64) -> Batches {
        let n = self.dataset.len();
        let order: Arc<[usize]> = match (&self.sampler, self.seed) {
            (Some(sampler), _) => sampler.indices(epoch).into(),
            (None, Some(seed)) => permutation(n, seed, epoch).into(),
            (None, None) => (0..n).collect(),
        };
        let dataset = self.dataset.clone();
        let build: BuildBatch = match self.transform.clone() {
            Some(t) => Arc::new(move |indices: &[usize]| t(dataset.get_batch(indices)?)),
            None => Arc::new(move |indices: &[usize]| dataset.get_batch(indices)),
        };
        Batches::new(Plan::new(build, order, self.batch_size, self.len()), self.prefetch)
    }
}

impl<D: Dataset + ?Sized + 'static> IntoIterator for &DataLoader<D> {
    type Item = Result<Vec<Tensor>>;
    type IntoIter = Batches;

    fn into_iter(self) -> Batches {
        self.iter()
    }
}

impl<D: Dataset + ?Sized + 'static> std::fmt::Debug for DataLoader<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataLoader")
            .field("samples", &self.dataset.len())
            .field("batch_size", &self.batch_size)
            .field("seed", &self.seed)
            .field("drop_last", &self.drop_last)
            .field("prefetch", &self.prefetch)
            .field("transform", &self.transform.is_some())
            .field("next_epoch", &self.next_epoch())
            .finish()
    }
}

impl<D: Dataset + ?Sized + 'static> DataLoaderBuilder<D> {
    /// Samples per batch; must be at least 1.
    pub fn batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// Whether each epoch visits the samples in a fresh random order.
    pub fn shuffle(mut self, shuffle: bool) -> Self {
        self.shuffle = shuffle;
        self
    }

    /// The shuffling seed (used only with [`shuffle`](Self::shuffle)). Without one, the
    /// loader draws its seed from the global generator when built.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Whether to leave out a last batch shorter than the batch size, so that every batch
    /// has the same shape.
    pub fn drop_last(mut self, drop_last: bool) -> Self {
        self.drop_last = drop_last;
        self
    }

    /// How many batches a worker thread builds ahead of the consumer; 0 builds each batch
    /// on the consuming thread when asked for.
    pub fn prefetch(mut self, batches: usize) -> Self {
        self.prefetch = batches;
        self
    }

    /// A function applied to every batch after the dataset builds it, on the worker thread
    /// when prefetching: typically dtype conversion and reshaping, such as
    /// [`transform::images_to_f32`](crate::transform::images_to_f32).
    pub fn transform(mut self, f: impl Fn(Vec<Tensor>) -> Result<Vec<Tensor>> + Send + Sync + 'static) -> Self {
        self.transform = Some(Arc::new(f));
        self
    }

    /// Takes each epoch's sample indices from `sampler` instead of the loader's own order
    /// (PyTorch's `sampler=`); the loader passes its epoch number, so a shuffling sampler
    /// reshuffles every epoch. Excludes [`shuffle`](Self::shuffle), as in PyTorch.
    pub fn sampler(mut self, sampler: impl Sampler + 'static) -> Self {
        self.sampler = Some(Arc::new(sampler));
        self
    }

    /// The loader; an error when the batch size is 0, or when both a sampler and
    /// shuffling are asked for.
    pub fn build(self) -> Result<DataLoader<D>> {
        if self.batch_size == 0 {
            return Err(Error::invalid("DataLoader", "the batch size must be at least 1, got 0"));
        }
        if self.shuffle && self.sampler.is_some() {
            return Err(Error::invalid("DataLoader", "sampler is mutually exclusive with shuffle"));
        }
        // Drawn here rather than in `seed`/`shuffle`, so that the global generator advances
        // once per shuffled loader whatever the order of the builder calls.
        let seed = self.shuffle.then(|| self.seed.unwrap_or_else(|| random::fork_rng().next_u64()));
        Ok(DataLoader {
            dataset: self.dataset,
            batch_size: self.batch_size,
            seed,
            drop_last: self.drop_last,
            prefetch: self.prefetch,
            transform: self.transform,
            sampler: self.sampler,
            next_epoch: AtomicU64::new(0),
        })
    }
}
