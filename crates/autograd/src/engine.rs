//! The backward engine (see docs/design.md, 'Engine and extensions').
//!
//! 1. *Ensure-forward*: each root is refreshed by value ([`crate::reactive`]), so a graph
//!    whose leaves were replaced is recomputed before it is differentiated.
//! 2. *Discovery*: an explicit-stack DFS from the roots over edges into nodes that require
//!    grad gives every reachable node a local index and a post-order.
//! 3. *Pruning*: in post-order, a node is *needed* if it is itself a destination (a leaf
//!    that requires grad, a node that retains its grad or that an extension wants a
//!    gradient for; for [`grad`], one of the requested inputs) or if any of its inputs is needed. Nothing else runs.
//! 4. *Dependencies*: each needed node counts the needed consumers that will send it a
//!    gradient.
//! 5. *Execution*: a max-heap on sequence numbers holds the ready nodes (all gradients
//!    arrived). A node takes its input buffer (the sum of what its consumers sent), hands it
//!    to the extensions flagged on it, accumulates into `.grad` if it is a leaf, otherwise
//!    calls its operation's backward and adds each input's gradient into that input's
//!    buffer.
//!
//! Each backward propagates only its own gradients: buffers live in this call, never in the
//! nodes, so a node used by two backward calls never sees the first call's signal in the
//! second (see docs/design.md, 'Accumulation rules'). Leaves accumulate across calls until
//! `zero_grad`.
//!
//! Without `retain_graph`, a node's value is freed as soon as its backward has run (the
//! memory of small ones in batches, see [`Released`]), unless a user handle still holds the
//! node or the value was written in place since it was computed; a later backward through
//! freed nodes recomputes them from the leaves. Nothing here recurses, so chains of
//! millions of nodes are fine.
//!
//! Optional features take part through the hook points of [`crate::extension`]: around the
//! whole call and each node's backward when one is active on the thread, and, for nodes
//! that carry an extension flag, on the gradient arriving at the node, after a leaf's
//! accumulation, on release, to redirect a node's gradient and to keep the prepared plan of
//! a root. The thread's mask is read once per call and a node's flags once per node, so a
//! backward without features pays for none of them.

use crate::backward_ctx::BackwardCtx;
use crate::extension::{self, Dispatch, Running};
use crate::grad_buffer::grad_buffer;
use crate::grad_mode::{GradModeGuard, is_grad_enabled};
use crate::node::{
    EXTENSION_FLAGS, EXTENSION_SHIFT, GRAD_IN_PLACE, HAS_GRAD, IS_LEAF, NodeRef, RELEASE_MIN_BYTES, REQUIRES_GRAD,
    RETAINS_GRAD, any_kept_grad, structure_epoch,
};
use crate::op::Grads;
use crate::reactive::{self, Mode};
use crate::var::Var;
use ember_tensor::{Error, Result, Tensor};
use rustc_hash::FxHashMap;
use smallvec::SmallVec;
use std::any::Any;
use std::cell::Cell;
use std::collections::BinaryHeap;
use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

fn key(n: &NodeRef) -> usize {
    Arc::as_ptr(n) as *const u8 as usize
}

/// A node as the graph refers to it: its handle, copied without a count of its own.
///
/// Taking a counted reference to every node discovered, and dropping it afterwards, was two
/// atomic updates per node of a backward, each on a line the forward had long left. The
/// nodes need none: every node a backward reaches is held, for the whole call, by the
/// roots its caller holds through the inputs of the nodes in between (a node's inputs are
/// fixed until the node itself is dropped), or by the graph's `redirects`. A plan that
/// outlives its call, or that extensions see (they may count a node's references), also
/// holds counted references (`Graph::held`).
struct GraphNode(ManuallyDrop<NodeRef>);

impl GraphNode {
    /// `n` without a count of its own.
    ///
    /// # Safety
    /// The node must stay alive as long as the alias is used (see the type's docs).
    #[inline]
    unsafe fn alias(n: &NodeRef) -> GraphNode {
        // SAFETY: a bitwise copy of the handle that is never dropped (`ManuallyDrop`), so
        // the node's count stays its owners'; the caller keeps the node alive meanwhile.
        GraphNode(ManuallyDrop::new(unsafe { std::ptr::read(n) }))
    }
}

impl Deref for GraphNode {
    type Target = NodeRef;
    #[inline]
    fn deref(&self) -> &NodeRef {
        &self.0
    }
}

