//! The moves a process group's transport makes on host buffers, run on the group's
//! communication thread.

use crate::header::WORDS;
use crate::host_buf::{HostBuf, HostSlice};
use crate::reduce_op::ReduceOp;
use ember_tensor::Result;

/// A communicator: the primitive collectives over host buffers. The shared code
/// ([`crate::comm::Comm`]) checks the ranks' headers first, so a transport may assume that
/// every rank calls the same primitive with buffers of one dtype and length. `op` names the
/// user's collective for messages.
pub(crate) trait Transport: Send + 'static {
    fn rank(&self) -> usize;
    fn world_size(&self) -> usize;
    /// Every rank's header, indexed by rank.
    fn exchange_headers(&mut self, op: &'static str, header: [u64; WORDS]) -> Result<Vec<[u64; WORDS]>>;
    /// Whether the communication thread may reduce a contiguous host tensor where it lies
    /// ([`Transport::all_reduce_slice`]), holding its storage's lock while it waits for the
    /// peers: true where every rank's tensor is its own (ranks are processes); false where
    /// ranks share an address space and one tensor may be handed to several of them, whose
    /// communication threads would then wait for each other's lock.
    const IN_PLACE: bool;
    /// In place; `op` is `Sum`, `Max` or `Min` (averages are sums divided afterwards).
    fn all_reduce(&mut self, op: &'static str, buf: &mut HostBuf, reduce: ReduceOp) -> Result<()>;
    /// [`Transport::all_reduce`] on a tensor's own elements, where `reduce` may also be `Avg`
    /// (the sum divided by the world size, rounded as [`HostBuf::scale`] rounds it); by
    /// default through a copy, divided after the sum.
    fn all_reduce_slice(&mut self, op: &'static str, mut buf: HostSlice<'_>, reduce: ReduceOp) -> Result<()> {
        let mut copy = buf.to_buf();
        self.all_reduce(op, &mut copy, reduce.summed())?;
        if reduce == ReduceOp::Avg {
            copy.scale(1.0 / self.world_size() as f64);
        }
        buf.copy_from(op, &copy)
    }
    fn broadcast(&mut self, op: &'static str, buf: &mut HostBuf, root: usize) -> Result<()>;
    /// Every rank's buffer, indexed by rank.
    fn all_gather(&mut self, op: &'static str, buf: &HostBuf) -> Result<Vec<HostBuf>>;
    /// `buf` holds `world_size` equal chunks; returns the reduction of every rank's chunk
    /// `rank` (`Sum`, `Max` or `Min`).
    fn reduce_scatter(&mut self, op: &'static str, buf: &HostBuf, reduce: ReduceOp) -> Result<HostBuf>;
    fn barrier(&mut self, op: &'static str) -> Result<()>;
    /// The communicator of `ranks` (already checked to be the same list on every rank);
    /// `None` on ranks outside it. Collective over this communicator.
    fn split(&mut self, ranks: &[usize]) -> Result<Option<Self>>
    where
        Self: Sized;
}
