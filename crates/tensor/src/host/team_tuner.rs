//! Whether helper threads make parallel loops faster on this machine, measured while the
//! program runs.
//!
//! On a shared virtual machine two vCPUs are not always two cores: for stretches of
//! seconds to minutes the host may run them on one core (or let another guest take most of
//! one). Then a helper slows the caller down instead of sharing its work, and two threads
//! run slower than one. The quick-start MLP on our 2-vCPU machine ran at about 118,000
//! samples/s on two threads when the host gave each vCPU a core, at about 52,000 when it
//! did not, and at 73,000 on one thread either way; the host switched between the two at
//! arbitrary times.
//!
//! So the team measures. It runs *main* phases in the mode it believes faster (with
//! helpers, or the caller alone) and, after each, a short *probe* phase in the other mode,
//! then measures the main mode again for as long, and switches when the probe beat the main
//! mode both before and after it by [`MARGIN`], so a change of the host during the probe is
//! not taken for a faster mode.
//!
//! **Like is compared with like.** A training step is a string of different loops (a
//! Transformer's step: products, softmaxes, norms, the optimizer's update), from a few
//! microseconds to milliseconds each, repeated every step; a probe of 30 ms covers a part
//! of a step, and which part is chance. An average over whatever loops a window held moved
//! with the part of the step it fell on more than with the mode: the Transformer's windows
//! ranged from 370 to 1,190 µs a loop in one run (on a loaded machine), so probes were
//! decided by where they fell, and drops between parts of the step read as slowdowns and
//! cut main phases short. So each loop is identified by its call site and its number of indices (its *key*), the
//! main mode's cost of each key is kept (its mean over the last main phase that ran it), and
//! a window is the ratio of its loops' costs to the main mode's costs of the same keys. A
//! window of the main mode is then 1 wherever it falls in a step, and a probe at 0.8 ran the
//! same loops in 80% of the time. Loops whose key has no cost yet (the first loops of a
//! new kind of work) do not count; a probe with too few counted loops decides nothing.
//!
//! A loop's cost runs from the end of the previous loop to its own end: the program's
//! serial work before the loop counts, not only the loop. When the host runs both vCPUs on
//! one core, helpers watching for the next loop take that core's time from the caller's
//! serial work too: the loops themselves then took 138-142 µs with helpers against 129 µs
//! alone (within the margin), while whole training steps ran at 55,000 samples/s with
//! helpers against 70,000 alone. Gaps longer than [`MAX_GAP`] (the program doing something
//! else: loading data, printing) count as that.
//!
//! Main phases last a second after a switch (the first 200 ms). Those with helpers double
//! while probes confirm them, up to four seconds, so the solo probes, which cost the most
//! where many helpers pay, take under 1% of the time. Those of the caller alone stay at a
//! second: a probe of the helpers costs little even where they lose, and the host's return
//! of the second core is found within a second. Where helpers do not pay, they sleep
//! through the main phases and the caller runs at the speed of one thread.
//!
//! The host's changes also come in stretches of a second or two, shorter than a main phase
//! (the MLP on 2 threads fell to about 50,000 samples/s for 1-2 s at a time, below the
//! 72,000 of one thread). So a main phase also watches its loops in stretches of a probe's
//! length: a stretch [`SLOWDOWN`] slower than the main mode's costs of its keys ends the
//! phase, and the probe that follows must beat that stretch.
//!
//! Which thread runs which part of a loop never changes a result (the parts are fixed by
//! the work's shape), so the tuner changes timing only. `EMBER_THREAD_TUNING=0` turns it off
//! (helpers join every loop); `EMBER_THREAD_TUNING=log` prints every probe's outcome.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::panic::Location;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The length of a main phase after a probe that changed the mode, and of every main phase
/// of the caller alone; each probe that confirms the helpers doubles theirs, up to
/// [`LONGEST_MAIN`].
const MAIN: Duration = Duration::from_secs(1);

