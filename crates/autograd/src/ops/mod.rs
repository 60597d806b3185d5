//! Differentiable operations on `Var`s, one file per family. Each operation is one type
//! implementing [`Op`]: its forward (a `Tensor` kernel call) and its backward (written with
//! `Var` operations, so that it can be differentiated again) side by side, plus the `Var`
//! method that applies it.

mod attention;
mod binary;
mod compare;
mod conv;
mod index;
mod interpolate;
mod join;
mod layer_norm;
mod linalg;
mod loss;
mod norm;
mod operators;
mod pool;
mod reduce;
mod softmax;
mod unary;
mod unfold;
mod view;

use crate::extension::{self, Applying};
use crate::grad_mode::is_grad_enabled;
use crate::inference_mode::{self, INFERENCE_BIT, INFERENCE_FLAG};
use crate::node::{NodeRef, NodeState, REQUIRES_GRAD, new_node, next_seq, release_flags};
use crate::op::Op;
use crate::var::Var;
use ember_tensor::{Error, Result, Tensor};
use parking_lot::MutexGuard;
use smallvec::SmallVec;
use std::panic::Location;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Runs `op` on the values of `inputs` and, in grad mode, records it in the graph.
///
/// The inputs' states are locked (each node once, in address order, so that two threads
/// applying `a * b` and `b * a` cannot deadlock) while the forward runs on borrowed values:
/// no input tensor is cloned.
#[inline]
#[track_caller]
pub(crate) fn apply<O: Op>(op: O, inputs: &[&Var]) -> Result<Var> {
    // Extensions active on this thread (the profiler, saved-tensor hooks, checkpoint,
    // anomaly mode, inference mode) watch operations through this one thread-local check.
    let active = extension::active();
    if active != 0 {
        return apply_instrumented(op, inputs, active, Location::caller());
    }
    apply_plain(op, inputs)
}

/// `apply` while an extension is active on this thread: its recording hooks run around the
/// operation (see `extension::Applying`), and in inference mode nothing is recorded.
/// `caller` is the line that called the public `Var` method (every one is `#[track_caller]`,
/// down to `apply`), for the profiler's call sites.
#[cold]
#[inline(never)]
fn apply_instrumented<O: Op>(op: O, inputs: &[&Var], active: u8, caller: &'static Location<'static>) -> Result<Var> {
    let inference = active & INFERENCE_BIT != 0;
    if active == INFERENCE_BIT {
        // Inference mode alone: no hooks to call.
        return apply_unrecorded(op, inputs);
    }
    crate::profiler::note_caller(caller);
    let applying = Applying::begin(op.name(), inputs);
    let result = if inference { apply_unrecorded(op, inputs) } else { apply_plain(op, inputs) };
    if let Ok(var) = &result {
        applying.recorded(var);
    }
    result
}

/// `apply` in inference mode: the forward, and an inference tensor that records nothing.
#[inline]
fn apply_unrecorded<O: Op>(op: O, inputs: &[&Var]) -> Result<Var> {
    compute(op, inputs, |_, inputs, out, _| Ok(inference_mode::unrecorded(inputs, out, true)))
}

/// `apply` without the optional instrumentation.
#[inline]
pub(crate) fn apply_plain<O: Op>(op: O, inputs: &[&Var]) -> Result<Var> {
    compute(op, inputs, record)
}

/// Runs `op`'s forward on the values of `inputs` and hands the result, with the inputs'
/// versions, to `finish` (which records it, or not).
#[inline]
fn compute<O: Op>(
    op: O,
    inputs: &[&Var],
    finish: impl FnOnce(O, &[&Var], Tensor, Versions) -> Result<Var>,
) -> Result<Var> {
    match inputs {
        [x] => {
            // The common case (elementwise, scalar, reductions, views): one lock, no
            // bookkeeping.
            // The forward's result is unwrapped only on the way into `finish`: unwrapped
            // inside the block, the tensor was copied from one stack slot to the next on
            // each step out of it.
            let (out, versions) = {
                let st = x.node.state();
                let v = value_of(&st, &op)?;
                let versions = smallvec::smallvec![st.versions()];
                (op.forward(&[v]), versions)
            };
            finish(op, inputs, out?, versions)
        }
        [a, b] if Arc::ptr_eq(&a.node, &b.node) => {
            let (out, versions) = {
                let st = a.node.state();
                let v = value_of(&st, &op)?;
                (op.forward(&[v, v])?, smallvec::smallvec![st.versions(), st.versions()])
            };
            finish(op, inputs, out, versions)
        }
        [a, b] => {
            // Two locks, taken in address order so that `a * b` and `b * a` on two threads
            // cannot deadlock.
            let swap = key(a) > key(b);
            let (first, second) = if swap { (b, a) } else { (a, b) };
            let (out, versions) = {
                let s1 = first.node.state();
                let s2 = second.node.state();
                let (sa, sb) = if swap { (&s2, &s1) } else { (&s1, &s2) };
                let (va, vb) = (value_of(sa, &op)?, value_of(sb, &op)?);
                (op.forward(&[va, vb])?, smallvec::smallvec![sa.versions(), sb.versions()])
            };
            finish(op, inputs, out, versions)
        }
        _ => {
            let (out, versions) = compute_many(&op, inputs)?;
            finish(op, inputs, out, versions)
        }
    }
}

