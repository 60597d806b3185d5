//! [`DeviceTimer`]: the time a device spends on the work queued between two points of the
//! host's program, measured on the device (CUDA events), for profilers.

use crate::error::Result;
use std::time::Duration;

/// What a backend with an asynchronous queue gives a [`DeviceTimer`]: marks on its queue
/// and the device time between them. Defined here, below the backends, so that a backend
/// implements it without the trait layer naming the backend.
pub(crate) trait QueueMarks: Send {
    /// Marks the end of the timed work.
    fn stop(&mut self) -> Result<()>;
    /// The device time between the marks, once the device has reached the end one.
    fn elapsed(&self) -> Result<Duration>;
}

/// Times the device work queued from its start ([`Device::start_timer`](crate::Device::start_timer))
/// until [`DeviceTimer::stop`]: a pair of events on the device's queue, so that neither call
/// waits for the device. Reading the time ([`DeviceTimer::elapsed`]) waits for the work to
/// finish. Only asynchronous devices (CUDA) have one: on the CPU and the emulated device the
/// host's wall time is the time.
pub struct DeviceTimer {
    marks: Box<dyn QueueMarks>,
}

impl DeviceTimer {
    /// A timer over a backend's queue marks (only the CUDA backend makes them).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn new(marks: Box<dyn QueueMarks>) -> DeviceTimer {
        DeviceTimer { marks }
    }

    /// Marks the end of the timed work (the work queued so far).
    pub fn stop(&mut self) -> Result<()> {
        self.marks.stop()
    }

    /// The device time between the start and [`DeviceTimer::stop`]; waits until the device
    /// has run that work. An error if the timer was not stopped.
    pub fn elapsed(&self) -> Result<Duration> {
        self.marks.elapsed()
    }
}

impl std::fmt::Debug for DeviceTimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DeviceTimer")
    }
}
