//! A scoped profiler: per-operation counts and times of forward and backward, as a table
//! sorted by total time (PyTorch's `key_averages().table()`) or a Chrome trace.
//!
//! While [`profile`] runs (or a [`Profiler`] lives), every operation applied on this thread
//! is timed from its call to the recorded node (*forward*), every node's backward in the
//! engine is timed (*backward*), and [`record_function`] adds named ranges of your own. An
//! event's *self* time is its total time minus that of the events nested in it (a backward
//! that applies operations under `create_graph`, a checkpoint's recomputation, a range
//! around a whole step).
//!
//! When no profiler is active the cost is one thread-local check per operation and one per
//! backward call.
//!
//! ```
//! use ember_autograd::{profile, record_function, Var};
//! use ember_tensor::{DType, Tensor};
//! let w = Var::param(Tensor::ones([4, 4], DType::F32)?);
//! let x = Var::new(Tensor::ones([2, 4], DType::F32)?);
//! let (result, prof) = profile(|| {
//!     record_function("step", || x.matmul(&w)?.relu().sum_all().backward())
//! });
//! result?;
//! let stats = prof.key_averages();
//! assert!(stats.iter().any(|s| s.name == "matmul" && s.count == 1));
//! println!("{}", prof.table());
//! assert!(prof.chrome_trace().starts_with("{\"traceEvents\":["));
//! # Ok::<(), ember_tensor::Error>(())
//! ```

use crate::extension::{Extension, Feature, ids};
use crate::node::NodeRef;
use crate::op::Grads;
use crate::var::Var;
use ember_tensor::{Error, Result};
use rustc_hash::FxHashMap;
use std::cell::{Cell, RefCell};
use std::fmt::Write as _;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What an event measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// An operation applied: its forward computation and the recording of its node.
    Forward,
    /// A node's backward, run by the engine.
    Backward,
    /// A range of [`record_function`], or a whole backward call (`backward`).
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
}

/// The events of one name and phase, aggregated.
#[derive(Clone, Debug, PartialEq)]
pub struct OpStats {
    /// The operation's name.
    pub name: String,
    /// Forward, backward or range.
    pub phase: Phase,
    /// How many times it ran.
    pub count: usize,
    /// The sum of its durations, nested events included.
    pub total: Duration,
    /// The sum of its self times.
    pub self_time: Duration,
}

struct Open {
    name: u32,
    phase: Phase,
    start: Instant,
    children: Duration,
}

struct RawEvent {
    name: u32,
    phase: Phase,
    start: Duration,
    duration: Duration,
    self_time: Duration,
    depth: u32,
}

/// One profiling session's recording. Names are interned so that timing an operation
/// allocates nothing once its name has been seen.
struct Recorder {
    t0: Instant,
    names: Vec<Box<str>>,
    ids: FxHashMap<Box<str>, u32>,
    events: Vec<RawEvent>,
    open: Vec<Open>,
}

impl Recorder {
    fn intern(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.into());
        self.ids.insert(name.into(), id);
        id
    }
}

