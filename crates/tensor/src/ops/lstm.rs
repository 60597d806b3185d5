//! The LSTM step kernels a backend provides: one time step's gates and state update, and
//! its gradient, each in one pass over the batch.
//!
//! With the gate pre-activations `p = a + gi` (`[B, 4H]`, gates in PyTorch's order input,
//! forget, cell, output) and the previous cell state `c` (`[B, H]`), the forward writes the
//! step's seven `[B, H]` slots, `[7, B, H]`:
//!
//! | slot | value |
//! |---|---|
//! | 0 `i` | `sigmoid(p_i)` |
//! | 1 `f` | `sigmoid(p_f)` |
//! | 2 `g` | `tanh(p_g)` |
//! | 3 `o` | `sigmoid(p_o)` |
//! | 4 `c'` | `f * c + i * g` |
//! | 5 `h'` | `o * tanh(c')` |
//! | 6 `tanh(c')` | |
//!
//! The backward takes those slots, the gradients `dh` and `dc` arriving from the next step,
//! the gradient `gy` arriving at the slots themselves (`[7, B, H]`; only when a backward is
//! differentiated, otherwise absent) and `c`, and gives the gradient of `p` (`[B, 4H]`) and
//! of `c` (`[B, H]`):
//!
//! ```text
//! dh_t = dh + gy_h            dc_t = dc + gy_c + (dh_t * o + gy_tc) * (1 - tanh(c')^2)
//! dp_i = (dc_t * g + gy_i) * i * (1 - i)     dp_f = (dc_t * c + gy_f) * f * (1 - f)
//! dp_g = (dc_t * i + gy_g) * (1 - g^2)       dp_o = (dh_t * tanh(c') + gy_o) * o * (1 - o)
//! dc_prev = dc_t * f
//! ```

use crate::layout::Layout;
use crate::{DType, Error, Result};

/// The slots of a step's output, in order.
pub const LSTM_SLOTS: usize = 7;

/// The first of a step's state slots, `c'` (4), followed by `h'` (5): adjacent, so that the
/// `[T, 2, B, H]` view `narrow(1, LSTM_STATE_SLOT, 2)` of a whole sequence's output holds
/// every step's state, the only slots a user of the layer reads (and so the only ones a
/// gradient can arrive at).
pub const LSTM_STATE_SLOT: usize = 4;

/// Checks the forward's operands (`a` and `gi` `[B, 4H]`, `c` `[B, H]`, one float dtype)
/// and returns `(B, H)`.
pub(crate) fn check_forward(a: (DType, &Layout), gi: (DType, &Layout), c: (DType, &Layout)) -> Result<(usize, usize)> {
    let op = "lstm_cell";
    let (b, h) = match c.1.shape().dims() {
        [b, h] => (*b, *h),
        other => return Err(Error::shape(op, format!("the cell state must be [batch, hidden], got {other:?}"))),
    };
    for (what, (dtype, l)) in [("the recurrent product", a), ("the input projection", gi)] {
        if l.shape().dims() != [b, 4 * h] {
            return Err(Error::shape(op, format!("{what} must be [{b}, {}], got {:?}", 4 * h, l.shape().dims())));
        }
        if dtype != c.0 {
            return Err(Error::dtype(op, format!("{what} is {dtype}, the cell state {}", c.0)));
        }
    }
    if !c.0.is_float() {
        return Err(Error::dtype(op, format!("the operands must be float, got {}", c.0)));
    }
    Ok((b, h))
}

/// Checks the backward's operands (`y` and `gy` `[7, B, H]`, `dh`, `dc`, `c` `[B, H]`, one
/// float dtype) and returns `(B, H)`.
pub(crate) fn check_backward(
    y: (DType, &Layout),
    gy: Option<(DType, &Layout)>,
    dh: (DType, &Layout),
    dc: (DType, &Layout),
    c: (DType, &Layout),
) -> Result<(usize, usize)> {
    let op = "lstm_cell_backward";
    let (b, h) = match c.1.shape().dims() {
        [b, h] => (*b, *h),
        other => return Err(Error::shape(op, format!("the cell state must be [batch, hidden], got {other:?}"))),
    };
    let slots = [("the step's output", Some(y)), ("the slots' gradient", gy)];
    for (what, (dtype, l)) in slots.into_iter().filter_map(|(w, v)| Some((w, v?))) {
        if l.shape().dims() != [LSTM_SLOTS, b, h] {
            return Err(Error::shape(op, format!("{what} must be [7, {b}, {h}], got {:?}", l.shape().dims())));
        }
        if dtype != c.0 {
            return Err(Error::dtype(op, format!("{what} is {dtype}, the cell state {}", c.0)));
        }
    }
    for (what, (dtype, l)) in [("dh", dh), ("dc", dc)] {
        if l.shape().dims() != [b, h] || dtype != c.0 {
            return Err(Error::shape(
                op,
                format!("{what} must be {} [{b}, {h}], got {dtype} {:?}", c.0, l.shape().dims()),
            ));
        }
    }
    if !c.0.is_float() {
        return Err(Error::dtype(op, format!("the operands must be float, got {}", c.0)));
    }
    Ok((b, h))
}

