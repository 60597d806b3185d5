//! Pools and other separable maps of planes: `MaxPool` / `AveragePool` for pools with a
//! kernel-and-stride description, otherwise exact decompositions of the planned windows
//! (max pools: `Slice` + `ReduceMax` + `Concat` per output position and dimension) or of
//! the linear map (average pools, interpolation: `MatMul` by its two matrices).

use super::{Writer, float_list, int, int_attr, ints, ints_attr, pair, string_attr};
use crate::proto::AttributeProto;
use ember_autograd::Var;
use ember_autograd::export::OpExport;
use ember_tensor::{Error, Result, Tensor};

/// ONNX's `pads` (`[top, left, bottom, right]`) for symmetric padding `[h, w]`.
fn pads(p: [i64; 2]) -> Vec<i64> {
    vec![p[0], p[1], p[0], p[1]]
}

/// The attributes of a pool with a kernel-and-stride description; `dilations` only where
/// the operator has them (`AveragePool` gets them in opset 19).
fn kernel_attrs(desc: &OpExport, dilations: bool) -> Result<Vec<AttributeProto>> {
    let mut attrs = vec![
        ints_attr("kernel_shape", pair(desc, "kernel")?.to_vec()),
        ints_attr("strides", pair(desc, "stride")?.to_vec()),
        ints_attr("pads", pads(pair(desc, "padding")?)),
        int_attr("ceil_mode", int(desc, "ceil_mode")?),
    ];
    if dilations {
        attrs.push(ints_attr("dilations", pair(desc, "dilation")?.to_vec()));
    } else if pair(desc, "dilation")?.iter().any(|&d| d != 1) {
        return Err(Error::invalid("onnx export", format!("'{}' with dilation has no ONNX mapping", desc.kind)));
    }
    Ok(attrs)
}

impl Writer {
    /// A max pool of the planes of `x` (named `input`).
    pub(super) fn max_pool(&mut self, desc: &OpExport, input: &str, x: &Var, out: &Var) -> Result<String> {
        if desc.get("kernel").is_some() {
            let attrs = kernel_attrs(desc, true)?;
            return self.pool("MaxPool", attrs, input, x, out);
        }
        // Adaptive pools and pools whose ceil_mode differs between dimensions: the maximum
        // over each planned window, rows first (a maximum is separable, so this is exact).
        let step = pair(desc, "step")?;
        let rank = x.shape().rank() as i64;
        let rows = self.reduce_windows(desc, input, &ints(desc, "rows")?, rank - 2, step[0])?;
        self.reduce_windows(desc, &rows, &ints(desc, "cols")?, rank - 1, step[1])
    }

    /// `ReduceMax` of `input` over each window (`[start, count]` pairs in `windows`, taps
    /// `step` apart) along `axis`, concatenated; the input itself when every window is its
    /// own single position.
    fn reduce_windows(
        &mut self,
        desc: &OpExport,
        input: &str,
        windows: &[i64],
        axis: i64,
        step: i64,
    ) -> Result<String> {
        if !windows.len().is_multiple_of(2) {
            return Err(Error::invalid("onnx export", format!("'{}' has malformed windows", desc.kind)));
        }
        let pairs: Vec<(i64, i64)> = windows.chunks(2).map(|w| (w[0], w[1])).collect();
        if pairs.iter().enumerate().all(|(i, &(s, c))| s == i as i64 && c == 1) {
            return Ok(input.to_string());
        }
        let (axes, steps) = (self.const_ints(&[axis])?, self.const_ints(&[step])?);
        let mut parts = Vec::with_capacity(pairs.len());
        for (start, count) in pairs {
            let (st, en) = (self.const_ints(&[start])?, self.const_ints(&[start + (count - 1).max(0) * step + 1])?);
            let s = self.node("Slice", &[input, &st, &en, &axes, &steps], vec![]);
            let attrs = vec![ints_attr("axes", vec![axis]), int_attr("keepdims", 1)];
            parts.push(self.node("ReduceMax", &[&s], attrs));
        }
        let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
        Ok(self.node("Concat", &parts, vec![int_attr("axis", axis)]))
    }

