//! The comparison and reduction kinds a [`Backend`](super::Backend) computes. (The
//! elementwise kinds, [`UnaryOp`](super::UnaryOp) and [`BinaryOp`](super::BinaryOp), are
//! generated from the op tables in `ops/`.)

/// Elementwise comparisons; the result is a `u8` mask.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// `a == b`
    Eq,
    /// `a != b`
    Ne,
    /// `a < b`
    Lt,
    /// `a <= b`
    Le,
    /// `a > b`
    Gt,
    /// `a >= b`
    Ge,
}

impl CmpOp {
    /// A lowercase name for messages and profiles.
    pub fn name(self) -> &'static str {
        match self {
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
        }
    }
}

/// Reductions over a set of dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum.
    Sum,
    /// Product.
    Prod,
    /// Maximum (NaN propagates).
    Max,
    /// Minimum (NaN propagates).
    Min,
    /// Index of the first maximum along one dimension (`i64` result).
    ArgMax,
    /// Index of the first minimum along one dimension (`i64` result).
    ArgMin,
}

impl ReduceOp {
    /// A lowercase name for messages and profiles.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::ArgMax => "argmax",
            ReduceOp::ArgMin => "argmin",
        }
    }
}
