//! The one place that maps a [`Device`] to its backend ([`backend_for`]), and the
//! `Device` methods that need a device's backend. Nothing else above the backends names
//! one: the tensor layer asks here.

use super::Backend;
use super::DeviceTimer;
use super::cpu::CpuBackend;
#[cfg(feature = "cuda")]
use super::cuda;
#[cfg(not(feature = "cuda"))]
use super::emulated_cuda::{self, EmulatedCuda};
#[cfg(feature = "libtorch")]
use super::libtorch::TorchBackend;
use crate::device::{Device, DeviceMemory};
use crate::error::Result;

/// The emulated `cuda:0`: the CPU backend's kernels on storages marked as the device's.
#[cfg(not(feature = "cuda"))]
static EMULATED_CUDA: EmulatedCuda = EmulatedCuda::new(&CpuBackend);

/// The backend for `device`, or an error saying why the device cannot be used (not
/// compiled in, no such GPU, no driver).
pub fn backend_for(device: Device) -> Result<&'static dyn Backend> {
    match device {
        Device::Cpu => Ok(&CpuBackend),
        #[cfg(feature = "cuda")]
        Device::Cuda(n) => Ok(cuda::backend(n)?),
        #[cfg(not(feature = "cuda"))]
        Device::Cuda(n) if emulated_cuda::is_on() => {
            emulated_cuda::check_ordinal(n)?;
            Ok(&EMULATED_CUDA)
        }
        #[cfg(not(feature = "cuda"))]
        Device::Cuda(_) => Err(device.not_compiled()),
        #[cfg(feature = "libtorch")]
        Device::TorchCpu => Ok(&TorchBackend),
        #[cfg(not(feature = "libtorch"))]
        Device::TorchCpu => Err(device.not_compiled()),
    }
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
        backend_for(self).map(|_| ())
    }

    /// Waits for the work queued on the device to finish (PyTorch's
    /// `torch.cuda.synchronize`): timings of asynchronous devices need it. A no-op on the CPU.
    pub fn synchronize(self) -> Result<()> {
        backend_for(self)?.synchronize()
    }

    /// A timer of the device work queued from now until [`DeviceTimer::stop`] (CUDA events,
    /// what PyTorch's profiler reads for device time); `None` where kernels run on the host
    /// (the CPU and the emulated device), whose time is the host's.
    pub fn start_timer(self) -> Result<Option<DeviceTimer>> {
        #[cfg(feature = "cuda")]
        if let Device::Cuda(n) = self {
            return Ok(Some(DeviceTimer::new(Box::new(cuda::timer::start(n)?))));
        }
        Ok(None)
    }

    /// The device memory figures of a GPU; `None` for the CPU (see
    /// [`crate::storage::memory_stats`] for host memory).
    pub fn memory_stats(self) -> Result<Option<DeviceMemory>> {
        backend_for(self)?.memory()
    }

    /// Starts the peak of [`Device::memory_stats`] again from the memory held now.
    pub fn reset_peak_memory(self) -> Result<()> {
        backend_for(self)?.reset_peak_memory()
    }

    /// Returns the memory a GPU's caching allocator keeps for reuse to the driver
    /// (`torch.cuda.empty_cache`); a no-op on the CPU.
    pub fn empty_cache(self) -> Result<()> {
        backend_for(self)?.empty_cache()
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
            emulated_cuda::turn_on();
            true
        }
    }

    /// The first GPU when one is available, the CPU otherwise.
    pub fn cuda_if_available() -> Device {
        if Device::Cuda(0).is_available() { Device::Cuda(0) } else { Device::Cpu }
    }
}
