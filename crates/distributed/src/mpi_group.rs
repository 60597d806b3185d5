//! [`MpiGroup`]: ranks as MPI processes (cargo feature `mpi`), over rsmpi.
//!
//! Non-blocking collectives run as blocking MPI collectives on the group's communication
//! thread rather than as MPI's immediate collectives (`MPI_Iallreduce`): Open MPI, like
//! most MPI libraries, progresses an immediate collective only while some thread is inside
//! an MPI call, so overlap would need the training thread to poll MPI in the middle of
//! backward. A thread that sits in the blocking call progresses it on its own (what
//! PyTorch's Gloo backend does too). MPI is therefore initialised with
//! `MPI_THREAD_MULTIPLE`, since sub-groups have their own communication threads.
//!
//! Where every rank runs on one host, `all_reduce`, `barrier` and the header comparison go
//! through a shared-memory window instead of MPI's messages ([`crate::mpi_shm`]).

use crate::comm::{Comm, forward_process_group};
use crate::header::{Header, WORDS};
use crate::host_buf::{HostBuf, HostSlice};
use crate::mpi_shm::MpiShm;
use crate::reduce_op::ReduceOp;
use crate::shm::ShmElem;
use crate::transport::Transport;
use ember_tensor::{Error, Result};
use mpi::Threading;
use mpi::collective::SystemOperation;
use mpi::datatype::Equivalence;
use mpi::environment::Universe;
use mpi::topology::{Color, SimpleCommunicator};
use mpi::traits::{Communicator, CommunicatorCollectives, Root};
use std::sync::Arc;

/// A process group whose ranks are the processes of an MPI job (`mpirun -np N ...`).
///
/// [`MpiGroup::world`] initialises MPI and returns the group of all processes
/// (`MPI_COMM_WORLD`); [`new_group`](crate::ProcessGroup::new_group) splits it. MPI is
/// finalised when the world group drops (drop sub-groups before it).
///
/// Failures: MPI's default error handler aborts the job, and `mpirun` kills every rank when
/// one process exits with an error or without finalising MPI, so a rank that fails or exits
/// ends the job instead of leaving the others hanging. Mismatched collectives, shapes or
/// dtypes are caught before any data moves and give errors on every rank, like
/// [`LocalGroup`](crate::LocalGroup)'s.
///
/// Ranks on one host all-reduce through shared memory ([`MpiOptions::shared_memory`]);
/// freeing its window is collective, so every rank drops its groups in the same order.
pub struct MpiGroup {
    comm: Comm<MpiTransport>,
    /// Whether `all_reduce` goes through shared memory.
    shared_memory: bool,
    /// Finalises MPI after the communication thread stopped (fields drop in order), on the
    /// thread that initialised it.
    _universe: Arc<Universe>,
}

forward_process_group!(MpiGroup, comm);

impl std::fmt::Debug for MpiGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::ProcessGroup;
        f.debug_struct("MpiGroup").field("rank", &self.rank()).field("world_size", &self.world_size()).finish()
    }
}

/// How an [`MpiGroup`] moves data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MpiOptions {
    /// When every rank of the group runs on one host, `all_reduce`, `barrier` and the
    /// ranks' header comparison go through a shared-memory window (`MPI_Win_allocate_shared`)
    /// that every rank maps, instead of MPI's messages: each rank combines its share of the
    /// elements straight from the others' buffers, in rank order, so every rank gets
    /// bit-identical results. On by default; ranks on several hosts always use MPI. Every
    /// rank must pass the same value or it is off for all.
    pub shared_memory: bool,
    /// The bytes of each of the two shared buffers per rank (rounded up to a page): larger
    /// all-reduces go through in pieces of this size. 4 MiB by default; the ranks use the
    /// smallest any of them asks for.
    pub shared_memory_bytes: usize,
}

impl Default for MpiOptions {
    fn default() -> MpiOptions {
        MpiOptions { shared_memory: true, shared_memory_bytes: 4 << 20 }
    }
}

impl MpiGroup {
    /// Initialises MPI (with `MPI_THREAD_MULTIPLE`) and returns the group of every process
    /// of the job, with the default [`MpiOptions`]. Once per process: an error if MPI is
    /// already initialised, or if the MPI library does not support threads.
    pub fn world() -> Result<MpiGroup> {
        MpiGroup::world_with_options(MpiOptions::default())
    }

    /// [`MpiGroup::world`] with `options` (every rank must pass the same).
    pub fn world_with_options(options: MpiOptions) -> Result<MpiGroup> {
        let (universe, threading) = mpi::initialize_with_threading(Threading::Multiple)
            .ok_or_else(|| Error::invalid("MpiGroup::world", "MPI is already initialised in this process"))?;
        if threading != Threading::Multiple {
            return Err(Error::invalid(
                "MpiGroup::world",
                format!("the MPI library provides thread level {threading:?}, ember needs Multiple"),
            ));
        }
        let universe = Arc::new(universe);
        let transport = MpiTransport::new(universe.world(), universe.clone(), options);
        let shared_memory = transport.shm.is_some();
        Ok(MpiGroup { comm: Comm::start(transport, "mpi")?, shared_memory, _universe: universe })
    }

