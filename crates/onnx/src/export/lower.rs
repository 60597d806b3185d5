//! ember's operation descriptions as ONNX nodes (opset 17).

use super::{onnx_type, tensor_proto};
use crate::proto::{AttributeProto, NodeProto, TensorProto, attribute_type, data_type};
use ember_autograd::Var;
use ember_autograd::export::{ExportAttr, OpExport};
use ember_tensor::{DType, Error, Result, Tensor};

mod conv;
mod norm;
mod pool;
mod recurrent;

/// Collects nodes and initializers while the traced graph is walked.
pub(super) struct Writer {
    nodes: Vec<NodeProto>,
    inits: Vec<TensorProto>,
    dynamic_batch: bool,
    batch: Option<usize>,
    fresh: usize,
}

fn int_attr(name: &str, v: i64) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: attribute_type::INT, i: v, ..Default::default() }
}

fn float_attr(name: &str, v: f32) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: attribute_type::FLOAT, f: v, ..Default::default() }
}

fn string_attr(name: &str, v: &str) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: attribute_type::STRING, s: v.as_bytes().to_vec(), ..Default::default() }
}

fn ints_attr(name: &str, v: Vec<i64>) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: attribute_type::INTS, ints: v, ..Default::default() }
}

fn ints(desc: &OpExport, name: &str) -> Result<Vec<i64>> {
    match desc.get(name) {
        Some(ExportAttr::Ints(v)) => Ok(v.clone()),
        _ => Err(missing(desc, name)),
    }
}

/// The two-element (height, width) list `name`.
fn pair(desc: &OpExport, name: &str) -> Result<[i64; 2]> {
    let v = ints(desc, name)?;
    <[i64; 2]>::try_from(v.as_slice()).map_err(|_| {
        Error::invalid("onnx export", format!("operation '{}' has '{name}' {v:?}, not 2 values", desc.kind))
    })
}

fn int(desc: &OpExport, name: &str) -> Result<i64> {
    match desc.get(name) {
        Some(ExportAttr::Int(v)) => Ok(*v),
        _ => Err(missing(desc, name)),
    }
}

fn float_list(desc: &OpExport, name: &str) -> Result<Vec<f64>> {
    match desc.get(name) {
        Some(ExportAttr::Floats(v)) => Ok(v.clone()),
        _ => Err(missing(desc, name)),
    }
}

fn float(desc: &OpExport, name: &str) -> Result<f64> {
    match desc.get(name) {
        Some(ExportAttr::Float(v)) => Ok(*v),
        _ => Err(missing(desc, name)),
    }
}

fn missing(desc: &OpExport, name: &str) -> Error {
    Error::invalid("onnx export", format!("operation '{}' lacks its '{name}' attribute", desc.kind))
}

impl Writer {
    pub(super) fn new(dynamic_batch: bool, batch: Option<usize>) -> Writer {
        Writer { nodes: Vec::new(), inits: Vec::new(), dynamic_batch, batch, fresh: 0 }
    }

    pub(super) fn finish(self) -> (Vec<NodeProto>, Vec<TensorProto>) {
        (self.nodes, self.inits)
    }

    pub(super) fn initializer(&mut self, name: &str, t: &Tensor) -> Result<()> {
        self.inits.push(tensor_proto(name, t)?);
        Ok(())
    }

    fn name(&mut self, base: &str) -> String {
        self.fresh += 1;
        format!("{base}_{}", self.fresh)
    }

    fn node(&mut self, op: &str, inputs: &[&str], attrs: Vec<AttributeProto>) -> String {
        let out = self.name(op);
        self.nodes.push(NodeProto {
            name: out.clone(),
            op_type: op.into(),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: vec![out.clone()],
            attribute: attrs,
            ..Default::default()
        });
        out
    }

    /// `to = Identity(from)`: graph outputs get their own names.
    pub(super) fn identity(&mut self, from: &str, to: &str) {
        self.nodes.push(NodeProto {
            name: to.into(),
            op_type: "Identity".into(),
            input: vec![from.into()],
            output: vec![to.into()],
            ..Default::default()
        });
    }