/// The part of the graph one backward call works on.
struct Graph {
    nodes: Vec<GraphNode>,
    /// Counted references to `nodes`, for a plan that extensions keep or see (empty
    /// otherwise, see [`GraphNode`]).
    held: Vec<NodeRef>,
    hold: bool,
    /// Per node, per input: the local index of the input if a gradient can flow to it.
    edges: Vec<SmallVec<[Option<usize>; 2]>>,
    /// Per node: how many input edges of discovered nodes point to it. With the graph's own
    /// reference (when it holds one, [`Graph::own_refs`]), that accounts for every strong
    /// reference the graph itself holds; any other is a handle held outside this backward,
    /// whose value must be kept.
    graph_refs: Vec<usize>,
    /// Per node: its flags as discovery read them (the flags a plan depends on change only
    /// with the structure epoch, see [`Prepared`]), so that pruning does not visit every
    /// node again.
    flags: Vec<u32>,
    index: FxHashMap<usize, usize>,
    /// The nodes whose gradient an extension redirects, with their target for this
    /// backward (read once, so that it cannot change mid-pass).
    redirects: FxHashMap<usize, Option<NodeRef>>,
}

impl Graph {
    fn add(&mut self, n: GraphNode) -> (usize, bool) {
        let k = key(&n);
        if let Some(&i) = self.index.get(&k) {
            return (i, false);
        }
        let i = self.push(n);
        self.index.insert(k, i);
        (i, true)
    }

    /// Adds `n` without indexing it, for a node that no other edge of the graph reaches
    /// (see [`reached_once`]); its local index.
    fn push(&mut self, n: GraphNode) -> usize {
        let i = self.nodes.len();
        if self.hold {
            self.held.push(NodeRef::clone(&n));
        }
        self.flags.push(n.flags.load(Ordering::Relaxed));
        self.nodes.push(n);
        self.edges.push(SmallVec::new());
        self.graph_refs.push(0);
        i
    }

    /// The strong references to each node that the graph holds itself (see [`GraphNode`]).
    fn own_refs(&self) -> usize {
        self.hold as usize
    }
}

/// Whether `input`, a node just reached through one edge of the graph (a recorded input or
/// a redirect's target) and not yet added to it, is reached by no other: every edge that
/// leads to a node holds a strong reference to it, so a node reached twice has at least
/// two. (A redirect's target also has the reference in `redirects`, and is indexed.) Edges
/// are fixed once recorded and new consumers never join a graph that already exists, so
/// the count cannot hide a second edge. Such a node is not indexed: in a chain, hashing
/// every node was half of what discovering it cost.
fn reached_once(input: &NodeRef) -> bool {
    Arc::strong_count(input) <= 1
}

/// The inputs a gradient flows to: the recorded inputs, or a redirected node's target.
fn grad_input(n: &NodeRef, redirects: &FxHashMap<usize, Option<NodeRef>>, pos: usize) -> Option<GraphNode> {
    let input = match redirects.get(&key(n)) {
        Some(target) if pos == 0 => target.as_ref(),
        Some(_) => None,
        None => n.inputs.get(pos),
    };
    // SAFETY: `n` (alive, see `GraphNode`) holds its inputs, and `redirects` its targets,
    // for as long as the graph is used.
    input.map(|i| unsafe { GraphNode::alias(i) })
}

#[inline]
fn grad_input_count(n: &NodeRef, redirects: &mut FxHashMap<usize, Option<NodeRef>>) -> usize {
    if n.is_leaf() {
        // A leaf may keep inputs (a result of constants made to require grad), but backward
        // ends at it.
        return 0;
    }
    let flags = n.extensions();
    if flags != 0 {
        return flagged_grad_input_count(n, flags, redirects);
    }
    n.inputs.len()
}

/// [`grad_input_count`] of a node with extension flags, which may redirect its gradient
/// (kept apart so that the common case inlines into discovery).
#[cold]
fn flagged_grad_input_count(n: &NodeRef, flags: u8, redirects: &mut FxHashMap<usize, Option<NodeRef>>) -> usize {
    if let Some(target) = extension::redirect(flags, n) {
        let target = target.map(|v| v.node.clone());
        let count = target.is_some() as usize;
        redirects.insert(key(n), target);
        return count;
    }
    n.inputs.len()
}

