//! [`ReduceOp`]: how `all_reduce` and `reduce_scatter` combine the ranks' values.

/// How [`all_reduce`](crate::ProcessGroup::all_reduce) and
/// [`reduce_scatter`](crate::ProcessGroup::reduce_scatter) combine the values of the ranks,
/// element by element (PyTorch's `ReduceOp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// The sum over ranks.
    Sum,
    /// The mean over ranks: the sum divided by the world size (what data-parallel training
    /// does to gradients).
    Avg,
    /// The largest value.
    Max,
    /// The smallest value.
    Min,
}

impl ReduceOp {
    /// The name used in messages: `sum`, `avg`, `max`, `min`.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Avg => "avg",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
        }
    }

    /// `Sum` for `Avg` (whose division comes after the sum), the op itself otherwise.
    pub(crate) fn summed(self) -> ReduceOp {
        if self == ReduceOp::Avg { ReduceOp::Sum } else { self }
    }

    pub(crate) fn code(self) -> u64 {
        match self {
            ReduceOp::Sum => 0,
            ReduceOp::Avg => 1,
            ReduceOp::Max => 2,
            ReduceOp::Min => 3,
        }
    }
}