thread_local! {
    /// The active sessions, innermost last; events go to the innermost.
    static SESSIONS: RefCell<Vec<Recorder>> = const { RefCell::new(Vec::new()) };
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

/// The profiler as an engine extension, active on the threads where a profiler records:
/// it times operations, backward calls and each node's backward. A token is the session
/// the event began in (see [`Timer`]).
struct Profiling;

static FEATURE: Feature = Feature::new(ids::PROFILER, &Profiling);

impl Extension for Profiling {
    fn before_apply(&self, op: &str, _: &[&Var]) -> u64 {
        begin(op, Phase::Forward).into_token()
    }
    fn after_apply(&self, token: u64) {
        drop(Timer::from_token(token));
    }
    fn enter_run(&self) -> u64 {
        begin("backward", Phase::Range).into_token()
    }
    fn exit_run(&self, token: u64) {
        drop(Timer::from_token(token));
    }
    fn before_backward(&self, node: &NodeRef) -> u64 {
        begin(node.op.name(), Phase::Backward).into_token()
    }
    fn after_backward(&self, token: u64, _: &NodeRef, _: &mut Result<Grads>) {
        drop(Timer::from_token(token));
    }
}

/// An event being timed; ends when dropped (also while unwinding, so that events stay
/// nested).
pub(crate) struct Timer {
    session: usize,
}

/// Starts timing `name`; the event ends when the returned timer is dropped.
pub(crate) fn begin(name: &str, phase: Phase) -> Timer {
    SESSIONS.with(|s| {
        let mut s = s.borrow_mut();
        let session = s.len();
        if let Some(r) = s.last_mut() {
            let name = r.intern(name);
            r.open.push(Open { name, phase, start: Instant::now(), children: Duration::ZERO });
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
            if s.len() != self.session {
                return;
            }
            let Some(r) = s.last_mut() else { return };
            let Some(open) = r.open.pop() else { return };
            let duration = now.saturating_duration_since(open.start);
            if let Some(parent) = r.open.last_mut() {
                parent.children += duration;
            }
            r.events.push(RawEvent {
                name: open.name,
                phase: open.phase,
                start: open.start.saturating_duration_since(r.t0),
                duration,
                self_time: duration.saturating_sub(open.children),
                depth: r.open.len() as u32,
            });
        });
    }
}

/// Records events on this thread until [`Profiler::stop`] (dropping it without stopping
/// discards them). Profilers nest: events go to the innermost.
#[must_use = "the profiler records until it is stopped"]
pub struct Profiler {
    session: usize,
    stopped: bool,
    // The recording lives in a thread-local: the profiler must stay on its thread.
    _not_send: PhantomData<*const ()>,
}

impl Profiler {
    /// Starts recording on this thread.
    pub fn start() -> Profiler {
        let session = SESSIONS.with(|s| {
            let mut s = s.borrow_mut();
            s.push(Recorder {
                t0: Instant::now(),
                names: Vec::new(),
                ids: FxHashMap::default(),
                events: Vec::new(),
                open: Vec::new(),
            });
            s.len()
        });
        FEATURE.set_active(true);
        Profiler { session, stopped: false, _not_send: PhantomData }
    }

    /// Stops recording and returns what was recorded.
    pub fn stop(mut self) -> Profile {
        self.stopped = true;
        let rec = self.pop();
        let mut events: Vec<ProfileEvent> = rec
            .as_ref()
            .map(|r| {
                r.events
                    .iter()
                    .map(|e| ProfileEvent {
                        name: r.names[e.name as usize].to_string(),
                        phase: e.phase,
                        start: e.start,
                        duration: e.duration,
                        self_time: e.self_time,
                        depth: e.depth as usize,
                    })
                    .collect()
            })
            .unwrap_or_default();
        // Events end inner-first; order them by start for reading and for traces.
        events.sort_by_key(|e| (e.start, e.depth));
        Profile { events, thread: thread_number() }
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
    let p = Profiler::start();
    let r = f();
    (r, p.stop())
}

/// Runs `f` as a named range in the active profiler (just runs it when none is active),
/// PyTorch's `record_function`.
pub fn record_function<R>(name: &str, f: impl FnOnce() -> R) -> R {
    if !is_profiling() {
        return f();
    }
    let _t = begin(name, Phase::Range);
    f()
}

/// What a profiler recorded.
#[derive(Clone, Debug)]
pub struct Profile {
    events: Vec<ProfileEvent>,
    thread: u64,
}

impl Profile {
    /// The events, in order of their start.
    pub fn events(&self) -> &[ProfileEvent] {
        &self.events
    }

    /// The events aggregated by name and phase, sorted by total time, longest first.
    pub fn key_averages(&self) -> Vec<OpStats> {
        let mut by_key: FxHashMap<(&str, Phase), OpStats> = FxHashMap::default();
        for e in &self.events {
            let s = by_key.entry((e.name.as_str(), e.phase)).or_insert_with(|| OpStats {
                name: e.name.clone(),
                phase: e.phase,
                count: 0,
                total: Duration::ZERO,
                self_time: Duration::ZERO,
            });
            s.count += 1;
            s.total += e.duration;
            s.self_time += e.self_time;
        }
        let mut stats: Vec<OpStats> = by_key.into_values().collect();
        stats.sort_by(|a, b| b.total.cmp(&a.total).then_with(|| (&a.name, a.phase).cmp(&(&b.name, b.phase))));
        stats
    }

    /// The sum of all self times: the time covered by events.
    pub fn total_self_time(&self) -> Duration {
        self.events.iter().map(|e| e.self_time).sum()
    }

    /// [`Profile::key_averages`] as a text table: name, phase, calls, total, self, average
    /// and the share of the profiled time spent in each (self time).
    pub fn table(&self) -> String {
        let stats = self.key_averages();
        let all = self.total_self_time().as_secs_f64().max(f64::MIN_POSITIVE);
        let width = stats.iter().map(|s| s.name.len()).max().unwrap_or(4).clamp(4, 48);
        let mut out = String::new();
        let header = format!(
            "{:<width$}  {:<8}  {:>7}  {:>12}  {:>12}  {:>10}  {:>7}",
            "name", "phase", "calls", "total (us)", "self (us)", "avg (us)", "self %"
        );
        let _ = writeln!(out, "{header}");
        let _ = writeln!(out, "{}", "-".repeat(header.len()));
        for s in &stats {
            let name: String = s.name.chars().take(width).collect();
            let total = s.total.as_secs_f64() * 1e6;
            let _ = writeln!(
                out,
                "{name:<width$}  {:<8}  {:>7}  {:>12.1}  {:>12.1}  {:>10.2}  {:>6.1}%",
                s.phase.label(),
                s.count,
                total,
                s.self_time.as_secs_f64() * 1e6,
                total / s.count.max(1) as f64,
                s.self_time.as_secs_f64() / all * 100.0,
            );
        }
        let _ = writeln!(out, "profiled time (sum of self times): {:.1} us", all * 1e6);
        out
    }

    /// The events in the Chrome trace format (`chrome://tracing`, Perfetto): complete
    /// (`"ph":"X"`) events with start and duration in microseconds.
    pub fn chrome_trace(&self) -> String {
        let pid = std::process::id();
        let mut out = String::from("{\"traceEvents\":[");
        for (k, e) in self.events.iter().enumerate() {
            if k > 0 {
                out.push(',');
            }
            let name = match e.phase {
                Phase::Backward => format!("{} (backward)", e.name),
                _ => e.name.clone(),
            };
            let _ = write!(
                out,
                "{{\"name\":\"{}\",\"cat\":\"{}\",\"ph\":\"X\",\"ts\":{:.3},\"dur\":{:.3},\"pid\":{pid},\"tid\":{}}}",
                escape_json(&name),
                e.phase.label(),
                e.start.as_secs_f64() * 1e6,
                e.duration.as_secs_f64() * 1e6,
                self.thread
            );
        }
        out.push_str("],\"displayTimeUnit\":\"ms\"}");
        out
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

/// `s` as the inside of a JSON string.
fn escape_json(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}
