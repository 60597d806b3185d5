//! The ONNX front-end: a `.onnx` file (protobuf) into the [`ir`](crate::ir) graph.
//!
//! Nothing is allocated from a size the file declares before the data is known to be there:
//! tensor dims are multiplied with overflow checks and compared with the bytes actually
//! present (inline or in the external file) first, so a corrupt or hostile file gives an
//! error, never a huge allocation or a panic.

use crate::ir::{Attr, Graph, Node, Value, ValueInfo};
use crate::proto::{self, ModelProto, TensorProto, attribute_type, data_type};
use ember_tensor::{DType, Error, Result, Tensor, bf16, f16};
use prost::Message;
use std::path::{Path, PathBuf};

/// The opset versions of the default domain that the importer reads.
pub const OPSETS: std::ops::RangeInclusive<i64> = 13..=20;

/// Where the bytes came from, for messages and external data.
struct Source {
    path: PathBuf,
    dir: Option<PathBuf>,
}

impl Source {
    fn err(&self, msg: impl Into<String>) -> Error {
        Error::format(self.path.clone(), msg)
    }
}

/// Reads a `.onnx` file into a checked, runnable graph: structure, operators and
/// attributes (see [`Graph::build`]), then shapes (a run on zeros of the declared input
/// shapes, dynamic dimensions set to 1). External data files are looked up next to it.
pub fn load(path: impl AsRef<Path>) -> Result<crate::GraphModel> {
    let path = path.as_ref();
    let model = read_graph(path)?.build().map_err(|e| Error::format(path, e.to_string()))?;
    checked(model).map_err(|e| Error::format(path, e.to_string()))
}

/// Reads ONNX bytes (a model without external data) into a runnable graph.
pub fn load_bytes(bytes: &[u8]) -> Result<crate::GraphModel> {
    checked(parse(bytes, &Source { path: "<onnx bytes>".into(), dir: None })?.build()?)
}

/// The most input elements the load-time shape check allocates (per input); a file
/// declaring more is checked when it runs instead.
const CHECK_LIMIT: usize = 1 << 24;

/// Runs [`GraphModel::check_shapes`](crate::GraphModel::check_shapes) when every input
/// declares its shape, of a reasonable size (the declared sizes come from the file).
fn checked(model: crate::GraphModel) -> Result<crate::GraphModel> {
    let small = |s: &Vec<Option<usize>>| {
        s.iter().try_fold(1usize, |n, d| n.checked_mul(d.unwrap_or(1))).is_some_and(|n| n <= CHECK_LIMIT)
    };
    if model.inputs().iter().all(|i| i.shape.as_ref().is_some_and(small)) {
        model.check_shapes()?;
    }
    Ok(model)
}

/// Reads a `.onnx` file into the IR without building it (to inspect or edit it first).
pub fn read_graph(path: impl AsRef<Path>) -> Result<Graph> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    parse(&bytes, &Source { path: path.into(), dir: path.parent().map(Path::to_path_buf) })
}

fn parse(bytes: &[u8], src: &Source) -> Result<Graph> {
    let model = ModelProto::decode(bytes).map_err(|e| src.err(format!("not a valid ONNX protobuf: {e}")))?;
    let opset = model
        .opset_import
        .iter()
        .find(|o| o.domain.is_empty() || o.domain == "ai.onnx")
        .map(|o| o.version)
        .ok_or_else(|| src.err("the model imports no version of the default operator set"))?;
    if !OPSETS.contains(&opset) {
        return Err(src.err(format!(
            "opset {opset} is not supported (ember reads opsets {} to {})",
            OPSETS.start(),
            OPSETS.end()
        )));
    }
    let g = model.graph.ok_or_else(|| src.err("the model has no graph"))?;
    let mut graph = Graph::new(&g.name);
    for t in &g.initializer {
        graph
            .initializers
            .push((t.name.clone(), tensor(t, src).map_err(|e| src.err(format!("initializer '{}': {e}", t.name)))?));
    }
    graph.inputs = g.input.iter().map(|v| value_info(v, src)).collect::<Result<_>>()?;
    graph.outputs = g.output.iter().map(|v| value_info(v, src)).collect::<Result<_>>()?;
    for n in &g.node {
        graph.nodes.push(node(n, src)?);
    }
    Ok(graph)
}

