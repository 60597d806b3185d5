//! The precision of `f32` matrix products, PyTorch's `torch.set_float32_matmul_precision`.
//!
//! `"highest"` (the default) multiplies `f32` matrices in full FP32. `"high"` and
//! `"medium"` let a backend use a faster internal format: on the CUDA backend cuBLAS then
//! computes with TF32 tensor cores (`CUBLAS_COMPUTE_32F_FAST_TF32`: operands rounded to a
//! 10-bit mantissa, sums in f32), as PyTorch's `"high"` does; PyTorch's `"medium"` also
//! allows bf16 internally where a library offers it, which cuBLAS's f32 products do not,
//! so it behaves as `"high"` there. The CPU backend always computes `f32` products in full
//! FP32. The setting is global to the process, as PyTorch's is, and reads cost one atomic
//! load.
//!
//! ```
//! use ember_tensor::{float32_matmul_precision, set_float32_matmul_precision};
//!
//! assert_eq!(float32_matmul_precision(), "highest");
//! set_float32_matmul_precision("high")?;
//! assert_eq!(float32_matmul_precision(), "high");
//! assert!(set_float32_matmul_precision("fast").is_err());
//! set_float32_matmul_precision("highest")?;
//! # Ok::<(), ember_tensor::Error>(())
//! ```

use crate::{Error, Result};
use std::sync::atomic::{AtomicU8, Ordering};

/// How `f32` matrix products may compute internally.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatmulPrecision {
    /// Full FP32 (PyTorch's `"highest"`, the default).
    Highest,
    /// TF32 where the device has it (PyTorch's `"high"`).
    High,
    /// TF32, or bf16 where a library offers it for `f32` products (PyTorch's `"medium"`).
    Medium,
}

impl MatmulPrecision {
    /// Every setting, in the order of the names PyTorch accepts.
    pub const ALL: [MatmulPrecision; 3] = [MatmulPrecision::Highest, MatmulPrecision::High, MatmulPrecision::Medium];

    /// The name PyTorch gives the setting: `"highest"`, `"high"` or `"medium"`.
    pub fn name(self) -> &'static str {
        match self {
            MatmulPrecision::Highest => "highest",
            MatmulPrecision::High => "high",
            MatmulPrecision::Medium => "medium",
        }
    }

    /// The setting called `name`; an error naming the accepted names otherwise.
    pub fn parse(name: &str) -> Result<MatmulPrecision> {
        MatmulPrecision::ALL.into_iter().find(|p| p.name() == name).ok_or_else(|| {
            Error::invalid(
                "set_float32_matmul_precision",
                format!("expected \"highest\", \"high\" or \"medium\", got {name:?}"),
            )
        })
    }

    /// Whether `f32` products may use a reduced internal precision (TF32).
    pub fn allows_reduced(self) -> bool {
        self != MatmulPrecision::Highest
    }
}

/// The setting, as its position in [`MatmulPrecision::ALL`].
static PRECISION: AtomicU8 = AtomicU8::new(0);

/// Sets the precision of `f32` matrix products for the whole process: `"highest"`,
/// `"high"` or `"medium"`, as PyTorch's `torch.set_float32_matmul_precision`. Any other
/// name is an error that lists the accepted ones, and leaves the setting as it was.
pub fn set_float32_matmul_precision(name: &str) -> Result<()> {
    let p = MatmulPrecision::parse(name)?;
    PRECISION.store(p as u8, Ordering::Relaxed);
    Ok(())
}

/// The name of the current setting (`"highest"` until changed), as PyTorch's
/// `torch.get_float32_matmul_precision`.
pub fn float32_matmul_precision() -> &'static str {
    matmul_precision().name()
}

/// The current setting.
pub fn matmul_precision() -> MatmulPrecision {
    match PRECISION.load(Ordering::Relaxed) {
        1 => MatmulPrecision::High,
        2 => MatmulPrecision::Medium,
        _ => MatmulPrecision::Highest,
    }
}
