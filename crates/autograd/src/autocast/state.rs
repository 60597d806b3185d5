//! The thread's autocast state: per device type, whether autocast is on and its dtype, and
//! how deeply autocast regions nest (the weight cache lives as long as the outermost one).
//!
//! Operations with a policy read [`enabled_bits`] (one thread-local byte) and do nothing
//! more while it is 0; the dtypes and the depth are read only inside a region.

use super::cache;
use ember_tensor::{DType, Device, Error, Result};
use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;

/// The kind of device an autocast region applies to, PyTorch's `device_type` (`"cpu"`,
/// `"cuda"`): a region covers every device of its kind. A [`Device`] converts into its
/// kind, so `autocast(Device::Cuda(0), ..)` and `autocast(DeviceType::Cuda, ..)` mean the
/// same.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceType {
    /// The host CPU.
    Cpu,
    /// CUDA devices (real, or the emulated `cuda:0`).
    Cuda,
}

impl DeviceType {
    /// The bit of this device type in [`enabled_bits`].
    #[inline]
    pub(crate) fn bit(self) -> u8 {
        match self {
            DeviceType::Cpu => 1,
            DeviceType::Cuda => 2,
        }
    }

    fn index(self) -> usize {
        match self {
            DeviceType::Cpu => 0,
            DeviceType::Cuda => 1,
        }
    }

    /// The lower-precision dtype autocast uses on this device type unless told otherwise
    /// (PyTorch's defaults): `bf16` on the CPU, `f16` on CUDA.
    pub fn default_autocast_dtype(self) -> DType {
        match self {
            DeviceType::Cpu => DType::BF16,
            DeviceType::Cuda => DType::F16,
        }
    }
}

impl From<Device> for DeviceType {
    fn from(device: Device) -> DeviceType {
        match device {
            Device::Cpu | Device::TorchCpu => DeviceType::Cpu,
            Device::Cuda(_) => DeviceType::Cuda,
        }
    }
}

impl fmt::Display for DeviceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeviceType::Cpu => "cpu",
            DeviceType::Cuda => "cuda",
        })
    }
}

thread_local! {
    /// `DeviceType::bit`s of the device types autocast is on for.
    static ENABLED: Cell<u8> = const { Cell::new(0) };
    /// The autocast dtype per device type (`DeviceType::index`).
    static DTYPES: Cell<[DType; 2]> = const { Cell::new([DType::BF16, DType::F16]) };
    /// How many autocast guards (enabled or not) are alive on this thread.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// The device types autocast is on for on this thread, as bits: the one read operations
/// make outside autocast.
#[inline(always)]
pub(crate) fn enabled_bits() -> u8 {
    ENABLED.with(|e| e.get())
}

/// Whether autocast is on for `device`'s type on this thread (PyTorch's
/// `torch.is_autocast_enabled(device_type)`).
pub fn is_autocast_enabled(device: impl Into<DeviceType>) -> bool {
    enabled_bits() & device.into().bit() != 0
}

/// The dtype autocast casts to on `device`'s type on this thread (PyTorch's
/// `torch.get_autocast_dtype(device_type)`): the innermost region's, or the device type's
/// default outside any region.
pub fn autocast_dtype(device: impl Into<DeviceType>) -> DType {
    DTYPES.with(|d| d.get()[device.into().index()])
}

/// Checks that autocast may cast to `dtype` on `device`: `bf16` and `f16` on both device
/// types, as current PyTorch allows.
fn check_dtype(device: DeviceType, dtype: DType) -> Result<()> {
    if matches!(dtype, DType::BF16 | DType::F16) {
        return Ok(());
    }
    Err(Error::invalid("autocast", format!("{device} autocast only supports the dtypes bf16 and f16, got {dtype}")))
}

/// An autocast region on this thread until dropped (PyTorch's `torch.autocast` as a context
/// manager); dropping it restores the previous state of its device type. Regions nest, and
/// the innermost decides; an inner region with `enabled = false` turns autocast off for
/// what runs inside it. When the outermost region ends, the weight cache is emptied.
///
/// Like the grad-mode guards it belongs to the thread that made it (neither `Send` nor
/// `Sync`).
///
/// ```compile_fail
/// fn assert_send<T: Send>(_: T) {}
/// assert_send(ember_autograd::AutocastGuard::new(ember_autograd::DeviceType::Cpu, ember_tensor::DType::BF16));
/// ```
#[must_use = "autocast is restored when the guard is dropped"]
pub struct AutocastGuard {
    device: DeviceType,
    prev_enabled: bool,
    prev_dtype: DType,
    _not_send: PhantomData<*const ()>,
}

impl AutocastGuard {
    /// Turns autocast on for `device`'s type, casting to `dtype` (`bf16` or `f16`; anything
    /// else is an error naming the device type and the dtype).
    pub fn new(device: impl Into<DeviceType>, dtype: DType) -> Result<AutocastGuard> {
        AutocastGuard::with_enabled(device, dtype, true)
    }

    /// Sets autocast for `device`'s type to `enabled`, casting to `dtype` when it is on
    /// (PyTorch's `torch.autocast(device_type, dtype, enabled=...)`). The dtype is checked
    /// either way, as PyTorch's constructor does.
    pub fn with_enabled(device: impl Into<DeviceType>, dtype: DType, enabled: bool) -> Result<AutocastGuard> {
        let device = device.into();
        check_dtype(device, dtype)?;
        let prev_enabled = is_autocast_enabled(device);
        let prev_dtype = autocast_dtype(device);
        set(device, enabled, dtype);
        DEPTH.with(|d| d.set(d.get() + 1));
        Ok(AutocastGuard { device, prev_enabled, prev_dtype, _not_send: PhantomData })
    }

    /// Turns autocast off for `device`'s type inside an autocast region (PyTorch's
    /// `torch.autocast(device_type, enabled=False)`), keeping its dtype.
    pub fn disabled(device: impl Into<DeviceType>) -> AutocastGuard {
        let device = device.into();
        let prev_enabled = is_autocast_enabled(device);
        let prev_dtype = autocast_dtype(device);
        set(device, false, prev_dtype);
        DEPTH.with(|d| d.set(d.get() + 1));
        AutocastGuard { device, prev_enabled, prev_dtype, _not_send: PhantomData }
    }
}

impl Drop for AutocastGuard {
    fn drop(&mut self) {
        set(self.device, self.prev_enabled, self.prev_dtype);
        let depth = DEPTH.with(|d| {
            let depth = d.get().saturating_sub(1);
            d.set(depth);
            depth
        });
        if depth == 0 {
            cache::clear();
        }
    }
}

/// Sets `device`'s bit and dtype on this thread.
fn set(device: DeviceType, enabled: bool, dtype: DType) {
    ENABLED.with(|e| {
        let bits = e.get();
        e.set(if enabled { bits | device.bit() } else { bits & !device.bit() });
    });
    DTYPES.with(|d| {
        let mut all = d.get();
        all[device.index()] = dtype;
        d.set(all);
    });
}

/// Runs `body` in an autocast region for `device`'s type casting to `dtype` (PyTorch's
/// `with torch.autocast(device_type, dtype):`); see [`AutocastGuard`]. An error for a dtype
/// autocast does not support, before `body` runs.
pub fn autocast<R>(device: impl Into<DeviceType>, dtype: DType, body: impl FnOnce() -> R) -> Result<R> {
    let _g = AutocastGuard::new(device, dtype)?;
    Ok(body())
}
