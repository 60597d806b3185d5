//! The recording: one [`Recorder`] per profiling session in a thread-local stack, the
//! [`Timer`] that opens and closes an event, and the profiler's engine extension, which
//! opens one per operation, backward call and backward node.

use super::events::{CallSite, Phase, ProfileEvent};
use super::options::ProfileOptions;
use crate::extension::{Extension, Feature, ids};
use crate::node::NodeRef;
use crate::op::Grads;
use crate::var::Var;
use ember_tensor::{Device, DeviceTimer, Result};
use rustc_hash::FxHashMap;
use std::cell::{Cell, RefCell};
use std::panic::Location;
use std::time::{Duration, Instant};

/// An event still running.
struct Open {
    name: u32,
    phase: Phase,
    start: Instant,
    children: Duration,
    shapes: Vec<Vec<usize>>,
    stack: Option<CallSite>,
    memory_at_start: i64,
    children_memory: i64,
    device: Option<DeviceTimer>,
}

/// An event that ended; its device time is read when the session stops.
struct RawEvent {
    name: u32,
    phase: Phase,
    start: Duration,
    duration: Duration,
    self_time: Duration,
    depth: u32,
    shapes: Vec<Vec<usize>>,
    stack: Option<CallSite>,
    memory: i64,
    self_memory: i64,
    device: Option<DeviceTimer>,
}

/// One profiling session's recording. Names are interned so that timing an operation
/// allocates nothing once its name has been seen (with every option off).
pub(crate) struct Recorder {
    t0: Instant,
    options: ProfileOptions,
    names: Vec<Box<str>>,
    ids: FxHashMap<Box<str>, u32>,
    events: Vec<RawEvent>,
    open: Vec<Open>,
}

impl Recorder {
    pub(crate) fn new(options: ProfileOptions) -> Recorder {
        Recorder {
            t0: Instant::now(),
            options,
            names: Vec::new(),
            ids: FxHashMap::default(),
            events: Vec::new(),
            open: Vec::new(),
        }
    }

    fn intern(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.into());
        self.ids.insert(name.into(), id);
        id
    }

    /// The events, in order of their start, with their device times read (which waits for
    /// the device to reach them).
    pub(crate) fn into_events(self) -> Vec<ProfileEvent> {
        let mut events: Vec<ProfileEvent> = self
            .events
            .into_iter()
            .map(|e| ProfileEvent {
                name: self.names[e.name as usize].to_string(),
                phase: e.phase,
                start: e.start,
                duration: e.duration,
                self_time: e.self_time,
                depth: e.depth as usize,
                shapes: e.shapes,
                stack: e.stack,
                memory: e.memory,
                self_memory: e.self_memory,
                device_time: e.device.and_then(|t| t.elapsed().ok()),
            })
            .collect();
        // Events end inner-first; order them by start for reading and for traces.
        events.sort_by_key(|e| (e.start, e.depth));
        events
    }
}

thread_local! {
    /// The active sessions, innermost last; events go to the innermost.
    pub(crate) static SESSIONS: RefCell<Vec<Recorder>> = const { RefCell::new(Vec::new()) };
    /// The line that called the public `Var` method now being applied (see [`note_caller`]).
    static CALLER: Cell<Option<&'static Location<'static>>> = const { Cell::new(None) };
}

/// The profiler as an engine extension, active on the threads where a profiler records:
/// it times operations, backward calls and each node's backward. A token is the session
/// the event began in (see [`Timer`]).
struct Profiling;

pub(crate) static FEATURE: Feature = Feature::new(ids::PROFILER, &Profiling);

/// Keeps `caller`, the line that applied the operation about to be recorded, for the
/// profiler's `with_stack`. Called on the instrumented path of `apply` only, so the
/// location (a hidden argument of the `#[track_caller]` op methods) is read only while
/// some extension is active.
pub(crate) fn note_caller(caller: &'static Location<'static>) {
    if FEATURE.is_active() {
        CALLER.with(|c| c.set(Some(caller)));
    }
}