/// One LSTM direction over a whole sequence: its shape and the order its steps run in.
///
/// The recurrence's operands are the input projection `gi` (`[T, B, 4H]`, both biases
/// included), the recurrent weight `w_hh` (`[4H, H]`) and the initial state `h0`, `c0`
/// (`[B, H]`); its output holds every step's seven slots (see [`LSTM_SLOTS`]) as
/// `[T, 7, B, H]`, so that each slot of a step is one contiguous `[B, H]` block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LstmRun {
    /// `T`, the number of steps.
    pub steps: usize,
    /// `B`, the number of sequences.
    pub batch: usize,
    /// `H`, the hidden size.
    pub hidden: usize,
    /// Run from the last step to the first.
    pub reverse: bool,
}

impl LstmRun {
    /// The time steps in the order they run.
    pub fn order(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.steps).map(move |i| if self.reverse { self.steps - 1 - i } else { i })
    }
}

/// An error of `op` naming `what` unless `l` has the dims `want` and the dtype `of` (the
/// recurrent weight's).
fn expect_dims(op: &'static str, what: &str, (dtype, l): (DType, &Layout), want: &[usize], of: DType) -> Result<()> {
    if l.shape().dims() != want {
        return Err(Error::shape(op, format!("{what} must be {want:?}, got {:?}", l.shape().dims())));
    }
    if dtype != of {
        return Err(Error::dtype(op, format!("{what} is {dtype}, the recurrent weight {of}")));
    }
    Ok(())
}

/// The recurrent weight's dims `(4H, H)`, checked to be those of a float `[4H, H]` matrix.
fn weight_dims(op: &'static str, (dtype, l): (DType, &Layout)) -> Result<(usize, usize)> {
    match l.shape().dims() {
        [g, h] if *g == 4 * *h && dtype.is_float() => Ok((*g, *h)),
        other => {
            Err(Error::shape(op, format!("the recurrent weight must be a float [4H, H] matrix, got {dtype} {other:?}")))
        }
    }
}

/// Checks the whole-sequence forward's operands (`gi` `[T, B, 4H]`, `w_hh` `[4H, H]`, `h0`
/// and `c0` `[B, H]`, one float dtype) and returns the run, `reverse` as given.
pub(crate) fn check_sequence(
    gi: (DType, &Layout),
    w_hh: (DType, &Layout),
    h0: (DType, &Layout),
    c0: (DType, &Layout),
    reverse: bool,
) -> Result<LstmRun> {
    let op = "lstm_sequence";
    let (gates, hidden) = weight_dims(op, w_hh)?;
    let (steps, batch) = match gi.1.shape().dims() {
        [t, b, _] => (*t, *b),
        other => return Err(Error::shape(op, format!("the input projection must be [T, B, {gates}], got {other:?}"))),
    };
    if steps == 0 {
        return Err(Error::shape(op, "the sequence must have at least one step, got an input projection of 0 steps"));
    }
    expect_dims(op, "the input projection", gi, &[steps, batch, gates], w_hh.0)?;
    expect_dims(op, "h0", h0, &[batch, hidden], w_hh.0)?;
    expect_dims(op, "c0", c0, &[batch, hidden], w_hh.0)?;
    Ok(LstmRun { steps, batch, hidden, reverse })
}

/// Checks the whole-sequence backward's operands (`y` `[T, 7, B, H]`, the state gradient
/// `gs` `[T, 2, B, H]`, `w_hh` `[4H, H]`, `c0` `[B, H]`, one float dtype) and returns the
/// run, `reverse` as given.
pub(crate) fn check_sequence_backward(
    y: (DType, &Layout),
    gs: (DType, &Layout),
    w_hh: (DType, &Layout),
    c0: (DType, &Layout),
    reverse: bool,
) -> Result<LstmRun> {
    let op = "lstm_sequence_backward";
    let (_, hidden) = weight_dims(op, w_hh)?;
    let (steps, batch) = match y.1.shape().dims() {
        [t, LSTM_SLOTS, b, _] => (*t, *b),
        other => return Err(Error::shape(op, format!("the output must be [T, 7, B, {hidden}], got {other:?}"))),
    };
    let slots = [steps, LSTM_SLOTS, batch, hidden];
    expect_dims(op, "the output", y, &slots, w_hh.0)?;
    expect_dims(op, "the state gradient", gs, &[steps, 2, batch, hidden], w_hh.0)?;
    expect_dims(op, "c0", c0, &[batch, hidden], w_hh.0)?;
    Ok(LstmRun { steps, batch, hidden, reverse })
}
