//! The subset of the ONNX protobuf schema that ember reads and writes, written by hand with
//! `prost` derives (no `protoc` at build time). Field numbers are those of `onnx.proto3` for
//! **IR version 8** (ONNX 1.10+; opsets up to 17 and beyond use it unchanged). Fields ember
//! does not model (functions, sparse tensors, training info, sub-graph attributes, quantisation
//! annotations) are skipped by the decoder; a node that needs one of them is rejected when the
//! graph is built, because its operator or attribute type is not supported.
//!
//! `oneof` fields of the schema (`TypeProto.value`, `Dimension.value`) are written as
//! optional fields: on the wire the two are the same.

/// The ONNX IR version these structures follow and that [`export`](mod@crate::export) writes.
pub const IR_VERSION: i64 = 8;

/// `TensorProto.DataType` values ember knows.
pub mod data_type {
    /// 32-bit float.
    pub const FLOAT: i32 = 1;
    /// Unsigned byte.
    pub const UINT8: i32 = 2;
    /// 32-bit signed integer.
    pub const INT32: i32 = 6;
    /// 64-bit signed integer.
    pub const INT64: i32 = 7;
    /// Boolean (one byte per value in `raw_data`, `int32_data` otherwise).
    pub const BOOL: i32 = 9;
    /// IEEE half-precision float.
    pub const FLOAT16: i32 = 10;
    /// 64-bit float.
    pub const DOUBLE: i32 = 11;
    /// bfloat16.
    pub const BFLOAT16: i32 = 16;
}

/// `AttributeProto.AttributeType` values.
pub mod attribute_type {
    /// A float.
    pub const FLOAT: i32 = 1;
    /// An integer.
    pub const INT: i32 = 2;
    /// A byte string.
    pub const STRING: i32 = 3;
    /// A tensor.
    pub const TENSOR: i32 = 4;
    /// A sub-graph (not supported).
    pub const GRAPH: i32 = 5;
    /// A list of floats.
    pub const FLOATS: i32 = 6;
    /// A list of integers.
    pub const INTS: i32 = 7;
    /// A list of byte strings.
    pub const STRINGS: i32 = 8;
}

/// A whole model: the graph and the operator sets it uses.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelProto {
    /// The IR version the file follows.
    #[prost(int64, tag = "1")]
    pub ir_version: i64,
    /// The operator sets (domain and version) the nodes use.
    #[prost(message, repeated, tag = "8")]
    pub opset_import: Vec<OperatorSetIdProto>,
    /// The tool that wrote the file.
    #[prost(string, tag = "2")]
    pub producer_name: String,
    /// Its version.
    #[prost(string, tag = "3")]
    pub producer_version: String,
    /// The model's namespace.
    #[prost(string, tag = "4")]
    pub domain: String,
    /// The model's own version.
    #[prost(int64, tag = "5")]
    pub model_version: i64,
    /// Free text.
    #[prost(string, tag = "6")]
    pub doc_string: String,
    /// The computation.
    #[prost(message, optional, tag = "7")]
    pub graph: Option<GraphProto>,
}

/// An operator set: a domain (`""` or `ai.onnx` for the standard operators) and a version.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OperatorSetIdProto {
    /// The domain.
    #[prost(string, tag = "1")]
    pub domain: String,
    /// The opset version.
    #[prost(int64, tag = "2")]
    pub version: i64,
}

/// A graph: nodes in topological order, initializers, inputs and outputs.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GraphProto {
    /// The nodes.
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeProto>,
    /// The graph's name.
    #[prost(string, tag = "2")]
    pub name: String,
    /// Named constant tensors (the weights).
    #[prost(message, repeated, tag = "5")]
    pub initializer: Vec<TensorProto>,
    /// Free text.
    #[prost(string, tag = "10")]
    pub doc_string: String,
    /// The inputs (older files list initializers here too).
    #[prost(message, repeated, tag = "11")]
    pub input: Vec<ValueInfoProto>,
    /// The outputs.
    #[prost(message, repeated, tag = "12")]
    pub output: Vec<ValueInfoProto>,
    /// Types of intermediate values (informative).
    #[prost(message, repeated, tag = "13")]
    pub value_info: Vec<ValueInfoProto>,
}

/// One operator application.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeProto {
    /// Input value names (`""`: an optional input left out).
    #[prost(string, repeated, tag = "1")]
    pub input: Vec<String>,
    /// Output value names.
    #[prost(string, repeated, tag = "2")]
    pub output: Vec<String>,
    /// The node's name (for messages).
    #[prost(string, tag = "3")]
    pub name: String,
    /// The operator.
    #[prost(string, tag = "4")]
    pub op_type: String,
    /// The attributes.
    #[prost(message, repeated, tag = "5")]
    pub attribute: Vec<AttributeProto>,
    /// Free text.
    #[prost(string, tag = "6")]
    pub doc_string: String,
    /// The operator's domain (`""`: the standard one).
    #[prost(string, tag = "7")]
    pub domain: String,
}

