//! Where a tensor's data lives.

use crate::{Error, Result};
use std::fmt;

/// A compute device. Only the CPU is compiled in today; `Cuda(n)` exists so that code can
/// name a GPU and get a clear error until a CUDA backend lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Device {
    /// The host CPU.
    #[default]
    Cpu,
    /// The `n`-th CUDA device.
    Cuda(usize),
}

impl Device {
    /// Whether this build can run tensors on the device.
    pub fn is_available(self) -> bool {
        matches!(self, Device::Cpu)
    }

    /// `Ok(())` for an available device, otherwise a "not compiled in" error naming it.
    pub fn check_available(self) -> Result<()> {
        match self {
            Device::Cpu => Ok(()),
            Device::Cuda(_) => Err(Error::Device {
                device: self.to_string(),
                msg: "CUDA support is not compiled into this build of ember".into(),
            }),
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}