impl Extension for Profiling {
    fn before_apply(&self, op: &str, inputs: &[&Var]) -> u64 {
        let caller = CALLER.with(Cell::take);
        begin(op, Phase::Forward, Subject::Op { inputs, caller }).into_token()
    }
    fn after_apply(&self, token: u64) {
        drop(Timer::from_token(token));
    }
    fn enter_run(&self) -> u64 {
        begin("backward", Phase::Range, Subject::Range).into_token()
    }
    fn exit_run(&self, token: u64) {
        drop(Timer::from_token(token));
    }
    fn before_backward(&self, node: &NodeRef) -> u64 {
        begin(node.op.name(), Phase::Backward, Subject::Node(node)).into_token()
    }
    fn after_backward(&self, token: u64, _: &NodeRef, _: &mut Result<Grads>) {
        drop(Timer::from_token(token));
    }
}

/// What an event is about, for the optional columns.
pub(crate) enum Subject<'a> {
    /// A named range: no shapes, no call site, no device.
    Range,
    /// An operation applied to `inputs` from `caller`.
    Op { inputs: &'a [&'a Var], caller: Option<&'static Location<'static>> },
    /// A node's backward, on the device of the node's value.
    Node(&'a NodeRef),
}

/// An event being timed; ends when dropped (also while unwinding, so that events stay
/// nested).
pub(crate) struct Timer {
    session: usize,
}

/// The live storage bytes now (see `ProfileEvent::memory`).
fn live_bytes() -> i64 {
    ember_tensor::storage::memory_stats().live_bytes as i64
}

/// Starts timing `name`; the event ends when the returned timer is dropped.
pub(crate) fn begin(name: &str, phase: Phase, subject: Subject<'_>) -> Timer {
    let options = SESSIONS.with(|s| s.borrow().last().map(|r| r.options));
    let Some(options) = options else {
        return Timer { session: 0 };
    };
    // The optional columns read the inputs' nodes: done before the session is borrowed.
    let mut shapes = Vec::new();
    let mut stack = None;
    let mut device = None;
    match subject {
        Subject::Range => {}
        Subject::Op { inputs, caller } => {
            if options.record_shapes {
                shapes = inputs.iter().map(|v| v.shape().dims().to_vec()).collect();
            }
            if options.with_stack {
                stack = caller.map(CallSite::of);
            }
            if options.device_time {
                device = inputs.first().map(|v| v.device());
            }
        }
        Subject::Node(node) => {
            if options.device_time {
                device = node.state().value.as_ref().map(|v| v.device());
            }
        }
    }
    let memory_at_start = if options.profile_memory { live_bytes() } else { 0 };
    // A device without a timer (the CPU, the emulated GPU) or one that fails to start one
    // leaves the device column `n/a`.
    let device = device.filter(|d| matches!(d, Device::Cuda(_))).and_then(|d| d.start_timer().ok().flatten());
    SESSIONS.with(|s| {
        let mut s = s.borrow_mut();
        let session = s.len();
        if let Some(r) = s.last_mut() {
            let name = r.intern(name);
            r.open.push(Open {
                name,
                phase,
                start: Instant::now(),
                children: Duration::ZERO,
                shapes,
                stack,
                memory_at_start,
                children_memory: 0,
                device,
            });
        }
        Timer { session }
    })
}

impl Timer {
    /// The timer as a token for extension hooks, which end it with [`Timer::from_token`].
    fn into_token(self) -> u64 {
        let token = self.session as u64;
        std::mem::forget(self);
        token
    }

    fn from_token(token: u64) -> Timer {
        Timer { session: token as usize }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        let now = Instant::now();
        SESSIONS.with(|s| {
            let mut s = s.borrow_mut();
            // A session started or stopped inside the event: it belongs to none of them.
            if self.session == 0 || s.len() != self.session {
                return;
            }
            let Some(r) = s.last_mut() else { return };
            let Some(mut open) = r.open.pop() else { return };
            let duration = now.saturating_duration_since(open.start);
            let memory = if r.options.profile_memory { live_bytes() - open.memory_at_start } else { 0 };
            if let Some(t) = open.device.as_mut() {
                // A timer that cannot stop reads as no device time.
                if t.stop().is_err() {
                    open.device = None;
                }
            }
            if let Some(parent) = r.open.last_mut() {
                parent.children += duration;
                parent.children_memory += memory;
            }
            r.events.push(RawEvent {
                name: open.name,
                phase: open.phase,
                start: open.start.saturating_duration_since(r.t0),
                duration,
                self_time: duration.saturating_sub(open.children),
                depth: r.open.len() as u32,
                shapes: open.shapes,
                stack: open.stack,
                memory,
                self_memory: memory - open.children_memory,
                device: open.device,
            });
        });
    }
}
