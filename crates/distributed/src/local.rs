//! [`LocalGroup`]: ranks as threads of one process, meeting in shared memory. For tests,
//! and for data-parallel code run without MPI.

use crate::comm::{Comm, forward_process_group};
use crate::header::WORDS;
use crate::host_buf::HostBuf;
use crate::reduce_op::ReduceOp;
use crate::transport::Transport;
use ember_tensor::{Error, Result};
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A process group whose ranks are threads of this process (no MPI needed).
///
/// Each rank holds its own `LocalGroup`; the ranks meet in shared memory, and each
/// collective combines the ranks' contributions in rank order, so every rank gets
/// bit-identical results. A rank that leaves (its group dropped: its thread returned, failed
/// or panicked) makes the other ranks' collectives that wait for it fail at once with an
/// error naming it; a collective that waits longer than the timeout fails too, and either
/// failure breaks the group (later collectives fail at once), so nothing hangs.
///
/// ```
/// use ember_distributed::{LocalGroup, ProcessGroup};
/// use ember_tensor::Tensor;
/// let results = LocalGroup::spawn(3, |group| {
///     let mine = Tensor::from_vec(vec![group.rank() as f64], [1])?;
///     let all = group.all_gather(&mine)?;
///     Ok(all.iter().map(|t| t.to_vec::<f64>().map(|v| v[0])).collect::<Result<Vec<_>, _>>()?)
/// });
/// for r in results {
///     assert_eq!(r?, vec![0.0, 1.0, 2.0]);
/// }
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub struct LocalGroup {
    comm: Comm<LocalTransport>,
}

forward_process_group!(LocalGroup, comm);

impl std::fmt::Debug for LocalGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::ProcessGroup;
        f.debug_struct("LocalGroup").field("rank", &self.rank()).field("world_size", &self.world_size()).finish()
    }
}

impl LocalGroup {
    /// How long a collective waits for the other ranks before failing, unless told
    /// otherwise (a rank that leaves is noticed at once, whatever the timeout).
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

    /// The `world_size` ranks of a new group, rank `r` at index `r`, each to be moved to
    /// its own thread.
    pub fn new_world(world_size: usize) -> Result<Vec<LocalGroup>> {
        LocalGroup::new_world_with_timeout(world_size, LocalGroup::DEFAULT_TIMEOUT)
    }

    /// [`new_world`](LocalGroup::new_world) with collectives that fail after waiting
    /// `timeout` for the other ranks.
    pub fn new_world_with_timeout(world_size: usize, timeout: Duration) -> Result<Vec<LocalGroup>> {
        if world_size == 0 {
            return Err(Error::invalid("LocalGroup::new_world", "a group needs at least one rank"));
        }
        let shared = Shared::new(world_size, timeout);
        (0..world_size)
            .map(|rank| Ok(LocalGroup { comm: Comm::start(LocalTransport::new(shared.clone(), rank), "local")? }))
            .collect()
    }

    /// Runs `f` on `world_size` threads, each with its rank's group, and returns each
    /// rank's result (index `r` for rank `r`). A rank that panics gives an error naming it.
    pub fn spawn<R: Send>(world_size: usize, f: impl Fn(LocalGroup) -> Result<R> + Sync) -> Vec<Result<R>> {
        LocalGroup::spawn_with_timeout(world_size, LocalGroup::DEFAULT_TIMEOUT, f)
    }

    /// [`spawn`](LocalGroup::spawn) with the collectives' timeout.
    pub fn spawn_with_timeout<R: Send>(
        world_size: usize,
        timeout: Duration,
        f: impl Fn(LocalGroup) -> Result<R> + Sync,
    ) -> Vec<Result<R>> {
        let groups = match LocalGroup::new_world_with_timeout(world_size, timeout) {
            Ok(g) => g,
            Err(e) => return vec![Err(e)],
        };
        let f = &f;
        std::thread::scope(|s| {
            let handles: Vec<_> = groups
                .into_iter()
                .enumerate()
                .map(|(rank, g)| {
                    std::thread::Builder::new().name(format!("ember-local-rank{rank}")).spawn_scoped(s, move || f(g))
                })
                .collect();
            handles
                .into_iter()
                .enumerate()
                .map(|(rank, h)| match h {
                    Err(e) => {
                        Err(Error::invalid("LocalGroup::spawn", format!("cannot start rank {rank}'s thread: {e}")))
                    }
                    Ok(h) => h.join().unwrap_or_else(|payload| {
                        let msg = payload
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| payload.downcast_ref::<String>().cloned())
                            .unwrap_or_else(|| "a non-string panic".into());
                        Err(Error::invalid("LocalGroup::spawn", format!("rank {rank} panicked: {msg}")))
                    }),
                })
                .collect()
        })
    }
}

