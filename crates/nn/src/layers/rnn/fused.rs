//! The LSTM recurrence over a whole sequence as one recorded operation.
//!
//! Unrolled step by step, an LSTM direction records a dozen operations per time step, and
//! every step's slice of the precomputed input projection sends back a gradient of the
//! full projection's size, which the engine then sums: for a 28-step sequence that is 28
//! full-size additions per layer. As one node the recurrence has one gradient per input,
//! the recurrent weight's gradient is a single matrix product over all steps, and the
//! per-step work is a handful of tensor kernels.
//!
//! The recurrence computes, for every step `t`, the activated gates, the state after the
//! step and `tanh(c_t)`, `[i, f, g, o, c_t, h_t, tanh(c_t)]` as `[T, 7, B, H]`, so that
//! every slot of a step is one contiguous `[B, H]` block. The node's value is the view of
//! the state slots alone, `[T, 2, B, H]` (`c_t`, `h_t`; the slots a layer's results are
//! read from), so that the gradient arriving at it has that size instead of seven slots
//! mostly of zeros; the backward widens the view again
//! ([`Tensor::lstm_sequence_slots`]) to read the gates kept around it. Without lengths the
//! forward is one `Tensor::lstm_sequence` kernel (on the CPU each piece of the batch runs
//! through all steps on one thread), and the backward one `Tensor::lstm_sequence_backward`
//! plus the recurrent weight's product. With lengths each step is one matrix product and
//! one fused gate kernel (`Tensor::lstm_cell`), the backward one
//! `Tensor::lstm_cell_backward` and a product per step. The backward reads the saved slots
//! (no recomputation); under `create_graph` it is written with `Var` operations, so it is
//! recorded and differentiable again, and it computes the gates again from the input
//! projection and the state (they are not part of the node's value, so they must be
//! functions of the graph for the second derivative to reach the inputs through them).
//!
//! With lengths, a sequence's padded steps carry its state unchanged and its gate and
//! `tanh(c)` slots are zero there (constants, so that nothing flows through them).

use super::lengths::step_is_padding;
use ember_autograd::{BackwardCtx, Grads, Op, Saves, Var, is_grad_enabled};
use ember_tensor::ops::lstm::LSTM_STATE_SLOT;
use ember_tensor::{Device, Result, Tensor};

/// One LSTM direction over `T` steps: inputs `gi` `[T, B, 4H]` (the input projection with
/// both biases), `w_hh` `[4H, H]`, `h0` and `c0` `[B, H]`; output the states `[T, 2, B, H]`
/// (`c_t`, `h_t`), a view of the `[T, 7, B, H]` slots.
pub(crate) struct LstmSequence {
    /// Run from the last step to the first.
    pub(crate) reverse: bool,
    /// Each sequence's number of real steps, if some are shorter than `T`.
    pub(crate) lengths: Option<Vec<usize>>,
}

/// The slots of the node's value, `[T, 2, B, H]`.
const STATE_C: usize = 0;
const STATE_H: usize = 1;

/// The slots of the whole `[T, 7, B, H]` output the value is a view of.
const I: usize = 0;
const F: usize = 1;
const G: usize = 2;
const O: usize = 3;
const C: usize = 4;
const H: usize = 5;
const TC: usize = 6;

impl LstmSequence {
    /// The steps in the order they run.
    fn order(&self, steps: usize) -> Vec<usize> {
        (0..steps).map(|i| if self.reverse { steps - 1 - i } else { i }).collect()
    }

    /// The `u8` `[B, 1]` mask of the sequences that are padding at step `t`, if any is, on
    /// the state's `device`.
    fn padding(&self, t: usize, device: Device) -> Result<Option<Tensor>> {
        match &self.lengths {
            Some(l) if l.iter().any(|&n| t >= n) => {
                let m: Vec<u8> = l.iter().map(|&n| u8::from(step_is_padding(t, n))).collect();
                Ok(Some(Tensor::from_vec(m, [l.len(), 1])?.to_device(device)?))
            }
            _ => Ok(None),
        }
    }
}

impl Op for LstmSequence {
    fn name(&self) -> &str {
        "lstm_sequence"
    }

