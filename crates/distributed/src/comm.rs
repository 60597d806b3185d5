//! [`Comm`]: a transport on its communication thread, as a [`ProcessGroup`]. The argument
//! checks, the cross-rank header comparison and the tensor conversions live here once for
//! every transport.

use crate::group::{Issued, Outcome, ProcessGroup, Work};
use crate::header::Header;
use crate::host_buf::{HostBuf, HostSlice};
use crate::reduce_op::ReduceOp;
use crate::transport::Transport;
use ember_tensor::{Error, Result, Tensor};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Sender, sync_channel};
use std::thread::JoinHandle;
use std::time::Instant;

type Job<T> = Box<dyn FnOnce(&mut T) + Send>;

/// A transport owned by its communication thread. Collectives are queued to the thread in
/// the order they are issued, which is the order every rank runs them in.
pub(crate) struct Comm<T: Transport> {
    rank: usize,
    world_size: usize,
    backend: &'static str,
    jobs: Mutex<Option<Sender<Job<T>>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Collectives issued so far, for messages.
    issued: AtomicU64,
}

impl<T: Transport> Comm<T> {
    /// Starts the communication thread of `transport`.
    pub(crate) fn start(transport: T, backend: &'static str) -> Result<Comm<T>> {
        let (rank, world_size) = (transport.rank(), transport.world_size());
        let (tx, rx) = std::sync::mpsc::channel::<Job<T>>();
        let thread = std::thread::Builder::new()
            .name(format!("ember-{backend}-comm-rank{rank}"))
            .spawn(move || {
                let mut transport = transport;
                while let Ok(job) = rx.recv() {
                    job(&mut transport);
                }
            })
            .map_err(|e| {
                Error::invalid("ProcessGroup", format!("rank {rank}: cannot start the communication thread: {e}"))
            })?;
        Ok(Comm {
            rank,
            world_size,
            backend,
            jobs: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
            issued: AtomicU64::new(0),
        })
    }

    /// Queues `f` on the communication thread.
    fn submit<R: Send + 'static>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut T) -> Result<R> + Send + 'static,
    ) -> Result<Work<R>> {
        let what = self.issue(op);
        let (tx, rx) = sync_channel::<Outcome<R>>(1);
        let job: Job<T> = Box::new(move |t: &mut T| {
            let start = Instant::now();
            let result = f(t);
            // The receiver may be gone (a dropped `Work`): nothing to tell then.
            let _ = tx.send((result, start.elapsed()));
        });
        let jobs = self.jobs.lock();
        let sent = jobs.as_ref().map(|s| s.send(job).is_ok()).unwrap_or(false);
        if !sent {
            return Err(Error::invalid(op, format!("{what}: the group's communication thread has stopped")));
        }
        Ok(Work::new(rx, what))
    }

    /// Queues `f` on the communication thread after the ranks agreed on `header` (for
    /// collectives a transport adds, such as copying a communicator).
    #[cfg(feature = "mpi")]
    pub(crate) fn call<R: Send + 'static>(
        &self,
        op: &'static str,
        header: Header,
        f: impl FnOnce(&mut T) -> Result<R> + Send + 'static,
    ) -> Result<Work<R>> {
        self.submit(op, move |t| {
            agree(t, op, &header)?;
            f(t)
        })
    }

    /// Numbers the next collective.
    fn issue(&self, op: &'static str) -> Issued {
        let n = self.issued.fetch_add(1, Ordering::Relaxed) + 1;
        Issued { op, n, rank: self.rank, world_size: self.world_size }
    }

    /// Averages are for floats (PyTorch refuses integer averages too).
    fn check_avg(&self, op: &'static str, reduce: ReduceOp, t: &Tensor) -> Result<()> {
        if reduce == ReduceOp::Avg && !t.dtype().is_float() {
            return Err(Error::dtype(
                op,
                format!(
                    "rank {}: avg needs a float tensor, got {} of shape {:?}",
                    self.rank,
                    t.dtype(),
                    t.shape().dims()
                ),
            ));
        }
        Ok(())
    }

    fn check_root(&self, op: &'static str, root: usize) -> Result<()> {
        if root >= self.world_size {
            return Err(Error::invalid(
                op,
                format!("rank {}: root {root} is not a rank of a group of {}", self.rank, self.world_size),
            ));
        }
        Ok(())
    }
}