/// Discovers the nodes reachable from `roots` through grad-requiring edges; returns the
/// graph and a post-order (inputs before consumers).
///
/// With `complete`, every node is indexed (a plan kept for later is asked which nodes it
/// holds, see [`plan_holds`]); otherwise only those that can be reached more than once
/// (and the roots) are, which is all that discovery needs to find a node again.
///
/// With `hold`, the graph holds counted references to its nodes (see [`GraphNode`]).
fn discover(roots: &[NodeRef], complete: bool, hold: bool) -> (Graph, Vec<usize>) {
    // Sized for the graph this thread's last backward discovered: a training loop runs the
    // same graph every step, and growing the lists node by node was close to half of what
    // adding a node to them cost.
    let hint = LAST_GRAPH_SIZE.with(Cell::get);
    let mut g = Graph {
        nodes: Vec::with_capacity(hint),
        held: Vec::new(),
        hold,
        edges: Vec::with_capacity(hint),
        graph_refs: Vec::with_capacity(hint),
        flags: Vec::with_capacity(hint),
        index: FxHashMap::default(),
        redirects: FxHashMap::default(),
    };
    let mut post = Vec::with_capacity(hint);
    // (node, number of inputs, next input to visit)
    let mut stack: Vec<(usize, usize, usize)> = Vec::new();
    for r in roots {
        // SAFETY: the caller holds the roots while the graph is used.
        let (i, new) = g.add(unsafe { GraphNode::alias(r) });
        if new {
            let n = grad_input_count(r, &mut g.redirects);
            stack.push((i, n, 0));
        }
        while let Some(&mut (i, count, ref mut pos)) = stack.last_mut() {
            if *pos < count {
                let p = *pos;
                *pos += 1;
                let Some(input) = grad_input(&g.nodes[i], &g.redirects, p) else {
                    g.edges[i].push(None);
                    continue;
                };
                if !input.requires_grad() {
                    g.edges[i].push(None);
                    continue;
                }
                let (j, new) = if !complete && reached_once(&input) { (g.push(input), true) } else { g.add(input) };
                g.edges[i].push(Some(j));
                // A redirect's target is no recorded input: it holds no reference to it.
                if !g.redirects.contains_key(&key(&g.nodes[i])) {
                    g.graph_refs[j] += 1;
                }
                if new {
                    let n = grad_input_count(&g.nodes[j], &mut g.redirects);
                    stack.push((j, n, 0));
                }
            } else {
                post.push(i);
                stack.pop();
            }
        }
    }
    LAST_GRAPH_SIZE.with(|c| c.set(g.nodes.len().min(MAX_SIZE_HINT)));
    (g, post)
}

/// The most nodes [`discover`] reserves room for ahead (a larger graph grows its lists as
/// it goes), so that one huge backward does not make every later one reserve as much.
const MAX_SIZE_HINT: usize = 1 << 16;

thread_local! {
    /// How many nodes this thread's last backward discovered (capped at [`MAX_SIZE_HINT`]).
    static LAST_GRAPH_SIZE: Cell<usize> = const { Cell::new(0) };
}

/// The part of a backward call that depends only on the graph: the discovered nodes and
/// edges, which nodes are needed, and how many gradients each needed node waits for.
pub(crate) struct Prepared {
    graph: Graph,
    needed: Vec<bool>,
    deps: Vec<usize>,
    target_slot: Vec<Option<usize>>,
    stamp: u64,
}

/// `keep`: the plan may be kept for later backward calls (see [`discover`]); it then holds
/// its nodes, and so it does with `hold`.
fn prepare(roots: &[NodeRef], targets: Option<&[NodeRef]>, keep: bool, hold: bool) -> Prepared {
    let accumulate = targets.is_none();
    let (graph, post) = discover(roots, keep, keep || hold);
    let n = graph.nodes.len();
    let mut target_slot: Vec<Option<usize>> = vec![None; n];
    if let Some(ts) = targets {
        for (t, node) in ts.iter().enumerate() {
            if let Some(&i) = graph.index.get(&key(node)) {
                target_slot[i] = Some(t);
            }
        }
    }
    let mut needed = vec![false; n];
    for &i in &post {
        let own = if accumulate {
            let f = graph.flags[i];
            let extensions = ((f & EXTENSION_FLAGS) >> EXTENSION_SHIFT) as u8;
            (f & IS_LEAF != 0 && f & REQUIRES_GRAD != 0)
                || f & RETAINS_GRAD != 0
                || (extensions != 0 && extension::wants_grad(extensions, &graph.nodes[i]))
        } else {
            target_slot[i].is_some()
        };
        needed[i] = own || graph.edges[i].iter().any(|e| e.is_some_and(|j| needed[j]));
    }
    let mut deps = vec![0usize; n];
    for i in 0..n {
        if needed[i] {
            for &j in graph.edges[i].iter().flatten() {
                if needed[j] {
                    deps[j] += 1;
                }
            }
        }
    }
    Prepared { graph, needed, deps, target_slot, stamp: structure_epoch() }
}

