//! The element types of PyTorch's storages and their conversion to ember's dtypes.

use crate::le::le_values;
use ember_tensor::{DType, Result, Tensor};

/// A storage class a checkpoint names (`torch.FloatStorage`, ...), i.e. a tensor's
/// element type in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StorageKind {
    F64,
    F32,
    I64,
    I32,
    I16,
    I8,
    U8,
    Bool,
}

impl StorageKind {
    /// The kind `torch.<name>` names, or `None` for one ember cannot hold.
    pub(crate) fn from_class(name: &str) -> Option<StorageKind> {
        Some(match name {
            "DoubleStorage" => StorageKind::F64,
            "FloatStorage" => StorageKind::F32,
            "LongStorage" => StorageKind::I64,
            "IntStorage" => StorageKind::I32,
            "ShortStorage" => StorageKind::I16,
            "CharStorage" => StorageKind::I8,
            "ByteStorage" => StorageKind::U8,
            "BoolStorage" => StorageKind::Bool,
            _ => return None,
        })
    }

    /// The storage class that holds ember's `dtype`.
    pub(crate) fn class_for(dtype: DType) -> &'static str {
        match dtype {
            DType::F64 => "DoubleStorage",
            DType::F32 => "FloatStorage",
            DType::F16 => "HalfStorage",
            DType::BF16 => "BFloat16Storage",
            DType::I64 => "LongStorage",
            DType::U8 => "ByteStorage",
        }
    }

    /// Bytes per element.
    pub(crate) fn size(self) -> usize {
        match self {
            StorageKind::F64 | StorageKind::I64 => 8,
            StorageKind::F32 | StorageKind::I32 => 4,
            StorageKind::I16 => 2,
            StorageKind::I8 | StorageKind::U8 | StorageKind::Bool => 1,
        }
    }

    /// The tensor of `shape` whose elements are those of the storage `bytes` at `indices`,
    /// in ember's dtype for this kind: integers widen to `i64`, booleans become `u8`
    /// (ember's mask dtype). The indices must lie inside the storage.
    pub(crate) fn gather(self, bytes: &[u8], indices: &Elements, shape: Vec<usize>) -> Result<Tensor> {
        fn pick<T: Copy>(mut all: Vec<T>, indices: &Elements) -> Vec<T> {
            match indices {
                Elements::Run { start, len } => {
                    all.truncate(start + len);
                    all.drain(..*start);
                    all
                }
                Elements::At(at) => at.iter().map(|&i| all[i]).collect(),
            }
        }
        match self {
            StorageKind::F64 => Tensor::from_vec(pick(le_values(bytes, f64::from_le_bytes), indices), shape),
            StorageKind::F32 => Tensor::from_vec(pick(le_values(bytes, f32::from_le_bytes), indices), shape),
            StorageKind::I64 => Tensor::from_vec(pick(le_values(bytes, i64::from_le_bytes), indices), shape),
            StorageKind::I32 => {
                let v: Vec<i64> = le_values(bytes, i32::from_le_bytes).into_iter().map(i64::from).collect();
                Tensor::from_vec(pick(v, indices), shape)
            }
            StorageKind::I16 => {
                let v: Vec<i64> = le_values(bytes, i16::from_le_bytes).into_iter().map(i64::from).collect();
                Tensor::from_vec(pick(v, indices), shape)
            }
            StorageKind::I8 => {
                let v: Vec<i64> = bytes.iter().map(|&b| i64::from(b as i8)).collect();
                Tensor::from_vec(pick(v, indices), shape)
            }
            StorageKind::U8 | StorageKind::Bool => Tensor::from_vec(pick(bytes.to_vec(), indices), shape),
        }
    }
}

/// Which elements of a storage a tensor holds, in the tensor's row-major order.
pub(crate) enum Elements {
    /// `len` consecutive elements from `start`: a contiguous tensor.
    Run { start: usize, len: usize },
    /// The elements at these positions: a strided view.
    At(Vec<usize>),
}
