//! What a profile holds: the events ([`ProfileEvent`]) and their aggregates by name
//! ([`OpStats`], PyTorch's `key_averages`).

use rustc_hash::FxHashMap;
use std::time::Duration;

/// What an event measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// An operation applied: its forward computation and the recording of its node.
    Forward,
    /// A node's backward, run by the engine.
    Backward,
    /// A range of [`record_function`](super::record_function), or a whole backward call
    /// (`backward`).
    Range,
}

impl Phase {
    /// A lowercase label: `forward`, `backward` or `range`.
    pub fn label(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Range => "range",
        }
    }
}

/// The source line that applied an operation (recorded with
/// [`ProfileOptions::with_stack`](super::ProfileOptions::with_stack)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CallSite {
    /// The source file, as the compiler names it (relative to the package root of its crate
    /// for workspace crates).
    pub file: &'static str,
    /// The line, from 1.
    pub line: u32,
    /// The column, from 1.
    pub column: u32,
}

impl CallSite {
    pub(crate) fn of(location: &'static std::panic::Location<'static>) -> CallSite {
        CallSite { file: location.file(), line: location.line(), column: location.column() }
    }
}

impl std::fmt::Display for CallSite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// One timed event.
#[derive(Clone, Debug)]
pub struct ProfileEvent {
    /// The operation's name (or the range's).
    pub name: String,
    /// What was timed.
    pub phase: Phase,
    /// When it started, since the profiler started.
    pub start: Duration,
    /// How long it took, nested events included.
    pub duration: Duration,
    /// How long it took, nested events excluded.
    pub self_time: Duration,
    /// How many events it is nested in.
    pub depth: usize,
    /// The shapes of the operation's inputs, in order (with
    /// [`ProfileOptions::record_shapes`](super::ProfileOptions::record_shapes); empty
    /// otherwise, and for ranges and backward nodes).
    pub shapes: Vec<Vec<usize>>,
    /// The line that applied the operation (with
    /// [`ProfileOptions::with_stack`](super::ProfileOptions::with_stack), for forward
    /// events).
    pub stack: Option<CallSite>,
    /// With [`ProfileOptions::profile_memory`](super::ProfileOptions::profile_memory): the
    /// bytes of tensor storage the event allocated, less those it freed (PyTorch's "CPU
    /// Mem"), nested events included. It is the change of ember-tensor's live storage bytes
    /// ([`memory_stats`](ember_tensor::storage::memory_stats)), which count storages of
    /// 4 KiB and more, on every thread: an operation's output shows up here, a temporary it
    /// freed before returning does not, and another thread allocating at the same time is
    /// counted too. Zero without the option.
    pub memory: i64,
    /// [`ProfileEvent::memory`] less that of the nested events.
    pub self_memory: i64,
    /// The device time of an operation on a CUDA device (with
    /// [`ProfileOptions::device_time`](super::ProfileOptions::device_time)); `None` on the
    /// CPU and the emulated device.
    pub device_time: Option<Duration>,
}

/// The events of one name and phase (and input shapes, when grouped by them), aggregated.
#[derive(Clone, Debug, PartialEq)]
pub struct OpStats {
    /// The operation's name.
    pub name: String,
    /// Forward, backward or range.
    pub phase: Phase,
    /// The input shapes shared by the events, when grouped by input shape
    /// ([`Profile::key_averages_by_input_shape`](super::Profile::key_averages_by_input_shape));
    /// `None` otherwise.
    pub shapes: Option<Vec<Vec<usize>>>,
    /// How many times it ran.
    pub count: usize,
    /// The sum of its durations, nested events included.
    pub total: Duration,
    /// The sum of its self times.
    pub self_time: Duration,
    /// The sum of its events' [`ProfileEvent::memory`].
    pub memory: i64,
    /// The sum of its events' [`ProfileEvent::self_memory`].
    pub self_memory: i64,
    /// The sum of its events' device times; `None` when none had one.
    pub device_time: Option<Duration>,
    /// The call site of the group's first event that has one.
    pub stack: Option<CallSite>,
}

impl OpStats {
    /// The mean duration ([`OpStats::total`] over [`OpStats::count`]).
    pub fn average(&self) -> Duration {
        self.total / self.count.max(1) as u32
    }
}

/// What events are grouped by: name, phase and (when grouping by them) input shapes.
type GroupKey<'a> = (&'a str, Phase, Option<&'a [Vec<usize>]>);

/// The events aggregated by name and phase, and by input shapes when `by_shapes`, in order
/// of first appearance.
pub(crate) fn aggregate(events: &[ProfileEvent], by_shapes: bool) -> Vec<OpStats> {
    let mut index: FxHashMap<GroupKey<'_>, usize> = FxHashMap::default();
    let mut stats: Vec<OpStats> = Vec::new();
    for e in events {
        let shapes = by_shapes.then_some(e.shapes.as_slice());
        let k = *index.entry((e.name.as_str(), e.phase, shapes)).or_insert_with(|| {
            stats.push(OpStats {
                name: e.name.clone(),
                phase: e.phase,
                shapes: shapes.map(<[Vec<usize>]>::to_vec),
                count: 0,
                total: Duration::ZERO,
                self_time: Duration::ZERO,
                memory: 0,
                self_memory: 0,
                device_time: None,
                stack: None,
            });
            stats.len() - 1
        });
        let s = &mut stats[k];
        s.count += 1;
        s.total += e.duration;
        s.self_time += e.self_time;
        s.memory += e.memory;
        s.self_memory += e.self_memory;
        if let Some(d) = e.device_time {
            s.device_time = Some(s.device_time.unwrap_or_default() + d);
        }
        s.stack = s.stack.or(e.stack);
    }
    stats
}
