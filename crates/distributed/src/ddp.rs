//! [`DistributedDataParallel`]: a module whose gradients are averaged across the ranks of
//! a process group, bucket by bucket, while backward is still running.

use crate::bucket::assign_buckets;
use crate::group::{ProcessGroup, Work};
use crate::host_buf::HostBuf;
use crate::reduce_op::ReduceOp;
use ember_autograd::{HookHandle, Var, is_grad_enabled};
use ember_nn::Module;
use ember_tensor::{Device, Error, Result, Tensor};
use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Settings of [`DistributedDataParallel`]; the defaults are PyTorch's.
#[derive(Clone, Debug, PartialEq)]
pub struct DdpOptions {
    /// The size of a gradient bucket in MiB (PyTorch's `bucket_cap_mb`, 25). The first
    /// bucket is capped at 1 MiB, as in PyTorch, so that communication starts early.
    pub bucket_cap_mb: f64,
    /// Copy rank 0's buffers (BatchNorm's running statistics) to every rank at the start
    /// of each forward that will be reduced (PyTorch's `broadcast_buffers`, on).
    pub broadcast_buffers: bool,
    /// Find, at the end of each forward, the parameters the output does not depend on and
    /// count them as reduced with a zero gradient, so that a model whose forward skips
    /// parameters still synchronises (PyTorch's `find_unused_parameters`, off: it walks
    /// the graph each forward). Without it, a parameter left without gradient is an error
    /// at the next forward that names it.
    pub find_unused_parameters: bool,
}

impl Default for DdpOptions {
    fn default() -> Self {
        DdpOptions { bucket_cap_mb: 25.0, broadcast_buffers: true, find_unused_parameters: false }
    }
}

/// Communication counters of a [`DistributedDataParallel`], for measuring overlap.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DdpStats {
    /// Iterations whose gradients were reduced.
    pub steps: u64,
    /// The number of gradient buckets.
    pub buckets: usize,
    /// Gradient bytes all-reduced per rank, over all steps.
    pub bytes_reduced: u64,
    /// The time the buckets' all-reduces ran on the communication thread, over all steps.
    pub all_reduce_time: Duration,
    /// The time the training thread waited for all-reduces to finish (at the end of
    /// backward): the part of `all_reduce_time` that overlap did not hide.
    pub exposed_wait: Duration,
}

impl DdpStats {
    /// The fraction of the all-reduce time hidden behind backward:
    /// `1 - exposed_wait / all_reduce_time` (0 when nothing was reduced).
    pub fn hidden_fraction(&self) -> f64 {
        let total = self.all_reduce_time.as_secs_f64();
        if total == 0.0 { 0.0 } else { (1.0 - self.exposed_wait.as_secs_f64() / total).clamp(0.0, 1.0) }
    }
}

/// Wraps a module for data-parallel training (PyTorch's `DistributedDataParallel`).
///
/// * **Construction** broadcasts rank 0's parameters and buffers to every rank, so all
///   replicas start equal.
/// * **Buckets**: the gradients of the parameters that require grad are grouped, in reverse
///   registration order (roughly the order backward produces them), into buckets of
///   [`DdpOptions::bucket_cap_mb`].
/// * **Overlap**: a post-accumulate hook on each parameter marks its gradient ready; when
///   every gradient of a bucket is ready the bucket's all-reduce starts on the group's
///   communication thread (buckets start in order, so every rank issues the same
///   collectives), while backward goes on computing the earlier layers' gradients.
/// * **Averaging before `backward()` returns**: the hook that completes the last bucket
///   waits for all buckets and writes the averaged gradients into `.grad`, so after
///   `loss.backward()` the gradients are averaged over ranks and `optimizer.step()` can
///   follow at once, as in PyTorch. When some parameter got no gradient (it did not take
///   part in the loss), backward cannot tell it is over: the next forward then fails naming
///   the parameter, unless [`DdpOptions::find_unused_parameters`] is set; [`finish`]
///   reduces what is left explicitly.
/// * [`no_sync`](DistributedDataParallel::no_sync) skips the reduction for gradient
///   accumulation: the first backward after the guard drops reduces the accumulated
///   gradients.
///
/// Parameter and buffer names carry PyTorch's `module.` prefix; save
/// [`module()`](DistributedDataParallel::module)'s state dict for a checkpoint that loads
/// into the plain model.
///
/// [`finish`]: DistributedDataParallel::finish
#[derive(Module)]
pub struct DistributedDataParallel<M: Module> {
    module: M,
    #[module(skip)]
    reducer: Arc<Reducer>,
    #[module(skip)]
    hooks: Vec<HookHandle>,
    #[module(skip)]
    options: DdpOptions,
}