/// The longest main phase with helpers: a solo probe costs a share of its time where the
/// helpers win (with 16 helpers worth having, it runs at a sixteenth of the speed), so
/// helpers that keep winning are probed less often, and a change of the host is still found
/// within seconds.
const LONGEST_MAIN: Duration = Duration::from_secs(4);

/// The length of the first main phase: short, so that a program started on a host that
/// shares one core between the vCPUs finds out soon.
const FIRST_MAIN: Duration = Duration::from_millis(200);

/// The length of a probe, of the measurement of the main mode after it, and of the
/// stretches a main phase watches for a slowdown.
const PROBE: Duration = Duration::from_millis(30);

/// The fewest loops a window lasts, and the fewest loops with a known cost a probe (and the
/// measurement after it) must hold to decide anything.
const MIN_LOOPS: u64 = 32;

/// How much faster a probe's loops must be than the main mode's to change the main mode.
const MARGIN: f64 = 0.1;

/// How much slower than the main mode's costs a stretch of a main phase must run to end the
/// phase and probe at once: the host's changes come at any time and can last only a second
/// or two, less than a main phase.
const SLOWDOWN: f64 = 0.3;

/// The longest gap before a loop that counts toward its cost: the serial work between the
/// loops of a step is microseconds; a longer gap is the program doing something else.
const MAX_GAP: Duration = Duration::from_millis(1);

/// The most keys whose cost is kept; a program with more distinct loops starts over.
const MAX_KEYS: usize = 4096;

/// The tuner of the process's parallel loops.
pub(crate) static TUNER: Tuner = Tuner::new();

/// `EMBER_THREAD_TUNING`: `0` turns the tuner off, `log` prints each probe's outcome to
/// standard error; read once.
fn setting() -> &'static str {
    static SETTING: OnceLock<String> = OnceLock::new();
    SETTING.get_or_init(|| std::env::var("EMBER_THREAD_TUNING").map(|v| v.trim().to_string()).unwrap_or_default())
}

/// Whether the tuner is on.
pub(crate) fn enabled() -> bool {
    setting() != "0"
}

/// What identifies a loop from one step to the next: where it is called from and its
/// number of indices.
pub(crate) fn key(site: &'static Location<'static>, n: usize) -> u64 {
    let site = std::ptr::from_ref(site) as usize as u64;
    // Both halves mixed (a multiplicative hash), so the table's hasher can pass it through.
    (site ^ (n as u64).rotate_left(32)).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// A hasher for keys that are already hashes.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | self.0 >> 56) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// Which phase the tuner is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Running in the main mode, keeping each key's cost and watching for a slowdown.
    Main,
    /// Running in the other mode.
    Probe,
    /// Back in the main mode after a probe, measured once more before deciding.
    Confirm,
}

/// A stretch of loops compared with the main mode's costs of their keys.
#[derive(Clone, Copy, Debug, Default)]
struct Window {
    /// When the window's first loop started.
    start: Option<Instant>,
    /// Every loop in the window, and those with a known cost.
    loops: u64,
    counted: u64,
    /// The counted loops' costs, and the main mode's costs of their keys (seconds).
    cost: f64,
    reference: f64,
}

impl Window {
    /// Adds a loop that ended at `now` after costing `cost`, with the main mode's cost of
    /// its key if known.
    fn add(&mut self, now: Instant, took: Duration, cost: f64, reference: Option<f64>) {
        self.start.get_or_insert(now.checked_sub(took).unwrap_or(now));
        self.loops += 1;
        if let Some(r) = reference {
            self.counted += 1;
            self.cost += cost;
            self.reference += r;
        }
    }

    /// Whether the window has lasted [`PROBE`] and [`MIN_LOOPS`] loops by `now`.
    fn done(&self, now: Instant) -> bool {
        self.loops >= MIN_LOOPS && self.start.is_some_and(|s| now.saturating_duration_since(s) >= PROBE)
    }