    fn export(&self) -> Result<ember_autograd::export::OpExport> {
        // Sequences of different lengths hold their state over the padded steps; an
        // exporter has only the recurrence without lengths to write.
        if self.lengths.is_some() {
            return Err(ember_tensor::Error::invalid(
                "export",
                "lstm_sequence: sequences with lengths (packed sequences) cannot be exported",
            ));
        }
        Ok(ember_autograd::export::OpExport::new("lstm_sequence")
            .attr("reverse", ember_autograd::export::ExportAttr::Int(self.reverse as i64)))
    }

    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let (gi, w_hh, h0, c0) = (inputs[0], inputs[1], inputs[2], inputs[3]);
        if self.lengths.is_none() {
            return Tensor::lstm_sequence(gi, w_hh, h0, c0, self.reverse)?.narrow(1, LSTM_STATE_SLOT, 2);
        }
        let steps = gi.shape()[0];
        // Each step multiplies by the transpose: lay it out once.
        let w_t = w_hh.t()?.contiguous();
        let (mut h, mut c) = (h0.clone(), c0.clone());
        let mut ys: Vec<Option<Tensor>> = vec![None; steps];
        for t in self.order(steps) {
            // The product, then the gates and the state update in one kernel pass.
            let y = Tensor::lstm_cell(&h.matmul(&w_t)?, &gi.select(0, t)?, &c)?;
            match self.padding(t, h.device())? {
                Some(pad) => {
                    h = pad.where_cond(&h, &y.select(0, H)?)?;
                    c = pad.where_cond(&c, &y.select(0, C)?)?;
                    // Padded rows' gates are not part of the computation: zero constants.
                    for k in [I, F, G, O, TC] {
                        y.select(0, k)?.masked_fill_(&pad, 0.0)?;
                    }
                    y.select(0, C)?.copy_(&c)?;
                    y.select(0, H)?.copy_(&h)?;
                }
                None => (h, c) = (y.select(0, H)?, y.select(0, C)?),
            }
            ys[t] = Some(y);
        }
        let ys: Vec<Tensor> = ys.into_iter().flatten().collect();
        Tensor::stack(&ys.iter().collect::<Vec<_>>(), 0)?.narrow(1, LSTM_STATE_SLOT, 2)
    }

    fn backward(&self, ctx: &BackwardCtx<'_>, grad: &Var) -> Result<Grads> {
        if !is_grad_enabled() {
            return self.backward_kernels(ctx, grad);
        }
        let (gi, w_hh, h0, c0) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?, ctx.input(3)?);
        let states = ctx.output()?;
        let (steps, hidden) = (states.shape()[0], w_hh.shape()[1]);
        let batch = states.shape()[2];
        let w_t = w_hh.t()?;
        let (mut dh, mut dc) = (Var::new(h0.value().zeros_like()), Var::new(c0.value().zeros_like()));
        let mut da: Vec<Option<Var>> = vec![None; steps];
        let mut h_prev_of: Vec<Option<Var>> = vec![None; steps];
        let order = self.order(steps);
        for (n, &t) in order.iter().enumerate().rev() {
            let (st, gt) = (states.select(0, t)?, grad.select(0, t)?);
            let (h_prev, c_prev) = match n {
                0 => (h0.clone(), c0.clone()),
                _ => {
                    let sp = states.select(0, order[n - 1])?;
                    (sp.select(0, STATE_H)?, sp.select(0, STATE_C)?)
                }
            };
            // The gates again, as the forward computed them.
            let pre = gi.select(0, t)?.add(&h_prev.matmul(&w_t)?)?;
            let gate = |k: usize| pre.narrow(1, k * hidden, hidden);
            let (i, f, g, o) = (gate(0)?.sigmoid(), gate(1)?.sigmoid(), gate(2)?.tanh(), gate(3)?.sigmoid());
            let tc = st.select(0, STATE_C)?.tanh();
            let dh_t = dh.add(&gt.select(0, STATE_H)?)?;
            let dc_in = dc.add(&gt.select(0, STATE_C)?)?;
            // d tanh(c) = 1 - tanh(c)^2.
            let dc_t = dc_in.add(&dh_t.mul(&o)?.mul(&tc.square().rsub_scalar(1.0))?)?;
            let sig = |d: &Var, s: &Var| -> Result<Var> { d.mul(&s.mul(&s.rsub_scalar(1.0))?) };
            let a = Var::cat(
                &[
                    &sig(&dc_t.mul(&g)?, &i)?,
                    &sig(&dc_t.mul(&c_prev)?, &f)?,
                    &dc_t.mul(&i)?.mul(&g.square().rsub_scalar(1.0))?,
                    &sig(&dh_t.mul(&tc)?, &o)?,
                ],
                1,
            )?;
            let dh_prev = a.matmul(&w_hh)?;
            let dc_prev = dc_t.mul(&f)?;
            match self.padding(t, dh_prev.device())? {
                Some(pad) => {
                    // Padded rows passed the state through: their gradient goes on as it is.
                    let pad = Var::new(pad);
                    dh = pad.where_cond(&dh_t, &dh_prev)?;
                    dc = pad.where_cond(&dc_in, &dc_prev)?;
                    da[t] = Some(a.masked_fill(&pad, 0.0)?);
                }
                None => {
                    dh = dh_prev;
                    dc = dc_prev;
                    da[t] = Some(a);
                }
            }
            h_prev_of[t] = Some(h_prev);
        }
        let da: Vec<Var> = da.into_iter().flatten().collect();
        let h_prev: Vec<Var> = h_prev_of.into_iter().flatten().collect();
        let d_gi = Var::stack(&da.iter().collect::<Vec<_>>(), 0)?;
        let gw = if ctx.needs_input_grad(1) {
            // Every step's contribution in one product: sum_t da_t^T h_{t-1}.
            let hp = Var::stack(&h_prev.iter().collect::<Vec<_>>(), 0)?.reshape([steps * batch, hidden])?;
            Some(d_gi.reshape([steps * batch, 4 * hidden])?.t()?.matmul(&hp)?)
        } else {
            None
        };
        Ok([Some(d_gi), gw, Some(dh), Some(dc)].into_iter().collect())
    }

    fn saves(&self) -> Saves {
        // The input projection only for the recorded backward, which computes the gates
        // again from it.
        Saves { inputs: 0b1111, output: true }
    }
}

