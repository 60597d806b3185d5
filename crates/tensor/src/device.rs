//! Where a tensor's data lives.

use crate::{Error, Result};
use std::fmt;
use std::str::FromStr;

/// A compute device.
///
/// `Cuda(n)` computes on the `n`-th NVIDIA GPU when ember is built with the `cuda` feature
/// and a driver and GPU are present; otherwise using it is an error that says which of
/// those is missing.
///
/// ```
/// use ember_tensor::Device;
/// let d: Device = "cuda:1".parse()?;
/// assert_eq!(d, Device::Cuda(1));
/// assert_eq!("cpu".parse::<Device>()?, Device::Cpu);
/// assert!(Device::Cpu.is_available());
/// // PyTorch's kernels, where the `libtorch` feature is compiled in.
/// assert_eq!("torch-cpu".parse::<Device>()?, Device::TorchCpu);
/// assert_eq!(Device::TorchCpu.to_string(), "torch-cpu");
/// assert_eq!(Device::TorchCpu.is_available(), cfg!(feature = "libtorch"));
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Device {
    /// The host CPU.
    #[default]
    Cpu,
    /// The `n`-th CUDA device.
    Cuda(usize),
    /// The host CPU computing with PyTorch's kernels through LibTorch (feature `libtorch`),
    /// printed and parsed as `torch-cpu`.
    TorchCpu,
}

impl Device {
    /// The error for a GPU in a build without GPU support.
    #[cfg_attr(all(feature = "cuda", feature = "libtorch"), allow(dead_code))]
    pub(crate) fn not_compiled(self) -> Error {
        let (what, feature) = match self {
            Device::TorchCpu => ("LibTorch", "libtorch"),
            _ => ("CUDA", "cuda"),
        };
        Error::Device {
            device: self.to_string(),
            msg: format!("{what} support is not compiled into this build of ember (enable the `{feature}` feature)"),
        }
    }
}

/// Device memory in bytes as a GPU backend counts it (PyTorch's `torch.cuda.memory_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct DeviceMemory {
    /// Held by live tensors now (`memory_allocated`).
    pub allocated: usize,
    /// The most held at once since the last [`Device::reset_peak_memory`]
    /// (`max_memory_allocated`).
    pub peak_allocated: usize,
    /// Freed by tensors and kept by the caching allocator for reuse
    /// (`memory_reserved - memory_allocated`).
    pub cached: usize,
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
            Device::TorchCpu => f.write_str("torch-cpu"),
        }
    }
}

impl FromStr for Device {
    type Err = Error;

    /// Parses PyTorch's spellings: `cpu`, `cuda` (device 0) and `cuda:N`, and `torch-cpu`.
    fn from_str(s: &str) -> Result<Device> {
        let bad =
            || Error::Device { device: s.to_string(), msg: "expected `cpu`, `cuda`, `cuda:N` or `torch-cpu`".into() };
        match s.trim() {
            "cpu" => Ok(Device::Cpu),
            "torch-cpu" => Ok(Device::TorchCpu),
            "cuda" => Ok(Device::Cuda(0)),
            other => {
                let n = other.strip_prefix("cuda:").ok_or_else(bad)?;
                n.parse::<usize>().map(Device::Cuda).map_err(|_| bad())
            }
        }
    }
}
