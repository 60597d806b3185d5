//! The gradient reduction behind [`DistributedDataParallel`](crate::DistributedDataParallel):
//! which gradients are ready, which buckets are in flight, and the averaged result left in
//! the buckets the gradients are views of.
//!
//! On a group of one rank the average of the gradients is the gradients themselves, so
//! nothing is packed, copied or queued: the gradients stay the tensors backward made, as in
//! the plain model, and only the bookkeeping (readiness, the unused-parameter checks, the
//! counters) runs.

use crate::bucket::{Bucket, assign_buckets, is_view};
use crate::ddp::DdpStats;
use crate::group::{ProcessGroup, Work};
use crate::reduce_op::ReduceOp;
use ember_autograd::Var;
use ember_tensor::{Error, Result, Tensor};
use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The progress of the current iteration's reduction. Reset in place between iterations,
/// so that a step allocates nothing here.
struct IterState {
    /// Per parameter: its gradient is ready (or it was found unused).
    ready: Vec<bool>,
    /// Per parameter: found unused by the forward (contributes zeros).
    unused: Vec<bool>,
    /// Per bucket: parameters not ready yet.
    pending: Vec<usize>,
    /// The next bucket to launch; buckets launch in order on every rank.
    next_launch: usize,
    /// The buckets' all-reduces, in launch order.
    in_flight: Vec<Work<()>>,
    /// Whether anything of this iteration happened (a gradient marked ready).
    active: bool,
}

impl IterState {
    fn new(params: usize, buckets: &[Bucket]) -> IterState {
        let mut st = IterState {
            ready: vec![false; params],
            unused: vec![false; params],
            pending: vec![0; buckets.len()],
            next_launch: 0,
            in_flight: Vec::with_capacity(buckets.len()),
            active: false,
        };
        st.reset(buckets);
        st
    }

    fn reset(&mut self, buckets: &[Bucket]) {
        self.ready.fill(false);
        self.unused.fill(false);
        for (pending, b) in self.pending.iter_mut().zip(buckets) {
            *pending = b.members.len();
        }
        self.next_launch = 0;
        self.in_flight.clear();
        self.active = false;
    }
}

/// The flat buffers of a group of more than one rank, which the gradients are views of.
struct Packed {
    /// Per bucket, the buffer its all-reduce averages in place.
    flats: Vec<Tensor>,
    /// Per parameter, its view into its bucket: what its `.grad` is, with `as_views`.
    views: Vec<Var>,
    /// The gradients are the views (`DdpOptions::gradient_as_bucket_view`); otherwise they
    /// are copied into the views and the averages copied back.
    as_views: bool,
}

/// The gradient reduction shared by a `DistributedDataParallel` and its hooks.
pub(crate) struct Reducer {
    pub(crate) group: Arc<dyn ProcessGroup>,
    /// The distinct parameters that require grad, by their first name.
    pub(crate) params: Vec<(String, Var)>,
    /// None on a group of one rank, whose reduction is the identity.
    packed: Option<Packed>,
    /// In launch order.
    pub(crate) buckets: Vec<Bucket>,
    bucket_of: Vec<usize>,
    find_unused: bool,
    /// Off under `no_sync`.
    pub(crate) sync: AtomicBool,
    state: Mutex<IterState>,
    pub(crate) stats: Mutex<DdpStats>,
}

impl Reducer {
    /// Buckets `params` (the distinct parameters that require grad) and, on a group of more
    /// than one rank, makes their gradients views into the buckets.
    pub(crate) fn new(
        group: Arc<dyn ProcessGroup>,
        params: Vec<(String, Var)>,
        bucket_cap_mb: f64,
        find_unused: bool,
        as_views: bool,
    ) -> Result<Reducer> {
        let sizes: Vec<(usize, usize)> =
            params.iter().map(|(_, p)| (p.numel(), p.value().dtype().size_in_bytes())).collect();
        let dtypes: Vec<_> = params.iter().map(|(_, p)| p.value().dtype()).collect();
        let buckets: Vec<Bucket> = assign_buckets(&sizes, &dtypes, bucket_cap_mb)
            .into_iter()
            .map(|members| Bucket::new(members, &params))
            .collect();
        let mut bucket_of = vec![None; params.len()];
        for (b, bucket) in buckets.iter().enumerate() {
            for &i in &bucket.members {
                bucket_of[i] = Some(b);
            }
        }
        let bucket_of = bucket_of
            .into_iter()
            .zip(&params)
            .map(|(b, (name, _))| {
                b.ok_or_else(|| Error::invalid("DistributedDataParallel", format!("internal: {name} has no bucket")))
            })
            .collect::<Result<Vec<_>>>()?;
        let packed = if group.world_size() > 1 { Some(Packed::new(&buckets, &params, as_views)?) } else { None };
        Ok(Reducer {
            state: Mutex::new(IterState::new(params.len(), &buckets)),
            stats: Mutex::new(DdpStats { buckets: buckets.len(), ..Default::default() }),
            group,
            params,
            packed,
            buckets,
            bucket_of,
            find_unused,
            sync: AtomicBool::new(true),
        })
    }