/// The inputs' `(value version, storage version)` as a node records them.
type Versions = SmallVec<[(u64, u64); 2]>;

fn key(v: &Var) -> usize {
    Arc::as_ptr(&v.node) as *const u8 as usize
}

fn value_of<'a, O: Op>(st: &'a NodeState, op: &O) -> Result<&'a Tensor> {
    st.value.as_ref().ok_or_else(|| Error::autograd(format!("{}: an input has no value", op.name())))
}

/// The forward for three or more inputs: each distinct node locked once, in address order.
fn compute_many<O: Op>(op: &O, inputs: &[&Var]) -> Result<(Tensor, Versions)> {
    let mut order: SmallVec<[usize; 4]> = (0..inputs.len()).collect();
    order.sort_unstable_by_key(|&i| key(inputs[i]));
    let mut guards: SmallVec<[(usize, MutexGuard<'_, NodeState>); 4]> = SmallVec::new();
    for &i in &order {
        let k = key(inputs[i]);
        if guards.last().is_none_or(|(last, _)| *last != k) {
            guards.push((k, inputs[i].node.state()));
        }
    }
    let state_of = |v: &Var| -> &NodeState {
        let k = key(v);
        // Every input was locked above.
        &guards[guards.iter().position(|(g, _)| *g == k).unwrap_or(0)].1
    };
    let mut values: SmallVec<[&Tensor; 4]> = SmallVec::with_capacity(inputs.len());
    let mut versions: Versions = SmallVec::with_capacity(inputs.len());
    for v in inputs {
        let st = state_of(v);
        values.push(value_of(st, op)?);
        versions.push(st.versions());
    }
    let out = op.forward(&values)?;
    Ok((out, versions))
}

/// Wraps a computed `out` in a node for `op` (a plain leaf outside grad mode).
///
/// An inference tensor among the inputs is an error when the node would require grad (its
/// value would be saved for backward, and its storage counts no writes); otherwise nothing
/// is recorded. The inputs' flags are read once for both questions.
#[inline]
pub(crate) fn record<O: Op>(op: O, inputs: &[&Var], out: Tensor, versions: Versions) -> Result<Var> {
    if !is_grad_enabled() {
        return Ok(Var::leaf_with(out, 0));
    }
    let mut any = 0;
    for v in inputs {
        any |= v.node.flags.load(Ordering::Relaxed);
    }
    if any & INFERENCE_FLAG != 0 {
        if any & REQUIRES_GRAD != 0 {
            return Err(inference_mode::saved_for_backward(op.name()));
        }
        return Ok(inference_mode::unrecorded(inputs, out, false));
    }
    // Numbered first: see `new_node`.
    let seq = next_seq();
    let mut edges: SmallVec<[NodeRef; 2]> = SmallVec::new();
    for v in inputs {
        edges.push(v.node.clone());
    }
    let flags = any & REQUIRES_GRAD;
    let flags = flags | release_flags(&op, flags, &out);
    // Extensions see the node in `apply_instrumented`.
    Ok(new_node(seq, op, edges, flags, out, versions))
}

impl Var {
    /// Applies an operation of your own, implementing [`Op`], to `inputs`: its forward
    /// runs now and, in grad mode, it is recorded like a built-in operation. (For a forward
    /// on tensors with a hand-written backward that need not be re-executable, a
    /// [`Function`](crate::Function) is usually simpler.)
    ///
    /// ```
    /// use ember_autograd::{BackwardCtx, Grads, Op, Var};
    /// use ember_tensor::{Result, Tensor};
    /// /// `y = 3x`.
    /// struct Triple;
    /// impl Op for Triple {
    ///     fn name(&self) -> &str {
    ///         "triple"
    ///     }
    ///     fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
    ///         Ok(inputs[0].mul_scalar(3.0))
    ///     }
    ///     fn backward(&self, _: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
    ///         Ok([Some(g.mul_scalar(3.0))].into_iter().collect())
    ///     }
    /// }
    /// let x = Var::param(Tensor::from_vec(vec![1.0f64, 2.0], [2])?);
    /// Var::apply_op(Triple, &[&x])?.sum_all().backward()?;
    /// assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![3.0, 3.0]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    #[track_caller]
    pub fn apply_op<O: Op>(op: O, inputs: &[&Var]) -> Result<Var> {
        apply(op, inputs)
    }
}

/// `apply` for operations whose forward cannot fail on a valid value (elementwise functions
/// of one tensor, tensor-scalar operations).
#[inline]
#[track_caller]
pub(crate) fn apply_infallible<O: Op>(op: O, inputs: &[&Var]) -> Var {
    infallible(apply(op, inputs), "an infallible operation")
}

/// Unwraps the result of an operation that cannot fail on valid input (`what` names it for
/// the internal-error message). The only failure left is the system refusing memory for a
/// result, which aborts like `Vec` does (and like the tensor operations themselves).
pub(crate) fn infallible<T>(r: Result<T>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => unreachable!("ember internal error: {what} failed: {}", e.abort_if_alloc()),
    }
}

/// A constant (no gradient) `Var` holding `t`, for masks and coefficients in backward
/// formulas.
pub(crate) fn constant(t: Tensor) -> Var {
    Var::leaf_with(t, 0)
}