/// The prepared graph for a backward from `roots`: reused when an extension flagged on the
/// single root keeps one and nothing structural
/// changed since, computed otherwise and offered to those extensions. `hold`: the graph
/// holds counted references to its nodes (extensions are active, see [`GraphNode`]).
fn prepared_for(roots: &[NodeRef], targets: Option<&[NodeRef]>, hold: bool) -> Arc<dyn Any + Send + Sync> {
    let flags = if targets.is_none() && roots.len() == 1 { roots[0].extensions() } else { 0 };
    if flags != 0
        && let Some(p) = extension::cached_plan(flags, &roots[0])
        && p.downcast_ref::<Prepared>().is_some_and(|p| p.stamp == structure_epoch())
    {
        return p;
    }
    let p: Arc<dyn Any + Send + Sync> = Arc::new(prepare(roots, targets, flags != 0, hold));
    if flags != 0 {
        extension::keep_plan(flags, &roots[0], &p);
    }
    p
}

/// Whether a backward plan (as kept by an extension) holds a reference to `node` (owners
/// that count references to decide whether anyone else still uses a node must discount it).
pub(crate) fn plan_holds(plan: &(dyn Any + Send + Sync), node: *const u8) -> bool {
    plan.downcast_ref::<Prepared>().is_some_and(|p| p.graph.index.contains_key(&(node as usize)))
}

thread_local! {
    /// The backward call running on this thread (0: none), and whether it retains the
    /// graph.
    static RUN: Cell<(u64, bool)> = const { Cell::new((0, false)) };
}

static NEXT_RUN: AtomicU64 = AtomicU64::new(1);

/// The backward call running on this thread (0: none): a backward nested in another (run
/// by an operation's backward) has its own, so that what operations hand over
/// between their nodes stays within one call.
pub(crate) fn current_run() -> u64 {
    RUN.with(|r| r.get().0)
}

/// Whether the backward call running on this thread keeps what backward needs
/// (`retain_graph` or `create_graph`). Outside any backward call, nothing is freed.
pub(crate) fn current_run_retains() -> bool {
    RUN.with(|r| {
        let (id, retain) = r.get();
        id == 0 || retain
    })
}

/// Identifies one backward call on this thread while it runs (see [`current_run`]).
struct RunScope {
    prev: (u64, bool),
}

impl RunScope {
    fn enter(retain_graph: bool) -> RunScope {
        let id = NEXT_RUN.fetch_add(1, Ordering::Relaxed);
        RunScope { prev: RUN.with(|r| r.replace((id, retain_graph))) }
    }
}

impl Drop for RunScope {
    fn drop(&mut self) {
        RUN.with(|r| r.set(self.prev));
    }
}

/// Options of one backward call.
pub(crate) struct Run<'a> {
    pub roots: Vec<(NodeRef, Var)>,
    /// `Some` for `grad()`: capture the gradients of these nodes instead of accumulating.
    pub targets: Option<&'a [NodeRef]>,
    pub retain_graph: bool,
    pub create_graph: bool,
    /// Whether the extensions flagged on `targets` see their gradients. A backward nested in
    /// another one (run by an operation's backward) hands its targets' gradients to the
    /// outer backward, which shows them to the extensions when it delivers them: doing it
    /// here too would apply their hooks twice.
    pub target_hooks: bool,
}