    /// Its loops' time as a share of the main mode's for the same loops, if enough of them
    /// had a known cost.
    fn ratio(&self) -> Option<f64> {
        (self.counted >= MIN_LOOPS && self.reference > 0.0).then(|| self.cost / self.reference)
    }
}

/// The mode loops run in now, and the phases that decide it.
pub(crate) struct Tuner {
    /// Whether loops run on the caller alone now.
    solo: AtomicBool,
    state: Mutex<Option<State>>,
}

/// What the main mode costs one key.
#[derive(Clone, Copy, Debug, Default)]
struct Cost {
    /// Its mean cost (seconds) over the last main phase that ran it: what the loops of a
    /// probe, of the main mode after it and of a stretch watched for a slowdown are compared
    /// with. It changes only when a main phase ends, so a slowdown within a phase stands
    /// out against it.
    reference: Option<f64>,
    /// The current main phase's loops of the key, and their total cost.
    loops: u32,
    total: f64,
}

/// Where the tuner is in its phases.
struct State {
    /// The mode of the main phases.
    main_solo: bool,
    phase: Phase,
    /// When the current phase began.
    phase_start: Instant,
    /// The loops of the current phase so far.
    phase_loops: u64,
    /// The length of the current (or next) main phase.
    main_len: Duration,
    /// The main mode's cost of each key.
    costs: HashMap<u64, Cost, BuildHasherDefault<KeyHasher>>,
    /// When the last recorded loop ended: the gap from it counts toward the next loop's cost.
    last_end: Instant,
    /// The window being measured: the probe, the main mode after it, or the stretch of a
    /// main phase watched for a slowdown.
    window: Window,
    /// The main mode's ratio before the probe: 1, or the slowed stretch that ended the phase.
    before: f64,
    /// The probe's ratio, once it is over.
    probe: f64,
}

impl State {
    fn new(now: Instant) -> State {
        State {
            main_solo: false,
            phase: Phase::Main,
            phase_start: now,
            phase_loops: 0,
            main_len: FIRST_MAIN,
            costs: HashMap::default(),
            last_end: now,
            window: Window::default(),
            before: 1.0,
            probe: 1.0,
        }
    }

    /// Ends a main phase: its mean cost of each key it ran becomes the key's reference.
    fn fold_costs(&mut self) {
        for c in self.costs.values_mut() {
            if c.loops > 0 {
                c.reference = Some(c.total / f64::from(c.loops));
                (c.loops, c.total) = (0, 0.0);
            }
        }
    }

    /// Starts `phase` at `now`.
    fn enter(&mut self, phase: Phase, now: Instant) {
        self.phase = phase;
        self.phase_start = now;
        self.phase_loops = 0;
        self.window = Window::default();
    }

    /// Whether loops of the current phase run on the caller alone.
    fn solo(&self) -> bool {
        if self.phase == Phase::Probe { !self.main_solo } else { self.main_solo }
    }

    /// Decides after the main mode was measured again, and starts the next main phase.
    fn decide(&mut self, after: Option<f64>, now: Instant) {
        if let Some(after) = after {
            // The probe must beat the main mode both before and after it.
            let switch = self.probe < self.before.min(after) * (1.0 - MARGIN);
            if setting() == "log" {
                let mode = |solo: bool| if solo { "caller alone" } else { "with helpers" };
                eprintln!(
                    "ember thread tuning: {} at {:.2} of the main mode's time, {} at {:.2} then {:.2}: {}",
                    mode(!self.main_solo),
                    self.probe,
                    mode(self.main_solo),
                    self.before,
                    after,
                    mode(self.main_solo != switch)
                );
            }
            if switch {
                self.main_solo = !self.main_solo;
                self.main_len = MAIN;
                // The costs were the other mode's.
                self.costs.clear();
            } else {
                // A phase cut short by a slowdown is folded in now, so that a slowdown of
                // both modes becomes the measure rather than a probe after every stretch.
                self.fold_costs();
                // Only phases with helpers grow (see the module's docs).
                self.main_len = if self.main_solo { MAIN } else { (self.main_len * 2).clamp(MAIN, LONGEST_MAIN) };
            }
        }
        self.enter(Phase::Main, now);
    }
}

