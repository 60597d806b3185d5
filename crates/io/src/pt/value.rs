//! [`PtValue`]: the Python values a PyTorch checkpoint is made of.

use ember_tensor::Tensor;

/// A Python value read from or written to a PyTorch checkpoint (a `torch.save` file): the
/// types that a module's `state_dict()` and an optimizer's `state_dict()` are built from.
///
/// ```
/// use ember_io::pt::PtValue;
/// let group = PtValue::Dict(vec![(PtValue::from("lr"), PtValue::Float(0.1))]);
/// assert_eq!(group.get("lr").and_then(PtValue::as_f64), Some(0.1));
/// ```
#[derive(Clone, Debug)]
pub enum PtValue {
    /// `None`.
    None,
    /// `True` or `False`.
    Bool(bool),
    /// An `int` that fits in 64 bits.
    Int(i64),
    /// A `float`.
    Float(f64),
    /// A `str`.
    Str(String),
    /// A `tuple`.
    Tuple(Vec<PtValue>),
    /// A `list`.
    List(Vec<PtValue>),
    /// A `dict` or `OrderedDict`, its entries in the file's order.
    Dict(Vec<(PtValue, PtValue)>),
    /// A `torch.Tensor` (or `nn.Parameter`), as a contiguous ember tensor.
    Tensor(Tensor),
}

impl PtValue {
    /// The value under the string key `key`, if this is a dict that has one.
    pub fn get(&self, key: &str) -> Option<&PtValue> {
        self.as_dict()?.iter().find(|(k, _)| k.as_str() == Some(key)).map(|(_, v)| v)
    }

    /// The value under the integer key `key` (optimizer state is keyed by parameter index).
    pub fn get_index(&self, key: i64) -> Option<&PtValue> {
        self.as_dict()?.iter().find(|(k, _)| matches!(k, PtValue::Int(i) if *i == key)).map(|(_, v)| v)
    }

    /// The entries of a dict.
    pub fn as_dict(&self) -> Option<&[(PtValue, PtValue)]> {
        match self {
            PtValue::Dict(entries) => Some(entries),
            _ => None,
        }
    }

    /// The items of a list or a tuple.
    pub fn as_items(&self) -> Option<&[PtValue]> {
        match self {
            PtValue::List(items) | PtValue::Tuple(items) => Some(items),
            _ => None,
        }
    }

    /// A string's text.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            PtValue::Str(s) => Some(s),
            _ => None,
        }
    }

    /// A number (an `int`, a `float`, a `bool` as 0 or 1, or a one-element tensor, as
    /// PyTorch keeps Adam's `step`) as `f64`.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            PtValue::Float(v) => Some(*v),
            PtValue::Int(v) => Some(*v as f64),
            PtValue::Bool(b) => Some(f64::from(u8::from(*b))),
            PtValue::Tensor(t) if t.numel() == 1 => t.to_vec_f64().ok()?.first().copied(),
            _ => None,
        }
    }

    /// A `bool`.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            PtValue::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// A tensor.
    pub fn as_tensor(&self) -> Option<&Tensor> {
        match self {
            PtValue::Tensor(t) => Some(t),
            _ => None,
        }
    }

    /// The Python type's name, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            PtValue::None => "None",
            PtValue::Bool(_) => "bool",
            PtValue::Int(_) => "int",
            PtValue::Float(_) => "float",
            PtValue::Str(_) => "str",
            PtValue::Tuple(_) => "tuple",
            PtValue::List(_) => "list",
            PtValue::Dict(_) => "dict",
            PtValue::Tensor(_) => "Tensor",
        }
    }
}

impl From<&str> for PtValue {
    fn from(s: &str) -> PtValue {
        PtValue::Str(s.to_string())
    }
}

impl From<Tensor> for PtValue {
    fn from(t: Tensor) -> PtValue {
        PtValue::Tensor(t)
    }
}