/// Runs a backward pass; returns the captured gradients of `targets` (empty otherwise).
pub(crate) fn execute(run: Run<'_>) -> Result<Vec<Option<Var>>> {
    let accumulate = run.targets.is_none();
    let create_graph = run.create_graph;
    let retain_graph = run.retain_graph || create_graph;
    if !is_grad_enabled() && !create_graph {
        log::warn!(
            "backward() called with grad mode disabled (inside no_grad): the graph was recorded before, so \
             gradients are computed anyway; this is usually a mistake"
        );
    }
    for (r, _) in &run.roots {
        reactive::refresh(r, Mode::Values)?;
    }
    let _mode = GradModeGuard::new(create_graph);
    let _run = RunScope::enter(retain_graph);
    // The features active on this thread, read once for the whole call.
    let features = extension::active();
    let _running = (features != 0).then(|| Running::begin(features));

    // Held until the plan is gone: they hold the graph's nodes (see `GraphNode`).
    let root_nodes: Vec<NodeRef> = run.roots.iter().map(|(n, _)| n.clone()).collect();
    let plan = prepared_for(&root_nodes, run.targets, features != 0);
    let Some(prepared) = plan.downcast_ref::<Prepared>() else {
        return Err(Error::autograd("ember internal error: a kept backward plan has another type"));
    };
    let (graph, needed, target_slot) = (&prepared.graph, &prepared.needed, &prepared.target_slot);
    let n = graph.nodes.len();
    // Only a backward that retained its graph leaves gradients on nodes on the way: until
    // one has run, no node can hold one, and the pass over every node is skipped.
    if accumulate && any_kept_grad() {
        for node in &graph.nodes {
            // A node on the way stops holding the previous backward's gradient (see docs/design.md,
            // 'Accumulation rules').
            if node.has(HAS_GRAD) && !node.is_leaf() && !node.has(RETAINS_GRAD) {
                *node.grad_slot() = None;
                node.set(HAS_GRAD, false);
            }
        }
    }
    let mut deps = prepared.deps.clone();

    let mut buffers: Vec<Option<Var>> = vec![None; n];
    let mut heap = BinaryHeap::new();
    for (node, grad) in run.roots {
        let i = graph.index[&key(&node)];
        buffers[i] = Some(match buffers[i].take() {
            None => grad,
            Some(prev) => prev.add(&grad)?,
        });
    }
    let mut queued = vec![false; n];
    for r in &root_nodes {
        let i = graph.index[&key(r)];
        if needed[i] && deps[i] == 0 && !queued[i] {
            queued[i] = true;
            heap.push((graph.nodes[i].seq, i));
        }
    }

    let mut captured: Vec<Option<Var>> = vec![None; run.targets.map_or(0, |t| t.len())];
    let mut released = Released::new();
    while let Some((_, i)) = heap.pop() {
        let node = &graph.nodes[i];
        let flags = node.extensions();
        let mut grad = buffers[i].take();
        if flags != 0
            && (run.target_hooks || target_slot[i].is_none())
            && let Some(g) = grad.take()
        {
            grad = Some(extension::on_grad(flags, node, g)?);
        }
        if let Some(t) = target_slot[i] {
            captured[t] = grad.as_ref().map(|g| in_dtype_of(node, g));
        }
        if node.is_leaf() {
            if accumulate
                && node.requires_grad()
                && let Some(g) = grad
            {
                accumulate_grad(node, g, create_graph)?;
                if flags != 0 {
                    extension::after_accumulate(flags, node)?;
                }
            }
            continue;
        }
        if accumulate {
            if node.has(RETAINS_GRAD) {
                if let Some(g) = &grad {
                    accumulate_grad(node, g.clone(), create_graph)?;
                }
            } else if retain_graph {
                *node.grad_slot() = grad.as_ref().map(|g| readable_grad(g, create_graph));
                node.set_kept_grad(grad.is_some());
            }
        }
        // Built by pushing rather than collected: `SmallVec`'s `extend` reserves through a
        // call that cost more than the one or two flags most nodes have.
        let mut needs: SmallVec<[bool; 2]> = SmallVec::new();
        for e in &graph.edges[i] {
            needs.push(e.is_some_and(|j| needed[j]));
        }
        let mut grads: Grads = match &grad {
            Some(g) if needs.iter().any(|&b| b) => {
                if flags != 0 && graph.redirects.contains_key(&key(node)) {
                    // A redirect passes its gradient on unchanged.
                    smallvec::smallvec![Some(g.clone())]
                } else {
                    if create_graph && !node.op.backward_differentiable() {
                        return Err(not_differentiable(node));
                    }
                    // Inputs that may take their gradient in their buffer: leaves whose only
                    // gradient comes from here and is accumulated.
                    let mut sole: SmallVec<[bool; 2]> = SmallVec::new();
                    if accumulate && !create_graph {
                        for e in &graph.edges[i] {
                            sole.push(e.is_some_and(|j| {
                                needed[j] && prepared.deps[j] == 1 && graph.nodes[j].has(GRAD_IN_PLACE)
                            }));
                        }
                    }
                    // The engine's own gradient may be overwritten by the operation (see
                    // `BackwardCtx::writable_grad`); `grad` is dropped right after.
                    let owned_grad = (!create_graph && features == 0 && Arc::strong_count(&g.node) == 1).then_some(g);
                    let ctx = BackwardCtx { node, needs, saved: &Dispatch, sole, owned_grad };
                    if features != 0 {
                        extension::backward_node(features, node, &ctx, g)?
                    } else {
                        node.op.backward(&ctx, g)?
                    }
                }
            }
            _ => Grads::new(),
        };
        for (k, e) in graph.edges[i].iter().enumerate() {
            let Some(j) = *e else { continue };
            if !needed[j] {
                continue;
            }
            // Moved out rather than cloned: a clone and the drop of `grads` were two atomic
            // updates of the gradient's count per edge.
            if let Some(gk) = grads.get_mut(k).and_then(Option::take) {
                // Built-in operations are covered by gradcheck tests; the check costs two
                // locks per edge, so release builds leave it to operations that ask for it.
                if cfg!(debug_assertions) || node.checks_grads() {
                    check_grad_shape(node, k, &graph.nodes[j], &gk)?;
                }
                buffers[j] = Some(match buffers[j].take() {
                    None => gk,
                    Some(prev) => prev.add(&gk)?,
                });
            }
            deps[j] -= 1;
            if deps[j] == 0 {
                // A leaf runs as soon as its gradient is complete (PyTorch gives
                // AccumulateGrad the top priority too): its gradient is not kept buffered
                // until the rest of backward is done, and extensions watching the leaf see it early.
                let n = &graph.nodes[j];
                heap.push((if n.is_leaf() { u64::MAX } else { n.seq }, j));
            }
        }
        if !retain_graph {
            if flags != 0 {
                extension::on_release(flags, node);
            }
            release(node, graph.own_refs() + graph.graph_refs[i], &mut released);
        }
    }
    Ok(captured)
}