impl<M: Module> std::fmt::Debug for DistributedDataParallel<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DistributedDataParallel")
            .field("rank", &self.reducer.group.rank())
            .field("world_size", &self.reducer.group.world_size())
            .field("buckets", &self.reducer.buckets.len())
            .field("options", &self.options)
            .finish()
    }
}

impl<M: Module> DistributedDataParallel<M> {
    /// Wraps `module` with the default [`DdpOptions`]. Every rank of `group` must call it.
    pub fn new(module: M, group: Arc<dyn ProcessGroup>) -> Result<Self> {
        Self::with_options(module, group, DdpOptions::default())
    }

    /// Wraps `module` with `options`. Every rank of `group` must call it, with modules of
    /// the same parameter shapes and dtypes (a mismatch is an error naming the shapes).
    pub fn with_options(module: M, group: Arc<dyn ProcessGroup>, options: DdpOptions) -> Result<Self> {
        if options.bucket_cap_mb.is_nan() || options.bucket_cap_mb <= 0.0 {
            return Err(Error::invalid(
                "DistributedDataParallel",
                format!("bucket_cap_mb must be positive, got {}", options.bucket_cap_mb),
            ));
        }
        // Every rank starts from rank 0's state.
        let mut works = Vec::new();
        for (_, p) in module.named_parameters() {
            works.push(group.broadcast_async(&p.value(), 0)?);
        }
        for (_, b) in module.named_buffers() {
            works.push(group.broadcast_async(&b, 0)?);
        }
        for w in works {
            w.wait()?;
        }

        let mut seen = HashSet::new();
        let params: Vec<(String, Var)> =
            module.named_parameters().into_iter().filter(|(_, p)| p.requires_grad() && seen.insert(p.id())).collect();
        let sizes: Vec<(usize, usize)> =
            params.iter().map(|(_, p)| (p.numel(), p.value().dtype().size_in_bytes())).collect();
        let dtypes: Vec<_> = params.iter().map(|(_, p)| p.value().dtype()).collect();
        let buckets = assign_buckets(&sizes, &dtypes, options.bucket_cap_mb);
        let mut bucket_of = vec![0; params.len()];
        for (b, members) in buckets.iter().enumerate() {
            for &i in members {
                bucket_of[i] = b;
            }
        }
        let reducer = Arc::new(Reducer {
            state: Mutex::new(IterState::new(params.len(), &buckets)),
            stats: Mutex::new(DdpStats { buckets: buckets.len(), ..Default::default() }),
            group,
            params,
            buckets,
            bucket_of,
            find_unused: options.find_unused_parameters,
            sync: AtomicBool::new(true),
        });
        let mut hooks = Vec::new();
        for (i, (_, p)) in reducer.params.iter().enumerate() {
            // A weak handle: the parameter's node holds the hook, and the reducer holds the
            // parameter.
            let weak: Weak<Reducer> = Arc::downgrade(&reducer);
            hooks.push(p.register_post_accumulate_grad_hook(move |_| match weak.upgrade() {
                Some(r) => r.mark_ready(i),
                None => Ok(()),
            })?);
        }
        Ok(DistributedDataParallel { module, reducer, hooks, options })
    }

    /// The wrapped module (PyTorch's `ddp.module`).
    pub fn module(&self) -> &M {
        &self.module
    }

    /// The process group the gradients are reduced over.
    pub fn group(&self) -> &Arc<dyn ProcessGroup> {
        &self.reducer.group
    }

    /// The settings.
    pub fn options(&self) -> &DdpOptions {
        &self.options
    }

    /// The buckets as parameter names, in the order they are reduced.
    pub fn bucket_names(&self) -> Vec<Vec<String>> {
        let r = &self.reducer;
        r.buckets.iter().map(|b| b.iter().map(|&i| r.params[i].0.clone()).collect()).collect()
    }

    /// The communication counters so far.
    pub fn stats(&self) -> DdpStats {
        self.reducer.stats.lock().clone()
    }