/// Compares `header` with every rank's.
fn agree<T: Transport>(t: &mut T, op: &'static str, header: &Header) -> Result<()> {
    let all = t.exchange_headers(op, header.encode())?;
    Header::check_all(op, t.rank(), &all)
}

impl<T: Transport> std::fmt::Debug for Comm<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessGroup")
            .field("backend", &self.backend)
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .finish()
    }
}

impl<T: Transport> Drop for Comm<T> {
    fn drop(&mut self) {
        // Closing the queue ends the thread after the collectives already queued; the
        // transport drops there, which tells the peers this rank left.
        self.jobs.lock().take();
        if let Some(h) = self.thread.lock().take() {
            let _ = h.join();
        }
    }
}

impl<T: Transport> ProcessGroup for Comm<T> {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world_size
    }

    fn backend(&self) -> &'static str {
        self.backend
    }

    fn all_reduce_async(&self, tensor: &Tensor, op: ReduceOp) -> Result<Work<()>> {
        const OP: &str = "all_reduce";
        self.check_avg(OP, op, tensor)?;
        HostBuf::check_dtype(OP, self.rank, tensor)?;
        let world = self.world_size;
        if world == 1 {
            // Every reduction of one rank's contribution is that contribution, and one rank
            // always agrees with itself: nothing to move, nothing to wait for.
            return Ok(Work::ready(Ok(()), self.issue(OP)));
        }
        let header = Header::new(OP, Some(tensor.dtype()), op.code(), tensor.shape().dims());
        let prim = op.summed();
        if T::IN_PLACE && HostSlice::fits(tensor) {
            // The tensor's own elements, without a copy in or out (DDP's gradient buckets).
            let tensor = tensor.clone();
            return self.submit(OP, move |t| {
                agree(t, OP, &header)?;
                HostSlice::with(OP, &tensor, |slice| t.all_reduce_slice(OP, slice, op))
            });
        }
        let mut buf = HostBuf::read(OP, self.rank, tensor)?;
        let tensor = tensor.clone();
        self.submit(OP, move |t| {
            agree(t, OP, &header)?;
            t.all_reduce(OP, &mut buf, prim)?;
            if op == ReduceOp::Avg {
                buf.scale(1.0 / world as f64);
            }
            buf.write_into(&tensor)
        })
    }

    fn broadcast_async(&self, tensor: &Tensor, root: usize) -> Result<Work<()>> {
        const OP: &str = "broadcast";
        self.check_root(OP, root)?;
        let mut buf = HostBuf::read(OP, self.rank, tensor)?;
        let header = Header::new(OP, Some(tensor.dtype()), root as u64, tensor.shape().dims());
        let tensor = tensor.clone();
        let is_root = self.rank == root;
        self.submit(OP, move |t| {
            agree(t, OP, &header)?;
            t.broadcast(OP, &mut buf, root)?;
            if is_root { Ok(()) } else { buf.write_into(&tensor) }
        })
    }

    fn all_gather_async(&self, tensor: &Tensor) -> Result<Work<Vec<Tensor>>> {
        const OP: &str = "all_gather";
        let buf = HostBuf::read(OP, self.rank, tensor)?;
        let dims = tensor.shape().dims().to_vec();
        let (dtype, device) = (tensor.dtype(), tensor.device());
        let header = Header::new(OP, Some(dtype), 0, &dims);
        self.submit(OP, move |t| {
            agree(t, OP, &header)?;
            t.all_gather(OP, &buf)?.into_iter().map(|b| b.into_tensor(&dims, dtype, device)).collect()
        })
    }

    fn reduce_scatter_async(&self, inputs: &[Tensor], op: ReduceOp) -> Result<Work<Tensor>> {
        const OP: &str = "reduce_scatter";
        if inputs.len() != self.world_size {
            return Err(Error::invalid(
                OP,
                format!("rank {}: expected one input per rank ({}), got {}", self.rank, self.world_size, inputs.len()),
            ));
        }
        let first = &inputs[0];
        let dims = first.shape().dims().to_vec();
        if let Some((i, t)) =
            inputs.iter().enumerate().find(|(_, t)| t.shape().dims() != dims || t.dtype() != first.dtype())
        {
            return Err(Error::shape(
                OP,
                format!(
                    "rank {}: the inputs must share shape and dtype: input 0 is {} {:?} but input {i} is {} {:?}",
                    self.rank,
                    first.dtype(),
                    dims,
                    t.dtype(),
                    t.shape().dims()
                ),
            ));
        }
        self.check_avg(OP, op, first)?;
        let mut buf = HostBuf::read(OP, self.rank, first)?;
        for t in &inputs[1..] {
            buf.extend(&HostBuf::read(OP, self.rank, t)?);
        }
        let header = Header::new(OP, Some(first.dtype()), op.code(), &dims);
        let world = self.world_size;
        let (dtype, device) = (first.dtype(), first.device());
        self.submit(OP, move |t| {
            agree(t, OP, &header)?;
            let prim = op.summed();
            let mut out = t.reduce_scatter(OP, &buf, prim)?;
            if op == ReduceOp::Avg {
                out.scale(1.0 / world as f64);
            }
            out.into_tensor(&dims, dtype, device)
        })
    }

    fn barrier_async(&self) -> Result<Work<()>> {
        const OP: &str = "barrier";
        let header = Header::new(OP, None, 0, &[]);
        self.submit(OP, move |t| {
            agree(t, OP, &header)?;
            t.barrier(OP)
        })
    }

    fn new_group(&self, ranks: &[usize]) -> Result<Option<Box<dyn ProcessGroup>>> {
        const OP: &str = "new_group";
        let mut seen = vec![false; self.world_size];
        for &r in ranks {
            if r >= self.world_size || std::mem::replace(&mut seen[r], true) {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "rank {}: ranks {ranks:?} must be distinct ranks of a group of {}",
                        self.rank, self.world_size
                    ),
                ));
            }
        }
        let header = Header::new(OP, None, ranks.len() as u64, ranks);
        let ranks = ranks.to_vec();
        let backend = self.backend;
        let sub = self.submit(OP, move |t| {
            agree(t, OP, &header)?;
            t.split(&ranks)
        })?;
        match sub.wait()? {
            Some(transport) => Ok(Some(Box::new(Comm::start(transport, backend)?))),
            None => Ok(None),
        }
    }
}

