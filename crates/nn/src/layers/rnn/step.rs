//! One time step of each recurrence, shared by the cells and the multi-layer driver.
//!
//! The input's contribution `W_ih x + b_ih` is computed by the caller (the layers do it for
//! every time step at once, as one matrix product); a step adds the recurrent product and
//! applies the gates. Where the hidden bias enters the sum unchanged (RNN, LSTM) it is
//! folded into the input bias once, so that a step does not add it again.

use super::options::Mode;
use ember_autograd::Var;
use ember_tensor::Result;

/// The recurrent state between steps: `h`, and the LSTM's cell state `c`.
#[derive(Clone)]
pub(crate) struct State {
    pub(crate) h: Var,
    pub(crate) c: Option<Var>,
}

/// The recurrent parameters of one direction of one layer.
pub(crate) struct StepWeights<'a> {
    pub(crate) w_hh: &'a Var,
    /// The hidden bias where it does not fold into the input bias (GRU).
    pub(crate) b_hh: Option<&'a Var>,
    /// The LSTM projection `[proj_size, hidden_size]`.
    pub(crate) w_hr: Option<&'a Var>,
}

/// The bias of the input projection: `b_ih + b_hh` where the two only ever appear summed,
/// `b_ih` alone for the GRU (whose `b_hn` sits inside the reset gate's product).
pub(crate) fn input_bias(mode: Mode, b_ih: Option<&Var>, b_hh: Option<&Var>) -> Result<Option<Var>> {
    Ok(match (b_ih, b_hh) {
        (Some(bi), Some(bh)) if mode != Mode::Gru => Some(bi.add(bh)?),
        (bi, _) => bi.cloned(),
    })
}

/// The hidden bias a step adds itself (GRU only).
pub(crate) fn step_bias(mode: Mode, b_hh: Option<&Var>) -> Option<&Var> {
    if mode == Mode::Gru { b_hh } else { None }
}

/// The state after one step from `state`, given the input projection `gi` (`[B, gates *
/// hidden]`, with the biases as [`input_bias`] makes them).
pub(crate) fn step(mode: Mode, gi: &Var, state: &State, w: &StepWeights<'_>) -> Result<State> {
    let gh = state.h.linear(w.w_hh, w.b_hh)?;
    match mode {
        Mode::Tanh => Ok(State { h: gi.add(&gh)?.tanh(), c: None }),
        Mode::Relu => Ok(State { h: gi.add(&gh)?.relu(), c: None }),
        Mode::Lstm => {
            let gates = gi.add(&gh)?.chunk(4, -1)?;
            let (i, f, g, o) = (gates[0].sigmoid(), gates[1].sigmoid(), gates[2].tanh(), gates[3].sigmoid());
            let ig = i.mul(&g)?;
            let c = match &state.c {
                Some(c) => f.mul(c)?.add(&ig)?,
                None => ig,
            };
            let h = o.mul(&c.tanh())?;
            let h = match w.w_hr {
                Some(w_hr) => h.linear(w_hr, None)?,
                None => h,
            };
            Ok(State { h, c: Some(c) })
        }
        Mode::Gru => {
            let gi = gi.chunk(3, -1)?;
            let gh = gh.chunk(3, -1)?;
            let r = gi[0].add(&gh[0])?.sigmoid();
            let z = gi[1].add(&gh[1])?.sigmoid();
            let n = gi[2].add(&r.mul(&gh[2])?)?.tanh();
            // (1 - z) * n + z * h, with one product fewer.
            let h = n.add(&z.mul(&state.h.sub(&n)?)?)?;
            Ok(State { h, c: None })
        }
    }
}