    /// Zeroes the communication counters (after warm-up steps, say).
    pub fn reset_stats(&self) {
        let mut s = self.reducer.stats.lock();
        *s = DdpStats { buckets: s.buckets, ..Default::default() };
    }

    /// Skips gradient reduction while the guard lives (PyTorch's `no_sync()`): backward
    /// only accumulates into `.grad`, and the first backward after the guard drops reduces
    /// the accumulated gradients.
    ///
    /// ```
    /// # use ember_distributed::{DistributedDataParallel, LocalGroup, ProcessGroup};
    /// # use ember_nn::{Linear, Module};
    /// # use ember_autograd::Var;
    /// # use ember_tensor::{DType, Tensor};
    /// # use std::sync::Arc;
    /// # for r in LocalGroup::spawn(2, |group| {
    /// let model = DistributedDataParallel::new(Linear::new(2, 1)?, Arc::new(group))?;
    /// let x = Var::new(Tensor::ones([3, 2], DType::F32)?);
    /// {
    ///     let _accumulate = model.no_sync();
    ///     model.forward(&x)?.sum_all().backward()?; // local only
    /// }
    /// model.forward(&x)?.sum_all().backward()?; // reduces both micro-batches' sum
    /// # Ok(()) }) { r?; }
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn no_sync(&self) -> NoSyncGuard<'_> {
        let previous = self.reducer.sync.swap(false, Ordering::SeqCst);
        NoSyncGuard { sync: &self.reducer.sync, previous }
    }

    /// Reduces whatever this iteration left unreduced and waits for it. Backward does this
    /// by itself when every parameter received a gradient; call it after a backward that
    /// left parameters without gradient under `find_unused_parameters` (they count as zero)
    /// — without that option it is an error naming them. A no-op when there is nothing to
    /// reduce.
    pub fn finish(&self) -> Result<()> {
        self.reducer.finish()
    }

    /// Checks that the previous iteration was reduced, broadcasts rank 0's buffers
    /// (`broadcast_buffers`), runs the module and, with `find_unused_parameters`, marks the
    /// parameters the output does not depend on.
    fn forward(&self, x: &Var) -> Result<Var> {
        let syncing = is_grad_enabled() && self.reducer.sync.load(Ordering::SeqCst);
        if syncing {
            self.reducer.check_previous_iteration()?;
        }
        if syncing && self.options.broadcast_buffers && self.reducer.group.world_size() > 1 {
            let works: Vec<Work<()>> = self
                .module
                .named_buffers()
                .iter()
                .map(|(_, b)| self.reducer.group.broadcast_async(b, 0))
                .collect::<Result<_>>()?;
            for w in works {
                w.wait()?;
            }
        }
        let out = self.module.forward(x)?;
        if syncing && self.reducer.find_unused {
            self.reducer.mark_unused(&out)?;
        }
        Ok(out)
    }
}

impl<M: Module> Drop for DistributedDataParallel<M> {
    fn drop(&mut self) {
        for h in self.hooks.drain(..) {
            h.remove();
        }
    }
}

/// Turns gradient reduction back on when dropped; see
/// [`DistributedDataParallel::no_sync`].
#[must_use = "reduction is skipped only while the guard lives"]
#[derive(Debug)]
pub struct NoSyncGuard<'a> {
    sync: &'a AtomicBool,
    previous: bool,
}

impl Drop for NoSyncGuard<'_> {
    fn drop(&mut self) {
        self.sync.store(self.previous, Ordering::SeqCst);
    }
}

/// The `bucket` of the in-flight all-reduce of the used-parameter map.
const USAGE_MAP: usize = usize::MAX;

/// A bucket's all-reduce in flight: the flat buffer it reduces in place.
struct InFlight {
    bucket: usize,
    flat: Tensor,
    work: Work<()>,
}

/// The progress of the current iteration's reduction.
struct IterState {
    /// Per parameter: its gradient is ready (or it was found unused).
    ready: Vec<bool>,
    /// Per parameter: found unused by the forward (contributes zeros).
    unused: Vec<bool>,
    /// Per bucket: parameters not ready yet.
    pending: Vec<usize>,
    /// The next bucket to launch; buckets launch in order on every rank.
    next_launch: usize,
    in_flight: Vec<InFlight>,
    /// Whether anything of this iteration happened (a gradient marked ready).
    active: bool,
}

