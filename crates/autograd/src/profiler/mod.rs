//! A scoped profiler (PyTorch's `torch.profiler`): per-operation counts and times of
//! forward and backward, optionally with input shapes, source lines, memory and device
//! time, as a table sorted by any column (`key_averages().table(sort_by=.., row_limit=..)`)
//! or a Chrome trace.
//!
//! While [`profile`] runs (or a [`Profiler`] lives), every operation applied on this thread
//! is timed from its call to the recorded node (*forward*), every node's backward in the
//! engine is timed (*backward*), and [`record_function`] adds named ranges of your own. An
//! event's *self* time is its total time minus that of the events nested in it (a backward
//! that applies operations under `create_graph`, a checkpoint's recomputation, a range
//! around a whole step).
//!
//! [`ProfileOptions`] adds columns ([`Profiler::with`], [`profile_with`]):
//!
//! - `record_shapes`: the shapes of each operation's inputs; the table can then group by
//!   them ([`TableOptions::group_by_input_shape`]).
//! - `with_stack`: the line of your code that applied each operation. The public `Var`
//!   operations are `#[track_caller]`, so this is the caller's file and line even in a
//!   release build without debug info.
//! - `profile_memory`: the tensor storage bytes each event allocated, less those it freed,
//!   self and total (see [`ProfileEvent::memory`] for exactly what counts).
//! - `device_time`: the time an operation on a CUDA device took on the device, from CUDA
//!   events around it; `n/a` on the CPU and on the emulated device, where the wall time is
//!   the time.
//!
//! When no profiler (or other engine extension) is active the cost is one thread-local
//! check per operation and one per backward call, plus the caller's location that
//! `#[track_caller]` passes to each op method as a hidden argument (one instruction per
//! call); the location is read, and the options cost, only while recording.
//!
//! ```
//! use ember_autograd::profiler::{ProfileOptions, SortBy, TableOptions, profile_with};
//! use ember_autograd::{record_function, Var};
//! use ember_tensor::{DType, Error, Tensor};
//! let w = Var::param(Tensor::ones([64, 64], DType::F32)?);
//! let x = Var::new(Tensor::ones([32, 64], DType::F32)?);
//! let options = ProfileOptions::new().record_shapes(true).with_stack(true).profile_memory(true);
//! let (result, prof) = profile_with(options, || {
//!     record_function("step", || x.matmul(&w)?.relu().sum_all().backward())
//! });
//! result?;
//! let matmul = prof.events().iter().find(|e| e.name == "matmul").ok_or_else(|| Error::autograd("no matmul event"))?;
//! assert_eq!(matmul.shapes, vec![vec![32, 64], vec![64, 64]]);
//! assert_eq!(matmul.stack.map(|s| s.file), Some(file!()));
//! assert_eq!(matmul.memory, 32 * 64 * 4); // its f32 output
//! let table = prof.table_with(TableOptions { sort_by: SortBy::CpuSelf, row_limit: Some(5), ..Default::default() });
//! println!("{table}");
//! assert!(prof.chrome_trace().contains("\"Input Dims\":[[32, 64], [64, 64]]"));
//! # Ok::<(), ember_tensor::Error>(())
//! ```

mod events;
mod options;
mod record;
mod table;
mod trace;

pub use events::{CallSite, OpStats, Phase, ProfileEvent};
pub use options::ProfileOptions;
pub use table::{SortBy, TableOptions};

pub(crate) use record::note_caller;

use ember_tensor::{Error, Result};
use record::{FEATURE, Recorder, SESSIONS, Subject, begin};
use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

thread_local! {
    static THREAD_NUMBER: Cell<u64> = const { Cell::new(0) };
}

static NEXT_THREAD_NUMBER: AtomicU64 = AtomicU64::new(1);

/// A small number identifying this thread in Chrome traces.
fn thread_number() -> u64 {
    THREAD_NUMBER.with(|n| {
        if n.get() == 0 {
            n.set(NEXT_THREAD_NUMBER.fetch_add(1, Ordering::Relaxed));
        }
        n.get()
    })
}

/// Whether a profiler is recording on this thread.
pub fn is_profiling() -> bool {
    FEATURE.is_active()
}

/// Records events on this thread until [`Profiler::stop`] (dropping it without stopping
/// discards them). Profilers nest: events go to the innermost.
#[must_use = "the profiler records until it is stopped"]
pub struct Profiler {
    session: usize,
    stopped: bool,
    options: ProfileOptions,
    // The recording lives in a thread-local: the profiler must stay on its thread.
    _not_send: PhantomData<*const ()>,
}

impl Profiler {
    /// Starts recording names, counts and CPU times on this thread.
    pub fn start() -> Profiler {
        Profiler::with(ProfileOptions::default())
    }

