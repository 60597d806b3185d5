//! `Resize` (opsets 13 to 20; opset 18's `antialias`, `axes` and `keep_aspect_ratio_policy` at their defaults) as ember's `interpolate`, for the coordinate mappings that
//! PyTorch's modes are: `nearest` with `asymmetric` coordinates and `floor`, `linear` with
//! `align_corners` or (`pytorch_`)`half_pixel`.

use super::{float, float_in, int_attr, opt_ints_in, string_attr};
use crate::ir::{Node, Value};
use ember_tensor::ops::pool::{InterpolateArgs, InterpolateMode};
use ember_tensor::{DType, Error, Result};

type Args<'a> = &'a [Option<Value>];

pub(crate) fn resize(node: &Node, args: Args<'_>) -> Result<Vec<Value>> {
    let x = float_in(args, 0)?;
    let rank = x.shape().rank();
    if !(3..=4).contains(&rank) {
        return Err(Error::shape(
            "onnx",
            format!("Resize of [N, C, L] or [N, C, H, W] inputs only, got {}", x.shape()),
        ));
    }
    let mode = string_attr(node, "mode", "nearest")?;
    let coords = string_attr(node, "coordinate_transformation_mode", "half_pixel")?;
    if int_attr(node, "exclude_outside", 0)? != 0 {
        return Err(Error::invalid("onnx", "exclude_outside = 1 is not supported"));
    }
    // Opset 18's attributes at the values that mean what earlier opsets do.
    if int_attr(node, "antialias", 0)? != 0 {
        return Err(Error::invalid("onnx", "antialias = 1 is not supported"));
    }
    if node.attr("axes").is_some() {
        return Err(Error::invalid("onnx", "Resize with axes is not supported (scales or sizes of every dimension)"));
    }
    let policy = string_attr(node, "keep_aspect_ratio_policy", "stretch")?;
    if policy != "stretch" {
        return Err(Error::invalid("onnx", format!("keep_aspect_ratio_policy '{policy}' is not supported (stretch)")));
    }
    let (mode, align) = match (mode.as_str(), coords.as_str()) {
        ("nearest", "asymmetric") => {
            let rounding = string_attr(node, "nearest_mode", "round_prefer_floor")?;
            if rounding != "floor" {
                return Err(Error::invalid(
                    "onnx",
                    format!("nearest Resize with nearest_mode '{rounding}' (only floor)"),
                ));
            }
            (InterpolateMode::Nearest, None)
        }
        ("linear", "align_corners") => (linear(rank), Some(true)),
        ("linear", "half_pixel" | "pytorch_half_pixel") => (linear(rank), Some(false)),
        (m, c) => {
            return Err(Error::invalid(
                "onnx",
                format!("Resize with mode '{m}' and coordinate_transformation_mode '{c}' is not supported"),
            ));
        }
    };
    let scales = match args.get(2).and_then(Option::as_ref) {
        Some(Value::Float(s)) if s.numel() > 0 => Some(s.value().to_dtype(DType::F64).to_vec::<f64>()?),
        Some(Value::Int(_)) => return Err(Error::dtype("onnx", "Resize scales must be floats")),
        _ => None,
    };
    let sizes = opt_ints_in(args, 3)?.filter(|s| !s.is_empty());
    let lead_ok = |v: &[f64]| v.len() == rank && v[0] == 1.0 && v[1] == 1.0;
    let mut a = match (scales, sizes) {
        (Some(s), None) if lead_ok(&s) => InterpolateArgs::scale_factor(s[2..].to_vec()),
        (None, Some(z)) if z.len() == rank && z.iter().all(|&v| v > 0) => {
            let dims = x.shape().dims().to_vec();
            if z[0] as usize != dims[0] || z[1] as usize != dims[1] {
                return Err(Error::shape(
                    "onnx",
                    format!("Resize sizes {z:?} change the batch or channels of {dims:?}"),
                ));
            }
            InterpolateArgs::size(z[2..].iter().map(|&v| v as usize).collect::<Vec<_>>())
        }
        (s, z) => {
            return Err(Error::invalid(
                "onnx",
                format!("Resize needs scales [1, 1, ..] or positive sizes of rank {rank}, got {s:?} and {z:?}"),
            ));
        }
    };
    a = a.mode(mode);
    if let Some(on) = align {
        a = a.align_corners(on);
    }
    float(x.interpolate(&a)?)
}

fn linear(rank: usize) -> InterpolateMode {
    if rank == 3 { InterpolateMode::Linear } else { InterpolateMode::Bilinear }
}
