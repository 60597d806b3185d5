//! The tensor side of the LSTM step kernels (see [`crate::ops::lstm`]).

use super::Tensor;
use super::locks::ReadSet;
use crate::layout::Layout;
use crate::ops::lstm::{
    LSTM_SLOTS, LSTM_STATE_SLOT, check_backward, check_forward, check_sequence, check_sequence_backward,
};
use crate::shape::Shape;
use crate::{Error, Result};

/// `t` read through the locks of `set`, which must hold its storage.
fn view<'a>(set: &'a ReadSet<'_>, t: &'a Tensor) -> crate::backend::View<'a> {
    (set.get(&t.storage), &t.layout)
}

impl Tensor {
    /// One LSTM time step's gates and state in one pass: from the recurrent product `a`
    /// (`h @ w_hh^T`, `[B, 4H]`), the input projection `gi` (with both biases, `[B, 4H]`,
    /// gates in PyTorch's order i, f, g, o) and the cell state `c` (`[B, H]`), the step's
    /// seven slots `[7, B, H]`: the activated gates `i, f, g, o`, the new cell state, the
    /// new hidden state and `tanh` of the new cell state.
    ///
    /// ```
    /// use ember_tensor::Tensor;
    /// let a = Tensor::zeros([1, 4], ember_tensor::DType::F32)?;
    /// let c = Tensor::from_vec(vec![2.0f32], [1, 1])?;
    /// let y = Tensor::lstm_cell(&a, &a, &c)?;
    /// // All gates at half (sigmoid 0) but g at 0 (tanh 0): c' = 0.5 * 2 = 1.
    /// assert_eq!(y.to_vec::<f32>()?[4], 1.0);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn lstm_cell(a: &Tensor, gi: &Tensor, c: &Tensor) -> Result<Tensor> {
        let op = "lstm_cell";
        a.same_device(op, gi)?;
        a.same_device(op, c)?;
        let (b, h) = check_forward((a.dtype, &a.layout), (gi.dtype, &gi.layout), (c.dtype, &c.layout))?;
        let s = a.read3(gi, c, |va, vg, vc| a.backend().lstm_cell(va, vg, vc, (b, h)))?;
        Ok(Tensor::from_storage(s, Shape::from([LSTM_SLOTS, b, h])))
    }

    /// The gradients of one [`Tensor::lstm_cell`] step: from its output `y` (`[7, B, H]`),
    /// the gradient arriving at its slots (`gy`, `[7, B, H]`, if any), the gradients of the
    /// hidden and cell state from the next step (`dh`, `dc`, `[B, H]`) and the step's input
    /// cell state `c`, the gradient of the gate pre-activations (`[B, 4H]`) and of `c`.
    pub fn lstm_cell_backward(
        y: &Tensor,
        gy: Option<&Tensor>,
        dh: &Tensor,
        dc: &Tensor,
        c: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        let op = "lstm_cell_backward";
        for t in [Some(dh), Some(dc), Some(c), gy].into_iter().flatten() {
            y.same_device(op, t)?;
        }
        let (b, h) = check_backward(
            (y.dtype, &y.layout),
            gy.map(|g| (g.dtype, &g.layout)),
            (dh.dtype, &dh.layout),
            (dc.dtype, &dc.layout),
            (c.dtype, &c.layout),
        )?;
        let mut cells = vec![&**y.storage, &**dh.storage, &**dc.storage, &**c.storage];
        cells.extend(gy.map(|g| &**g.storage));
        let set = ReadSet::new(&cells);
        let gy = gy.map(|g| view(&set, g));
        let [dp, dcp] =
            y.backend().lstm_cell_backward(view(&set, y), gy, view(&set, dh), view(&set, dc), view(&set, c), (b, h))?;
        Ok((Tensor::from_storage(dp, Shape::from([b, 4 * h])), Tensor::from_storage(dcp, Shape::from([b, h]))))
    }

    /// One LSTM direction over a whole sequence: from the input projection `gi`
    /// (`[T, B, 4H]`, both biases included, gates in PyTorch's order i, f, g, o), the
    /// recurrent weight `w_hh` (`[4H, H]`) and the initial state `h0`, `c0` (`[B, H]`),
    /// every step's seven [`Tensor::lstm_cell`] slots as `[T, 7, B, H]`. With `reverse`
    /// the steps run from the last to the first.
    ///
    /// The same values as a [`Tensor::lstm_cell`] after a product per step, computed (on the
    /// CPU) without meeting the other threads between steps; see docs/design.md,
    /// "Recurrent layers".
    ///
    /// ```
    /// use ember_tensor::{DType, Tensor};
    /// let gi = Tensor::zeros([3, 2, 4], DType::F32)?;
    /// let w_hh = Tensor::zeros([4, 1], DType::F32)?;
    /// let c0 = Tensor::ones([2, 1], DType::F32)?;
    /// let y = Tensor::lstm_sequence(&gi, &w_hh, &c0.zeros_like(), &c0, false)?;
    /// assert_eq!(y.shape().dims(), &[3, 7, 2, 1]);
    /// // Forget gates at a half: the cell state halves every step.
    /// assert_eq!(y.select(0, 2)?.select(0, 4)?.to_vec::<f32>()?, vec![0.125, 0.125]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn lstm_sequence(gi: &Tensor, w_hh: &Tensor, h0: &Tensor, c0: &Tensor, reverse: bool) -> Result<Tensor> {
        let op = "lstm_sequence";
        for t in [w_hh, h0, c0] {
            gi.same_device(op, t)?;
        }
        let run = check_sequence(
            (gi.dtype, &gi.layout),
            (w_hh.dtype, &w_hh.layout),
            (h0.dtype, &h0.layout),
            (c0.dtype, &c0.layout),
            reverse,
        )?;
        let set = ReadSet::new(&[&**gi.storage, &**w_hh.storage, &**h0.storage, &**c0.storage]);
        let v = |t| view(&set, t);
        let s = gi.backend().lstm_sequence(v(gi), v(w_hh), v(h0), v(c0), &run)?;
        Ok(Tensor::from_storage(s, Shape::from([run.steps, LSTM_SLOTS, run.batch, run.hidden])))
    }

    /// The gradients of one [`Tensor::lstm_sequence`]: from its output `y` (`[T, 7, B, H]`),
    /// the gradient arriving at every step's state `gs` (`[T, 2, B, H]`: `c_t` and `h_t`, the
    /// slots of `y.narrow(1, LSTM_STATE_SLOT, 2)`), the recurrent weight `w_hh` and the
    /// initial cell state `c0`, the gradients of the input projection (`[T, B, 4H]`), of `h0`
    /// and of `c0` (`[B, H]` each). The recurrent weight's gradient is
    /// `sum_t dgi_t^T h_{t-1}`, one product of the first with the hidden states each step
    /// started from.
    ///
    /// The gates and `tanh(c_t)` are not part of a layer's result, so no gradient arrives at
    /// them; taking only the state's spares the caller a gradient of `y`'s size that is
    /// zero in five of its seven slots.
    pub fn lstm_sequence_backward(
        y: &Tensor,
        gs: &Tensor,
        w_hh: &Tensor,
        c0: &Tensor,
        reverse: bool,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let op = "lstm_sequence_backward";
        for t in [gs, w_hh, c0] {
            y.same_device(op, t)?;
        }
        let run = check_sequence_backward(
            (y.dtype, &y.layout),
            (gs.dtype, &gs.layout),
            (w_hh.dtype, &w_hh.layout),
            (c0.dtype, &c0.layout),
            reverse,
        )?;
        let set = ReadSet::new(&[&**y.storage, &**gs.storage, &**w_hh.storage, &**c0.storage]);
        let v = |t| view(&set, t);
        let [d_gi, dh0, dc0] = y.backend().lstm_sequence_backward(v(y), v(gs), v(w_hh), v(c0), &run)?;
        let (b, h) = (run.batch, run.hidden);
        Ok((
            Tensor::from_storage(d_gi, Shape::from([run.steps, b, 4 * h])),
            Tensor::from_storage(dh0, Shape::from([b, h])),
            Tensor::from_storage(dc0, Shape::from([b, h])),
        ))
    }

    /// The whole [`Tensor::lstm_sequence`] output (`[T, 7, B, H]`) that the state view
    /// `states` was taken from: `states` must be `y.narrow(1, LSTM_STATE_SLOT, 2)` of such an
    /// output `y` (any other tensor is an error), and the result is `y`, on the same storage.
    ///
    /// A recorded LSTM keeps only this view as its value, so that gradients arrive at the
    /// state slots alone, while its backward still reads the gates stored around it.
    ///
    /// ```
    /// use ember_tensor::{DType, Tensor};
    /// use ember_tensor::ops::lstm::LSTM_STATE_SLOT;
    /// let gi = Tensor::zeros([3, 2, 4], DType::F32)?;
    /// let (w_hh, s0) = (Tensor::zeros([4, 1], DType::F32)?, Tensor::ones([2, 1], DType::F32)?);
    /// let y = Tensor::lstm_sequence(&gi, &w_hh, &s0, &s0, false)?;
    /// let states = y.narrow(1, LSTM_STATE_SLOT, 2)?;
    /// let again = Tensor::lstm_sequence_slots(&states)?;
    /// assert!(again.shares_storage(&y) && again.layout() == y.layout());
    /// assert!(Tensor::lstm_sequence_slots(&states.contiguous()).is_err());
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn lstm_sequence_slots(states: &Tensor) -> Result<Tensor> {
        let op = "lstm_sequence_slots";
        let wrong = || {
            Error::invalid(
                op,
                format!(
                    "expected the [T, 2, B, H] state view narrow(1, {LSTM_STATE_SLOT}, 2) of an lstm_sequence output, got \
                     shape {:?}, strides {:?}",
                    states.shape().dims(),
                    states.layout.strides()
                ),
            )
        };
        let &[steps, 2, batch, hidden] = states.shape().dims() else { return Err(wrong()) };
        let whole = Layout::contiguous(Shape::from([steps, LSTM_SLOTS, batch, hidden]));
        let slot = batch * hidden;
        let offset = states.layout.offset().checked_sub(LSTM_STATE_SLOT * slot).ok_or_else(wrong)?;
        let end = offset + steps * LSTM_SLOTS * slot;
        if states.layout.strides() != whole.strides() || end > states.read(|v| v.0.len()) {
            return Err(wrong());
        }
        let layout = Layout::new(whole.shape().clone(), whole.strides().iter().copied().collect(), offset)?;
        Ok(states.with_layout(layout))
    }
}
