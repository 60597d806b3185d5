//! Scaled dot-product attention: the plain composition of `Var` operations (matmul, mask,
//! softmax, matmul), and one recorded operation on the backend's memory-efficient kernel
//! that falls back to the composition where the kernel does not apply. See
//! [`ember_tensor::ops::attention`] for what both compute.

use super::{apply, constant};
use crate::autocast::{self, policy};
use crate::backward_ctx::BackwardCtx;
use crate::grad_mode::is_grad_enabled;
use crate::op::{Grads, Op};
use crate::var::Var;
use ember_tensor::ops::attention::OP;
use ember_tensor::{Attention, AttentionShapes, DType, Device, Error, Result, Shape, Tensor, check_attention};
use parking_lot::Mutex;
use smallvec::smallvec;
use std::sync::Arc;

/// Checks the operands of an attention call (see [`check_attention`]).
fn check(q: &Var, k: &Var, v: &Var, mask: Option<&Var>) -> Result<AttentionShapes> {
    check_attention(
        (&q.shape(), q.dtype()),
        (&k.shape(), k.dtype()),
        (&v.shape(), v.dtype()),
        mask.map(|m| (m.shape(), m.dtype())).as_ref().map(|(s, d)| (s, *d)),
    )
}

/// The `u8` mask of the positions the causal triangle excludes (`j > i`), `[L, S]`, on the
/// scores' device.
fn causal_excluded(l: usize, s: usize, device: Device) -> Result<Tensor> {
    Tensor::full_on([l, s], 1, DType::U8, device)?.triu(1)
}

impl Var {
    /// The attention weights `softmax(scale * q @ k^T + mask)` of this query (`[.., L, E]`)
    /// over `key` (`[.., S, E]`), `[.., L, S]`, as `Var` operations. `mask` is a bool
    /// (`u8`, non-zero = takes part) or float (added to the scores) tensor broadcastable to
    /// `[.., L, S]`; [`Attention::causal`] adds the causal triangle. Rows with no key to
    /// attend to are 0, as in PyTorch's CPU attention, and pass no gradient.
    ///
    /// This is the composition that [`Var::attention`] falls back to, and what
    /// `ember_nn::functional::scaled_dot_product_attention` uses with dropout.
    #[track_caller]
    pub fn attention_weights(&self, key: &Var, mask: Option<&Var>, spec: &Attention) -> Result<Var> {
        // Part of attention: its softmax runs in the attention's dtype.
        if let Some(r) = autocast::run_cast(&policy::ATTENTION, [Some(self), Some(key), mask], |c| {
            c.or(0, self).attention_weights(c.or(1, key), c.get(2), spec)
        }) {
            return r;
        }
        let shapes = check(self, key, key, mask)?;
        let mut scores = self.matmul(&key.transpose(-2, -1)?)?.mul_scalar(spec.scale);
        let mut maybe_dead = false;
        if let Some(m) = mask {
            if m.dtype() == DType::U8 {
                scores = scores.masked_fill(constant(m.value().logical_not()), f64::NEG_INFINITY)?;
            } else {
                scores = scores.add(m)?;
            }
            maybe_dead = true;
        }
        if spec.causal {
            // Row i always sees key 0, so the triangle alone leaves no row empty.
            scores = scores
                .masked_fill(constant(causal_excluded(shapes.l, shapes.s, scores.device())?), f64::NEG_INFINITY)?;
        }
        if maybe_dead && shapes.s > 0 {
            // A row of only -inf has no softmax (NaN); it is set to 0 and passes no gradient.
            let dead = scores.value().max(-1, true)?.eq_scalar(f64::NEG_INFINITY);
            if dead.sum_all().to_dtype(DType::F64).to_scalar::<f64>()? > 0.0 {
                let dead = constant(dead);
                return scores.masked_fill(dead.clone(), 0.0)?.softmax(-1)?.masked_fill(dead, 0.0);
            }
        }
        scores.softmax(-1)
    }

    /// Scaled dot-product attention as the plain composition
    /// `attention_weights(key, mask) @ value`, `[.., L, Ev]`: every intermediate, the
    /// `[.., L, S]` scores included, is kept for the backward. [`Var::attention`] computes
    /// the same with a kernel that keeps none of them.
    #[track_caller]
    pub fn attention_composed(&self, key: &Var, value: &Var, mask: Option<&Var>, spec: &Attention) -> Result<Var> {
        if let Some(r) = autocast::run_cast(&policy::ATTENTION, [Some(self), Some(key), Some(value), mask], |c| {
            c.or(0, self).attention_composed(c.or(1, key), c.or(2, value), c.get(3), spec)
        }) {
            return r;
        }
        check(self, key, value, mask)?;
        self.attention_weights(key, mask, spec)?.matmul(value)
    }
}

/// The output and per-row log-sum-exp of the latest forward, which the kernel's backward
/// recomputes the probabilities from.
type Saved = Arc<Mutex<Option<(Tensor, Tensor)>>>;

/// Attention on the backend's kernel; inputs `[q, k, v]` and, when `mask`, the mask (which
/// gets no gradient: a float mask that needs one takes the composition).
struct AttentionOp {
    spec: Attention,
    mask: bool,
    saved: Saved,
}

impl Op for AttentionOp {
    fn name(&self) -> &str {
        OP
    }

