//! What a profiler records beyond names and times: PyTorch's `torch.profiler.profile`
//! arguments.

/// The columns a [`Profiler`](super::Profiler) records besides counts and CPU times. All
/// are off by default (each costs time per operation while profiling); turn them on by
/// field or with the builder methods:
///
/// ```
/// use ember_autograd::profiler::ProfileOptions;
/// let options = ProfileOptions::new().record_shapes(true).with_stack(true);
/// assert!(options.record_shapes && options.with_stack && !options.profile_memory);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProfileOptions {
    /// Record the shapes of each operation's inputs (PyTorch's `record_shapes`), for the
    /// table's shape column and [`Profile::key_averages_by_input_shape`](super::Profile::key_averages_by_input_shape).
    pub record_shapes: bool,
    /// Record the source line that applied each operation (PyTorch's `with_stack`): the
    /// caller of the public `Var` method, found through `#[track_caller]`, so it works in
    /// release builds without debug info.
    pub with_stack: bool,
    /// Record the host memory each event allocated (PyTorch's `profile_memory`): the change
    /// of ember-tensor's live storage bytes over the event. See
    /// [`ProfileEvent::memory`](super::ProfileEvent::memory) for what counts.
    pub profile_memory: bool,
    /// Time operations on CUDA devices with device events as well (PyTorch's
    /// `ProfilerActivity.CUDA`). Operations on the CPU or the emulated device have no
    /// device time (`n/a`): their wall time is the time.
    pub device_time: bool,
}

impl ProfileOptions {
    /// Every option off: names, counts and CPU times only.
    pub fn new() -> ProfileOptions {
        ProfileOptions::default()
    }

    /// Every option on.
    pub fn all() -> ProfileOptions {
        ProfileOptions { record_shapes: true, with_stack: true, profile_memory: true, device_time: true }
    }

    /// Sets [`ProfileOptions::record_shapes`].
    pub fn record_shapes(mut self, on: bool) -> ProfileOptions {
        self.record_shapes = on;
        self
    }

    /// Sets [`ProfileOptions::with_stack`].
    pub fn with_stack(mut self, on: bool) -> ProfileOptions {
        self.with_stack = on;
        self
    }

    /// Sets [`ProfileOptions::profile_memory`].
    pub fn profile_memory(mut self, on: bool) -> ProfileOptions {
        self.profile_memory = on;
        self
    }

    /// Sets [`ProfileOptions::device_time`].
    pub fn device_time(mut self, on: bool) -> ProfileOptions {
        self.device_time = on;
        self
    }
}