    /// Starts recording on this thread, with the columns `options` asks for (PyTorch's
    /// `torch.profiler.profile(record_shapes=.., with_stack=.., profile_memory=..)`).
    pub fn with(options: ProfileOptions) -> Profiler {
        let session = SESSIONS.with(|s| {
            let mut s = s.borrow_mut();
            s.push(Recorder::new(options));
            s.len()
        });
        FEATURE.set_active(true);
        Profiler { session, stopped: false, options, _not_send: PhantomData }
    }

    /// Stops recording and returns what was recorded. With
    /// [`ProfileOptions::device_time`], waits for the device to run the timed operations.
    pub fn stop(mut self) -> Profile {
        self.stopped = true;
        let events = self.pop().map(Recorder::into_events).unwrap_or_default();
        Profile { events, thread: thread_number(), options: self.options }
    }

    fn pop(&mut self) -> Option<Recorder> {
        SESSIONS.with(|s| {
            let mut s = s.borrow_mut();
            let rec = if s.len() >= self.session { s.drain(self.session - 1..).next() } else { None };
            FEATURE.set_active(!s.is_empty());
            rec
        })
    }
}

impl Drop for Profiler {
    fn drop(&mut self) {
        if !self.stopped {
            self.pop();
        }
    }
}

/// Runs `f` under a profiler and returns its result with what was recorded.
pub fn profile<R>(f: impl FnOnce() -> R) -> (R, Profile) {
    profile_with(ProfileOptions::default(), f)
}

/// Runs `f` under a profiler recording what `options` asks for, and returns its result
/// with what was recorded.
pub fn profile_with<R>(options: ProfileOptions, f: impl FnOnce() -> R) -> (R, Profile) {
    let p = Profiler::with(options);
    let r = f();
    (r, p.stop())
}

/// Runs `f` as a named range in the active profiler (just runs it when none is active),
/// PyTorch's `record_function`.
pub fn record_function<R>(name: &str, f: impl FnOnce() -> R) -> R {
    if !is_profiling() {
        return f();
    }
    let _t = begin(name, Phase::Range, Subject::Range);
    f()
}

/// What a profiler recorded.
#[derive(Clone, Debug)]
pub struct Profile {
    events: Vec<ProfileEvent>,
    thread: u64,
    options: ProfileOptions,
}

impl Profile {
    /// The events, in order of their start.
    pub fn events(&self) -> &[ProfileEvent] {
        &self.events
    }

    /// The options the profiler recorded with.
    pub fn options(&self) -> ProfileOptions {
        self.options
    }

    /// The events aggregated by name and phase, sorted by total time, longest first.
    pub fn key_averages(&self) -> Vec<OpStats> {
        let mut stats = events::aggregate(&self.events, false);
        SortBy::CpuTotal.sort(&mut stats);
        stats
    }

    /// The events aggregated by name, phase and input shapes (PyTorch's
    /// `key_averages(group_by_input_shape=True)`; needs [`ProfileOptions::record_shapes`]),
    /// sorted by total time, longest first.
    pub fn key_averages_by_input_shape(&self) -> Vec<OpStats> {
        let mut stats = events::aggregate(&self.events, true);
        SortBy::CpuTotal.sort(&mut stats);
        stats
    }

    /// The sum of all self times: the time covered by events.
    pub fn total_self_time(&self) -> Duration {
        self.events.iter().map(|e| e.self_time).sum()
    }

    /// [`Profile::key_averages`] as a text table sorted by total time: name, phase, calls,
    /// total, self, average and the share of the profiled time spent in each (self time),
    /// then the columns of the options that were on.
    pub fn table(&self) -> String {
        self.table_with(TableOptions::default())
    }

    /// The key-averages table sorted by `options.sort_by`, limited to `options.row_limit`
    /// rows, grouped by input shape if asked (PyTorch's
    /// `key_averages(group_by_input_shape=..).table(sort_by=.., row_limit=..)`).
    pub fn table_with(&self, options: TableOptions) -> String {
        let mut stats = events::aggregate(&self.events, options.group_by_input_shape);
        options.sort_by.sort(&mut stats);
        stats.truncate(options.row_limit.unwrap_or(usize::MAX));
        let shapes = options.group_by_input_shape && self.options.record_shapes;
        table::render(&stats, self.options, self.total_self_time(), shapes)
    }

    /// The events in the Chrome trace format (`chrome://tracing`, Perfetto): complete
    /// (`"ph":"X"`) events with start and duration in microseconds, and the recorded
    /// shapes, call sites, memory and device times in their `args`.
    pub fn chrome_trace(&self) -> String {
        trace::chrome_trace(&self.events, self.options, self.thread)
    }

    /// Writes [`Profile::chrome_trace`] to `path`.
    pub fn save_chrome_trace(&self, path: impl AsRef<std::path::Path>) -> Result<()> {
        let path = path.as_ref();
        std::fs::write(path, self.chrome_trace())
            .map_err(|e| Error::autograd(format!("save_chrome_trace: cannot write {}: {e}", path.display())))
    }
}

impl std::fmt::Display for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.table())
    }
}
