//! The tensor side of the LSTM step kernels (see [`crate::backend::lstm`]).

use super::Tensor;
use super::locks::ReadSet;
use crate::Result;
use crate::backend::lstm::{LSTM_SLOTS, check_backward, check_forward};
use crate::shape::Shape;

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
        let mut cells = vec![&*y.storage, &*dh.storage, &*dc.storage, &*c.storage];
        cells.extend(gy.map(|g| &*g.storage));
        let set = ReadSet::new(&cells);
        fn view<'a>(set: &'a ReadSet<'_>, t: &'a Tensor) -> crate::backend::View<'a> {
            (set.get(&t.storage), &t.layout)
        }
        let gy = gy.map(|g| view(&set, g));
        let [dp, dcp] =
            y.backend().lstm_cell_backward(view(&set, y), gy, view(&set, dh), view(&set, dc), view(&set, c), (b, h))?;
        Ok((Tensor::from_storage(dp, Shape::from([b, 4 * h])), Tensor::from_storage(dcp, Shape::from([b, h]))))
    }
}
