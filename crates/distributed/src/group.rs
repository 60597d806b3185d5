//! The [`ProcessGroup`] trait and the [`Work`] handle of a non-blocking collective.

use crate::reduce_op::ReduceOp;
use ember_tensor::{Error, Result, Tensor};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

/// A set of ranks that run collectives together (PyTorch's `ProcessGroup`).
///
/// Every rank of the group must call the same collectives in the same order; the
/// collectives compare what the ranks brought (collective, dtype, shape, root) before any
/// data moves, and a mismatch is an error on every rank that names the ranks and shapes.
/// Collectives carry `f32`, `f64` and `i64` tensors (`Avg` only floats).
///
/// Each collective has a blocking form and a non-blocking `_async` form that returns a
/// [`Work`] handle at once; the collectives of one group run in the order they were
/// issued, on the group's communication thread, while the caller keeps computing.
/// Non-blocking collectives read their input when they are issued, except that `all_reduce`
/// may reduce a contiguous host tensor where it lies, on the communication thread (MPI
/// does, so that nothing is copied in or out); `all_reduce` and `broadcast` write their
/// result into the tensor. So the tensor must be neither read nor written until
/// [`Work::wait`] returns (as in PyTorch).
///
/// ```
/// use ember_distributed::{LocalGroup, ProcessGroup, ReduceOp};
/// use ember_tensor::Tensor;
/// let sums = LocalGroup::spawn(2, |group| {
///     let t = Tensor::from_vec(vec![group.rank() as f32 + 1.0; 3], [3])?;
///     group.all_reduce(&t, ReduceOp::Sum)?;
///     t.to_vec::<f32>()
/// });
/// for s in sums {
///     assert_eq!(s?, vec![3.0; 3]);
/// }
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub trait ProcessGroup: Send + Sync + std::fmt::Debug {
    /// This process's (or thread's) rank in the group, `0..world_size`.
    fn rank(&self) -> usize;

    /// The number of ranks in the group.
    fn world_size(&self) -> usize;

    /// The transport's name: `local` or `mpi`.
    fn backend(&self) -> &'static str;

    /// Starts combining `tensor` across ranks with `op`; the result replaces `tensor` on
    /// every rank.
    fn all_reduce_async(&self, tensor: &Tensor, op: ReduceOp) -> Result<Work<()>>;

    /// Starts copying rank `root`'s `tensor` into `tensor` on every other rank.
    fn broadcast_async(&self, tensor: &Tensor, root: usize) -> Result<Work<()>>;

    /// Starts gathering every rank's `tensor` (same shape and dtype on all ranks); the
    /// result holds rank `r`'s tensor at index `r`.
    fn all_gather_async(&self, tensor: &Tensor) -> Result<Work<Vec<Tensor>>>;

    /// Starts a reduce-scatter: `inputs` holds one tensor per rank (all of one shape);
    /// rank `r` receives the reduction with `op` of every rank's `inputs[r]`.
    fn reduce_scatter_async(&self, inputs: &[Tensor], op: ReduceOp) -> Result<Work<Tensor>>;

    /// Starts a barrier: completes once every rank has reached it.
    fn barrier_async(&self) -> Result<Work<()>>;

    /// A sub-group of the listed ranks (ranks of this group, distinct; their order sets
    /// the ranks in the new group), like PyTorch's `new_group`. Every rank of this group
    /// must call it, with the same list; ranks outside the list get `None`.
    fn new_group(&self, ranks: &[usize]) -> Result<Option<Box<dyn ProcessGroup>>>;

    /// [`all_reduce_async`](ProcessGroup::all_reduce_async), waited for.
    fn all_reduce(&self, tensor: &Tensor, op: ReduceOp) -> Result<()> {
        self.all_reduce_async(tensor, op)?.wait()
    }

    /// [`broadcast_async`](ProcessGroup::broadcast_async), waited for.
    fn broadcast(&self, tensor: &Tensor, root: usize) -> Result<()> {
        self.broadcast_async(tensor, root)?.wait()
    }

    /// [`all_gather_async`](ProcessGroup::all_gather_async), waited for.
    fn all_gather(&self, tensor: &Tensor) -> Result<Vec<Tensor>> {
        self.all_gather_async(tensor)?.wait()
    }

    /// [`reduce_scatter_async`](ProcessGroup::reduce_scatter_async), waited for.
    fn reduce_scatter(&self, inputs: &[Tensor], op: ReduceOp) -> Result<Tensor> {
        self.reduce_scatter_async(inputs, op)?.wait()
    }

    /// [`barrier_async`](ProcessGroup::barrier_async), waited for.
    fn barrier(&self) -> Result<()> {
        self.barrier_async()?.wait()
    }
}

