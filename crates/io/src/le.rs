//! Little-endian element bytes, the layout of tensor data in both safetensors files and
//! `torch.save` storage records: one place below both formats, so neither reaches into the
//! other.

use ember_tensor::{DType, Result, Tensor};

/// `t`'s elements as little-endian bytes, in row-major order.
pub(crate) fn le_bytes(t: &Tensor) -> Result<Vec<u8>> {
    Ok(match t.dtype() {
        DType::F32 => t.to_vec::<f32>()?.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::F64 => t.to_vec::<f64>()?.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::I64 => t.to_vec::<i64>()?.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::U8 => t.to_vec::<u8>()?,
        DType::F16 => t.to_vec::<ember_tensor::f16>()?.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::BF16 => t.to_vec::<ember_tensor::bf16>()?.iter().flat_map(|v| v.to_le_bytes()).collect(),
    })
}

/// The little-endian values of `N` bytes each in `bytes` (a trailing partial value is
/// ignored).
pub(crate) fn le_values<T, const N: usize>(bytes: &[u8], from: fn([u8; N]) -> T) -> Vec<T> {
    bytes
        .chunks_exact(N)
        .map(|c| {
            let mut a = [0u8; N];
            a.copy_from_slice(c);
            from(a)
        })
        .collect()
}