    /// `Reshape(input, dims)`: a view of a graph input's data that the traced function
    /// took as a plain tensor (see `input_view` in `export/mod.rs`).
    pub(super) fn input_reshape(&mut self, input: &str, dims: &[i64]) -> Result<String> {
        let shape = self.const_ints(dims)?;
        Ok(self.node("Reshape", &[input, &shape], vec![]))
    }

    fn const_ints(&mut self, v: &[i64]) -> Result<String> {
        let name = self.name("constant");
        self.initializer(&name, &Tensor::from_vec(v.to_vec(), [v.len()])?)?;
        Ok(name)
    }

    fn const_scalar(&mut self, v: f64, dtype: DType) -> Result<String> {
        let name = self.name("constant");
        self.initializer(&name, &Tensor::scalar(v).to_dtype(dtype))?;
        Ok(name)
    }

    /// A Reshape (`copy` 0) or Expand (`copy` 1) target `dims`, given the same target in the
    /// second trace (`alt`): the one dimension that follows the batch is inferred (`-1`)
    /// by a reshape, and kept from the input (`1`) by an expand. Without a second trace,
    /// [`Writer::target_shape`]'s assumption that the batch leads.
    fn batch_shape(
        &mut self,
        desc: &OpExport,
        dims: &[i64],
        alt: Option<&[i64]>,
        from: &Var,
        copy: i64,
    ) -> Result<String> {
        let Some(alt) = alt else { return self.target_shape(dims, from, copy) };
        if alt == dims {
            return self.const_ints(dims);
        }
        let changes = || {
            Error::invalid(
                "onnx export",
                format!("'{}' to {dims:?} (and {alt:?} one sample later) has no dynamic-batch form", desc.kind),
            )
        };
        let i = super::batch::the_batch_dim(dims, alt).ok_or_else(changes)?;
        let mut dims = dims.to_vec();
        if copy == 0 {
            dims[i] = -1;
        } else {
            // An expand keeps the input's extent there only if the input has it.
            let from = from.shape().dims().to_vec();
            let j = (i + from.len()).checked_sub(dims.len()).ok_or_else(changes)?;
            if from.get(j).map(|&d| d as i64) != Some(dims[i]) {
                return Err(changes());
            }
            dims[i] = 1;
        }
        self.const_ints(&dims)
    }

    /// A constant leaf `value` that is `other` in the second trace of a dynamic batch
    /// (a recurrent layer's zero state): when it is filled with one value and one
    /// dimension is the batch, `Expand` of that value to a shape whose batch dimension is
    /// read off the graph's first input (`input`); named `name`.
    pub(super) fn batch_constant(&mut self, name: &str, value: &Tensor, other: &Tensor, input: &str) -> Result<String> {
        let (a, b): (Vec<i64>, Vec<i64>) = (
            value.shape().dims().iter().map(|&d| d as i64).collect(),
            other.shape().dims().iter().map(|&d| d as i64).collect(),
        );
        let refuse = |why: &str| {
            Error::invalid(
                "onnx export",
                format!("constant '{name}' of shape {a:?} changes with the batch size ({b:?}): {why}"),
            )
        };
        let i = super::batch::the_batch_dim(&a, &b).ok_or_else(|| refuse("more than one dimension changes"))?;
        if self.batch.map(|n| n as i64) != Some(a[i]) || b[i] != a[i] + 1 {
            return Err(refuse("the changing dimension is not the batch"));
        }
        let values = value.to_dtype(DType::F64).to_vec::<f64>()?;
        let fill = values.first().copied().unwrap_or(0.0);
        let uniform = |t: &Tensor| -> Result<bool> {
            Ok(t.to_dtype(DType::F64).to_vec::<f64>()?.iter().all(|&v| v.to_bits() == fill.to_bits()))
        };
        if !uniform(value)? || !uniform(other)? {
            return Err(refuse("it is not filled with one value"));
        }
        let scalar = self.const_scalar(fill, value.dtype())?;
        let shape = self.node("Shape", &[input], vec![int_attr("start", 0), int_attr("end", 1)]);
        let mut parts = Vec::with_capacity(3);
        if i > 0 {
            parts.push(self.const_ints(&a[..i])?);
        }
        parts.push(shape);
        if i + 1 < a.len() {
            parts.push(self.const_ints(&a[i + 1..])?);
        }
        let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
        let target = self.node("Concat", &parts, vec![int_attr("axis", 0)]);
        Ok(self.node("Expand", &[&scalar, &target], vec![]))
    }

