//! ember's per-channel normalisation (`channel_norm`, inside group norm, instance norm
//! and batch norm in training mode) as its statistics: the mean and biased variance over
//! every dimension but 1 (`ReduceMean`), then `(x - mean) / sqrt(var + eps)`, times the
//! weight and plus the bias (`[C]`, reshaped to broadcast along dimension 1).

use super::{Writer, float, int, int_attr, ints_attr};
use ember_autograd::Var;
use ember_autograd::export::OpExport;
use ember_tensor::{Error, Result};

impl Writer {
    /// `channel_norm(x [N, C, ...], weight?, bias?)`.
    pub(super) fn channel_norm(&mut self, desc: &OpExport, args: &[(&str, &Var)]) -> Result<String> {
        let (weight, bias) = (int(desc, "weight")? != 0, int(desc, "bias")? != 0);
        let want = 1 + usize::from(weight) + usize::from(bias);
        let (x, x_var) = match args {
            [(x, v), ..] if args.len() == want => (*x, *v),
            _ => {
                return Err(Error::invalid(
                    "onnx export",
                    format!("'{}' takes {want} inputs, got {}", desc.kind, args.len()),
                ));
            }
        };
        let rank = x_var.shape().rank();
        if rank < 2 {
            return Err(Error::shape("onnx export", format!("'{}' of an input of shape {}", desc.kind, x_var.shape())));
        }
        let dtype = x_var.dtype();
        let axes: Vec<i64> = (0..rank as i64).filter(|&d| d != 1).collect();
        let reduce = |w: &mut Writer, v: &str| {
            w.node("ReduceMean", &[v], vec![ints_attr("axes", axes.clone()), int_attr("keepdims", 1)])
        };
        let mean = reduce(self, x);
        let centred = self.node("Sub", &[x, &mean], vec![]);
        let square = self.node("Mul", &[&centred, &centred], vec![]);
        let var = reduce(self, &square);
        let eps = self.const_scalar(float(desc, "eps")?, dtype)?;
        let shifted = self.node("Add", &[&var, &eps], vec![]);
        let std = self.node("Sqrt", &[&shifted], vec![]);
        let mut y = self.node("Div", &[&centred, &std], vec![]);
        let mut per_channel = vec![1i64; rank];
        per_channel[1] = x_var.shape()[1] as i64;
        for (present, at, op) in [(weight, 1, "Mul"), (bias, 1 + usize::from(weight), "Add")] {
            if present {
                let shape = self.const_ints(&per_channel)?;
                let p = self.node("Reshape", &[args[at].0, &shape], vec![]);
                y = self.node(op, &[&y, &p], vec![]);
            }
        }
        Ok(y)
    }
}