fn node(n: &proto::NodeProto, src: &Source) -> Result<Node> {
    let mut out = Node {
        name: n.name.clone(),
        op_type: n.op_type.clone(),
        inputs: n.input.clone(),
        outputs: n.output.clone(),
        attrs: Vec::with_capacity(n.attribute.len()),
    };
    if !n.domain.is_empty() && n.domain != "ai.onnx" {
        return Err(src.err(format!("{}: operator domain '{}' is not supported", out.label(), n.domain)));
    }
    for a in &n.attribute {
        let bad = |why: &str| src.err(format!("{}: attribute '{}' {why}", out.label(), a.name));
        let v = match a.r#type {
            attribute_type::FLOAT => Attr::Float(a.f),
            attribute_type::INT => Attr::Int(a.i),
            attribute_type::STRING => Attr::String(String::from_utf8(a.s.clone()).map_err(|_| bad("is not UTF-8"))?),
            attribute_type::FLOATS => Attr::Floats(a.floats.clone()),
            attribute_type::INTS => Attr::Ints(a.ints.clone()),
            attribute_type::STRINGS => Attr::Strings(
                a.strings
                    .iter()
                    .map(|s| String::from_utf8(s.clone()))
                    .collect::<std::result::Result<_, _>>()
                    .map_err(|_| bad("is not UTF-8"))?,
            ),
            attribute_type::TENSOR => {
                let t = a.t.as_ref().ok_or_else(|| bad("has no tensor"))?;
                Attr::Tensor(Value::from_tensor(&tensor(t, src).map_err(|e| bad(&e.to_string()))?)?)
            }
            attribute_type::GRAPH => return Err(bad("is a sub-graph, which is not supported")),
            t => return Err(bad(&format!("has attribute type {t}, which is not supported"))),
        };
        out.attrs.push((a.name.clone(), v));
    }
    Ok(out)
}

fn dtype_of(t: i32) -> Option<DType> {
    match t {
        data_type::FLOAT => Some(DType::F32),
        data_type::DOUBLE => Some(DType::F64),
        data_type::FLOAT16 => Some(DType::F16),
        data_type::BFLOAT16 => Some(DType::BF16),
        data_type::INT64 | data_type::INT32 => Some(DType::I64),
        data_type::UINT8 | data_type::BOOL => Some(DType::U8),
        _ => None,
    }
}

fn value_info(v: &proto::ValueInfoProto, src: &Source) -> Result<ValueInfo> {
    let Some(tt) = v.r#type.as_ref().and_then(|t| t.tensor_type.as_ref()) else {
        return Ok(ValueInfo { name: v.name.clone(), dtype: None, shape: None });
    };
    let dtype = dtype_of(tt.elem_type);
    if dtype.is_none() && tt.elem_type != 0 {
        return Err(src.err(format!("value '{}' has element type {}, which is not supported", v.name, tt.elem_type)));
    }
    let shape = tt
        .shape
        .as_ref()
        .map(|s| s.dim.iter().map(|d| d.dim_value.and_then(|x| usize::try_from(x).ok())).collect::<Vec<_>>());
    Ok(ValueInfo { name: v.name.clone(), dtype, shape })
}

/// The tensor's data as bytes read from its external file, checked against the file's size.
fn external(t: &TensorProto, src: &Source, want: usize) -> Result<Vec<u8>> {
    let get = |k: &str| t.external_data.iter().find(|e| e.key == k).map(|e| e.value.as_str());
    let location = get("location").ok_or_else(|| src.err("external data without a location"))?;
    let dir = src.dir.as_ref().ok_or_else(|| {
        src.err(format!("external data '{location}' cannot be read from bytes (load the file by path)"))
    })?;
    let rel = Path::new(location);
    if rel.is_absolute() || rel.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
        return Err(src.err(format!("external data location '{location}' must stay inside the model's folder")));
    }
    let file = dir.join(rel);
    let num = |k: &str| -> Result<u64> {
        get(k).map_or(Ok(0), |v| {
            v.parse::<u64>().map_err(|_| src.err(format!("external data {k} '{v}' is not a number")))
        })
    };
    let (offset, length) = (num("offset")?, num("length")?);
    let size = std::fs::metadata(&file).map_err(|e| Error::io(&file, e))?.len();
    let length = if get("length").is_some() { length } else { size.saturating_sub(offset) };
    if length != want as u64 {
        return Err(src.err(format!("external data '{location}' holds {length} bytes, the tensor needs {want}")));
    }
    if offset.checked_add(length).is_none_or(|end| end > size) {
        return Err(src.err(format!(
            "external data '{location}' is {size} bytes, shorter than offset {offset} + length {length}"
        )));
    }
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(&file).map_err(|e| Error::io(&file, e))?;
    f.seek(SeekFrom::Start(offset)).map_err(|e| Error::io(&file, e))?;
    let mut buf = vec![0u8; want];
    f.read_exact(&mut buf).map_err(|e| Error::io(&file, e))?;
    Ok(buf)
}