/// How many small released values [`Released`] holds before it frees them together.
const RELEASED_BATCH: usize = 32;

/// Values of this many bytes or fewer live inside their storage cell (ember-tensor's
/// inline buffers), so freeing them returns no block.
const CELL_INLINE_BYTES: usize = 32;

/// Values backward released from their nodes, freed in batches rather than one at a time.
///
/// A released value was computed during the forward, so its block has long left the
/// cache. Freed at once, it becomes the newest block of its size in the per-thread cache,
/// and the next gradient of that size (allocated a node later) is written into that cold
/// block instead of into the gradient freed just before, which is still in cache: on a
/// chain of 64-element values that was most of what backward cost beyond a chain of
/// 1-element ones. Held back and freed a batch at a time, the released blocks go under
/// the gradients' hot ones, and their frees (independent writes) overlap. Only values
/// below [`RELEASE_MIN_BYTES`] wait, so at most a batch of them (under 128 KiB) is held;
/// larger values are freed at once, as memory matters there.
struct Released {
    values: SmallVec<[Tensor; RELEASED_BATCH]>,
}

impl Released {
    fn new() -> Released {
        Released { values: SmallVec::new() }
    }

    /// Frees the held values if the batch is full, so that there is room for one more.
    #[inline]
    fn make_room(&mut self) {
        if self.values.len() == RELEASED_BATCH {
            self.values.clear();
        }
    }

    /// Takes `value` out of its node: freed now if it is large or lives inside its storage
    /// cell (no block to keep apart), else held with the batch (which must have room, see
    /// [`Released::make_room`]).
    #[inline]
    fn take(&mut self, value: &mut Option<Tensor>) {
        let small = value.as_ref().is_some_and(|v| {
            let bytes = v.numel() * v.dtype().size_in_bytes();
            bytes > CELL_INLINE_BYTES && bytes < RELEASE_MIN_BYTES
        });
        if small && let Some(v) = value.take() {
            self.values.push(v);
        } else {
            // Dropped in place: moving a tensor out costs a copy of it.
            *value = None;
        }
    }
}

/// The error for `create_graph` through a node whose backward is not differentiable.
#[cold]
fn not_differentiable(node: &NodeRef) -> Error {
    Error::autograd(format!(
        "{}: its backward is not differentiable (it computes with non-differentiable kernels), so it cannot run \
         under create_graph: higher-order gradients through it would be wrong; differentiate it without \
         create_graph, or give it a backward written with Var operations and declare it differentiable",
        node.op.name()
    ))
}

/// `g` in the dtype of `node`'s value. Operations already return gradients in their
/// inputs' dtypes; this covers what reaches a node from outside them (an extension's replacement).
fn in_dtype_of(node: &NodeRef, g: &Var) -> Var {
    let dtype = node.state().value.as_ref().map(|v| v.dtype());
    match dtype {
        Some(dt) if dt != g.dtype() => g.to_dtype(dt),
        _ => g.clone(),
    }
}

fn check_grad_shape(node: &NodeRef, k: usize, input: &NodeRef, g: &Var) -> Result<()> {
    let expected = input.state().value.as_ref().map(|v| (v.shape().clone(), v.dtype()));
    if let Some((s, dt)) = expected {
        let (gs, gd) = g.shape_and_dtype();
        // Every operation returns its inputs' dtypes (PyTorch's validate_outputs casts them;
        // ember's operations cast where they promote), so a mismatch is a bug in one.
        if gs != s || gd != dt {
            return Err(Error::autograd(format!(
                "backward of {}: the gradient for input {k} is [{gd} {gs:?}], expected [{dt} {s:?}]",
                node.op.name(),
            )));
        }
    }
    Ok(())
}

/// The gradient an intermediate node keeps readable until the next backward (see
/// docs/design.md, 'Accumulation rules'). Under `create_graph` it is the value only: the
/// gradient's graph usually reaches back to the node itself (the gradient of `h.square()` is `2 h g`), and a node holding it
/// would hold itself, so the graph would never be freed. PyTorch keeps graph-carrying
/// gradients only on leaves and on `retain_grad` nodes, and so does ember.
fn readable_grad(g: &Var, create_graph: bool) -> Var {
    if create_graph && g.requires_grad() { Var::new(g.value()) } else { g.clone() }
}

