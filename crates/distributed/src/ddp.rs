//! [`DistributedDataParallel`]: a module whose gradients are averaged across the ranks of
//! a process group, bucket by bucket, while backward is still running.

use crate::group::{ProcessGroup, Work};
use crate::reducer::Reducer;
use ember_autograd::{HookHandle, Var, is_grad_enabled};
use ember_nn::Module;
use ember_tensor::{Error, Result};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

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
    /// Make each parameter's `.grad` a view of its slice of the bucket (PyTorch's
    /// `gradient_as_bucket_view`; on here, off in PyTorch): backward writes the gradients
    /// into the buckets and the all-reduce averages them where they lie, with no copies.
    /// Off, each gradient is a tensor of its own, copied into the bucket when it is ready
    /// and the average copied back after the all-reduce. Either way the values are the same.
    pub gradient_as_bucket_view: bool,
}

impl Default for DdpOptions {
    fn default() -> Self {
        DdpOptions {
            bucket_cap_mb: 25.0,
            broadcast_buffers: true,
            find_unused_parameters: false,
            gradient_as_bucket_view: true,
        }
    }
}

/// Communication counters of a [`DistributedDataParallel`], for measuring overlap.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DdpStats {
    /// Iterations whose gradients were reduced.
    pub steps: u64,
    /// The number of gradient buckets.
    pub buckets: usize,
    /// Gradient bytes all-reduced per rank, over all steps (every bucket's, each step; on one
    /// rank, whose reduction is the identity and moves nothing, they are counted all the
    /// same).
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
/// * **Gradients are bucket views** (PyTorch's `gradient_as_bucket_view`): each bucket is
///   one flat buffer, and each parameter's `.grad` is a view of its slice of it. Backward
///   adds into the views in place ([`Var::set_grad_in_place`]), the all-reduce averages the
///   buffer where it lies, and nothing is copied out. Each view is also the parameter's
///   gradient buffer ([`Var::set_grad_buffer`]), so after `zero_grad` (which sets the
///   gradients to none) backward writes the first gradient into the view: a linear layer
///   computes its weight's gradient there directly, other operations' gradients are copied
///   in by the engine. A gradient the user replaced with [`Var::set_grad`] is copied into
///   its view when it is ready. [`DdpOptions::gradient_as_bucket_view`] turns views off.
/// * **One rank**: the average over a group of one rank is the rank's own gradient, so
///   there are no buffers, copies or collectives: the gradients stay the tensors backward
///   made, exactly as in the plain model, and a step costs what the plain step costs (the
///   hooks still check that every parameter got a gradient, and [`stats`] still counts the
///   steps, with no all-reduce time).
/// * **Averaging before `backward()` returns**: the hook that completes the last bucket
///   waits for all buckets, so after `loss.backward()` the gradients are averaged over
///   ranks and `optimizer.step()` can follow at once, as in PyTorch. When some parameter got no gradient (it did not take
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
/// [`stats`]: DistributedDataParallel::stats
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
        let reducer = Arc::new(Reducer::new(
            group,
            params,
            options.bucket_cap_mb,
            options.find_unused_parameters,
            options.gradient_as_bucket_view,
        )?);
        let mut hooks = Vec::new();
        for (i, (_, p)) in reducer.params.iter().enumerate() {
            // A weak handle: the parameter's node holds the hook, and the reducer holds the
            // parameter.
            let weak: Weak<Reducer> = Arc::downgrade(&reducer);
            let hook = p.register_post_accumulate_grad_hook(move |_| match weak.upgrade() {
                Some(r) => r.mark_ready(i),
                None => Ok(()),
            });
            match hook {
                Ok(h) => hooks.push(h),
                Err(e) => {
                    hooks.into_iter().for_each(HookHandle::remove);
                    reducer.release();
                    return Err(e);
                }
            }
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
        r.buckets.iter().map(|b| b.members.iter().map(|&i| r.params[i].0.clone()).collect()).collect()
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
        if syncing && self.options.find_unused_parameters {
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
        self.reducer.release();
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
