//! `DataLoader`: batching, shuffling, prefetch, transforms and errors.

use ember_data::{DataLoader, Dataset, Sampler, TensorDataset};
use ember_tensor::{DType, Error, Result, Tensor, manual_seed};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::ThreadId;
use std::time::Duration;

/// `n` samples: the index as an `i64`, and a 2-vector `[index, -index]` of `f32`.
fn numbered(n: usize) -> TensorDataset {
    let ids = Tensor::arange(0, n as i64).unwrap();
    let f = ids.to_dtype(DType::F32).unsqueeze(1).unwrap();
    let pair = Tensor::cat(&[&f, &f.neg()], 1).unwrap();
    TensorDataset::new(vec![ids, pair]).unwrap()
}

/// The sample ids of every batch of one epoch.
fn ids(batches: impl Iterator<Item = Result<Vec<Tensor>>>) -> Vec<Vec<i64>> {
    batches.map(|b| b.unwrap()[0].to_vec::<i64>().unwrap()).collect()
}

#[test]
fn batches_cover_the_dataset_in_order_with_a_short_last_batch() {
    let loader = DataLoader::new(numbered(10), 4).unwrap();
    assert_eq!(loader.len(), 3);
    assert_eq!(loader.batch_size(), 4);
    assert_eq!(loader.seed(), None);
    let batches: Vec<Vec<Tensor>> = loader.iter().map(|b| b.unwrap()).collect();
    assert_eq!(batches.len(), 3);
    assert_eq!(batches[0][0].to_vec::<i64>().unwrap(), vec![0, 1, 2, 3]);
    assert_eq!(batches[0][1].shape(), &[4, 2]);
    assert_eq!(batches[0][1].to_vec::<f32>().unwrap(), vec![0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 3.0, -3.0]);
    assert_eq!(batches[2][0].to_vec::<i64>().unwrap(), vec![8, 9]);
    assert_eq!(batches[2][1].shape(), &[2, 2]);
    // Without shuffling every epoch is the same.
    assert_eq!(ids(loader.iter()), ids(loader.iter()));
}

#[test]
fn drop_last_leaves_out_the_short_batch() {
    let loader = DataLoader::builder(numbered(10)).batch_size(4).drop_last(true).build().unwrap();
    assert_eq!(loader.len(), 2);
    assert_eq!(ids(loader.iter()), vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
    let exact = DataLoader::builder(numbered(8)).batch_size(4).drop_last(true).build().unwrap();
    assert_eq!(exact.len(), 2);
    let too_few = DataLoader::builder(numbered(3)).batch_size(4).drop_last(true).build().unwrap();
    assert_eq!(too_few.len(), 0);
    assert!(too_few.is_empty());
    assert_eq!(too_few.iter().count(), 0);
    let kept = DataLoader::new(numbered(3), 4).unwrap();
    assert_eq!(ids(kept.iter()), vec![vec![0, 1, 2]]);
}

#[test]
fn shuffled_epochs_are_permutations_that_change_every_epoch() {
    let loader = DataLoader::builder(numbered(100)).batch_size(7).shuffle(true).seed(11).build().unwrap();
    assert_eq!(loader.seed(), Some(11));
    let e0: Vec<i64> = ids(loader.iter()).concat();
    let e1: Vec<i64> = ids(loader.iter()).concat();
    for order in [&e0, &e1] {
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..100).collect::<Vec<i64>>());
        assert_ne!(*order, sorted);
    }
    assert_ne!(e0, e1);
    assert_eq!(loader.next_epoch(), 2);
    // Any epoch can be rebuilt, and `set_epoch` rewinds the counter.
    assert_eq!(ids(loader.epoch(1)).concat(), e1);
    loader.set_epoch(0);
    assert_eq!(ids(loader.iter()).concat(), e0);
}

#[test]
fn the_same_seed_gives_the_same_order() {
    let make = |seed| DataLoader::builder(numbered(50)).batch_size(8).shuffle(true).seed(seed).build().unwrap();
    let (a, b, c) = (make(5), make(5), make(6));
    for _ in 0..3 {
        let (oa, ob, oc) = (ids(a.iter()), ids(b.iter()), ids(c.iter()));
        assert_eq!(oa, ob);
        assert_ne!(oa, oc);
    }
}

