//! The values flowing through a graph: float tensors as `Var`s (differentiable), integer
//! and boolean tensors on the host (shapes, indices, masks), as exporters compute shapes
//! inside the graph.

use ember_autograd::Var;
use ember_tensor::{DType, Error, Result, Tensor};

/// A value in a running graph.
#[derive(Clone, Debug)]
pub enum Value {
    /// A float tensor (f32, f64, f16 or bf16), with its graph.
    Float(Var),
    /// An integer or boolean tensor.
    Int(IntTensor),
}

/// A host integer tensor: shape arithmetic, indices and masks. Booleans are 0 and 1 with
/// `is_bool` set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntTensor {
    /// The shape.
    pub shape: Vec<usize>,
    /// The values in row-major order.
    pub data: Vec<i64>,
    /// Whether this is a boolean tensor.
    pub is_bool: bool,
}

impl IntTensor {
    /// An int64 tensor; `data.len()` must be the shape's product.
    pub fn new(shape: Vec<usize>, data: Vec<i64>) -> Result<IntTensor> {
        if shape.iter().product::<usize>() != data.len() {
            return Err(Error::shape("IntTensor", format!("{} values do not fill shape {shape:?}", data.len())));
        }
        Ok(IntTensor { shape, data, is_bool: false })
    }

    /// A 1-d tensor of `data`.
    pub fn vector(data: Vec<i64>) -> IntTensor {
        IntTensor { shape: vec![data.len()], data, is_bool: false }
    }

    /// A 0-d tensor.
    pub fn scalar(v: i64) -> IntTensor {
        IntTensor { shape: Vec::new(), data: vec![v], is_bool: false }
    }

    /// As an ember tensor (`i64`, or `u8` for booleans).
    pub fn to_tensor(&self) -> Result<Tensor> {
        if self.is_bool {
            Tensor::from_vec(self.data.iter().map(|&v| (v != 0) as u8).collect::<Vec<u8>>(), self.shape.clone())
        } else {
            Tensor::from_vec(self.data.clone(), self.shape.clone())
        }
    }

    /// From an integer ember tensor.
    pub fn from_tensor(t: &Tensor) -> Result<IntTensor> {
        let shape = t.shape().dims().to_vec();
        match t.dtype() {
            DType::I64 => Ok(IntTensor { shape, data: t.to_vec::<i64>()?, is_bool: false }),
            DType::U8 => {
                Ok(IntTensor { shape, data: t.to_vec::<u8>()?.into_iter().map(i64::from).collect(), is_bool: false })
            }
            d => Err(Error::dtype("IntTensor", format!("expected an integer tensor, got {d}"))),
        }
    }
}

impl Value {
    /// The shape.
    pub fn shape(&self) -> Vec<usize> {
        match self {
            Value::Float(v) => v.shape().dims().to_vec(),
            Value::Int(t) => t.shape.clone(),
        }
    }

    /// Wraps a tensor: floats as a constant `Var`, integers on the host.
    pub fn from_tensor(t: &Tensor) -> Result<Value> {
        if t.dtype().is_float() {
            Ok(Value::Float(Var::new(t.clone())))
        } else {
            Ok(Value::Int(IntTensor::from_tensor(t)?))
        }
    }

    /// As an ember `Var` (integers become a constant `i64`/`u8` one).
    pub fn to_var(&self) -> Result<Var> {
        match self {
            Value::Float(v) => Ok(v.clone()),
            Value::Int(t) => Ok(Var::new(t.to_tensor()?)),
        }
    }
}
