//! The graph IR that every front-end targets, and its interpreter.
//!
//! A front-end (the ONNX reader in [`crate::import`]; a PNNX reader can do the same) parses
//! its file into a [`Graph`]: named values, [`Node`]s with an operator name and
//! [`Attr`]ibutes, initializer tensors, and typed inputs and outputs. [`Graph::build`]
//! checks it (every operator and attribute supported, every input defined, no cycles, no
//! value written twice) and orders its nodes; the result is a [`GraphModel`] that runs on
//! [`Var`](ember_autograd::Var)s, so it can be differentiated and fine-tuned like any
//! [`Module`](ember_nn::Module).
//!
//! The operator set is ONNX's (opset 17 names, attributes and input conventions): a
//! second front-end lowers its operators to those (PNNX's `nn.Conv2d` to `Conv` with
//! `kernel_shape`, `strides`, `pads`, ...). [`supported_ops`] lists them.
//!
//! ```
//! use ember_onnx::ir::{Attr, Graph, Node, ValueInfo};
//! use ember_autograd::Var;
//! use ember_nn::Module;
//! use ember_tensor::{DType, Tensor};
//! let mut g = Graph::new("tiny");
//! g.inputs.push(ValueInfo::new("x", DType::F32, &[None, Some(2)]));
//! g.initializers.push(("w".into(), Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2])?));
//! g.nodes.push(Node::new("mm", "MatMul", &["x", "w"], &["h"]));
//! g.nodes.push(Node::new("act", "Softmax", &["h"], &["y"]).with_attrs([("axis", Attr::Int(-1))]));
//! g.outputs.push(ValueInfo::new("y", DType::F32, &[None, Some(2)]));
//! let model = g.build()?;
//! let y = model.forward(&Var::new(Tensor::from_vec(vec![1.0f32, -1.0], [1, 2])?))?;
//! assert_eq!(y.value().to_vec::<f32>()?, vec![0.5, 0.5]); // softmax of [-2, -2]
//! assert_eq!(model.named_parameters()[0].0, "w");
//! # Ok::<(), ember_tensor::Error>(())
//! ```

mod build;
mod model;
mod value;

pub use build::supported_ops;
pub use model::GraphModel;
pub use value::{IntTensor, Value};

use ember_tensor::{DType, Tensor};

/// An attribute value.
#[derive(Clone, Debug)]
pub enum Attr {
    /// An integer.
    Int(i64),
    /// A float.
    Float(f32),
    /// A string.
    String(String),
    /// A list of integers.
    Ints(Vec<i64>),
    /// A list of floats.
    Floats(Vec<f32>),
    /// A list of strings (a recurrent operator's activations).
    Strings(Vec<String>),
    /// A tensor (a `Constant`'s value).
    Tensor(Value),
}

/// One operator application: `outputs = op_type(inputs; attrs)`.
#[derive(Clone, Debug)]
pub struct Node {
    /// The node's name, used in error messages (may be empty).
    pub name: String,
    /// The operator, by its ONNX name (`Conv`, `MatMul`, ...).
    pub op_type: String,
    /// Input value names; `""` leaves an optional input out.
    pub inputs: Vec<String>,
    /// Output value names.
    pub outputs: Vec<String>,
    /// The attributes, by name.
    pub attrs: Vec<(String, Attr)>,
}

impl Node {
    /// A node without attributes.
    pub fn new(name: &str, op_type: &str, inputs: &[&str], outputs: &[&str]) -> Node {
        Node {
            name: name.into(),
            op_type: op_type.into(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: outputs.iter().map(|s| s.to_string()).collect(),
            attrs: Vec::new(),
        }
    }

    /// The node with `attrs`.
    pub fn with_attrs(mut self, attrs: impl IntoIterator<Item = (impl Into<String>, Attr)>) -> Node {
        self.attrs.extend(attrs.into_iter().map(|(k, v)| (k.into(), v)));
        self
    }

    /// `name (op_type)`, the way errors name a node.
    pub fn label(&self) -> String {
        if self.name.is_empty() {
            format!("node of type {}", self.op_type)
        } else {
            format!("node '{}' ({})", self.name, self.op_type)
        }
    }

    /// The attribute `name`, if set.
    pub fn attr(&self, name: &str) -> Option<&Attr> {
        self.attrs.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }
}

/// A graph input or output: name, element type and shape (`None`: a dynamic dimension).
#[derive(Clone, Debug)]
pub struct ValueInfo {
    /// The value's name.
    pub name: String,
    /// The element type, if declared.
    pub dtype: Option<DType>,
    /// The shape, if declared; `None` entries are dynamic (`batch`).
    pub shape: Option<Vec<Option<usize>>>,
}

impl ValueInfo {
    /// A value of `dtype` and `shape` (`None`: dynamic).
    pub fn new(name: &str, dtype: DType, shape: &[Option<usize>]) -> ValueInfo {
        ValueInfo { name: name.into(), dtype: Some(dtype), shape: Some(shape.to_vec()) }
    }
}

/// A whole graph as a front-end produces it; [`Graph::build`] checks and orders it.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    /// The graph's name.
    pub name: String,
    /// What the caller passes in, in order.
    pub inputs: Vec<ValueInfo>,
    /// What the graph returns, in order.
    pub outputs: Vec<ValueInfo>,
    /// Named weights. Float initializers become parameters (requires grad) unless only
    /// used as running statistics (`BatchNormalization` inputs 3 and 4), which become
    /// buffers; integer ones are constants.
    pub initializers: Vec<(String, Tensor)>,
    /// The nodes, in any order (build sorts them).
    pub nodes: Vec<Node>,
}

impl Graph {
    /// An empty graph called `name`.
    pub fn new(name: &str) -> Graph {
        Graph { name: name.into(), ..Graph::default() }
    }
}