impl IterState {
    fn new(params: usize, buckets: &[Vec<usize>]) -> IterState {
        IterState {
            ready: vec![false; params],
            unused: vec![false; params],
            pending: buckets.iter().map(Vec::len).collect(),
            next_launch: 0,
            in_flight: Vec::new(),
            active: false,
        }
    }
}

/// The gradient reduction shared by a [`DistributedDataParallel`] and its hooks.
struct Reducer {
    group: Arc<dyn ProcessGroup>,
    /// The distinct parameters that require grad, by their first name.
    params: Vec<(String, Var)>,
    /// Per bucket, the parameters it packs, in packing order.
    buckets: Vec<Vec<usize>>,
    bucket_of: Vec<usize>,
    find_unused: bool,
    /// Off under `no_sync`.
    sync: AtomicBool,
    state: Mutex<IterState>,
    stats: Mutex<DdpStats>,
}

impl Reducer {
    fn err(&self, msg: String) -> Error {
        Error::invalid("DistributedDataParallel", format!("rank {}: {msg}", self.group.rank()))
    }

    /// A parameter's gradient is complete (its post-accumulate hook).
    fn mark_ready(&self, i: usize) -> Result<()> {
        if !self.sync.load(Ordering::SeqCst) {
            return Ok(());
        }
        let mut st = self.state.lock();
        if st.ready[i] {
            let name = &self.params[i].0;
            *st = IterState::new(self.params.len(), &self.buckets);
            return Err(self.err(format!(
                "parameter {name} received a gradient twice in one iteration (a second backward before the \
                 first was reduced, or a parameter reported unused that got a gradient); accumulate under \
                 no_sync() instead"
            )));
        }
        self.set_ready(&mut st, i);
        self.launch_ready(&mut st)
    }

    fn set_ready(&self, st: &mut IterState, i: usize) {
        st.ready[i] = true;
        st.active = true;
        st.pending[self.bucket_of[i]] -= 1;
    }

    /// Launches the complete buckets that are next in order; after the last one, waits for
    /// all and writes the averaged gradients.
    fn launch_ready(&self, st: &mut IterState) -> Result<()> {
        while st.next_launch < self.buckets.len() && st.pending[st.next_launch] == 0 {
            let b = st.next_launch;
            let flight = self.launch(st, b);
            st.next_launch += 1;
            match flight {
                Ok(f) => st.in_flight.push(f),
                Err(e) => {
                    *st = IterState::new(self.params.len(), &self.buckets);
                    return Err(e);
                }
            }
        }
        if st.next_launch == self.buckets.len() && st.active {
            let done = self.complete(st);
            *st = IterState::new(self.params.len(), &self.buckets);
            done?;
        }
        Ok(())
    }

    /// Packs bucket `b`'s gradients (zeros for unused parameters) and starts its all-reduce.
    fn launch(&self, st: &IterState, b: usize) -> Result<InFlight> {
        let mut flat: Option<HostBuf> = None;
        for &i in &self.buckets[b] {
            let p = &self.params[i].1;
            let g = match p.grad() {
                Some(g) if !st.unused[i] => g,
                _ => p.value().zeros_like(),
            };
            let buf = HostBuf::read("DistributedDataParallel", self.group.rank(), &g)?;
            match &mut flat {
                Some(f) => f.extend(&buf),
                None => flat = Some(buf),
            }
        }
        // The bucket's own dtype (one per bucket): a 16-bit bucket all-reduces as a 16-bit
        // tensor, which the collective sums in f32 and rounds once.
        let (Some(f), Some(&first)) = (flat, self.buckets[b].first()) else {
            return Err(self.err(format!("bucket {b} is empty")));
        };
        let n = f.len();
        let flat = f.into_tensor(&[n], self.params[first].1.dtype(), Device::Cpu)?;
        let work = self.group.all_reduce_async(&flat, ReduceOp::Avg)?;
        Ok(InFlight { bucket: b, flat, work })
    }