impl Tuner {
    const fn new() -> Tuner {
        Tuner { solo: AtomicBool::new(false), state: Mutex::new(None) }
    }

    /// Whether loops should run on the caller alone now.
    pub(crate) fn solo(&self) -> bool {
        self.solo.load(Ordering::Relaxed)
    }

    /// Records a loop of `key` ([`key`]) that took `took` of wall time and ended at `now`,
    /// and moves to the next phase when this one is over.
    pub(crate) fn record(&self, key: u64, took: Duration, now: Instant) {
        // Loops finishing at the same moment on other threads skip their record rather than
        // wait: the costs need samples, not every loop.
        let Some(mut guard) = self.state.try_lock() else { return };
        let s = guard.get_or_insert_with(|| State::new(now.checked_sub(took).unwrap_or(now)));
        let gap = now.saturating_duration_since(s.last_end).saturating_sub(took).min(MAX_GAP);
        s.last_end = now;
        let cost = (gap + took).as_secs_f64();
        let reference = s.costs.get(&key).and_then(|c| c.reference);
        s.phase_loops += 1;
        s.window.add(now, took, cost, reference);
        let elapsed = now.saturating_duration_since(s.phase_start);
        match s.phase {
            Phase::Main => {
                if s.costs.len() >= MAX_KEYS && !s.costs.contains_key(&key) {
                    s.costs.clear();
                }
                let c = s.costs.entry(key).or_default();
                c.loops += 1;
                c.total += cost;
                let mut slowed = None;
                if s.window.done(now) {
                    slowed = s.window.ratio().filter(|&r| r > 1.0 + SLOWDOWN);
                    s.window = Window::default();
                }
                if let Some(ratio) = slowed {
                    if setting() == "log" {
                        eprintln!("ember thread tuning: loops slowed to {ratio:.2} of their cost, probing now");
                    }
                    // Compared, like the probe, with the costs from before the slowdown.
                    s.before = ratio;
                    s.enter(Phase::Probe, now);
                } else if elapsed >= s.main_len && s.phase_loops >= MIN_LOOPS {
                    s.before = 1.0;
                    s.fold_costs();
                    s.enter(Phase::Probe, now);
                }
            }
            Phase::Probe => {
                if s.window.done(now) {
                    match s.window.ratio() {
                        Some(ratio) => {
                            s.probe = ratio;
                            s.enter(Phase::Confirm, now);
                        }
                        // Too few loops with a known cost: nothing to compare.
                        None => s.decide(None, now),
                    }
                }
            }
            Phase::Confirm => {
                if s.window.done(now) {
                    let after = s.window.ratio();
                    s.decide(after, now);
                }
            }
        }
        self.solo.store(s.solo(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key of the loops the tests feed, unless they say otherwise.
    const KEY: u64 = 1;

    /// Reads the tuner's state (after at least one loop).
    fn state<R>(tuner: &Tuner, f: impl FnOnce(&State) -> R) -> R {
        f(tuner.state.lock().as_ref().expect("a loop was recorded"))
    }

    fn main_solo(tuner: &Tuner) -> bool {
        state(tuner, |s| s.main_solo)
    }

    fn main_len(tuner: &Tuner) -> Duration {
        state(tuner, |s| s.main_len)
    }

    fn probing(tuner: &Tuner) -> bool {
        state(tuner, |s| s.phase == Phase::Probe)
    }

    /// Feeds `tuner` loops of `took` each, back to back from `*now`, for `span`, taking
    /// `took` from `solo_took` while the tuner runs solo.
    fn feed(tuner: &Tuner, now: &mut Instant, span: Duration, team_took: Duration, solo_took: Duration) {
        feed_with_gaps(tuner, now, span, (team_took, Duration::ZERO), (solo_took, Duration::ZERO));
    }

    /// Feeds `tuner` loops for `span` from `*now`: each one `(took, gap)` of the mode the
    /// tuner is in, `took` in the loop after `gap` of the program's serial work.
    fn feed_with_gaps(
        tuner: &Tuner,
        now: &mut Instant,
        span: Duration,
        team: (Duration, Duration),
        solo: (Duration, Duration),
    ) {
        let end = *now + span;
        while *now < end {
            let (took, gap) = if tuner.solo() { solo } else { team };
            *now += gap + took;
            tuner.record(KEY, took, *now);
        }
    }

    /// Whether the tuner is in a main phase (not probing, not measuring again after one).
    fn in_main_phase(tuner: &Tuner) -> bool {
        state(tuner, |s| s.phase == Phase::Main)
    }

    /// Feeds loops of 100 µs with helpers and 160 µs alone until the next main phase begins.
    fn to_next_main_phase(tuner: &Tuner, now: &mut Instant) {
        let (us, ms) = (Duration::from_micros, Duration::from_millis);
        while in_main_phase(tuner) {
            feed(tuner, now, ms(1), us(100), us(160));
        }
        while !in_main_phase(tuner) {
            feed(tuner, now, ms(1), us(100), us(160));
        }
    }

    /// A tuner that has run long enough with helpers that help (100 µs a loop with them,
    /// 160 alone) for its main phases to reach their longest, at the start of one.
    fn settled_with_helpers(now: &mut Instant) -> Tuner {
        let tuner = Tuner::new();
        feed(&tuner, now, LONGEST_MAIN * 3, Duration::from_micros(100), Duration::from_micros(160));
        assert_eq!(main_len(&tuner), LONGEST_MAIN);
        to_next_main_phase(&tuner, now);
        tuner
    }

    #[test]
    fn a_faster_mode_found_by_a_probe_becomes_the_main_mode() {
        let tuner = Tuner::new();
        let mut now = Instant::now();
        let us = Duration::from_micros;
        // Helpers help (loops of 100 µs with them, 160 µs alone): the probe of solo running
        // loses, and the team stays the main mode through several rounds.
        feed(&tuner, &mut now, LONGEST_MAIN * 3, us(100), us(160));
        assert!(!tuner.solo() || probing(&tuner));
        assert!(!main_solo(&tuner));
        // The host takes the second core away: with helpers, loops now take 200 µs. The next
        // probe of solo running wins and the caller runs alone from then on.
        feed(&tuner, &mut now, LONGEST_MAIN * 3, us(200), us(160));
        assert!(main_solo(&tuner));
        // The cores come back: a probe of the team wins again.
        feed(&tuner, &mut now, LONGEST_MAIN * 3, us(100), us(160));
        assert!(!main_solo(&tuner));
    }

    #[test]
    fn confirmed_modes_are_probed_less_often_and_a_switch_resets_that() {
        let tuner = Tuner::new();
        let mut now = Instant::now();
        let us = Duration::from_micros;
        feed(&tuner, &mut now, LONGEST_MAIN * 4, us(100), us(160));
        assert_eq!(main_len(&tuner), LONGEST_MAIN);
        // The host takes a core away: the first probe after that switches, and the main
        // phases start again from a second.
        let mut fed = Duration::ZERO;
        while !main_solo(&tuner) && fed < LONGEST_MAIN * 2 {
            feed(&tuner, &mut now, Duration::from_millis(1), us(200), us(160));
            fed += Duration::from_millis(1);
        }
        assert!(main_solo(&tuner));
        assert_eq!(main_len(&tuner), MAIN);
    }

    #[test]
    fn solo_main_phases_stay_short() {
        let tuner = Tuner::new();
        let mut now = Instant::now();
        let us = Duration::from_micros;
        // Helpers keep losing: the caller runs alone, and the helpers are still probed
        // every main phase's length, so their return is found within one.
        feed(&tuner, &mut now, LONGEST_MAIN * 4, us(200), us(160));
        assert!(main_solo(&tuner));
        assert_eq!(main_len(&tuner), MAIN);
    }

    #[test]
    fn the_first_probe_comes_early() {
        let tuner = Tuner::new();
        let mut now = Instant::now();
        let us = Duration::from_micros;
        // Started on a host where helpers slow loops down, the caller runs alone well
        // before the first full main phase would have ended.
        feed(&tuner, &mut now, FIRST_MAIN + PROBE * 3 + Duration::from_millis(2), us(200), us(160));
        assert!(main_solo(&tuner));
    }

    #[test]
    fn a_slowdown_within_a_main_phase_is_probed_at_once() {
        let mut now = Instant::now();
        let us = Duration::from_micros;
        let ms = Duration::from_millis;
        // At the beginning of a four-second main phase with helpers, the host takes a core
        // away for a moment: the caller runs alone well before the phase would have ended.
        let tuner = settled_with_helpers(&mut now);
        feed(&tuner, &mut now, PROBE * 4, us(200), us(160));
        assert!(main_solo(&tuner));
        // A steady main phase never ends early: no probe for a main phase's length.
        let tuner = settled_with_helpers(&mut now);
        let main_len = main_len(&tuner);
        let mut fed = Duration::ZERO;
        while fed + ms(10) < main_len {
            feed(&tuner, &mut now, ms(1), us(100), us(120));
            fed += ms(1);
            assert!(in_main_phase(&tuner), "probed {fed:?} into a main phase of {main_len:?}");
        }
    }

    #[test]
    fn a_change_of_the_programs_work_during_a_probe_changes_nothing() {
        let mut now = Instant::now();
        let us = Duration::from_micros;
        let ms = Duration::from_millis;
        // Training, where helpers help, then an evaluation pass of larger loops (250 µs
        // with helpers, 500 alone) that trips the slowdown watch; training resumes during
        // the probe, whose loops (a few slow ones, then training's 160 µs) beat the
        // evaluation's 250 µs, but not the training loops measured after the probe.
        let tuner = settled_with_helpers(&mut now);
        feed(&tuner, &mut now, PROBE + ms(2), us(250), us(500));
        assert!(probing(&tuner));
        feed(&tuner, &mut now, PROBE * 2 + ms(5), us(100), us(160));
        assert!(in_main_phase(&tuner));
        assert!(!main_solo(&tuner));
    }

    #[test]
    fn time_between_loops_counts() {
        let tuner = Tuner::new();
        let mut now = Instant::now();
        let us = Duration::from_micros;
        // The loops alone favour the helpers (100 µs against 110), but with them the serial
        // work between loops takes 80 µs instead of 20: 180 µs a loop against 130, so the
        // caller runs alone.
        feed_with_gaps(&tuner, &mut now, LONGEST_MAIN * 2, (us(100), us(80)), (us(110), us(20)));
        assert!(main_solo(&tuner));
        // Equal gaps leave the loops to decide: the helpers win again.
        feed_with_gaps(&tuner, &mut now, LONGEST_MAIN * 3, (us(100), us(20)), (us(160), us(20)));
        assert!(!main_solo(&tuner));
    }

    #[test]
    fn a_difference_within_the_margin_changes_nothing() {
        let tuner = Tuner::new();
        let mut now = Instant::now();
        let us = Duration::from_micros;
        feed(&tuner, &mut now, LONGEST_MAIN * 3, us(100), us(105));
        assert!(!main_solo(&tuner));
        feed(&tuner, &mut now, LONGEST_MAIN * 3, us(100), us(95));
        assert!(!main_solo(&tuner));
    }

    #[test]
    fn probes_wait_for_enough_loops() {
        let tuner = Tuner::new();
        let mut now = Instant::now();
        // Loops of 100 ms: a main phase holds only ten, so it lasts until it has measured
        // MIN_LOOPS of them, and no probe starts before.
        let ms = Duration::from_millis;
        feed(&tuner, &mut now, MAIN * 2, ms(100), ms(300));
        assert!(!tuner.solo());
        assert!(in_main_phase(&tuner));
    }

    /// Feeds one step after another for `span`: each step the loops `(key, took with
    /// helpers, took alone)` of `step`, back to back.
    fn feed_steps(tuner: &Tuner, now: &mut Instant, span: Duration, step: &[(u64, Duration, Duration)]) -> u32 {
        let end = *now + span;
        let mut probes = 0;
        let mut was_probing = false;
        while *now < end {
            for &(key, team, solo) in step {
                let took = if tuner.solo() { solo } else { team };
                *now += took;
                tuner.record(key, took, *now);
                let p = probing(tuner);
                probes += u32::from(p && !was_probing);
                was_probing = p;
            }
        }
        probes
    }

    /// A step of loops of very different lengths: 20 of 30 µs (the optimizer's update),
    /// 10 of 2 ms (products), 40 of 200 µs (softmaxes, norms), each a key of its own; the
    /// helpers make every loop 40% faster.
    fn mixed_step() -> Vec<(u64, Duration, Duration)> {
        let us = Duration::from_micros;
        let mut step = vec![];
        for i in 0..20 {
            step.push((100 + i, us(30), us(42)));
        }
        for i in 0..10 {
            step.push((200 + i, us(2_000), us(2_800)));
        }
        for i in 0..40 {
            step.push((300 + i, us(200), us(280)));
        }
        step
    }

    #[test]
    fn loops_of_different_lengths_are_each_compared_with_their_own_kind() {
        // Where a window falls in the step decides its average loop time (30 µs to 2 ms),
        // but not its ratio to the same loops' costs: the helpers, faster on every loop,
        // stay the main mode, and the main phases grow to their longest, without the drops
        // between parts of the step reading as slowdowns.
        let tuner = Tuner::new();
        let mut now = Instant::now();
        let probes = feed_steps(&tuner, &mut now, LONGEST_MAIN * 6, &mixed_step());
        assert!(!main_solo(&tuner));
        assert_eq!(main_len(&tuner), LONGEST_MAIN);
        // 24 s with main phases of 1, 2, 4, 4, ... s: about 8 probes, not one per window.
        assert!(probes <= 10, "{probes} probes in 24 s");
    }

    #[test]
    fn a_slower_mode_on_every_loop_loses_wherever_its_probe_falls() {
        // The caller alone is faster on every loop of the mixed step (the host runs both
        // vCPUs on one core): the first probe finds it.
        let tuner = Tuner::new();
        let mut now = Instant::now();
        let step: Vec<_> = mixed_step().into_iter().map(|(k, team, solo)| (k, solo * 2, team * 2)).collect();
        feed_steps(&tuner, &mut now, MAIN * 3, &step);
        assert!(main_solo(&tuner));
    }

    #[test]
    fn loops_never_seen_in_the_main_mode_decide_nothing() {
        // A probe that meets only new kinds of loops (evaluation after training) has no
        // costs to compare them with and leaves the mode as it is, however fast they run.
        let mut now = Instant::now();
        let tuner = settled_with_helpers(&mut now);
        let us = Duration::from_micros;
        // End the main phase with the training loops, then the probe sees new keys only.
        while in_main_phase(&tuner) {
            feed(&tuner, &mut now, Duration::from_millis(1), us(100), us(160));
        }
        let end = now + PROBE * 4;
        let mut key = 10_000;
        while now < end {
            now += us(50);
            tuner.record(key, us(50), now);
            key += 1;
        }
        assert!(!main_solo(&tuner));
    }

    #[test]
    fn keys_tell_call_sites_and_sizes_apart() {
        let here = Location::caller();
        let there = Location::caller();
        assert_ne!(key(here, 8), key(there, 8));
        assert_ne!(key(here, 8), key(here, 9));
        assert_eq!(key(here, 8), key(here, 8));
    }
}