/// What a rank brings to one exchange.
enum Payload {
    Header([u64; WORDS]),
    Buf(HostBuf),
    Nothing,
}

/// One exchange in progress: each rank's payload, and how many ranks took the result.
struct Round {
    slots: Vec<Option<Arc<Payload>>>,
    collected: usize,
}

struct State {
    rounds: HashMap<u64, Round>,
    left: Vec<bool>,
    /// Why the group broke; every later collective fails with it.
    broken: Option<String>,
    /// Sub-groups, by the exchange that made them.
    children: HashMap<u64, Arc<Shared>>,
}

/// The meeting place of a group's ranks.
struct Shared {
    world_size: usize,
    timeout: Duration,
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn new(world_size: usize, timeout: Duration) -> Arc<Shared> {
        Arc::new(Shared {
            world_size,
            timeout,
            state: Mutex::new(State {
                rounds: HashMap::new(),
                left: vec![false; world_size],
                broken: None,
                children: HashMap::new(),
            }),
            changed: Condvar::new(),
        })
    }
}

/// One rank's end of a [`Shared`] group.
pub(crate) struct LocalTransport {
    shared: Arc<Shared>,
    rank: usize,
    /// The number of exchanges this rank made: ranks meet in exchanges of equal number.
    next: u64,
}

impl LocalTransport {
    fn new(shared: Arc<Shared>, rank: usize) -> LocalTransport {
        LocalTransport { shared, rank, next: 0 }
    }

    /// Deposits `payload` and waits for every rank's; returns them by rank and the
    /// exchange's number.
    fn exchange(&mut self, op: &'static str, payload: Payload) -> Result<(Vec<Arc<Payload>>, u64)> {
        let (seq, rank, world) = (self.next, self.rank, self.shared.world_size);
        self.next += 1;
        let shared = &*self.shared;
        let mut st = shared.state.lock();
        if let Some(cause) = &st.broken {
            return Err(Error::invalid(op, format!("rank {rank} of {world}: the group is broken: {cause}")));
        }
        st.rounds.entry(seq).or_insert_with(|| Round { slots: vec![None; world], collected: 0 }).slots[rank] =
            Some(Arc::new(payload));
        shared.changed.notify_all();
        let deadline = Instant::now() + shared.timeout;
        loop {
            let round = st.rounds.get_mut(&seq);
            if let Some(round) = round
                && round.slots.iter().all(Option::is_some)
            {
                let all: Vec<Arc<Payload>> = round.slots.iter().flatten().cloned().collect();
                round.collected += 1;
                if round.collected == world {
                    st.rounds.remove(&seq);
                }
                return Ok((all, seq));
            }
            if let Some(cause) = &st.broken {
                return Err(Error::invalid(op, format!("rank {rank} of {world}: the group is broken: {cause}")));
            }
            let missing: Vec<usize> = st
                .rounds
                .get(&seq)
                .map(|r| r.slots.iter().enumerate().filter(|(_, s)| s.is_none()).map(|(i, _)| i).collect())
                .unwrap_or_default();
            if let Some(&gone) = missing.iter().find(|&&r| st.left[r]) {
                let cause = format!(
                    "rank {gone} left the group (its thread returned, failed or panicked, or dropped its group) \
                     before joining collective #{seq} ({op})"
                );
                st.broken = Some(cause.clone());
                shared.changed.notify_all();
                return Err(Error::invalid(op, format!("rank {rank} of {world}: {cause}")));
            }
            if shared.changed.wait_until(&mut st, deadline).timed_out() {
                let filled = st.rounds.get(&seq).is_some_and(|r| r.slots.iter().all(Option::is_some));
                if !filled {
                    let cause = format!(
                        "timed out after {:?} waiting for rank(s) {missing:?} to join collective #{seq} ({op})",
                        shared.timeout
                    );
                    st.broken = Some(cause.clone());
                    shared.changed.notify_all();
                    return Err(Error::invalid(op, format!("rank {rank} of {world}: {cause}")));
                }
            }
        }
    }

