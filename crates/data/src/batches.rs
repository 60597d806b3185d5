//! [`Batches`], the iterator over one epoch of a [`DataLoader`](crate::DataLoader), and the
//! schedule it follows.

use crate::prefetch::Worker;
use ember_tensor::{Error, Result, Tensor};
use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

/// Builds the batch of the given sample indices: the dataset's `get_batch` followed by the
/// loader's transform.
pub(crate) type BuildBatch = Arc<dyn Fn(&[usize]) -> Result<Vec<Tensor>> + Send + Sync>;

/// One epoch's schedule: the sample order cut into batches, and how to build each batch.
/// It runs on the consuming thread or on a prefetch worker alike, so both produce the same
/// batches.
#[derive(Clone)]
pub(crate) struct Plan {
    build: BuildBatch,
    /// Shared so that a copy for a fallback costs no allocation.
    order: Arc<[usize]>,
    batch_size: usize,
    num_batches: usize,
    next: usize,
}

impl Plan {
    /// `num_batches` batches of `batch_size` samples in `order`; the last may be shorter.
    pub(crate) fn new(build: BuildBatch, order: Arc<[usize]>, batch_size: usize, num_batches: usize) -> Plan {
        Plan { build, order, batch_size, num_batches, next: 0 }
    }

    /// Batches not yet built.
    pub(crate) fn remaining(&self) -> usize {
        self.num_batches - self.next
    }

    /// The next batch, `None` at the end of the epoch. A panic in the dataset or the
    /// transform is returned as an error, so that it reaches the training loop the same way
    /// from a worker thread as from the consuming one.
    pub(crate) fn next_batch(&mut self) -> Option<Result<Vec<Tensor>>> {
        if self.next >= self.num_batches {
            return None;
        }
        let start = self.next * self.batch_size;
        let end = (start + self.batch_size).min(self.order.len());
        self.next += 1;
        let indices = &self.order[start..end];
        let build = &self.build;
        Some(catch_unwind(AssertUnwindSafe(|| build(indices))).unwrap_or_else(|payload| {
            Err(Error::invalid("DataLoader", format!("building a batch panicked: {}", panic_message(&*payload))))
        }))
    }
}

/// The text of a panic payload (`panic!` gives a `&str` or a `String`).
fn panic_message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// The batches of one epoch, in order: `Ok` with one tensor per dataset field (after the
/// loader's transform), or the error that building that batch gave.
///
/// Every batch of the epoch yields exactly one item, so the iterator's length is the
/// loader's [`len`](crate::DataLoader::len) whether or not some batches fail; stop at the
/// first error with `?` if it should end the epoch.
///
/// With prefetch, a worker thread builds the batches ahead; dropping the iterator before
/// the end stops the worker and waits for it (at most the batch it is building).
pub struct Batches {
    source: Source,
    remaining: usize,
}

enum Source {
    /// Batches built on demand on the consuming thread.
    Inline(Plan),
    /// Batches built ahead on a worker thread.
    Prefetch(Worker),
}

impl Batches {
    /// Batches of `plan`, built `prefetch` ahead on a worker thread (on demand when 0).
    pub(crate) fn new(plan: Plan, prefetch: usize) -> Batches {
        let remaining = plan.remaining();
        let source = if prefetch == 0 || remaining == 0 {
            Source::Inline(plan)
        } else {
            // Without a thread (the system refused one) the batches are still correct, only
            // built on demand.
            match Worker::spawn(plan.clone(), prefetch) {
                Some(worker) => Source::Prefetch(worker),
                None => Source::Inline(plan),
            }
        };
        Batches { source, remaining }
    }

    /// Whether a worker thread builds the batches.
    pub fn is_prefetching(&self) -> bool {
        matches!(self.source, Source::Prefetch(_))
    }
}

impl Iterator for Batches {
    type Item = Result<Vec<Tensor>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        let item = match &mut self.source {
            Source::Inline(plan) => plan.next_batch(),
            Source::Prefetch(worker) => Some(worker.recv()),
        };
        self.remaining -= 1;
        item
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for Batches {}

impl std::iter::FusedIterator for Batches {}

impl std::fmt::Debug for Batches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batches")
            .field("remaining", &self.remaining)
            .field("prefetching", &self.is_prefetching())
            .finish()
    }
}