    /// Waits for every bucket and writes the averaged gradients.
    fn complete(&self, st: &mut IterState) -> Result<()> {
        let mut comm = Duration::ZERO;
        let mut exposed = Duration::ZERO;
        let mut bytes = 0u64;
        // Under find_unused, a parameter unused on every rank keeps its gradient as it
        // was (none), as in PyTorch: the ranks tell each other what they used.
        if self.find_unused {
            let local: Vec<f32> = st.unused.iter().map(|&u| if u { 0.0 } else { 1.0 }).collect();
            let n = local.len();
            let t = Tensor::from_vec(local, [n])?;
            let work = self.group.all_reduce_async(&t, ReduceOp::Max)?;
            st.in_flight.push(InFlight { bucket: USAGE_MAP, flat: t, work });
        }
        let mut used = vec![true; self.params.len()];
        let mut written = Vec::new();
        for f in std::mem::take(&mut st.in_flight) {
            let start = Instant::now();
            let (res, ran) = f.work.wait_timed();
            exposed += start.elapsed();
            comm += ran;
            res?;
            if f.bucket == USAGE_MAP {
                used = f.flat.to_vec::<f32>()?.iter().map(|&u| u > 0.0).collect();
            } else {
                bytes += (f.flat.numel() * f.flat.dtype().size_in_bytes()) as u64;
                written.push((f.bucket, f.flat));
            }
        }
        for (bucket, flat) in written {
            let flat = HostBuf::read("DistributedDataParallel", self.group.rank(), &flat)?;
            let mut offset = 0;
            for &i in &self.buckets[bucket] {
                let p = &self.params[i].1;
                let n = p.numel();
                if used[i] {
                    let dims = p.value().shape().dims().to_vec();
                    p.set_grad(Some(flat.slice(offset, n).into_tensor(&dims, p.dtype(), p.device())?))?;
                }
                offset += n;
            }
        }
        let mut s = self.stats.lock();
        s.steps += 1;
        s.bytes_reduced += bytes;
        s.all_reduce_time += comm;
        s.exposed_wait += exposed;
        Ok(())
    }

    /// The names of the parameters not ready in `st`.
    fn not_ready(&self, st: &IterState) -> Vec<String> {
        st.ready.iter().enumerate().filter(|(_, r)| !**r).map(|(i, _)| self.params[i].0.clone()).collect()
    }

    /// An error when the previous iteration started reducing but some parameters never got
    /// a gradient (PyTorch's "Expected to have finished reduction in the prior iteration").
    fn check_previous_iteration(&self) -> Result<()> {
        let mut st = self.state.lock();
        if !st.active {
            return Ok(());
        }
        let missing = self.not_ready(&st);
        *st = IterState::new(self.params.len(), &self.buckets);
        Err(self.err(format!(
            "the previous iteration's backward gave no gradient to parameters {missing:?}, so their buckets were \
             never reduced (the ranks are now out of step). Make every parameter take part in the loss, or pass \
             DdpOptions {{ find_unused_parameters: true, .. }}"
        )))
    }

    /// Marks the parameters that `out` does not depend on as ready with a zero gradient.
    fn mark_unused(&self, out: &Var) -> Result<()> {
        let mut reached = HashSet::new();
        let mut seen = HashSet::new();
        let mut stack = vec![out.clone()];
        while let Some(v) = stack.pop() {
            if !v.requires_grad() || !seen.insert(v.id()) {
                continue;
            }
            if v.is_leaf() {
                reached.insert(v.id());
                continue;
            }
            stack.extend(v.inputs()?);
        }
        let mut st = self.state.lock();
        for (i, (_, p)) in self.params.iter().enumerate() {
            if !reached.contains(&p.id()) && !st.ready[i] {
                st.unused[i] = true;
                self.set_ready(&mut st, i);
            }
        }
        self.launch_ready(&mut st)
    }

    fn finish(&self) -> Result<()> {
        let mut st = self.state.lock();
        if !st.active {
            return Ok(());
        }
        let missing = self.not_ready(&st);
        if !self.find_unused {
            *st = IterState::new(self.params.len(), &self.buckets);
            return Err(self.err(format!(
                "finish: parameters {missing:?} got no gradient in this iteration; pass DdpOptions {{ \
                 find_unused_parameters: true, .. }} to reduce them as zeros"
            )));
        }
        for i in 0..self.params.len() {
            if !st.ready[i] {
                st.unused[i] = true;
                self.set_ready(&mut st, i);
            }
        }
        self.launch_ready(&mut st)
    }
}
