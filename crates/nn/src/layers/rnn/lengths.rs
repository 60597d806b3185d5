//! Variable-length batches: which steps of which sequences are padding, and how a step
//! leaves a padded sequence's state alone.
//!
//! A sequence of length `n` is active at steps `t < n`. At its padded steps the state
//! keeps its value and the output is zero, in both directions: running forwards, the state
//! is frozen after the last real step (so `h_n` is the state at that step); running
//! backwards, it stays the initial state until the sequence's last real step, where the
//! reverse pass really begins. This is what PyTorch computes on a packed sequence.

use super::step::State;
use ember_autograd::Var;
use ember_tensor::{Device, Error, Result, Tensor};

/// Whether step `t` of a sequence of `len` real steps is padding.
pub(crate) fn step_is_padding(t: usize, len: usize) -> bool {
    t >= len
}

/// The masks of the steps where some sequence is padding (`None` at steps where every
/// sequence is active, which then run unmasked).
pub(crate) struct StepMasks {
    lengths: Vec<usize>,
    steps: Vec<Option<StepMask>>,
}

/// One step's masks, `u8` `[B, 1]`.
pub(crate) struct StepMask {
    /// 1 where the sequence is active.
    active: Var,
    /// 1 where the sequence is padding.
    padding: Var,
}

impl StepMasks {
    /// The masks of a batch of `batch` sequences padded to `steps` steps, or `None` when
    /// every sequence has `steps` steps. `name` (the layer) is for errors: there must be
    /// one length per sequence, each in `1..=steps`.
    pub(crate) fn new(
        name: &'static str,
        lengths: &[usize],
        steps: usize,
        batch: usize,
        device: Device,
    ) -> Result<Option<StepMasks>> {
        if lengths.len() != batch {
            return Err(Error::shape(name, format!("got {} lengths for a batch of {batch} sequences", lengths.len())));
        }
        if let Some(bad) = lengths.iter().find(|&&n| n == 0 || n > steps) {
            return Err(Error::invalid(
                name,
                format!("every length must be in 1..={steps} (the padded sequence length), got {bad} in {lengths:?}"),
            ));
        }
        if lengths.iter().all(|&n| n == steps) {
            return Ok(None);
        }
        let shortest = lengths.iter().copied().min().unwrap_or(steps);
        let mut out = Vec::with_capacity(steps);
        for t in 0..steps {
            if t < shortest {
                out.push(None);
                continue;
            }
            let active: Vec<u8> = lengths.iter().map(|&n| u8::from(!step_is_padding(t, n))).collect();
            let padding: Vec<u8> = active.iter().map(|&a| 1 - a).collect();
            out.push(Some(StepMask {
                active: Var::new(Tensor::from_vec(active, [batch, 1])?.to_device(device)?),
                padding: Var::new(Tensor::from_vec(padding, [batch, 1])?.to_device(device)?),
            }));
        }
        Ok(Some(StepMasks { lengths: lengths.to_vec(), steps: out }))
    }

    /// The sequences' lengths.
    pub(crate) fn lengths(&self) -> &[usize] {
        &self.lengths
    }

    /// The masks of step `t`, if some sequence is padding there.
    pub(crate) fn at(&self, t: usize) -> Option<&StepMask> {
        self.steps.get(t).and_then(Option::as_ref)
    }
}

impl StepMask {
    /// `new` where the sequence is active, `old` where it is padding.
    pub(crate) fn keep(&self, new: State, old: &State) -> Result<State> {
        let h = self.active.where_cond(&new.h, &old.h)?;
        let c = match (new.c, &old.c) {
            (Some(cn), Some(co)) => Some(self.active.where_cond(&cn, co)?),
            (c, _) => c,
        };
        Ok(State { h, c })
    }

    /// `y` with the rows of padded sequences zeroed.
    pub(crate) fn zero_padding(&self, y: &Var) -> Result<Var> {
        y.masked_fill(&self.padding, 0.0)
    }
}