    fn bufs<'a>(op: &'static str, all: &'a [Arc<Payload>]) -> Result<Vec<&'a HostBuf>> {
        all.iter()
            .map(|p| match &**p {
                Payload::Buf(b) => Ok(b),
                _ => Err(Error::invalid(op, "internal: a rank sent no data")),
            })
            .collect()
    }
}

impl Drop for LocalTransport {
    fn drop(&mut self) {
        let mut st = self.shared.state.lock();
        st.left[self.rank] = true;
        self.shared.changed.notify_all();
    }
}

impl Transport for LocalTransport {
    const IN_PLACE: bool = false;

    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.shared.world_size
    }

    fn exchange_headers(&mut self, op: &'static str, header: [u64; WORDS]) -> Result<Vec<[u64; WORDS]>> {
        let (all, _) = self.exchange(op, Payload::Header(header))?;
        all.iter()
            .map(|p| match &**p {
                Payload::Header(h) => Ok(*h),
                _ => Err(Error::invalid(op, "internal: a rank sent no header")),
            })
            .collect()
    }

    fn all_reduce(&mut self, op: &'static str, buf: &mut HostBuf, reduce: ReduceOp) -> Result<()> {
        let (all, _) = self.exchange(op, Payload::Buf(buf.clone()))?;
        let bufs = Self::bufs(op, &all)?;
        // Rank order on every rank: identical results everywhere.
        let mut acc = bufs[0].clone();
        for b in &bufs[1..] {
            acc.combine(b, reduce);
        }
        *buf = acc;
        Ok(())
    }

    fn broadcast(&mut self, op: &'static str, buf: &mut HostBuf, root: usize) -> Result<()> {
        let mine = if self.rank == root { Payload::Buf(buf.clone()) } else { Payload::Nothing };
        let (all, _) = self.exchange(op, mine)?;
        match &*all[root] {
            Payload::Buf(b) => *buf = b.clone(),
            _ => return Err(Error::invalid(op, "internal: the root sent no data")),
        }
        Ok(())
    }

    fn all_gather(&mut self, op: &'static str, buf: &HostBuf) -> Result<Vec<HostBuf>> {
        let (all, _) = self.exchange(op, Payload::Buf(buf.clone()))?;
        Ok(Self::bufs(op, &all)?.into_iter().cloned().collect())
    }

    fn reduce_scatter(&mut self, op: &'static str, buf: &HostBuf, reduce: ReduceOp) -> Result<HostBuf> {
        let (all, _) = self.exchange(op, Payload::Buf(buf.clone()))?;
        let bufs = Self::bufs(op, &all)?;
        let chunk = buf.len() / self.shared.world_size;
        let mut acc = bufs[0].slice(self.rank * chunk, chunk);
        for b in &bufs[1..] {
            acc.combine(&b.slice(self.rank * chunk, chunk), reduce);
        }
        Ok(acc)
    }

    fn barrier(&mut self, op: &'static str) -> Result<()> {
        self.exchange(op, Payload::Nothing).map(|_| ())
    }

    fn split(&mut self, ranks: &[usize]) -> Result<Option<LocalTransport>> {
        let (_, seq) = self.exchange("new_group", Payload::Nothing)?;
        let Some(pos) = ranks.iter().position(|&r| r == self.rank) else { return Ok(None) };
        let timeout = self.shared.timeout;
        let child =
            self.shared.state.lock().children.entry(seq).or_insert_with(|| Shared::new(ranks.len(), timeout)).clone();
        Ok(Some(LocalTransport::new(child, pos)))
    }
}
