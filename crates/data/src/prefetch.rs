//! The prefetch worker: a thread that builds an epoch's batches ahead of the training loop
//! and hands them over through a bounded channel.

use crate::batches::Plan;
use ember_tensor::{Error, Result, Tensor};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::{self, JoinHandle};

/// A thread running a [`Plan`], at most `ahead` batches in front of the consumer.
///
/// Dropping the worker stops it: the stop flag keeps it from starting another batch, and
/// closing the channel wakes it if it is waiting for room. The drop then joins the thread,
/// so no worker outlives its iterator, still holding the dataset.
pub(crate) struct Worker {
    /// `None` only while dropping.
    rx: Option<Receiver<Result<Vec<Tensor>>>>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Worker {
    /// Starts a worker for `plan`; `None` when the system refuses a thread.
    pub(crate) fn spawn(plan: Plan, ahead: usize) -> Option<Worker> {
        // The worker holds one finished batch while it waits to send, so the channel keeps
        // one fewer; a capacity of 0 is a rendezvous, i.e. one batch ahead.
        let (tx, rx) = sync_channel(ahead.saturating_sub(1));
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle =
            thread::Builder::new().name("ember-data-prefetch".into()).spawn(move || run(plan, &tx, &flag)).ok()?;
        Some(Worker { rx: Some(rx), stop, handle: Some(handle) })
    }

    /// The next batch, waiting for the worker to build it. Only called while the plan has
    /// batches left, each of which the worker sends.
    pub(crate) fn recv(&mut self) -> Result<Vec<Tensor>> {
        let disconnected = || Error::invalid("DataLoader", "the prefetch worker stopped before the end of the epoch");
        self.rx.as_ref().ok_or_else(disconnected)?.recv().unwrap_or_else(|_| Err(disconnected()))
    }
}

/// The worker's loop. Batch errors and panics travel through the channel as items (the
/// plan catches panics); it ends at the end of the plan or when the consumer is gone.
fn run(mut plan: Plan, tx: &SyncSender<Result<Vec<Tensor>>>, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        let Some(batch) = plan.next_batch() else { return };
        if tx.send(batch).is_err() {
            return;
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        drop(self.rx.take());
        if let Some(handle) = self.handle.take() {
            // The loop catches panics from user code, so the thread cannot have panicked; a
            // join error would carry nothing to report anyway.
            let _ = handle.join();
        }
    }
}
