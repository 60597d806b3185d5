//! CUDA events around the work of an operation, for [`DeviceTimer`](crate::DeviceTimer).

use super::device::gpu;
use crate::backend::timer::QueueMarks;
use crate::{Error, Result};
use cudarc::driver::CudaEvent;
use std::time::Duration;

/// Two events on the legacy default stream, where every kernel and copy of this backend
/// goes: the time between them is the device time of the work queued in between.
pub(crate) struct EventPair {
    ordinal: usize,
    start: CudaEvent,
    end: Option<CudaEvent>,
}

/// Records the start event on GPU `ordinal`.
pub(crate) fn start(ordinal: usize) -> Result<EventPair> {
    let start = gpu(ordinal)?.timing_event()?;
    Ok(EventPair { ordinal, start, end: None })
}

impl QueueMarks for EventPair {
    /// Records the end event.
    fn stop(&mut self) -> Result<()> {
        self.end = Some(gpu(self.ordinal)?.timing_event()?);
        Ok(())
    }

    /// The milliseconds between the events, once the device has reached the end one.
    fn elapsed(&self) -> Result<Duration> {
        let device = || format!("cuda:{}", self.ordinal);
        let end = self
            .end
            .as_ref()
            .ok_or_else(|| Error::Device { device: device(), msg: "the device timer was not stopped".into() })?;
        let ms = self
            .start
            .elapsed_ms(end)
            .map_err(|e| Error::Device { device: device(), msg: format!("cannot read the device timer: {e:?}") })?;
        Ok(Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3))
    }
}