    fn export(&self) -> Result<crate::export::OpExport> {
        use crate::export::{ExportAttr, OpExport};
        // The mask, when there is one, is the fourth input; its dtype says how it applies.
        Ok(OpExport::new(OP)
            .attr("scale", ExportAttr::Float(self.spec.scale))
            .attr("causal", ExportAttr::Int(self.spec.causal as i64))
            .attr("masked", ExportAttr::Int(self.mask as i64)))
    }

    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let mask = self.mask.then(|| inputs[3]);
        let (out, lse) = inputs[0].attention(inputs[1], inputs[2], mask, &self.spec)?;
        *self.saved.lock() = Some((out.clone(), lse));
        Ok(out)
    }

    fn backward(&self, ctx: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        let (q, k, v) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
        let mask = self.mask.then(|| ctx.input(3)).transpose()?;
        // Grad mode is on in backward exactly under create_graph: then the gradients must be
        // graphs themselves, so they are built from Var operations; otherwise the kernel.
        let (dq, dk, dv) = if is_grad_enabled() {
            differentiable_grads(&q, &k, &v, mask.as_ref(), g, &self.spec)?
        } else {
            let saved = self.saved.lock().clone();
            let (out, lse) = saved.ok_or_else(|| Error::autograd("scaled_dot_product_attention: nothing was saved"))?;
            let m = mask.as_ref().map(Var::value);
            let (dq, dk, dv) =
                q.value().attention_backward(&k.value(), &v.value(), m.as_ref(), &out, &lse, &g.value(), &self.spec)?;
            (constant(dq), constant(dk), constant(dv))
        };
        // An operand broadcast over batch dimensions sums its gradient over them.
        let fit = |i: usize, x: &Var, gx: Var| -> Result<Option<Var>> {
            if !ctx.needs_input_grad(i) {
                return Ok(None);
            }
            let shape: Shape = x.shape();
            Ok(Some(if gx.shape() == shape { gx } else { gx.sum_to(&shape)? }))
        };
        let mut grads: Grads = smallvec![fit(0, &q, dq)?, fit(1, &k, dk)?, fit(2, &v, dv)?];
        if self.mask {
            grads.push(None);
        }
        Ok(grads)
    }
}

/// The gradients `(dq, dk, dv)` in the broadcast batch shape as `Var` operations, the
/// probabilities recomputed by the composition so that their dependence on `q` and `k` is
/// part of the graph: `dv = P^T g`, `dS = P * (g v^T - rowsum(P * g v^T))`,
/// `dq = scale dS k`, `dk = scale dS^T q`.
fn differentiable_grads(
    q: &Var,
    k: &Var,
    v: &Var,
    mask: Option<&Var>,
    g: &Var,
    spec: &Attention,
) -> Result<(Var, Var, Var)> {
    let p = q.attention_weights(k, mask, spec)?;
    let dv = p.transpose(-2, -1)?.matmul(g)?;
    let dp = g.matmul(&v.transpose(-2, -1)?)?;
    let along = dp.mul(&p)?.sum(-1, true)?;
    let ds = p.mul(&dp.sub(&along)?)?;
    let dq = ds.matmul(k)?.mul_scalar(spec.scale);
    let dk = ds.transpose(-2, -1)?.matmul(q)?.mul_scalar(spec.scale);
    Ok((dq, dk, dv))
}

impl Var {
    /// Scaled dot-product attention of this query (`[.., L, E]`) over `key` (`[.., S, E]`)
    /// and `value` (`[.., S, Ev]`), `[.., L, Ev]`: `softmax(scale * q @ k^T + mask) @ v`
    /// with the mask and rows as in [`Var::attention_weights`].
    ///
    /// One recorded operation on the backend's kernel ([`Tensor::attention`], which on the
    /// CPU never holds more than a block of the `[.., L, S]` scores), saving only the output
    /// and each row's log-sum-exp; its backward is the kernel's too, except under
    /// `create_graph`, where it is built from `Var` operations so that it can be
    /// differentiated again. A float mask that requires a gradient takes the composition
    /// ([`Var::attention_composed`]) instead, which gives it one.
    ///
    /// ```
    /// use ember_autograd::Var;
    /// use ember_tensor::{Attention, Tensor};
    /// let q = Var::param(Tensor::randn([2, 5, 8])?);
    /// let k = Var::param(Tensor::randn([2, 7, 8])?);
    /// let v = Var::param(Tensor::randn([2, 7, 3])?);
    /// let spec = Attention { scale: Attention::default_scale(8), causal: true };
    /// let out = q.attention(&k, &v, None, &spec)?;
    /// assert_eq!(out.op_name(), "scaled_dot_product_attention");
    /// out.sum_all().backward()?;
    /// assert_eq!(v.grad().unwrap().shape().dims(), &[2, 7, 3]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    #[track_caller]
    pub fn attention(&self, key: &Var, value: &Var, mask: Option<&Var>, spec: &Attention) -> Result<Var> {
        if let Some(c) = autocast::cast_inputs(&policy::ATTENTION, [Some(self), Some(key), Some(value), mask])? {
            return c.or(0, self).attention(c.or(1, key), c.or(2, value), c.get(3), spec);
        }
        check(self, key, value, mask)?;
        if mask.is_some_and(|m| m.dtype() != DType::U8 && m.requires_grad()) {
            return self.attention_composed(key, value, mask, spec);
        }
        let op = AttentionOp { spec: *spec, mask: mask.is_some(), saved: Saved::default() };
        let mut inputs = vec![self, key, value];
        inputs.extend(mask);
        apply(op, &inputs)
    }
}