/// What a communication thread sends back: the collective's result and how long it ran.
pub(crate) type Outcome<T> = (Result<T>, Duration);

/// The collective a [`Work`] waits for; named only when a message needs it, so that issuing
/// a collective formats nothing.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Issued {
    pub(crate) op: &'static str,
    /// The collective's number among those the group issued.
    pub(crate) n: u64,
    pub(crate) rank: usize,
    pub(crate) world_size: usize,
}

impl std::fmt::Display for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} #{} on rank {} of {}", self.op, self.n, self.rank, self.world_size)
    }
}

/// The handle of a non-blocking collective (PyTorch's `Work`); [`wait`](Work::wait) blocks
/// until it completed and returns its result. Dropping a handle without waiting does not
/// cancel the collective.
#[must_use = "a collective's result and errors arrive through wait()"]
pub struct Work<T> {
    state: WorkState<T>,
    what: Issued,
}

enum WorkState<T> {
    /// Running on the communication thread, which sends the outcome.
    Pending(Receiver<Outcome<T>>),
    /// Complete when issued.
    Done(Outcome<T>),
}

impl<T> std::fmt::Debug for Work<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Work").field("collective", &self.what.to_string()).finish()
    }
}

impl<T> Work<T> {
    pub(crate) fn new(rx: Receiver<Outcome<T>>, what: Issued) -> Work<T> {
        Work { state: WorkState::Pending(rx), what }
    }

    /// A collective already complete with `result` (one that a group of one rank has nothing
    /// to do for).
    pub(crate) fn ready(result: Result<T>, what: Issued) -> Work<T> {
        Work { state: WorkState::Done((result, Duration::ZERO)), what }
    }

    /// Blocks until the collective completed; its result or error.
    pub fn wait(self) -> Result<T> {
        self.wait_timed().0
    }

    /// Like [`wait`](Work::wait), also returning how long the collective ran on the
    /// communication thread (from its start there, after the collectives issued before
    /// it, to its end): the communication time that overlap can hide.
    pub fn wait_timed(self) -> (Result<T>, Duration) {
        let (outcome, _) = self.wait_exposed();
        outcome
    }

    /// Like [`wait_timed`](Work::wait_timed), also returning how long the caller was blocked:
    /// zero, with no clock read, when the collective had already completed.
    pub(crate) fn wait_exposed(self) -> (Outcome<T>, Duration) {
        let rx = match self.state {
            WorkState::Done(outcome) => return (outcome, Duration::ZERO),
            WorkState::Pending(rx) => rx,
        };
        let (received, blocked) = match rx.try_recv() {
            Ok(outcome) => (Ok(outcome), Duration::ZERO),
            Err(TryRecvError::Disconnected) => (Err(()), Duration::ZERO),
            Err(TryRecvError::Empty) => {
                let start = Instant::now();
                (rx.recv().map_err(|_| ()), start.elapsed())
            }
        };
        let outcome = received.unwrap_or_else(|()| {
            let e = Error::invalid(
                "wait",
                format!("{}: the group's communication thread stopped before completing it", self.what),
            );
            (Err(e), Duration::ZERO)
        });
        (outcome, blocked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::sync_channel;

    fn issued() -> Issued {
        Issued { op: "all_reduce", n: 7, rank: 1, world_size: 2 }
    }

    #[test]
    fn a_collective_already_complete_is_waited_for_without_blocking() {
        let (tx, rx) = sync_channel::<Outcome<u32>>(1);
        tx.send((Ok(5), Duration::from_millis(3))).unwrap();
        let ((result, ran), blocked) = Work::new(rx, issued()).wait_exposed();
        assert_eq!(result.unwrap(), 5);
        assert_eq!(ran, Duration::from_millis(3));
        assert_eq!(blocked, Duration::ZERO);

        let ((result, ran), blocked) = Work::ready(Ok(6), issued()).wait_exposed();
        assert_eq!((result.unwrap(), ran, blocked), (6, Duration::ZERO, Duration::ZERO));
    }

    #[test]
    fn a_collective_whose_thread_stopped_is_an_error_naming_it() {
        let (tx, rx) = sync_channel::<Outcome<()>>(1);
        drop(tx);
        let ((result, _), blocked) = Work::new(rx, issued()).wait_exposed();
        let msg = result.unwrap_err().to_string();
        assert!(msg.contains("all_reduce #7 on rank 1 of 2") && msg.contains("stopped"), "{msg}");
        assert_eq!(blocked, Duration::ZERO);
    }
}
