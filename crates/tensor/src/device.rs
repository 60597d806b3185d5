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
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Device {
    /// The host CPU.
    #[default]
    Cpu,
    /// The `n`-th CUDA device.
    Cuda(usize),
}

impl Device {
    /// Whether tensors can be made on the device now: always for the CPU; for a GPU, when
    /// the backend is compiled in and finds the device.
    pub fn is_available(self) -> bool {
        self.check_available().is_ok()
    }

    /// `Ok(())` for an available device, otherwise an error naming it and saying why it
    /// cannot be used.
    pub fn check_available(self) -> Result<()> {
        crate::backend::backend_for(self).map(|_| ())
    }

    /// Waits for the work queued on the device to finish (PyTorch's
    /// `torch.cuda.synchronize`): timings of asynchronous devices need it. A no-op on the CPU.
    pub fn synchronize(self) -> Result<()> {
        crate::backend::backend_for(self)?.synchronize()
    }

    /// The device memory figures of a GPU; `None` for the CPU (see
    /// [`crate::storage::memory_stats`] for host memory).
    pub fn memory_stats(self) -> Result<Option<DeviceMemory>> {
        crate::backend::backend_for(self)?.memory()
    }

    /// Starts the peak of [`Device::memory_stats`] again from the memory held now.
    pub fn reset_peak_memory(self) -> Result<()> {
        crate::backend::backend_for(self)?.reset_peak_memory()
    }

    /// Returns the memory a GPU's caching allocator keeps for reuse to the driver
    /// (`torch.cuda.empty_cache`); a no-op on the CPU.
    pub fn empty_cache(self) -> Result<()> {
        crate::backend::backend_for(self)?.empty_cache()
    }

    /// Turns on an emulated `cuda:0` in a build without the `cuda` feature, for testing
    /// device plumbing on machines without a GPU; returns whether `cuda:0` is emulated now
    /// (`false` in a build with the `cuda` feature, where `cuda:0` is the real device).
    ///
    /// The emulated device's tensors are host memory marked as living on `cuda:0`, and its
    /// kernels are the CPU's: every device check, move and placement behaves as with a GPU,
    /// and results are bitwise the CPU's. Once on, it stays on for the whole process.
    ///
    /// ```
    /// use ember_tensor::{DType, Device, Tensor};
    /// if Device::emulate_cuda() {
    ///     let x = Tensor::ones([2], DType::F32)?.to_device(Device::Cuda(0))?;
    ///     assert_eq!(x.device(), Device::Cuda(0));
    ///     assert_eq!(x.to_vec::<f32>()?, vec![1.0, 1.0]);
    /// }
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn emulate_cuda() -> bool {
        #[cfg(feature = "cuda")]
        return false;
        #[cfg(not(feature = "cuda"))]
        {
            crate::backend::cuda::turn_on();
            true
        }
    }

    /// The first GPU when one is available, the CPU otherwise.
    pub fn cuda_if_available() -> Device {
        if Device::Cuda(0).is_available() { Device::Cuda(0) } else { Device::Cpu }
    }

    /// The error for a GPU in a build without GPU support.
    #[cfg_attr(feature = "cuda", allow(dead_code))]
    pub(crate) fn not_compiled(self) -> Error {
        Error::Device {
            device: self.to_string(),
            msg: "CUDA support is not compiled into this build of ember (enable the `cuda` feature)".into(),
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
        }
    }
}

impl FromStr for Device {
    type Err = Error;

    /// Parses PyTorch's spellings: `cpu`, `cuda` (device 0) and `cuda:N`.
    fn from_str(s: &str) -> Result<Device> {
        let bad = || Error::Device { device: s.to_string(), msg: "expected `cpu`, `cuda` or `cuda:N`".into() };
        match s.trim() {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            other => {
                let n = other.strip_prefix("cuda:").ok_or_else(bad)?;
                n.parse::<usize>().map(Device::Cuda).map_err(|_| bad())
            }
        }
    }
}