    /// A linear map of the planes of `x` (named `input`): an average pool, or the map's
    /// matrices.
    pub(super) fn linear_map(&mut self, desc: &OpExport, input: &str, x: &Var, out: &Var) -> Result<String> {
        if desc.get("kernel").is_some() {
            let mut attrs = kernel_attrs(desc, false)?;
            attrs.push(int_attr("count_include_pad", int(desc, "count_include_pad")?));
            return self.pool("AveragePool", attrs, input, x, out);
        }
        if desc.get("mode").is_some()
            && let Some(y) = self.resize(desc, input, x)?
        {
            return Ok(y);
        }
        // `y = rows · x · colsᵀ` over the last two dimensions; a dimension the map leaves
        // alone (the height of a 1-d map) is skipped, so that it stays exact.
        let plane = ints(desc, "plane")?;
        let (rows, cols) = (float_list(desc, "rows")?, float_list(desc, "cols")?);
        let [ih, iw, oh, ow] = <[i64; 4]>::try_from(plane.as_slice())
            .map_err(|_| Error::invalid("onnx export", format!("'{}' has a malformed plane", desc.kind)))?
            .map(|v| v as usize);
        if rows.len() != oh * ih || cols.len() != ow * iw {
            return Err(Error::invalid(
                "onnx export",
                format!(
                    "'{}': matrices of {} and {} entries for planes {ih}x{iw} -> {oh}x{ow}",
                    desc.kind,
                    rows.len(),
                    cols.len()
                ),
            ));
        }
        let identity = |m: &[f64], n: usize, o: usize| {
            n == o && m.iter().enumerate().all(|(i, &v)| v == if i / n == i % n { 1.0 } else { 0.0 })
        };
        let dtype = x.dtype();
        let mut y = input.to_string();
        if !identity(&rows, ih, oh) {
            let r = self.name("rows");
            self.initializer(&r, &Tensor::from_vec(rows, [oh, ih])?.to_dtype(dtype))?;
            y = self.node("MatMul", &[&r, &y], vec![]);
        }
        if !identity(&cols, iw, ow) {
            let c = self.name("cols");
            let ct: Vec<f64> = (0..iw * ow).map(|j| cols[(j % ow) * iw + j / ow]).collect();
            self.initializer(&c, &Tensor::from_vec(ct, [iw, ow])?.to_dtype(dtype))?;
            y = self.node("MatMul", &[&y, &c], vec![]);
        }
        if y == input {
            y = self.node("Identity", &[input], vec![]);
        }
        Ok(y)
    }

    /// An interpolation as `Resize` (opset 13 semantics): PyTorch's `nearest` is
    /// `asymmetric` coordinates with `floor`; linear modes are `align_corners` or
    /// `pytorch_half_pixel`. Scale factors that set the source positions go in as `scales`,
    /// otherwise the output size as `sizes` (the batch and channels read off the input, so
    /// that the batch stays dynamic). `None` when a scale is not a `float` (the source
    /// positions would move) or would not give the output its size (ONNX Runtime rounds
    /// `input * scale` in single precision).
    fn resize(&mut self, desc: &OpExport, input: &str, x: &Var) -> Result<Option<String>> {
        let plane = ints(desc, "plane")?;
        if plane.len() != 4 || x.shape().rank() != 4 {
            return Err(Error::shape("onnx export", format!("'{}' of planes {plane:?} from {}", desc.kind, x.shape())));
        }
        let linear = int(desc, "mode")? != 0;
        let mut attrs = vec![string_attr("mode", if linear { "linear" } else { "nearest" })];
        if linear {
            let align = int(desc, "align_corners")? != 0;
            attrs.push(string_attr(
                "coordinate_transformation_mode",
                if align { "align_corners" } else { "pytorch_half_pixel" },
            ));
        } else {
            attrs.push(string_attr("coordinate_transformation_mode", "asymmetric"));
            attrs.push(string_attr("nearest_mode", "floor"));
        }
        if desc.get("scales").is_some() {
            let s = float_list(desc, "scales")?;
            let exact = |v: f64| f64::from(v as f32) == v;
            let sized = |i: usize| (plane[i] as f32 * s[i] as f32).floor() as i64 == plane[i + 2];
            if s.len() != 2 || !(0..2).all(|i| exact(s[i]) && sized(i)) {
                return Ok(None);
            }
            let scales = self.name("scales");
            self.initializer(&scales, &Tensor::from_vec(vec![1.0, 1.0, s[0] as f32, s[1] as f32], [4])?)?;
            return Ok(Some(self.node("Resize", &[input, "", &scales], attrs)));
        }
        let lead = self.node("Shape", &[input], vec![int_attr("start", 0), int_attr("end", 2)]);
        let out = self.const_ints(&plane[2..])?;
        let sizes = self.node("Concat", &[&lead, &out], vec![int_attr("axis", 0)]);
        Ok(Some(self.node("Resize", &[input, "", "", &sizes], attrs)))
    }

    /// A pool over the planes of `x` (named `input`): ember pools planes of any leading
    /// shape, ONNX wants `[N, C, H, W]`, so other ranks are reshaped there and back.
    pub(super) fn pool(
        &mut self,
        op: &str,
        attrs: Vec<AttributeProto>,
        input: &str,
        x: &Var,
        out: &Var,
    ) -> Result<String> {
        if x.shape().rank() == 4 {
            return Ok(self.node(op, &[input], attrs));
        }
        let dims: Vec<i64> = x.shape().dims().iter().map(|&d| d as i64).collect();
        let k = dims.len();
        if k < 2 {
            return Err(Error::shape("onnx export", format!("{op} of an input of shape {}", x.shape())));
        }
        let four = self.const_ints(&[-1, 1, dims[k - 2], dims[k - 1]])?;
        let r = self.node("Reshape", &[input, &four], vec![]);
        let p = self.node(op, &[&r], attrs);
        let back: Vec<i64> = out.shape().dims().iter().map(|&d| d as i64).collect();
        let back = self.target_shape(&back, x, 0)?;
        Ok(self.node("Reshape", &[&p, &back], vec![]))
    }
}