#[test]
fn without_a_seed_the_global_generator_decides() {
    // The only test of this binary that touches the global generator.
    let make = || DataLoader::builder(numbered(50)).batch_size(8).shuffle(true).build().unwrap();
    manual_seed(3);
    let a = make();
    manual_seed(3);
    let b = make();
    let c = make();
    assert_eq!(a.seed(), b.seed());
    assert_ne!(b.seed(), c.seed());
    assert_eq!(ids(a.iter()), ids(b.iter()));
    // A loader that does not shuffle leaves the global generator alone.
    manual_seed(3);
    DataLoader::new(numbered(5), 2).unwrap();
    assert_eq!(make().seed(), a.seed());
}

#[test]
fn prefetching_yields_the_same_batches_as_building_on_demand() {
    let batches = |prefetch| {
        let loader = DataLoader::builder(numbered(103))
            .batch_size(10)
            .shuffle(true)
            .seed(9)
            .prefetch(prefetch)
            .transform(|mut b: Vec<Tensor>| {
                b[1] = b[1].mul_scalar(2.0);
                Ok(b)
            })
            .build()
            .unwrap();
        let it = loader.iter();
        assert_eq!(it.is_prefetching(), prefetch > 0);
        assert_eq!(it.len(), 11);
        it.map(|b| b.unwrap().iter().map(|t| t.to_vec_f64().unwrap()).collect::<Vec<_>>()).collect::<Vec<_>>()
    };
    let inline = batches(0);
    assert_eq!(inline.len(), 11);
    assert_eq!(inline[0][1][1], -2.0 * inline[0][0][0]);
    for prefetch in [1, 2, 8, 100] {
        assert_eq!(batches(prefetch), inline, "prefetch {prefetch}");
    }
}

/// Counts the batches it builds, slowly, and can fail or panic on a chosen batch.
struct Probe {
    inner: TensorDataset,
    built: Arc<AtomicUsize>,
    delay: Duration,
    fail_at: Option<usize>,
    panic_at: Option<usize>,
}

impl Probe {
    fn new(n: usize) -> Probe {
        Probe {
            inner: numbered(n),
            built: Arc::new(AtomicUsize::new(0)),
            delay: Duration::ZERO,
            fail_at: None,
            panic_at: None,
        }
    }
}

impl Dataset for Probe {
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn get(&self, index: usize) -> Result<Vec<Tensor>> {
        self.inner.get(index)
    }
    fn get_batch(&self, indices: &[usize]) -> Result<Vec<Tensor>> {
        let k = self.built.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(self.delay);
        if self.fail_at == Some(k) {
            return Err(Error::invalid("Probe", format!("batch {k} is unreadable")));
        }
        if self.panic_at == Some(k) {
            panic!("probe panics on batch {k}");
        }
        self.inner.get_batch(indices)
    }
}

#[test]
fn dropping_the_iterator_early_stops_the_worker() {
    let mut probe = Probe::new(1000);
    probe.delay = Duration::from_millis(2);
    let built = probe.built.clone();
    let loader = DataLoader::builder(probe).batch_size(10).prefetch(2).build().unwrap();
    let mut it = loader.iter();
    assert!(it.is_prefetching());
    assert_eq!(it.next().unwrap().unwrap()[0].to_vec::<i64>().unwrap()[0], 0);
    // Let the worker fill its queue and block, then drop while it waits for room.
    std::thread::sleep(Duration::from_millis(50));
    drop(it);
    let after_drop = built.load(Ordering::SeqCst);
    // One taken, two queued, at most one more started before it noticed.
    assert!((1..=4).contains(&after_drop), "built {after_drop}");
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(built.load(Ordering::SeqCst), after_drop, "the worker kept running");

    // Dropping right away, before any batch is taken, does not hang either.
    for _ in 0..20 {
        drop(loader.iter());
    }
    // And the loader still serves whole epochs afterwards.
    assert_eq!(loader.iter().count(), 100);
}