/// Frees the value of a node that backward no longer needs and nothing outside the graph
/// holds (no `Var` of the user's, no other graph that was not part of this backward), or
/// hands it to `released` to free later. `graph_refs`: the strong references to the node
/// that the graph accounts for.
fn release(node: &NodeRef, graph_refs: usize, released: &mut Released) {
    if node.inputs.is_empty() || !node.recomputable() {
        return;
    }
    released.make_room();
    // The handle count is read under the state lock: a thread that takes a handle and then
    // reads the value (through the lock) either finishes before this and is counted, or
    // reads after the value is gone and recomputes it. Read before the lock, a handle taken
    // in between would find the value present, then lose it.
    let mut st = node.state();
    if Arc::strong_count(node) > graph_refs {
        return;
    }
    // A value written in place since it was computed is kept: recomputing it would give the
    // value from before the write, and consumers computed from the written one would then be
    // differentiated at the wrong point.
    if st.value.as_ref().is_none_or(|v| v.version() != st.storage_version) {
        return;
    }
    #[cfg(test)]
    tests::at_release(node);
    released.take(&mut st.value);
}

/// Adds `g` into a leaf's (or a retaining node's) `.grad`.
fn accumulate_grad(node: &NodeRef, g: Var, create_graph: bool) -> Result<()> {
    let shape = node.state().value.as_ref().map(|v| (v.shape().clone(), v.dtype()));
    let g = match shape {
        Some((s, _)) if g.shape() != s => {
            return Err(Error::autograd(format!(
                "the gradient of shape {:?} does not match the leaf's shape {:?}",
                g.shape(),
                s
            )));
        }
        // Converted like PyTorch's AccumulateGrad; under create_graph differentiably, so the
        // gradient's graph survives the conversion.
        Some((_, dt)) if dt != g.dtype() => {
            if create_graph {
                g.to_dtype(dt)
            } else {
                Var::new(g.value().to_dtype(dt))
            }
        }
        _ => g,
    };
    // Taken before the gradient's lock (the engine never holds both the other way round).
    let buffer = if !create_graph && node.has(GRAD_IN_PLACE) { grad_buffer(node) } else { None };
    let mut slot = node.grad_slot();
    let new = match slot.take() {
        None if create_graph => g,
        None => match buffer {
            // The first gradient goes into the buffer, unless the operation wrote it there.
            Some(buffer) => {
                let (t, b) = (g.value(), buffer.value());
                if !(t.shares_storage(&b) && t.layout() == b.layout()) {
                    b.copy_(&t)?;
                }
                buffer
            }
            None => {
                let t = g.value();
                if t.is_contiguous() && g.is_leaf() { g } else { Var::new(t.contiguous()) }
            }
        },
        Some(old) if create_graph || old.requires_grad() || g.requires_grad() => old.add(&g)?,
        Some(old) => {
            let t = old.value();
            // In place only when nothing else can see the old gradient's storage, or when the
            // leaf asked for it (its gradient is a view that must stay one).
            let unique = Arc::strong_count(&old.node) == 1 && Arc::strong_count(t.storage()) == 2;
            if unique || node.has(GRAD_IN_PLACE) {
                t.add_(&g.value())?;
                old
            } else {
                Var::new(t.add(&g.value())?)
            }
        }
    };
    *slot = Some(new);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;
    use std::sync::mpsc::{Sender, channel};

    /// A node whose release tells a channel and then waits, so that a test can run another
    /// thread at the moment backward frees that node's value.
    static PAUSE: Mutex<Option<(usize, Sender<()>)>> = Mutex::new(None);

    pub(super) fn at_release(node: &NodeRef) {
        let hit = PAUSE.lock().take_if(|(k, _)| *k == key(node));
        if let Some((_, tell)) = hit {
            let _ = tell.send(());
            // Give the other thread time to take a handle and read the value.
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    /// Another thread takes a handle to a node (as `inputs()` and a backward's context do)
    /// while backward frees it: the handle must end up with a value (recomputed), never
    /// with none. Before the count was read under the lock, the handle saw the value, then
    /// lost it, and `value()` hit an internal-error panic.
    #[test]
    fn a_handle_taken_while_backward_frees_the_node_keeps_a_value() -> Result<()> {
        let w = Var::param(Tensor::from_vec(vec![0.5f64, 1.0], [2])?);
        let loss = w.exp().sum_all();
        let h_id = loss.inputs()?[0].id();
        let (tell, told) = channel();
        *PAUSE.lock() = Some((h_id, tell));
        let (done, finished) = channel::<()>();
        let reader = {
            let loss = loss.clone();
            std::thread::spawn(move || -> Result<Vec<f64>> {
                told.recv().map_err(|_| Error::autograd("backward never reached the node"))?;
                let h = loss.inputs()?.remove(0);
                let _ = finished.recv();
                h.value().to_vec::<f64>()
            })
        };
        let result = loss.backward();
        let _ = done.send(());
        result?;
        let read = reader.join().map_err(|_| Error::autograd("the reading thread panicked"))??;
        assert_eq!(read, vec![0.5f64.exp(), 1.0f64.exp()]);
        Ok(())
    }

    /// Backward frees small released values in batches (`Released`): by the time it
    /// returns, every value it released is gone, in a chain longer than several batches, at
    /// sizes that live in a block (64 elements), inside their cell (one) and in the pool
    /// (2,048, released in the forward already), and the gradient is unchanged.
    #[test]
    fn every_value_backward_releases_is_freed_by_its_end() -> Result<()> {
        for n in [1usize, 64, 2048] {
            let x = Var::param(Tensor::ones([n], ember_tensor::DType::F32)?);
            let mut y = x.clone();
            let mut values = Vec::new();
            for _ in 0..3 * RELEASED_BATCH {
                y = y.mul_scalar(2.0);
                values.push(Arc::downgrade(y.value().storage()));
            }
            let loss = y.sum_all();
            drop(y);
            if n * 4 < RELEASE_MIN_BYTES {
                // (Larger values nothing reads went when their last `Var` did.)
                assert!(values.iter().all(|v| v.strong_count() == 1), "every value is alive before backward");
            }
            loss.backward()?;
            let alive = values.iter().filter(|v| v.strong_count() > 0).count();
            assert_eq!(alive, 0, "numel {n}: {alive} values outlived backward");
            let want = 2f32.powi(3 * RELEASED_BATCH as i32);
            assert_eq!(x.grad().ok_or_else(|| Error::autograd("no gradient"))?.to_vec::<f32>()?, vec![want; n]);
        }
        Ok(())
    }

    /// A plain backward's graph holds no counted references to its nodes, one run while an
    /// extension is active does (see `GraphNode`): either way backward frees the same
    /// values, keeping one a user's handle holds and freeing one nothing holds.
    #[test]
    fn backward_frees_the_same_values_whether_or_not_the_graph_holds_its_nodes() -> Result<()> {
        let run = || -> Result<(bool, bool)> {
            let x = Var::param(Tensor::ones([64], ember_tensor::DType::F32)?);
            let held = x.mul_scalar(2.0);
            let unheld = held.mul_scalar(3.0);
            let held_value = Arc::downgrade(held.value().storage());
            let unheld_value = Arc::downgrade(unheld.value().storage());
            let loss = unheld.mul_scalar(4.0).sum_all();
            drop(unheld);
            loss.backward()?;
            assert_eq!(x.grad().ok_or_else(|| Error::autograd("no gradient"))?.to_vec::<f32>()?, vec![24.0; 64]);
            Ok((held_value.strong_count() > 0, unheld_value.strong_count() > 0))
        };
        assert_eq!(run()?, (true, false), "plain backward");
        assert!(crate::extension::active() == 0);
        let with_extension = crate::detect_anomaly(|| {
            assert!(crate::extension::active() != 0);
            run()
        })?;
        assert_eq!(with_extension, (true, false), "backward under anomaly mode");
        Ok(())
    }

    /// A gradient that is a view into a larger buffer: by default a second backward adds
    /// into a new tensor (the buffer keeps the first gradient); with `set_grad_in_place`
    /// it adds through the view, and the gradient stays that view.
    #[test]
    fn a_shared_gradient_is_added_into_in_place_only_when_asked() -> Result<()> {
        for in_place in [false, true] {
            let w = Var::param(Tensor::from_vec(vec![1.0f64, 2.0], [2])?);
            w.set_grad_in_place(in_place)?;
            let buffer = Tensor::zeros([3], ember_tensor::DType::F64)?;
            let view = buffer.narrow(0, 1, 2)?;
            view.fill_(1.0)?;
            w.set_grad(Some(view))?;
            w.square().sum_all().backward()?;
            let grad = w.grad().ok_or_else(|| Error::autograd("no gradient"))?;
            assert_eq!(grad.to_vec::<f64>()?, vec![3.0, 5.0]);
            assert_eq!(grad.shares_storage(&buffer), in_place);
            let expected = if in_place { vec![0.0, 3.0, 5.0] } else { vec![0.0, 1.0, 1.0] };
            assert_eq!(buffer.to_vec::<f64>()?, expected);
        }
        assert!(Var::param(Tensor::ones([1], ember_tensor::DType::F32)?).exp().set_grad_in_place(true).is_err());
        Ok(())
    }
}
