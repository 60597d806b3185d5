//! Every type named in the signatures of [`Backend`](super::Backend)'s methods, so that code
//! generated from the method list ([`backend_methods!`](crate::backend_methods)) can bring
//! them into scope with one glob import, wherever it expands.

pub use super::operands::{AdamState, RmsPropState, Target, View};
pub use crate::device::{Device, DeviceMemory};
pub use crate::dtype::{DType, Scalar};
pub use crate::error::Result;
pub use crate::layout::Layout;
pub use crate::ops::attention::Attention;
pub use crate::ops::conv::{ConvGeometry, SlidingWindow};
pub use crate::ops::loss::ClassLoss;
pub use crate::ops::lstm::LstmRun;
pub use crate::ops::optim::{AdamStep, RmsPropStep, SgdStep};
pub use crate::ops::pool::{PoolWindows, Resample};
pub use crate::ops::{BinaryOp, UnaryOp};
pub use crate::ops::{CmpOp, ReduceOp};
pub use crate::random::Distribution;
pub use crate::storage::{CpuStorage, Storage};
