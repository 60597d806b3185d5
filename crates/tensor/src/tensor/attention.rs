//! Scaled dot-product attention on the backend's kernel: the forward (output and per-row
//! log-sum-exp) and its gradients.

use super::Tensor;
use super::locks::ReadSet;
use crate::Result;
use crate::backend::View;
use crate::ops::attention::{Attention, AttentionShapes, OP, check_attention, laid_out_like};
use crate::storage::StorageCell;

/// `t`'s storage, locked in `set`, with its layout.
fn view_in<'a>(set: &'a ReadSet<'_>, t: &'a Tensor) -> View<'a> {
    (set.get(&t.storage), &t.layout)
}

impl Tensor {
    /// Scaled dot-product attention of this query (`[.., L, E]`) over `key` (`[.., S, E]`)
    /// and `value` (`[.., S, Ev]`), leading dimensions broadcast, with an optional `mask`
    /// broadcastable to `[.., L, S]` (bool `u8`, non-zero = takes part, or float, added to
    /// the scores) and the causal triangle and scale of `spec`. Returns the output
    /// `[.., L, Ev]` and each query row's log-sum-exp `[.., L]` (`-inf` for a row that sees
    /// no key, whose output is 0). See [`crate::ops::attention`].
    ///
    /// The output lies in memory in the query's order of dimensions (see
    /// [`crate::ops::attention::laid_out_like`]): for the heads of a `[B, T, H, E]`
    /// projection viewed as `[B, H, T, E]` it is `[B, H, T, Ev]` over `[B, T, H, Ev]` memory,
    /// which merging the heads reshapes without a copy. The CPU kernel never holds more of
    /// the `[.., L, S]` scores than one block.
    ///
    /// ```
    /// use ember_tensor::{Attention, Tensor};
    /// let q = Tensor::from_vec(vec![1.0f64, 0.0], [1, 2])?;
    /// let k = Tensor::from_vec(vec![1.0f64, 0.0, 0.0, 1.0], [2, 2])?;
    /// let v = Tensor::from_vec(vec![10.0f64, 20.0], [2, 1])?;
    /// let (out, lse) = q.attention(&k, &v, None, &Attention { scale: 1.0, causal: false })?;
    /// let w = 1.0f64.exp() / (1.0f64.exp() + 1.0);
    /// assert!((out.to_vec::<f64>()?[0] - (10.0 * w + 20.0 * (1.0 - w))).abs() < 1e-12);
    /// assert!((lse.to_vec::<f64>()?[0] - (1.0f64.exp() + 1.0).ln()).abs() < 1e-12);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn attention(
        &self,
        key: &Tensor,
        value: &Tensor,
        mask: Option<&Tensor>,
        spec: &Attention,
    ) -> Result<(Tensor, Tensor)> {
        let (shapes, [q, k, v], mask) = self.attention_operands(key, value, mask)?;
        let mut cells: Vec<&StorageCell> = vec![&q.storage, &k.storage, &v.storage];
        cells.extend(mask.as_ref().map(|m| &**m.storage));
        let set = ReadSet::new(&cells);
        let view = |t| view_in(&set, t);
        let mv = mask.as_ref().map(|m| (set.get(&m.storage), &m.layout));
        let out_layout = laid_out_like(&q.layout, &shapes.output());
        let [out, lse] = self.backend().attention_laid_out([view(&q), view(&k), view(&v)], mv, spec, &out_layout)?;
        let out = Tensor::from_storage(out, shapes.output()).with_layout(out_layout);
        Ok((out, Tensor::from_storage(lse, shapes.rows())))
    }

    /// The gradients of [`Tensor::attention`] with respect to the query, key and value, for
    /// the incoming gradient `grad` of the output, given the forward's `output` and `lse`.
    /// The gradients have the broadcast batch shape (`[batch.., L, E]`, `[batch.., S, E]`,
    /// `[batch.., S, Ev]`): an operand that was broadcast sums its gradient over the
    /// repeated dimensions itself. Each lies in memory in its operand's order of dimensions,
    /// as the output does in the query's.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_backward(
        &self,
        key: &Tensor,
        value: &Tensor,
        mask: Option<&Tensor>,
        output: &Tensor,
        lse: &Tensor,
        grad: &Tensor,
        spec: &Attention,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let (_, [q, k, v], mask) = self.attention_operands(key, value, mask)?;
        for t in [output, lse, grad] {
            self.same_device(OP, t)?;
        }
        let mut cells: Vec<&StorageCell> =
            vec![&q.storage, &k.storage, &v.storage, &output.storage, &lse.storage, &grad.storage];
        cells.extend(mask.as_ref().map(|m| &**m.storage));
        let set = ReadSet::new(&cells);
        let view = |t| view_in(&set, t);
        let mv = mask.as_ref().map(|m| (set.get(&m.storage), &m.layout));
        let layouts = [&q, &k, &v].map(|t| laid_out_like(&t.layout, t.shape()));
        let [dq, dk, dv] = self.backend().attention_backward_laid_out(
            [view(&q), view(&k), view(&v)],
            mv,
            [view(output), view(lse), view(grad)],
            spec,
            [&layouts[0], &layouts[1], &layouts[2]],
        )?;
        let [lq, lk, lv] = layouts;
        Ok((
            Tensor::from_storage(dq, lq.shape().clone()).with_layout(lq),
            Tensor::from_storage(dk, lk.shape().clone()).with_layout(lk),
            Tensor::from_storage(dv, lv.shape().clone()).with_layout(lv),
        ))
    }

    /// The checked sizes, and query, key, value and mask broadcast to the batch shape (the
    /// mask to the scores' shape), as views of their storages.
    fn attention_operands(
        &self,
        key: &Tensor,
        value: &Tensor,
        mask: Option<&Tensor>,
    ) -> Result<(AttentionShapes, [Tensor; 3], Option<Tensor>)> {
        self.same_device(OP, key)?;
        self.same_device(OP, value)?;
        if let Some(m) = mask {
            self.same_device(OP, m)?;
        }
        let shapes = check_attention(
            (self.shape(), self.dtype),
            (key.shape(), key.dtype),
            (value.shape(), value.dtype),
            mask.map(|m| (m.shape(), m.dtype)),
        )?;
        let to = |t: &Tensor, rows: usize, cols: usize| -> Result<Tensor> {
            Ok(t.with_layout(t.layout.broadcast_to(OP, &shapes.with_last(&[rows, cols]))?))
        };
        let q = to(self, shapes.l, shapes.e)?;
        let k = to(key, shapes.s, shapes.e)?;
        let v = to(value, shapes.s, shapes.ev)?;
        let mask = mask.map(|m| to(m, shapes.l, shapes.s)).transpose()?;
        Ok((shapes, [q, k, v], mask))
    }
}