/// A named attribute value; `type` says which field holds it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AttributeProto {
    /// The attribute's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// A reference to a function attribute (not supported).
    #[prost(string, tag = "21")]
    pub ref_attr_name: String,
    /// Free text.
    #[prost(string, tag = "13")]
    pub doc_string: String,
    /// Which value field is set (see [`attribute_type`]).
    #[prost(int32, tag = "20")]
    pub r#type: i32,
    /// A float value.
    #[prost(float, tag = "2")]
    pub f: f32,
    /// An integer value.
    #[prost(int64, tag = "3")]
    pub i: i64,
    /// A string value.
    #[prost(bytes = "vec", tag = "4")]
    pub s: Vec<u8>,
    /// A tensor value.
    #[prost(message, optional, tag = "5")]
    pub t: Option<TensorProto>,
    /// A list of floats.
    #[prost(float, repeated, tag = "7")]
    pub floats: Vec<f32>,
    /// A list of integers.
    #[prost(int64, repeated, tag = "8")]
    pub ints: Vec<i64>,
    /// A list of strings.
    #[prost(bytes = "vec", repeated, tag = "9")]
    pub strings: Vec<Vec<u8>>,
}

/// The name and type of a graph input, output or intermediate value.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueInfoProto {
    /// The value's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its type.
    #[prost(message, optional, tag = "2")]
    pub r#type: Option<TypeProto>,
    /// Free text.
    #[prost(string, tag = "3")]
    pub doc_string: String,
}

/// A value's type; only tensor types are modelled.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TypeProto {
    /// A tensor type (the `tensor_type` case of the schema's `oneof value`).
    #[prost(message, optional, tag = "1")]
    pub tensor_type: Option<TypeProtoTensor>,
    /// Free text.
    #[prost(string, tag = "6")]
    pub denotation: String,
}

/// A tensor type: element type and (possibly symbolic) shape.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TypeProtoTensor {
    /// A [`data_type`] value.
    #[prost(int32, tag = "1")]
    pub elem_type: i32,
    /// The shape, if known.
    #[prost(message, optional, tag = "2")]
    pub shape: Option<TensorShapeProto>,
}

/// A shape: one entry per dimension.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorShapeProto {
    /// The dimensions.
    #[prost(message, repeated, tag = "1")]
    pub dim: Vec<Dimension>,
}

/// A dimension: a size, a symbolic name, or neither (unknown).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Dimension {
    /// A fixed size.
    #[prost(int64, optional, tag = "1")]
    pub dim_value: Option<i64>,
    /// A symbolic size (`"batch"`).
    #[prost(string, optional, tag = "2")]
    pub dim_param: Option<String>,
    /// Free text.
    #[prost(string, tag = "3")]
    pub denotation: String,
}

/// A tensor: dims, element type and data, inline (typed fields or `raw_data`, little
/// endian) or in an external file (`data_location` = 1, with `location`, `offset` and
/// `length` in `external_data`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorProto {
    /// The shape.
    #[prost(int64, repeated, tag = "1")]
    pub dims: Vec<i64>,
    /// A [`data_type`] value.
    #[prost(int32, tag = "2")]
    pub data_type: i32,
    /// Float data.
    #[prost(float, repeated, tag = "4")]
    pub float_data: Vec<f32>,
    /// int32, uint8, bool (and other narrow types) data.
    #[prost(int32, repeated, tag = "5")]
    pub int32_data: Vec<i32>,
    /// int64 data.
    #[prost(int64, repeated, tag = "7")]
    pub int64_data: Vec<i64>,
    /// The tensor's name.
    #[prost(string, tag = "8")]
    pub name: String,
    /// Free text.
    #[prost(string, tag = "12")]
    pub doc_string: String,
    /// The data as little-endian bytes.
    #[prost(bytes = "vec", tag = "9")]
    pub raw_data: Vec<u8>,
    /// Double data.
    #[prost(double, repeated, tag = "10")]
    pub double_data: Vec<f64>,
    /// Where external data lives (`location`, `offset`, `length`).
    #[prost(message, repeated, tag = "13")]
    pub external_data: Vec<StringStringEntryProto>,
    /// 0: inline; 1: external.
    #[prost(int32, tag = "14")]
    pub data_location: i32,
}

/// A key-value pair.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StringStringEntryProto {
    /// The key.
    #[prost(string, tag = "1")]
    pub key: String,
    /// The value.
    #[prost(string, tag = "2")]
    pub value: String,
}