#[test]
fn batch_errors_reach_the_consumer_in_order_and_iteration_goes_on() {
    for prefetch in [0, 2] {
        let mut probe = Probe::new(40);
        probe.fail_at = Some(1);
        probe.panic_at = Some(2);
        let loader = DataLoader::builder(probe).batch_size(10).prefetch(prefetch).build().unwrap();
        let items: Vec<Result<Vec<Tensor>>> = loader.iter().collect();
        assert_eq!(items.len(), 4);
        assert!(items[0].is_ok() && items[3].is_ok());
        let e1 = items[1].as_ref().unwrap_err().to_string();
        assert!(e1.contains("batch 1 is unreadable"), "{e1}");
        let e2 = items[2].as_ref().unwrap_err().to_string();
        assert!(e2.contains("building a batch panicked: probe panics on batch 2"), "{e2}");
        assert_eq!(items[3].as_ref().unwrap()[0].to_vec::<i64>().unwrap()[0], 30);
    }
}

#[test]
fn the_transform_runs_on_the_worker_thread() {
    for prefetch in [0, 3] {
        let seen: Arc<Mutex<Vec<ThreadId>>> = Arc::default();
        let log = seen.clone();
        let loader = DataLoader::builder(numbered(20))
            .batch_size(5)
            .prefetch(prefetch)
            .transform(move |b| {
                log.lock().push(std::thread::current().id());
                Ok(b)
            })
            .build()
            .unwrap();
        assert_eq!(loader.iter().count(), 4);
        let threads = seen.lock().clone();
        assert_eq!(threads.len(), 4);
        let here = std::thread::current().id();
        assert!(threads.iter().all(|&t| (t == here) == (prefetch == 0)), "prefetch {prefetch}: {threads:?}");
    }
}

#[test]
fn transform_errors_are_batch_errors() {
    let loader = DataLoader::builder(numbered(6))
        .batch_size(3)
        .transform(ember_data::transform::images_to_f32(true))
        .build()
        .unwrap();
    let e = loader.iter().next().unwrap().unwrap_err().to_string();
    assert!(e.contains("images_to_f32: expected u8 images in field 0, got i64"), "{e}");
}

#[test]
fn invalid_settings_are_errors() {
    let e = DataLoader::new(numbered(10), 0).unwrap_err().to_string();
    assert!(e.contains("the batch size must be at least 1"), "{e}");
    assert!(DataLoader::builder(numbered(10)).batch_size(0).shuffle(true).build().is_err());
    let images = Tensor::zeros([10, 28, 28], DType::U8).unwrap();
    let labels = Tensor::zeros([9], DType::I64).unwrap();
    let e = TensorDataset::new(vec![images, labels]).unwrap_err().to_string();
    assert!(e.contains("holds 9 samples but field 0"), "{e}");
}

#[test]
fn loaders_work_over_shared_and_dynamic_datasets() {
    let shared: Arc<dyn Dataset> = Arc::new(numbered(9));
    let a = DataLoader::builder_shared(shared.clone()).batch_size(4).prefetch(1).build().unwrap();
    let b = DataLoader::builder_shared(shared).batch_size(3).prefetch(0).build().unwrap();
    assert_eq!(ids(a.iter()).concat(), ids(b.iter()).concat());
    assert_eq!(a.dataset().len(), 9);
    let mut n = 0;
    for batch in &b {
        n += batch.unwrap()[0].numel();
    }
    assert_eq!(n, 9);
    let empty = DataLoader::new(numbered(0), 4).unwrap();
    assert_eq!(empty.len(), 0);
    assert_eq!(empty.iter().count(), 0);
    assert!(format!("{a:?}").contains("batch_size: 4"));
}

/// Every other sample, in reverse, shifted by the epoch.
struct EveryOtherReversed(usize);

impl Sampler for EveryOtherReversed {
    fn len(&self) -> usize {
        self.0.div_ceil(2)
    }
    fn indices(&self, epoch: u64) -> Vec<usize> {
        (0..self.0).rev().step_by(2).map(|i| (i + epoch as usize) % self.0).collect()
    }
}

#[test]
fn a_sampler_chooses_each_epoch_indices() {
    let loader = DataLoader::builder(numbered(7)).batch_size(3).sampler(EveryOtherReversed(7)).build().unwrap();
    assert_eq!(loader.len(), 2);
    assert_eq!(ids(loader.iter()).concat(), vec![6, 4, 2, 0]);
    assert_eq!(ids(loader.iter()).concat(), vec![0, 5, 3, 1], "the loader passes its epoch");
    let e = DataLoader::builder(numbered(7)).shuffle(true).sampler(EveryOtherReversed(7)).build().unwrap_err();
    assert!(e.to_string().contains("sampler is mutually exclusive with shuffle"), "{e}");
}
