//! An emulated `Device::Cuda(0)` for testing the device plumbing on machines without a GPU,
//! in builds without the `cuda` feature: off until
//! [`Device::emulate_cuda`](crate::Device::emulate_cuda) turns it on.
//!
//! Its storages are [`Storage::Cuda`] values, so every check that compares devices, every
//! `to_device` and every tensor that should follow its inputs onto the device behaves as
//! it would with a GPU, while the data stays in host memory and every kernel is the host
//! backend's (the registry gives it the CPU backend). Results are therefore bit-identical
//! to the CPU's: a training run on `Device::Cuda(0)` that differs in any bit from the same
//! run on the CPU has a tensor that left the device or was made on the wrong one. What it
//! cannot show is anything about the real GPU kernels (their rounding, their speed,
//! asynchronous errors).
//!
//! Every [`Backend`] method is generated ([`delegate_backend!`](crate::delegate_backend)):
//! device storages are unwrapped to the host storages inside, the host backend computes,
//! and its storages are wrapped as the device's. Only what makes it a device is written
//! here ([`Delegate`]): its device, and how host storages are disguised.
//!
//! The emulation has one device, ordinal 0. A storage of another device handed to its
//! backend is an [`Error::Device`], never a reinterpretation of the data.

use super::{Backend, Delegate};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::storage::{DeviceData, DeviceStorage, Storage};
use std::sync::atomic::{AtomicBool, Ordering};

const DEVICE: Device = Device::Cuda(0);

/// The data of a tensor on the emulated device: a host storage in disguise, made only by
/// [`EmulatedCuda`] from its host backend's results.
#[derive(Debug)]
struct HostStorage(Storage);

impl DeviceData for HostStorage {
    fn dtype(&self) -> DType {
        self.0.dtype()
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn ordinal(&self) -> usize {
        0
    }
}

/// The backend of the emulated `cuda:0`: a host backend's kernels on storages marked as
/// living on the device.
#[derive(Clone, Copy)]
pub struct EmulatedCuda {
    host: &'static dyn Backend,
}

impl EmulatedCuda {
    /// The emulated device computing with `host`'s kernels.
    pub const fn new(host: &'static dyn Backend) -> Self {
        EmulatedCuda { host }
    }
}

fn foreign(op: &'static str, device: Device) -> Error {
    Error::Device {
        device: device.to_string(),
        msg: format!("{op}: the emulated {DEVICE} backend was given a storage of this device"),
    }
}

impl Delegate for EmulatedCuda {
    type Inner = dyn Backend;

    fn inner(&self) -> &dyn Backend {
        self.host
    }

    fn outer_device(&self) -> Device {
        DEVICE
    }

    fn inner_storage<'a>(&self, op: &'static str, s: &'a Storage) -> Result<&'a Storage> {
        match s.as_cuda().and_then(DeviceStorage::downcast_ref::<HostStorage>) {
            Some(h) => Ok(&h.0),
            None => Err(foreign(op, s.device())),
        }
    }

    fn inner_storage_mut<'a>(&self, op: &'static str, s: &'a mut Storage) -> Result<&'a mut Storage> {
        let device = s.device();
        match s.as_cuda_mut().and_then(DeviceStorage::downcast_mut::<HostStorage>) {
            Some(h) => Ok(&mut h.0),
            None => Err(foreign(op, device)),
        }
    }

    fn outer_storage(&self, s: Storage) -> Storage {
        Storage::Cuda(DeviceStorage::new(HostStorage(s)))
    }
}

crate::delegate_backend!(all for EmulatedCuda);

/// An error unless `ordinal` is 0, the emulation's only device.
pub fn check_ordinal(ordinal: usize) -> Result<()> {
    if ordinal != 0 {
        return Err(Error::Device {
            device: Device::Cuda(ordinal).to_string(),
            msg: "the emulated CUDA backend (`Device::emulate_cuda`) has one device, cuda:0".into(),
        });
    }
    Ok(())
}

/// Whether [`Device::emulate_cuda`](crate::Device::emulate_cuda) has turned the emulation on.
static ON: AtomicBool = AtomicBool::new(false);

/// Turns the emulation on for the rest of the process.
pub(crate) fn turn_on() {
    ON.store(true, Ordering::Relaxed);
}

/// Whether the emulation is on: `cuda:0` exists only then.
pub(crate) fn is_on() -> bool {
    ON.load(Ordering::Relaxed)
}