/// Decodes a tensor, checking its declared size against the data present.
fn tensor(t: &TensorProto, src: &Source) -> Result<Tensor> {
    if dtype_of(t.data_type).is_none() {
        return Err(Error::invalid("onnx", format!("data type {} is not supported", t.data_type)));
    }
    let mut dims = Vec::with_capacity(t.dims.len());
    let mut numel: usize = 1;
    for &d in &t.dims {
        let d = usize::try_from(d).map_err(|_| Error::shape("onnx", format!("negative dimension in {:?}", t.dims)))?;
        numel = numel.checked_mul(d).ok_or_else(|| Error::shape("onnx", format!("dims {:?} overflow", t.dims)))?;
        dims.push(d);
    }
    let width = match t.data_type {
        data_type::FLOAT | data_type::INT32 => 4,
        data_type::DOUBLE | data_type::INT64 => 8,
        data_type::FLOAT16 | data_type::BFLOAT16 => 2,
        _ => 1,
    };
    let bytes_needed =
        numel.checked_mul(width).ok_or_else(|| Error::shape("onnx", format!("dims {:?} overflow", t.dims)))?;
    let external_bytes = if t.data_location == 1 { Some(external(t, src, bytes_needed)?) } else { None };
    let raw: Option<&[u8]> = match &external_bytes {
        Some(b) => Some(b),
        None if !t.raw_data.is_empty() => {
            if t.raw_data.len() != bytes_needed {
                return Err(Error::shape(
                    "onnx",
                    format!("raw_data has {} bytes, dims {:?} need {bytes_needed}", t.raw_data.len(), t.dims),
                ));
            }
            Some(&t.raw_data)
        }
        None => None,
    };
    let count = |n: usize| -> Result<()> {
        if n != numel {
            return Err(Error::shape("onnx", format!("{n} values stored, dims {:?} need {numel}", t.dims)));
        }
        Ok(())
    };
    let le = |chunk: &[u8]| -> [u8; 8] {
        let mut b = [0u8; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        b
    };
    match t.data_type {
        data_type::FLOAT => {
            let v: Vec<f32> = match raw {
                Some(r) => r.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
                None => {
                    count(t.float_data.len())?;
                    t.float_data.clone()
                }
            };
            Tensor::from_vec(v, dims)
        }
        data_type::DOUBLE => {
            let v: Vec<f64> = match raw {
                Some(r) => r.chunks_exact(8).map(|c| f64::from_le_bytes(le(c))).collect(),
                None => {
                    count(t.double_data.len())?;
                    t.double_data.clone()
                }
            };
            Tensor::from_vec(v, dims)
        }
        data_type::INT64 => {
            let v: Vec<i64> = match raw {
                Some(r) => r.chunks_exact(8).map(|c| i64::from_le_bytes(le(c))).collect(),
                None => {
                    count(t.int64_data.len())?;
                    t.int64_data.clone()
                }
            };
            Tensor::from_vec(v, dims)
        }
        data_type::FLOAT16 => {
            let bits = sixteen_bit(raw, &t.int32_data, count)?;
            Tensor::from_vec(bits.into_iter().map(f16::from_bits).collect::<Vec<_>>(), dims)
        }
        data_type::BFLOAT16 => {
            let bits = sixteen_bit(raw, &t.int32_data, count)?;
            Tensor::from_vec(bits.into_iter().map(bf16::from_bits).collect::<Vec<_>>(), dims)
        }
        data_type::INT32 => {
            let v: Vec<i64> = match raw {
                Some(r) => r.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64).collect(),
                None => {
                    count(t.int32_data.len())?;
                    t.int32_data.iter().map(|&x| x as i64).collect()
                }
            };
            Tensor::from_vec(v, dims)
        }
        _ => {
            let v: Vec<u8> = match raw {
                Some(r) => r.to_vec(),
                None => {
                    count(t.int32_data.len())?;
                    t.int32_data.iter().map(|&x| x as u8).collect()
                }
            };
            Tensor::from_vec(v, dims)
        }
    }
}

/// The bit patterns of a FLOAT16 or BFLOAT16 tensor: little-endian pairs of bytes in
/// `raw`, or else one pattern in the low 16 bits of each `int32_data` entry (ONNX's layout
/// for both; higher bits are ignored, as ONNX Runtime ignores them). `count` checks the
/// number of typed values.
fn sixteen_bit(raw: Option<&[u8]>, typed: &[i32], count: impl Fn(usize) -> Result<()>) -> Result<Vec<u16>> {
    Ok(match raw {
        Some(r) => r.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect(),
        None => {
            count(typed.len())?;
            typed.iter().map(|&x| x as u16).collect()
        }
    })
}