impl LstmSequence {
    /// The backward when it is not itself recorded (no `create_graph`): the same
    /// arithmetic as [`Op::backward`]'s, with each step's elementwise part in one
    /// [`Tensor::lstm_cell_backward`] pass instead of some thirty tensor kernels.
    fn backward_kernels(&self, ctx: &BackwardCtx<'_>, grad: &Var) -> Result<Grads> {
        let (w_hh, h0, c0) = (ctx.input(1)?.value(), ctx.input(2)?.value(), ctx.input(3)?.value());
        // The value is the state view; the gates lie around it.
        let y = Tensor::lstm_sequence_slots(&ctx.output()?.value())?;
        let g = grad.value();
        let (steps, batch, hidden) = (y.shape()[0], y.shape()[2], w_hh.shape()[1]);
        if self.lengths.is_none() {
            let (d_gi, dh0, dc0) = Tensor::lstm_sequence_backward(&y, &g, &w_hh, &c0, self.reverse)?;
            let gw = if ctx.needs_input_grad(1) {
                // The hidden state each step started from, in time order.
                let hs = y.select(1, H)?;
                let before = match (steps, self.reverse) {
                    (1, _) => h0.unsqueeze(0)?,
                    (_, false) => Tensor::cat(&[&h0.unsqueeze(0)?, &hs.slice(0, 0, steps - 1, 1)?], 0)?,
                    (_, true) => Tensor::cat(&[&hs.slice(0, 1, steps, 1)?, &h0.unsqueeze(0)?], 0)?,
                };
                let gates = d_gi.reshape([steps * batch, 4 * hidden])?;
                let before = before.reshape([steps * batch, hidden])?;
                // The product computes each tile of this `[4H, H]` weight gradient as its
                // transpose where that is faster (`gates` is a transposed view there), so
                // no transposed copy of a `[H, 4H]` product is needed here.
                Some(Var::new(gates.t()?.matmul(&before)?))
            } else {
                None
            };
            return Ok([Some(Var::new(d_gi)), gw, Some(Var::new(dh0)), Some(Var::new(dc0))].into_iter().collect());
        }
        let (mut dh, mut dc) = (h0.zeros_like(), c0.zeros_like());
        let mut da: Vec<Option<Tensor>> = vec![None; steps];
        let mut h_prev_of: Vec<Option<Tensor>> = vec![None; steps];
        let order = self.order(steps);
        for (n, &t) in order.iter().enumerate().rev() {
            let (yt, gt) = (y.select(0, t)?, g.select(0, t)?);
            let (h_prev, c_prev) = match n {
                0 => (h0.clone(), c0.clone()),
                _ => {
                    let yp = y.select(0, order[n - 1])?;
                    (yp.select(0, H)?, yp.select(0, C)?)
                }
            };
            let dh_t = dh.add(&gt.select(0, STATE_H)?)?;
            let dc_in = dc.add(&gt.select(0, STATE_C)?)?;
            let (a, dc_prev) = Tensor::lstm_cell_backward(&yt, None, &dh_t, &dc_in, &c_prev)?;
            let dh_prev = a.matmul(&w_hh)?;
            match self.padding(t, dh.device())? {
                Some(pad) => {
                    // Padded rows passed the state through: their gradient goes on as it is.
                    dh = pad.where_cond(&dh_t, &dh_prev)?;
                    dc = pad.where_cond(&dc_in, &dc_prev)?;
                    da[t] = Some(a.masked_fill(&pad, 0.0)?);
                }
                None => {
                    dh = dh_prev;
                    dc = dc_prev;
                    da[t] = Some(a);
                }
            }
            h_prev_of[t] = Some(h_prev);
        }
        let da: Vec<Tensor> = da.into_iter().flatten().collect();
        let d_gi = Tensor::stack(&da.iter().collect::<Vec<_>>(), 0)?;
        let gw = if ctx.needs_input_grad(1) {
            let h_prev: Vec<Tensor> = h_prev_of.into_iter().flatten().collect();
            let hp = Tensor::stack(&h_prev.iter().collect::<Vec<_>>(), 0)?.reshape([steps * batch, hidden])?;
            Some(Var::new(d_gi.reshape([steps * batch, 4 * hidden])?.t()?.matmul(&hp)?))
        } else {
            None
        };
        Ok([Some(Var::new(d_gi)), gw, Some(Var::new(dh)), Some(Var::new(dc))].into_iter().collect())
    }
}

