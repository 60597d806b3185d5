//! ember's fused LSTM recurrence (`lstm_sequence`), unrolled into ONNX operators step by
//! step: its output `[T, 2, B, H]` holds every step's states `c` and `h`, which the layer
//! then reads `h`, `h_n` and `c_n` from. ONNX's `LSTM` operator returns the states in
//! another layout, so the unrolled form is the exact one.

use super::{Writer, int, int_attr, ints_attr};
use ember_autograd::Var;
use ember_autograd::export::OpExport;
use ember_tensor::{Error, Result};

impl Writer {
    /// `lstm_sequence(gi [T, B, 4H], w_hh [4H, H], h0 [B, H], c0 [B, H])`.
    pub(super) fn lstm_sequence(&mut self, desc: &OpExport, args: &[(&str, &Var)]) -> Result<String> {
        let [gi, w_hh, h0, c0] = <[(&str, &Var); 4]>::try_from(args).map_err(|_| {
            Error::invalid("onnx export", format!("'{}' takes 4 inputs, got {}", desc.kind, args.len()))
        })?;
        let (steps, hidden) = match (gi.1.shape().dims(), w_hh.1.shape().dims()) {
            (&[t, _, _], &[_, h]) => (t as i64, h as i64),
            (g, w) => {
                return Err(Error::shape(
                    "onnx export",
                    format!("'{}' expects gi [T, B, 4H] and w_hh [4H, H], got {g:?} and {w:?}", desc.kind),
                ));
            }
        };
        let reverse = int(desc, "reverse")? != 0;
        let wt = self.node("Transpose", &[w_hh.0], vec![ints_attr("perm", vec![1, 0])]);
        let (axis0, last, one) = (self.const_ints(&[0])?, self.const_ints(&[-1])?, self.const_ints(&[1])?);
        let (mut h, mut c) = (h0.0.to_string(), c0.0.to_string());
        let mut ys: Vec<Option<String>> = vec![None; steps as usize];
        for n in 0..steps {
            let t = if reverse { steps - 1 - n } else { n };
            let (st, en) = (self.const_ints(&[t])?, self.const_ints(&[t + 1])?);
            let x = self.node("Slice", &[gi.0, &st, &en, &axis0, &one], vec![]);
            let x = self.node("Squeeze", &[&x, &axis0], vec![]);
            let r = self.node("MatMul", &[&h, &wt], vec![]);
            let a = self.node("Add", &[&r, &x], vec![]);
            let mut gate = |k: i64, act: &str| -> Result<String> {
                let (st, en) = (self.const_ints(&[k * hidden])?, self.const_ints(&[(k + 1) * hidden])?);
                let s = self.node("Slice", &[&a, &st, &en, &last, &one], vec![]);
                Ok(self.node(act, &[&s], vec![]))
            };
            let (i, f, g, o) = (gate(0, "Sigmoid")?, gate(1, "Sigmoid")?, gate(2, "Tanh")?, gate(3, "Sigmoid")?);
            let fc = self.node("Mul", &[&f, &c], vec![]);
            let ig = self.node("Mul", &[&i, &g], vec![]);
            c = self.node("Add", &[&fc, &ig], vec![]);
            let tc = self.node("Tanh", &[&c], vec![]);
            h = self.node("Mul", &[&o, &tc], vec![]);
            let slots: Vec<String> =
                [&c, &h].iter().map(|v| self.node("Unsqueeze", &[v.as_str(), &axis0], vec![])).collect();
            let slots: Vec<&str> = slots.iter().map(String::as_str).collect();
            let y = self.node("Concat", &slots, vec![int_attr("axis", 0)]);
            ys[t as usize] = Some(self.node("Unsqueeze", &[&y, &axis0], vec![]));
        }
        let ys: Vec<String> = ys.into_iter().flatten().collect();
        let ys: Vec<&str> = ys.iter().map(String::as_str).collect();
        Ok(self.node("Concat", &ys, vec![int_attr("axis", 0)]))
    }
}
