//! Convolutions (1-d ones run on planes of height 1) as `Conv` and `ConvTranspose`.

use super::{Writer, int, int_attr, ints_attr, pair};
use ember_autograd::Var;
use ember_autograd::export::OpExport;
use ember_tensor::{Error, Result};

/// `inputs` as names, with the optional bias.
fn operands<'a>(args: &[(&'a str, &Var)]) -> Vec<&'a str> {
    args.iter().take(3).map(|(n, _)| *n).collect()
}

/// The spatial extents `[h, w]` of an `[N, C, h, w]` operand.
fn plane(op: &str, v: &Var) -> Result<[i64; 2]> {
    match v.shape().dims() {
        &[_, _, h, w] => Ok([h as i64, w as i64]),
        _ => Err(Error::shape("onnx export", format!("{op} expects an [N, C, H, W] operand, got {}", v.shape()))),
    }
}

impl Writer {
    /// A convolution. ember pads `padding` before each dimension and as much after as the
    /// output needs (PyTorch's `"same"` puts an odd extra zero there), so the end padding is
    /// the smallest that gives the output its size, and never below the start's.
    pub(super) fn conv(&mut self, desc: &OpExport, args: &[(&str, &Var)], out: &Var) -> Result<String> {
        let (k, s, p, d) =
            (pair(desc, "kernel")?, pair(desc, "stride")?, pair(desc, "padding")?, pair(desc, "dilation")?);
        let x = args.first().ok_or_else(|| Error::invalid("onnx export", format!("'{}' lacks input 0", desc.kind)))?;
        let (input, output) = (plane(&desc.kind, x.1)?, plane(&desc.kind, out)?);
        let end: Vec<i64> =
            (0..2).map(|i| ((output[i] - 1) * s[i] + d[i] * (k[i] - 1) + 1 - input[i] - p[i]).max(p[i])).collect();
        let attrs = vec![
            ints_attr("kernel_shape", k.to_vec()),
            ints_attr("strides", s.to_vec()),
            ints_attr("pads", vec![p[0], p[1], end[0], end[1]]),
            ints_attr("dilations", d.to_vec()),
            int_attr("group", int(desc, "groups")?),
        ];
        Ok(self.node("Conv", &operands(args), attrs))
    }

    /// A transposed convolution: ONNX's output size `stride * (in - 1) + output_padding +
    /// dilation * (kernel - 1) + 1 - 2 * padding`, so `output_padding` is what ember's
    /// output has beyond the rest.
    pub(super) fn conv_transpose(&mut self, desc: &OpExport, args: &[(&str, &Var)], out: &Var) -> Result<String> {
        let (k, s, p, d) =
            (pair(desc, "kernel")?, pair(desc, "stride")?, pair(desc, "padding")?, pair(desc, "dilation")?);
        let y = args.first().ok_or_else(|| Error::invalid("onnx export", format!("'{}' lacks input 0", desc.kind)))?;
        let (input, output) = (plane(&desc.kind, y.1)?, plane(&desc.kind, out)?);
        let extra: Vec<i64> =
            (0..2).map(|i| output[i] - (s[i] * (input[i] - 1) + d[i] * (k[i] - 1) + 1 - 2 * p[i])).collect();
        if extra.iter().any(|&e| e < 0) {
            return Err(Error::shape(
                "onnx export",
                format!("'{}' from {input:?} to {output:?} has no output_padding", desc.kind),
            ));
        }
        let attrs = vec![
            ints_attr("kernel_shape", k.to_vec()),
            ints_attr("strides", s.to_vec()),
            ints_attr("pads", vec![p[0], p[1], p[0], p[1]]),
            ints_attr("dilations", d.to_vec()),
            ints_attr("output_padding", extra),
            int_attr("group", int(desc, "groups")?),
        ];
        Ok(self.node("ConvTranspose", &operands(args), attrs))
    }
}
