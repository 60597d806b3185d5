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
