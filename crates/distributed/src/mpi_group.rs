//! [`MpiGroup`]: ranks as MPI processes (cargo feature `mpi`), over rsmpi.
//!
//! Non-blocking collectives run as blocking MPI collectives on the group's communication
//! thread rather than as MPI's immediate collectives (`MPI_Iallreduce`): Open MPI, like
//! most MPI libraries, progresses an immediate collective only while some thread is inside
//! an MPI call, so overlap would need the training thread to poll MPI in the middle of
//! backward. A thread that sits in the blocking call progresses it on its own (what
//! PyTorch's Gloo backend does too). MPI is therefore initialised with
//! `MPI_THREAD_MULTIPLE`, since sub-groups have their own communication threads.

use crate::comm::{Comm, forward_process_group};
use crate::header::WORDS;
use crate::host_buf::{HostBuf, HostSlice};
use crate::reduce_op::ReduceOp;
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
pub struct MpiGroup {
    comm: Comm<MpiTransport>,
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

impl MpiGroup {
    /// Initialises MPI (with `MPI_THREAD_MULTIPLE`) and returns the group of every process
    /// of the job. Once per process: an error if MPI is already initialised, or if the MPI
    /// library does not support threads.
    pub fn world() -> Result<MpiGroup> {
        let (universe, threading) = mpi::initialize_with_threading(Threading::Multiple)
            .ok_or_else(|| Error::invalid("MpiGroup::world", "MPI is already initialised in this process"))?;
        if threading != Threading::Multiple {
            return Err(Error::invalid(
                "MpiGroup::world",
                format!("the MPI library provides thread level {threading:?}, ember needs Multiple"),
            ));
        }
        let universe = Arc::new(universe);
        let transport = MpiTransport::new(universe.world(), universe.clone());
        Ok(MpiGroup { comm: Comm::start(transport, "mpi")?, _universe: universe })
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
    comm: SendComm,
    rank: usize,
    size: usize,
    /// The receive buffers of in-place all-reduces, kept from one to the next so that a
    /// training step allocates nothing (rsmpi has no `MPI_IN_PLACE`).
    scratch: Scratch,
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
    fn new(comm: SimpleCommunicator, universe: Arc<Universe>) -> MpiTransport {
        let (rank, size) = (comm.rank() as usize, comm.size() as usize);
        MpiTransport { comm: SendComm(comm), rank, size, scratch: Scratch::default(), _universe: universe }
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
        let mut all = vec![0u64; WORDS * self.size];
        self.comm.0.all_gather_into(&header[..], &mut all[..]);
        Ok(all.chunks_exact(WORDS).map(|c| std::array::from_fn(|i| c[i])).collect())
    }

    fn all_reduce_slice(&mut self, _op: &'static str, buf: HostSlice<'_>, reduce: ReduceOp) -> Result<()> {
        let (c, s) = (&self.comm.0, &mut self.scratch);
        match buf {
            HostSlice::F32(v) => all_reduce_through(c, v, &mut s.f32, system_op(reduce)),
            HostSlice::F64(v) => all_reduce_through(c, v, &mut s.f64, system_op(reduce)),
            HostSlice::I64(v) => all_reduce_through(c, v, &mut s.i64, system_op(reduce)),
        }
        Ok(())
    }

    fn all_reduce(&mut self, _op: &'static str, buf: &mut HostBuf, reduce: ReduceOp) -> Result<()> {
        let c = &self.comm.0;
        match buf {
            HostBuf::F32(v) => {
                let mut out = vec![0f32; v.len()];
                c.all_reduce_into(&v[..], &mut out[..], system_op(reduce));
                *v = out;
            }
            HostBuf::F64(v) => {
                let mut out = vec![0f64; v.len()];
                c.all_reduce_into(&v[..], &mut out[..], system_op(reduce));
                *v = out;
            }
            HostBuf::I64(v) => {
                let mut out = vec![0i64; v.len()];
                c.all_reduce_into(&v[..], &mut out[..], system_op(reduce));
                *v = out;
            }
        }
        Ok(())
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
        self.comm.0.barrier();
        Ok(())
    }

    fn split(&mut self, ranks: &[usize]) -> Result<Option<MpiTransport>> {
        let pos = ranks.iter().position(|&r| r == self.rank);
        let color = if pos.is_some() { Color::with_value(0) } else { Color::undefined() };
        let sub = self.comm.0.split_by_color_with_key(color, pos.unwrap_or(0) as i32);
        Ok(sub.map(|c| MpiTransport::new(c, self._universe.clone())))
    }
}