    /// A group of the same ranks in the same order, with other options: collective, like
    /// [`new_group`](crate::ProcessGroup::new_group) with every rank. Drop it before the
    /// world group.
    pub fn duplicate(&self, options: MpiOptions) -> Result<MpiGroup> {
        use crate::ProcessGroup;
        const OP: &str = "new_group";
        let ranks: Vec<usize> = (0..self.comm.world_size()).collect();
        let header = Header::new(OP, None, ranks.len() as u64, &ranks);
        let transport = self.comm.call(OP, header, move |t| Ok(t.duplicate(options)))?.wait()?;
        let shared_memory = transport.shm.is_some();
        Ok(MpiGroup { comm: Comm::start(transport, "mpi")?, shared_memory, _universe: self._universe.clone() })
    }

    /// Whether `all_reduce` goes through shared memory ([`MpiOptions::shared_memory`]):
    /// asked for, every rank on one host, and MPI made the window.
    pub fn uses_shared_memory(&self) -> bool {
        self.shared_memory
    }
}

/// A communicator that may move to the communication thread.
struct SendComm(SimpleCommunicator);

// SAFETY: MPI runs with MPI_THREAD_MULTIPLE (checked in `MpiGroup::world`), under which an
// MPI handle may be used from any thread; each communicator is used by one thread only, its
// group's communication thread.
unsafe impl Send for SendComm {}

/// One process's end of an MPI communicator.
pub(crate) struct MpiTransport {
    /// The shared-memory path, where the ranks share a host; dropped (a collective
    /// `MPI_Win_free`) before the communicator.
    shm: Option<MpiShm>,
    comm: SendComm,
    rank: usize,
    size: usize,
    /// The receive buffers of in-place all-reduces, kept from one to the next so that a
    /// training step allocates nothing (rsmpi has no `MPI_IN_PLACE`).
    scratch: Scratch,
    /// What sub-groups are made with.
    options: MpiOptions,
    /// Keeps MPI initialised while the communicator lives (dropped after `comm`).
    _universe: Arc<Universe>,
}

#[derive(Default)]
struct Scratch {
    f32: Vec<f32>,
    f64: Vec<f64>,
    i64: Vec<i64>,
}

/// All-reduces `v` into `scratch` (grown to the largest bucket once) and copies the result
/// back.
fn all_reduce_through<T: Equivalence + Copy + Default>(
    c: &SimpleCommunicator,
    v: &mut [T],
    scratch: &mut Vec<T>,
    op: SystemOperation,
) {
    if scratch.len() < v.len() {
        scratch.resize(v.len(), T::default());
    }
    let out = &mut scratch[..v.len()];
    c.all_reduce_into(&v[..], &mut out[..], op);
    v.copy_from_slice(out);
}

impl MpiTransport {
    /// Collective over `comm` (the shared window).
    fn new(comm: SimpleCommunicator, universe: Arc<Universe>, options: MpiOptions) -> MpiTransport {
        let (rank, size) = (comm.rank() as usize, comm.size() as usize);
        let shm = MpiShm::create(&comm, options.shared_memory, options.shared_memory_bytes);
        MpiTransport {
            shm,
            comm: SendComm(comm),
            rank,
            size,
            scratch: Scratch::default(),
            options,
            _universe: universe,
        }
    }

    /// A transport over a copy of the communicator (collective).
    fn duplicate(&self, options: MpiOptions) -> MpiTransport {
        MpiTransport::new(self.comm.0.duplicate(), self._universe.clone(), options)
    }
}

/// All-reduces `v` in shared memory if there is a window, else through MPI.
fn all_reduce_in<T: Equivalence + ShmElem + Default>(
    shm: &mut Option<MpiShm>,
    c: &SimpleCommunicator,
    v: &mut [T],
    scratch: &mut Vec<T>,
    reduce: ReduceOp,
) {
    match shm {
        Some(shm) => shm.shm.all_reduce(v, reduce),
        None => all_reduce_through(c, v, scratch, system_op(reduce)),
    }
}

fn system_op(op: ReduceOp) -> SystemOperation {
    match op {
        ReduceOp::Sum | ReduceOp::Avg => SystemOperation::sum(),
        ReduceOp::Max => SystemOperation::max(),
        ReduceOp::Min => SystemOperation::min(),
    }
}

