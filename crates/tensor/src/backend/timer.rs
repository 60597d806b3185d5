//! [`DeviceTimer`]: the time a device spends on the work queued between two points of the
//! host's program, measured on the device (CUDA events), for profilers.

#[cfg(feature = "cuda")]
use super::cuda::timer::EventPair;
use crate::error::Result;
use std::time::Duration;

/// Times the device work queued from its start ([`Device::start_timer`](crate::Device::start_timer))
/// until [`DeviceTimer::stop`]: a pair of events on the device's queue, so that neither call
/// waits for the device. Reading the time ([`DeviceTimer::elapsed`]) waits for the work to
/// finish. Only asynchronous devices (CUDA) have one: on the CPU and the emulated device the
/// host's wall time is the time.
pub struct DeviceTimer {
    inner: Inner,
}

#[cfg(feature = "cuda")]
type Inner = EventPair;

/// Without the `cuda` feature no device has a timer: a value of this type cannot exist.
#[cfg(not(feature = "cuda"))]
enum Inner {}

impl DeviceTimer {
    #[cfg(feature = "cuda")]
    pub(crate) fn new(inner: EventPair) -> DeviceTimer {
        DeviceTimer { inner }
    }

    /// Marks the end of the timed work (the work queued so far).
    pub fn stop(&mut self) -> Result<()> {
        #[cfg(feature = "cuda")]
        return self.inner.stop();
        #[cfg(not(feature = "cuda"))]
        match self.inner {}
    }

    /// The device time between the start and [`DeviceTimer::stop`]; waits until the device
    /// has run that work. An error if the timer was not stopped.
    pub fn elapsed(&self) -> Result<Duration> {
        #[cfg(feature = "cuda")]
        return self.inner.elapsed();
        #[cfg(not(feature = "cuda"))]
        match self.inner {}
    }
}

impl std::fmt::Debug for DeviceTimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DeviceTimer")
    }
}