/// Implements [`ProcessGroup`] for a public group type by forwarding to its `Comm` field.
macro_rules! forward_process_group {
    ($ty:ty, $field:ident) => {
        impl $crate::group::ProcessGroup for $ty {
            fn rank(&self) -> usize {
                self.$field.rank()
            }
            fn world_size(&self) -> usize {
                self.$field.world_size()
            }
            fn backend(&self) -> &'static str {
                self.$field.backend()
            }
            fn all_reduce_async(
                &self,
                tensor: &ember_tensor::Tensor,
                op: $crate::ReduceOp,
            ) -> ember_tensor::Result<$crate::Work<()>> {
                self.$field.all_reduce_async(tensor, op)
            }
            fn broadcast_async(
                &self,
                tensor: &ember_tensor::Tensor,
                root: usize,
            ) -> ember_tensor::Result<$crate::Work<()>> {
                self.$field.broadcast_async(tensor, root)
            }
            fn all_gather_async(
                &self,
                tensor: &ember_tensor::Tensor,
            ) -> ember_tensor::Result<$crate::Work<Vec<ember_tensor::Tensor>>> {
                self.$field.all_gather_async(tensor)
            }
            fn reduce_scatter_async(
                &self,
                inputs: &[ember_tensor::Tensor],
                op: $crate::ReduceOp,
            ) -> ember_tensor::Result<$crate::Work<ember_tensor::Tensor>> {
                self.$field.reduce_scatter_async(inputs, op)
            }
            fn barrier_async(&self) -> ember_tensor::Result<$crate::Work<()>> {
                self.$field.barrier_async()
            }
            fn new_group(&self, ranks: &[usize]) -> ember_tensor::Result<Option<Box<dyn $crate::group::ProcessGroup>>> {
                self.$field.new_group(ranks)
            }
        }
    };
}
pub(crate) use forward_process_group;