impl Transport for MpiTransport {
    const IN_PLACE: bool = true;

    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.size
    }

    fn exchange_headers(&mut self, _op: &'static str, header: [u64; WORDS]) -> Result<Vec<[u64; WORDS]>> {
        if let Some(shm) = &mut self.shm {
            return Ok(shm.shm.exchange_headers(header));
        }
        let mut all = vec![0u64; WORDS * self.size];
        self.comm.0.all_gather_into(&header[..], &mut all[..]);
        Ok(all.chunks_exact(WORDS).map(|c| std::array::from_fn(|i| c[i])).collect())
    }

    fn all_reduce_slice(&mut self, _op: &'static str, mut buf: HostSlice<'_>, reduce: ReduceOp) -> Result<()> {
        let (shm, c, s) = (&mut self.shm, &self.comm.0, &mut self.scratch);
        match buf.reborrow() {
            HostSlice::F32(v) => all_reduce_in(shm, c, v, &mut s.f32, reduce),
            HostSlice::F64(v) => all_reduce_in(shm, c, v, &mut s.f64, reduce),
            HostSlice::I64(v) => all_reduce_in(shm, c, v, &mut s.i64, reduce),
        }
        // The shared-memory path divides as it reduces; MPI's sum is divided here.
        if reduce == ReduceOp::Avg && self.shm.is_none() {
            buf.scale(1.0 / self.size as f64);
        }
        Ok(())
    }

    fn all_reduce(&mut self, op: &'static str, buf: &mut HostBuf, reduce: ReduceOp) -> Result<()> {
        let slice = match buf {
            HostBuf::F32(v) => HostSlice::F32(v),
            HostBuf::F64(v) => HostSlice::F64(v),
            HostBuf::I64(v) => HostSlice::I64(v),
        };
        self.all_reduce_slice(op, slice, reduce.summed())
    }

    fn broadcast(&mut self, _op: &'static str, buf: &mut HostBuf, root: usize) -> Result<()> {
        let root = self.comm.0.process_at_rank(root as i32);
        match buf {
            HostBuf::F32(v) => root.broadcast_into(&mut v[..]),
            HostBuf::F64(v) => root.broadcast_into(&mut v[..]),
            HostBuf::I64(v) => root.broadcast_into(&mut v[..]),
        }
        Ok(())
    }

    fn all_gather(&mut self, _op: &'static str, buf: &HostBuf) -> Result<Vec<HostBuf>> {
        let (c, n) = (&self.comm.0, buf.len());
        Ok(match buf {
            HostBuf::F32(v) => {
                let mut all = vec![0f32; n * self.size];
                c.all_gather_into(&v[..], &mut all[..]);
                all.chunks_exact(n.max(1)).take(self.size).map(|c| HostBuf::F32(c.to_vec())).collect()
            }
            HostBuf::F64(v) => {
                let mut all = vec![0f64; n * self.size];
                c.all_gather_into(&v[..], &mut all[..]);
                all.chunks_exact(n.max(1)).take(self.size).map(|c| HostBuf::F64(c.to_vec())).collect()
            }
            HostBuf::I64(v) => {
                let mut all = vec![0i64; n * self.size];
                c.all_gather_into(&v[..], &mut all[..]);
                all.chunks_exact(n.max(1)).take(self.size).map(|c| HostBuf::I64(c.to_vec())).collect()
            }
        })
        .map(|mut v: Vec<HostBuf>| {
            // Empty tensors gather to empty tensors.
            v.resize_with(self.size, || buf.empty_like());
            v
        })
    }

    fn reduce_scatter(&mut self, _op: &'static str, buf: &HostBuf, reduce: ReduceOp) -> Result<HostBuf> {
        let (c, chunk) = (&self.comm.0, buf.len() / self.size);
        Ok(match buf {
            HostBuf::F32(v) => {
                let mut out = vec![0f32; chunk];
                c.reduce_scatter_block_into(&v[..], &mut out[..], system_op(reduce));
                HostBuf::F32(out)
            }
            HostBuf::F64(v) => {
                let mut out = vec![0f64; chunk];
                c.reduce_scatter_block_into(&v[..], &mut out[..], system_op(reduce));
                HostBuf::F64(out)
            }
            HostBuf::I64(v) => {
                let mut out = vec![0i64; chunk];
                c.reduce_scatter_block_into(&v[..], &mut out[..], system_op(reduce));
                HostBuf::I64(out)
            }
        })
    }

    fn barrier(&mut self, _op: &'static str) -> Result<()> {
        match &mut self.shm {
            Some(shm) => shm.shm.barrier(),
            None => self.comm.0.barrier(),
        }
        Ok(())
    }

    fn split(&mut self, ranks: &[usize]) -> Result<Option<MpiTransport>> {
        let pos = ranks.iter().position(|&r| r == self.rank);
        let color = if pos.is_some() { Color::with_value(0) } else { Color::undefined() };
        let sub = self.comm.0.split_by_color_with_key(color, pos.unwrap_or(0) as i32);
        Ok(sub.map(|c| MpiTransport::new(c, self._universe.clone(), self.options)))
    }
}