    /// A shape for Reshape/Expand: with a dynamic batch, a leading batch-sized dimension
    /// of an input that leads with the batch is copied (`0`) or broadcast (`1`) instead.
    /// A reshape whose leading dimension folds the batch with others (`[B * T, F]`, as
    /// recurrent layers and attention write, or back) infers it (`-1`) from the rest.
    fn target_shape(&mut self, dims: &[i64], from: &Var, copy: i64) -> Result<String> {
        let mut dims = dims.to_vec();
        let leads_with_batch = from.shape().dims().first().copied() == self.batch;
        let batch = self.batch.unwrap_or(0) as i64;
        if self.dynamic_batch && leads_with_batch && dims.first().copied() == Some(batch) {
            dims[0] = copy;
        } else if self.dynamic_batch
            && copy == 0
            && batch > 0
            && !dims.contains(&-1)
            && dims.first().is_some_and(|&d| d > 0 && d % batch == 0)
            && from.shape().dims().first().is_some_and(|&d| d > 0 && d as i64 % batch == 0)
        {
            dims[0] = -1;
        }
        self.const_ints(&dims)
    }

    /// Writes the nodes for `desc` applied to `args` (`(value name, var)`), computing
    /// `out`; returns the name of the result.
    /// `alt` is the same operation in the second trace of a dynamic batch (one sample
    /// more), which says what follows the batch.
    pub(super) fn lower(
        &mut self,
        desc: &OpExport,
        args: &[(&str, &Var)],
        out: &Var,
        alt: Option<&OpExport>,
    ) -> Result<String> {
        if let Some(alt) = alt
            && alt != desc
            && desc.kind != "reshape"
            && desc.kind != "expand"
        {
            return Err(Error::invalid(
                "onnx export",
                format!(
                    "operation '{}' changes with the batch size ({:?} vs {:?}); export it without a dynamic batch",
                    desc.kind, desc.attrs, alt.attrs
                ),
            ));
        }
        let a = |i: usize| -> Result<&str> {
            args.get(i)
                .map(|(n, _)| *n)
                .ok_or_else(|| Error::invalid("onnx export", format!("'{}' lacks input {i}", desc.kind)))
        };
        let dtype = out.dtype();
        let simple = |op: &str| -> Option<&'static str> {
            Some(match op {
                "add" => "Add",
                "sub" => "Sub",
                "mul" => "Mul",
                "div" => "Div",
                "pow" => "Pow",
                "neg" => "Neg",
                "abs" => "Abs",
                "relu" => "Relu",
                "sigmoid" => "Sigmoid",
                "tanh" => "Tanh",
                "exp" => "Exp",
                "log" => "Log",
                "sqrt" => "Sqrt",
                "sin" => "Sin",
                "cos" => "Cos",
                "erf" => "Erf",
                "sign" => "Sign",
                "floor" => "Floor",
                "ceil" => "Ceil",
                "round" => "Round",
                "recip" => "Reciprocal",
                "maximum" => "Max",
                "minimum" => "Min",
                "matmul" => "MatMul",
                "contiguous" | "copy" | "detach" => "Identity",
                _ => return None,
            })
        };
        let kind = desc.kind.as_str();
        if let Some(op) = simple(kind) {
            let inputs: Vec<&str> = args.iter().map(|(n, _)| *n).collect();
            return Ok(self.node(op, &inputs, vec![]));
        }
        Ok(match kind {
            "add_scalar" | "sub_scalar" | "mul_scalar" | "div_scalar" | "pow_scalar" => {
                let c = self.const_scalar(float(desc, "value")?, dtype)?;
                let op = match kind {
                    "add_scalar" => "Add",
                    "sub_scalar" => "Sub",
                    "mul_scalar" => "Mul",
                    "div_scalar" => "Div",
                    _ => "Pow",
                };
                self.node(op, &[a(0)?, &c], vec![])
            }
            "rsub_scalar" | "rdiv_scalar" => {
                let c = self.const_scalar(float(desc, "value")?, dtype)?;
                self.node(if kind == "rsub_scalar" { "Sub" } else { "Div" }, &[&c, a(0)?], vec![])
            }
            "leaky_relu" => {
                let alpha = float(desc, "alpha")?;
                self.node("LeakyRelu", &[a(0)?], vec![float_attr("alpha", alpha as f32)])
            }
            "square" => self.node("Mul", &[a(0)?, a(0)?], vec![]),
            "rsqrt" => {
                let s = self.node("Sqrt", &[a(0)?], vec![]);
                self.node("Reciprocal", &[&s], vec![])
            }
            "silu" => {
                let s = self.node("Sigmoid", &[a(0)?], vec![]);
                self.node("Mul", &[a(0)?, &s], vec![])
            }
            "gelu" => {
                // 0.5 x (1 + erf(x / sqrt 2)), as PyTorch writes GELU before opset 20.
                let r2 = self.const_scalar(std::f64::consts::SQRT_2, dtype)?;
                let one = self.const_scalar(1.0, dtype)?;
                let half = self.const_scalar(0.5, dtype)?;
                let d = self.node("Div", &[a(0)?, &r2], vec![]);
                let e = self.node("Erf", &[&d], vec![]);
                let p = self.node("Add", &[&e, &one], vec![]);
                let m = self.node("Mul", &[a(0)?, &p], vec![]);
                self.node("Mul", &[&m, &half], vec![])
            }
            "gelu_tanh" => {
                // 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), PyTorch's approximation.
                let k = self.const_scalar((2.0 / std::f64::consts::PI).sqrt(), dtype)?;
                let c = self.const_scalar(0.044715, dtype)?;
                let one = self.const_scalar(1.0, dtype)?;
                let half = self.const_scalar(0.5, dtype)?;
                let x2 = self.node("Mul", &[a(0)?, a(0)?], vec![]);
                let x3 = self.node("Mul", &[&x2, a(0)?], vec![]);
                let cx3 = self.node("Mul", &[&x3, &c], vec![]);
                let inner = self.node("Add", &[a(0)?, &cx3], vec![]);
                let scaled = self.node("Mul", &[&inner, &k], vec![]);
                let t = self.node("Tanh", &[&scaled], vec![]);
                let p = self.node("Add", &[&t, &one], vec![]);
                let m = self.node("Mul", &[a(0)?, &p], vec![]);
                self.node("Mul", &[&m, &half], vec![])
            }
            "maximum_scalar" | "minimum_scalar" => {
                let c = self.const_scalar(float(desc, "value")?, dtype)?;
                self.node(if kind == "maximum_scalar" { "Max" } else { "Min" }, &[a(0)?, &c], vec![])
            }
            "channel_norm" => self.channel_norm(desc, args)?,
            "linear" => {
                let bias = int(desc, "bias")? != 0;
                if args[0].1.shape().rank() == 2 {
                    let mut inputs = vec![a(0)?, a(1)?];
                    if bias {
                        inputs.push(a(2)?);
                    }
                    self.node("Gemm", &inputs, vec![int_attr("transB", 1)])
                } else {
                    let t = self.node("Transpose", &[a(1)?], vec![ints_attr("perm", vec![1, 0])]);
                    let m = self.node("MatMul", &[a(0)?, &t], vec![]);
                    if bias { self.node("Add", &[&m, a(2)?], vec![]) } else { m }
                }
            }
            "conv1d" | "conv2d" => self.conv(desc, args, out)?,
            "conv_transpose1d" | "conv_transpose2d" => self.conv_transpose(desc, args, out)?,
            "max_pool1d" | "max_pool2d" | "adaptive_max_pool1d" | "adaptive_max_pool2d" => {
                self.max_pool(desc, a(0)?, args[0].1, out)?
            }
            "avg_pool1d"
            | "avg_pool2d"
            | "adaptive_avg_pool1d"
            | "adaptive_avg_pool2d"
            | "upsample_nearest"
            | "upsample_linear" => self.linear_map(desc, a(0)?, args[0].1, out)?,
            "reshape" => {
                let alt = alt.map(|d| ints(d, "shape")).transpose()?;
                let s = self.batch_shape(desc, &ints(desc, "shape")?, alt.as_deref(), args[0].1, 0)?;
                self.node("Reshape", &[a(0)?, &s], vec![])
            }
            "expand" => {
                let alt = alt.map(|d| ints(d, "shape")).transpose()?;
                let s = self.batch_shape(desc, &ints(desc, "shape")?, alt.as_deref(), args[0].1, 1)?;
                self.node("Expand", &[a(0)?, &s], vec![])
            }
            "permute" => self.node("Transpose", &[a(0)?], vec![ints_attr("perm", ints(desc, "perm")?)]),
            "slice" => {
                let s = ints(desc, "spec")?;
                let (dim, start, len, step) = (s[0], s[1], s[2], s[3]);
                let end = if len == 0 { start } else { start + (len - 1) * step + 1 };
                let (st, en, ax, sp) = (
                    self.const_ints(&[start])?,
                    self.const_ints(&[end])?,
                    self.const_ints(&[dim])?,
                    self.const_ints(&[step])?,
                );
                self.node("Slice", &[a(0)?, &st, &en, &ax, &sp], vec![])
            }
            "cat" => {
                let inputs: Vec<&str> = args.iter().map(|(n, _)| *n).collect();
                self.node("Concat", &inputs, vec![int_attr("axis", int(desc, "dim")?)])
            }
            "index_select" => self.node("Gather", &[a(0)?, a(1)?], vec![int_attr("axis", int(desc, "dim")?)]),
            "sum" => {
                let axes = self.const_ints(&ints(desc, "dims")?)?;
                self.node("ReduceSum", &[a(0)?, &axes], vec![int_attr("keepdims", int(desc, "keepdim")?)])
            }
            "layer_norm" => {
                // LayerNormalization normalises from `axis` on and requires a scale: ones
                // where the layer has none.
                let shape = ints(desc, "normalized_shape")?;
                let axis = args[0].1.shape().rank() as i64 - shape.len() as i64;
                let weight = int(desc, "weight")? != 0;
                let scale = if weight {
                    a(1)?.to_string()
                } else {
                    let one = self.const_scalar(1.0, dtype)?;
                    let target = self.const_ints(&shape)?;
                    self.node("Expand", &[&one, &target], vec![])
                };
                let mut inputs = vec![a(0)?, scale.as_str()];
                if int(desc, "bias")? != 0 {
                    inputs.push(a(1 + usize::from(weight))?);
                }
                let attrs = vec![int_attr("axis", axis), float_attr("epsilon", float(desc, "eps")? as f32)];
                self.node("LayerNormalization", &inputs, attrs)
            }
            "softmax" => self.node("Softmax", &[a(0)?], vec![int_attr("axis", int(desc, "dim")?)]),
            "log_softmax" => self.node("LogSoftmax", &[a(0)?], vec![int_attr("axis", int(desc, "dim")?)]),
            "to_dtype" => self.node("Cast", &[a(0)?], vec![int_attr("to", onnx_type(dtype) as i64)]),
            "where_cond" => {
                let c = self.node("Cast", &[a(0)?], vec![int_attr("to", data_type::BOOL as i64)]);
                self.node("Where", &[&c, a(1)?, a(2)?], vec![])
            }
            "masked_fill" => {
                let c = self.node("Cast", &[a(1)?], vec![int_attr("to", data_type::BOOL as i64)]);
                let v = self.const_scalar(float(desc, "value")?, dtype)?;
                self.node("Where", &[&c, &v, a(0)?], vec![])
            }
            "scaled_dot_product_attention" | "attention" => self.attention(desc, args)?,
            "lstm_sequence" => self.lstm_sequence(desc, args)?,
            other => {
                return Err(Error::invalid("onnx export", format!("operation '{other}' has no ONNX mapping")));
            }
        })
    }

    /// Attention, decomposed: `softmax(q k^T * scale [+ mask] [+ causal mask]) v`. A bool
    /// (`u8`) mask keeps the scores where it is non-zero and puts `-inf` elsewhere (`Where`);
    /// a float mask is added. With a mask a row can lose every key: ember (as PyTorch's CPU
    /// attention) makes such rows 0, so the decomposition finds them (`ReduceMax` = `-inf`)
    /// and zeroes them too.
    fn attention(&mut self, desc: &OpExport, args: &[(&str, &Var)]) -> Result<String> {
        let operand = |i: usize| {
            args.get(i)
                .copied()
                .ok_or_else(|| Error::invalid("onnx export", format!("'{}' lacks input {i}", desc.kind)))
        };
        let (q, k, v) = (operand(0)?, operand(1)?, operand(2)?);
        let rank = k.1.shape().rank();
        if rank < 2 {
            return Err(Error::shape("onnx export", format!("'{}' of a key of shape {}", desc.kind, k.1.shape())));
        }
        let mut perm: Vec<i64> = (0..rank as i64).collect();
        perm.swap(rank - 1, rank - 2);
        let dtype = q.1.dtype();
        let kt = self.node("Transpose", &[k.0], vec![ints_attr("perm", perm)]);
        let s = self.node("MatMul", &[q.0, &kt], vec![]);
        let scale = self.const_scalar(float(desc, "scale")?, dtype)?;
        let mut s = self.node("Mul", &[&s, &scale], vec![]);
        let masked = matches!(desc.get("masked"), Some(ExportAttr::Int(1)));
        if masked {
            let m = operand(3)?;
            s = if m.1.dtype() == DType::U8 {
                let keep = self.node("Cast", &[m.0], vec![int_attr("to", data_type::BOOL as i64)]);
                let ninf = self.const_scalar(f64::NEG_INFINITY, dtype)?;
                self.node("Where", &[&keep, &s, &ninf], vec![])
            } else {
                self.node("Add", &[&s, m.0], vec![])
            };
        }
        if int(desc, "causal")? != 0 {
            let (l, n) = (q.1.shape()[q.1.shape().rank() - 2], k.1.shape()[rank - 2]);
            let mask: Vec<f64> =
                (0..l).flat_map(|i| (0..n).map(move |j| if j <= i { 0.0 } else { f64::NEG_INFINITY })).collect();
            let name = self.name("causal_mask");
            self.initializer(&name, &Tensor::from_vec(mask, [l, n])?.to_dtype(dtype))?;
            s = self.node("Add", &[&s, &name], vec![]);
        }
        let mut p = if masked {
            let top = self.node("ReduceMax", &[&s], vec![ints_attr("axes", vec![-1]), int_attr("keepdims", 1)]);
            let ninf = self.const_scalar(f64::NEG_INFINITY, dtype)?;
            let dead = self.node("Equal", &[&top, &ninf], vec![]);
            let zero = self.const_scalar(0.0, dtype)?;
            let live = self.node("Where", &[&dead, &zero, &s], vec![]);
            let p = self.node("Softmax", &[&live], vec![int_attr("axis", -1)]);
            self.node("Where", &[&dead, &zero, &p], vec![])
        } else {
            self.node("Softmax", &[&s], vec![int_attr("axis", -1)])
        };
        p = self.node("MatMul", &[&p, v.0], vec![]);
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::Writer;
    use ember_autograd::Var;
    use ember_autograd::export::OpExport;
    use ember_tensor::Tensor;

    /// Every operation the export table lists reaches its lowering: with placeholder inputs
    /// and no attributes it may fail, but never as an operation without a mapping.
    #[test]
    fn every_listed_operation_is_lowered() {
        let x = Var::new(Tensor::randn([2, 3]).expect("randn"));
        let args: Vec<(&str, &Var)> = vec![("a", &x), ("b", &x), ("c", &x), ("d", &x)];
        for (kinds, _) in crate::export::EXPORTS {
            for kind in *kinds {
                let mut w = Writer::new(false, None);
                if let Err(e) = w.lower(&OpExport::new(kind), &args, &x, None) {
                    assert!(!e.to_string().contains("has no ONNX mapping"), "{kind}: {e}");
                }
            }
        }
        let mut w = Writer::new(false, None);
        let e = w.lower(&OpExport::new("no_such_operation"), &args, &x, None).unwrap_err();
        assert!(e.to_string().contains("has no ONNX mapping"), "{e}");
    }
}