    fn err(&self, msg: String) -> Error {
        Error::invalid("DistributedDataParallel", format!("rank {}: {msg}", self.group.rank()))
    }

    /// A parameter's gradient is complete (its post-accumulate hook).
    pub(crate) fn mark_ready(&self, i: usize) -> Result<()> {
        if !self.sync.load(Ordering::SeqCst) {
            return Ok(());
        }
        let mut st = self.state.lock();
        if st.ready[i] {
            let name = &self.params[i].0;
            st.reset(&self.buckets);
            return Err(self.err(format!(
                "parameter {name} received a gradient twice in one iteration (a second backward before the \
                 first was reduced, or a parameter reported unused that got a gradient); accumulate under \
                 no_sync() instead"
            )));
        }
        if let Some(packed) = &self.packed
            && let Err(e) = packed.make_grad_view(&self.params[i].1, i)
        {
            st.reset(&self.buckets);
            return Err(e);
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
    /// all and leaves the averaged gradients in the buckets.
    fn launch_ready(&self, st: &mut IterState) -> Result<()> {
        while st.next_launch < self.buckets.len() && st.pending[st.next_launch] == 0 {
            let b = st.next_launch;
            st.next_launch += 1;
            // One rank: the bucket's average is what it holds.
            let Some(packed) = &self.packed else { continue };
            match self.launch(st, packed, b) {
                Ok(work) => st.in_flight.push(work),
                Err(e) => {
                    st.reset(&self.buckets);
                    return Err(e);
                }
            }
        }
        if st.next_launch == self.buckets.len() && st.active {
            let done = match &self.packed {
                Some(packed) => self.complete(st, packed),
                None => {
                    self.count_step(Duration::ZERO, Duration::ZERO);
                    Ok(())
                }
            };
            st.reset(&self.buckets);
            done?;
        }
        Ok(())
    }

    /// Zeroes the views of bucket `b`'s unused parameters and starts its all-reduce, in
    /// place on the bucket.
    fn launch(&self, st: &IterState, packed: &Packed, b: usize) -> Result<Work<()>> {
        let bucket = &self.buckets[b];
        for &i in &bucket.members {
            if st.unused[i] {
                let (p, view) = (&self.params[i].1, packed.views[i].value());
                // Its gradient, if it is the view, keeps its value: it is not reduced.
                if let Some(g) = p.grad()
                    && is_view(&g, &view)
                {
                    p.set_grad(Some(g.copy()))?;
                }
                view.zero_()?;
            }
        }
        self.group.all_reduce_async(&packed.flats[b], ReduceOp::Avg)
    }

    /// Waits for every bucket and points the gradients of the parameters some rank used at
    /// their views, which hold the averages.
    fn complete(&self, st: &mut IterState, packed: &Packed) -> Result<()> {
        let mut comm = Duration::ZERO;
        let mut exposed = Duration::ZERO;
        // Under find_unused, a parameter unused on every rank keeps its gradient as it
        // was (none), as in PyTorch: the ranks tell each other what they used.
        let usage = if self.find_unused {
            let local: Vec<f32> = st.unused.iter().map(|&u| if u { 0.0 } else { 1.0 }).collect();
            let n = local.len();
            let t = Tensor::from_vec(local, [n])?;
            let work = self.group.all_reduce_async(&t, ReduceOp::Max)?;
            Some((t, work))
        } else {
            None
        };
        let mut failed = None;
        for work in st.in_flight.drain(..) {
            let ((res, ran), blocked) = work.wait_exposed();
            exposed += blocked;
            comm += ran;
            if let Err(e) = res {
                failed.get_or_insert(e);
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        let used = match usage {
            Some((t, work)) => {
                work.wait()?;
                Some(t.to_vec::<f32>()?)
            }
            None => None,
        };
        for (i, (_, p)) in self.params.iter().enumerate() {
            if used.as_ref().is_none_or(|u| u[i] > 0.0) {
                let view = &packed.views[i];
                if packed.as_views {
                    if p.grad().is_none_or(|g| !is_view(&g, &view.value())) {
                        p.set_grad_var(Some(view.clone()))?;
                    }
                } else {
                    // The copy path: the average goes back into the gradient backward made
                    // (a parameter this rank did not use gets a tensor of its own).
                    match p.grad() {
                        Some(g) if !st.unused[i] => g.copy_(&view.value())?,
                        _ => p.set_grad(Some(view.value().copy()))?,
                    }
                }
            }
        }
        self.count_step(comm, exposed);
        Ok(())
    }

    /// Adds a reduced step to the counters: every bucket's bytes, the time the all-reduces
    /// ran and the time the training thread waited for them.
    fn count_step(&self, comm: Duration, exposed: Duration) {
        let bytes: u64 = self.buckets.iter().map(|b| b.bytes).sum();
        let mut s = self.stats.lock();
        s.steps += 1;
        s.bytes_reduced += bytes;
        s.all_reduce_time += comm;
        s.exposed_wait += exposed;
    }

    /// The names of the parameters not ready in `st`.
    fn not_ready(&self, st: &IterState) -> Vec<String> {
        st.ready.iter().enumerate().filter(|(_, r)| !**r).map(|(i, _)| self.params[i].0.clone()).collect()
    }

    /// An error when the previous iteration started reducing but some parameters never got
    /// a gradient (PyTorch's "Expected to have finished reduction in the prior iteration").
    pub(crate) fn check_previous_iteration(&self) -> Result<()> {
        let mut st = self.state.lock();
        if !st.active {
            return Ok(());
        }
        let missing = self.not_ready(&st);
        st.reset(&self.buckets);
        Err(self.err(format!(
            "the previous iteration's backward gave no gradient to parameters {missing:?}, so their buckets were \
             never reduced (the ranks are now out of step). Make every parameter take part in the loss, or pass \
             DdpOptions {{ find_unused_parameters: true, .. }}"
        )))
    }

    /// Marks the parameters that `out` does not depend on as ready with a zero gradient.
    pub(crate) fn mark_unused(&self, out: &Var) -> Result<()> {
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

    pub(crate) fn finish(&self) -> Result<()> {
        let mut st = self.state.lock();
        if !st.active {
            return Ok(());
        }
        let missing = self.not_ready(&st);
        if !self.find_unused {
            st.reset(&self.buckets);
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

    /// Stops backward adding into the gradients in place (they stay views, now of buffers
    /// nothing reduces).
    pub(crate) fn release(&self) {
        if self.packed.is_none() {
            return;
        }
        for (_, p) in &self.params {
            // Only leaves were given a buffer, and they stay leaves.
            let _ = p.set_grad_buffer(None);
            let _ = p.set_grad_in_place(false);
        }
    }
}

impl Packed {
    /// The buckets' buffers and views; with `as_views`, the parameters' gradients become the
    /// views.
    fn new(buckets: &[Bucket], params: &[(String, Var)], as_views: bool) -> Result<Packed> {
        let mut flats = Vec::with_capacity(buckets.len());
        let mut views: Vec<Option<Var>> = vec![None; params.len()];
        for bucket in buckets {
            let (flat, bucket_views) = bucket.pack(params, as_views)?;
            for (&i, view) in bucket.members.iter().zip(bucket_views) {
                views[i] = Some(view);
            }
            flats.push(flat);
        }
        // Every parameter is in a bucket (the reducer checked), so every view is set.
        let views: Vec<Var> = views.into_iter().flatten().collect();
        if as_views {
            for ((_, p), view) in params.iter().zip(&views) {
                // Backward writes each first gradient into its view (the operation that
                // computes it, or the engine with a copy) and adds later ones into it in
                // place, so the gradients are the views.
                p.set_grad_buffer(Some(view.clone()))?;
            }
        }
        Ok(Packed { flats, views, as_views })
    }

    /// Puts parameter `i`'s gradient into its bucket view. Backward writes and accumulates
    /// into the view when it is the gradient buffer; a gradient the user replaced, or any
    /// gradient on the copy path (`gradient_as_bucket_view` off), is copied in, and on the
    /// view path the view becomes the gradient again.
    fn make_grad_view(&self, p: &Var, i: usize) -> Result<()> {
        let view = &self.views[i];
        let view_tensor = view.value();
        match p.grad() {
            Some(g) if !is_view(&g, &view_tensor) => {
                view_tensor.copy_(&g)?;
                if self.as_views { p.set_grad_var(Some(view.clone())) } else { Ok(()) }
            }
            _ => Ok(()),
        }
    }
}