/// One LSTM direction over the whole sequence (see [`LstmSequence`]): the hidden states
/// `[T, B, H]` (zero at padded steps), and the final `h` and `c`, each `[B, H]`.
pub(crate) fn lstm_sequence(
    gi: &Var,
    w_hh: &Var,
    h0: &Var,
    c0: &Var,
    reverse: bool,
    lengths: Option<&[usize]>,
) -> Result<(Var, Var, Var)> {
    let lengths = lengths.filter(|l| l.iter().any(|&n| n < gi.shape()[0])).map(<[usize]>::to_vec);
    let steps = gi.shape()[0];
    let padding_mask = match &lengths {
        Some(l) => {
            let m: Vec<u8> = (0..steps).flat_map(|t| l.iter().map(move |&n| u8::from(step_is_padding(t, n)))).collect();
            Some(Tensor::from_vec(m, [steps, l.len(), 1])?.to_device(gi.device())?)
        }
        None => None,
    };
    let states = Var::apply_op(LstmSequence { reverse, lengths }, &[gi, w_hh, h0, c0])?;
    let hs = states.select(1, STATE_H)?;
    // The final state straight from the states, not through `hs`: its gradient then lands
    // in theirs without first filling a `[T, B, H]` one.
    let last = states.select(0, if reverse { 0 } else { steps - 1 })?;
    let (h_n, c_n) = (last.select(0, STATE_H)?, last.select(0, STATE_C)?);
    let output = match padding_mask {
        Some(m) => hs.masked_fill(Var::new(m), 0.0)?,
        None => hs,
    };
    Ok((output, h_n, c_n))
}
