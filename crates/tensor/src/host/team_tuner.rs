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
//! and compares the probe's loops with the same measure over the same length of time at the
//! end of the main phase and right after the probe, back in the main mode: the probe must
//! beat both, so a change of the program's own work during the probe
//! (evaluation giving way to training) is not taken for a faster mode. A training loop
//! repeats the same kernels every step, so phases of tens of milliseconds see the same mix
//! of loops. A probe faster by [`MARGIN`] than both makes its mode the main one. Main phases
//! last a second after a switch (the first 200 ms). Those with helpers double while probes
//! confirm them, up to four seconds, so the solo probes, which cost the most where many
//! helpers pay, take under 1% of the time. Those of the caller alone stay at a second: a
//! probe of the helpers costs little even where they lose, and the host's return of the
//! second core is found within a second. Where helpers do not pay, they sleep through the
//! main phases and the caller runs at the speed of one thread.
//!
//! A loop's cost is the wall time from the end of the previous loop to its own end, less
//! the heavy loops run in between (they run with helpers in either mode): the program's
//! serial work between the loops counts, not only the loops. When the host runs
//! both vCPUs on one core, helpers watching for the next loop take that core's time from the
//! caller's serial work too: the loops themselves then took 138-142 µs with helpers against
//! 129 µs alone (within the margin), while whole training steps ran at 55,000 samples/s with
//! helpers against 70,000 alone.
//!
//! Windows are compared loop for loop, not by their average loop: a long training step (a
//! Transformer's, hundreds of milliseconds) mixes stretches of small loops with stretches
//! where large products run between few measured loops, so two windows of the same mode at
//! different points of the step differ by 2-3x. Each loop is known by its call site (the
//! closure's type), its index count and the loop before it (a layer norm after the
//! attention has other serial work before it than one after the feed-forward), and the
//! tuner keeps each such loop's usual cost in either mode: quick to fall, so that a
//! program's slow first steps are soon forgotten, and slow to rise, so that a slowdown of
//! the host stands out. A window's measure is its loops' cost over their usual cost in the
//! main mode: about 1 for a window of the main mode wherever it falls in the step, the
//! other mode's relative cost for a probe. Loops not yet seen in the main mode are left
//! out. With an average per loop instead, an encoder step of 240 ms probed about once every
//! 200 ms, 3-5% of its speed, and a probe that fell on a stretch of small loops could pass
//! for a faster mode.
//!
//! The host's changes also come in stretches of a second or two, shorter than a main phase
//! (the MLP on 2 threads fell to about 50,000 samples/s for 1-2 s at a time, below the
//! 72,000 of one thread). So a main phase also watches its loops in stretches of a probe's
//! length: a stretch whose measure is [`SLOWDOWN`] over the one the main mode was last found at
//! ends the phase, and the probe that follows is compared with that stretch. A change of the
//! program's own work (an evaluation pass after training) can trigger it too; the probe
//! then confirms the mode, and the new loops become the measure.
//!
//! Which thread runs which part of a loop never changes a result (the parts are fixed by
//! the work's shape), so the tuner changes timing only. `EMBER_THREAD_TUNING=0` turns it off
//! (helpers join every loop); `EMBER_THREAD_TUNING=log` prints every probe's outcome.

use parking_lot::Mutex;
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

/// The length of a probe, and of the end of a main phase it is compared with.
const PROBE: Duration = Duration::from_millis(30);

/// The fewest loops a probe, or the end of a main phase, averages over.
const MIN_LOOPS: u64 = 32;

/// How much faster a probe's loops must be on average to change the main mode.
const MARGIN: f64 = 0.1;

/// How much slower than its last measurement a main phase's loops must become, averaged
/// over a probe's length, to end the phase and probe at once: the host's changes come at
/// any time and can last only a second or two, less than a main phase.
const SLOWDOWN: f64 = 0.3;

/// How many loops (call site, index count and the loop before) the tuner keeps the usual
/// cost of, per mode; more evict each other, and an evicted loop is left out until it is
/// seen again.
const KNOWN_LOOPS: usize = 256;

/// How far a cost below the usual one moves it: quickly, so that the slow first steps of
/// a program (allocations, cold caches) are forgotten within a few steps.
const FASTER_WEIGHT: f64 = 0.5;

/// How many neighbouring slots a loop may take in the table of usual costs.
const WAYS: usize = 4;

/// How far one loop's cost moves its usual cost: slowly, so that a stretch where the host
/// slows down stands out against the usual costs before they follow it.
const USUAL_WEIGHT: f64 = 1.0 / 16.0;

/// Identifies a loop's call site for the tuner: a value fixed per site (such as the
/// address of its closure's type name) and the loop's index count. The tuner adds the key
/// of the loop before (`Tuner::record`).
pub(crate) fn loop_key(site: usize, n: usize) -> u64 {
    // Odd multipliers mix both into the high bits, which pick the table slot.
    (site as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (n as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
}

/// Each known loop's usual cost in one mode, in seconds.
struct Usual {
    keys: [u64; KNOWN_LOOPS],
    /// 0 where the slot is empty.
    cost: [f64; KNOWN_LOOPS],
    /// When each cost last moved: at most once per [`PROBE`], so that a loop run thousands
    /// of times a second does not carry its usual cost along through a slowdown before the
    /// watch has measured it.
    moved: [Option<Instant>; KNOWN_LOOPS],
    /// How many costs each usual cost has taken in (up to `1 / USUAL_WEIGHT`): the first
    /// is replaced by the second (a program's first run of a loop pays for its warm-up),
    /// which the next ones are averaged with until the weight reaches [`USUAL_WEIGHT`].
    samples: [u32; KNOWN_LOOPS],
}

impl Usual {
    const fn new() -> Usual {
        Usual {
            keys: [0; KNOWN_LOOPS],
            cost: [0.0; KNOWN_LOOPS],
            moved: [None; KNOWN_LOOPS],
            samples: [0; KNOWN_LOOPS],
        }
    }

    /// The slots loop `key` may take: [`WAYS`] neighbours, so that a few loops whose keys
    /// pick the same slot do not evict each other.
    fn slots(key: u64) -> impl Iterator<Item = usize> {
        let first = Usual::first_slot(key);
        (0..WAYS).map(move |w| (first + w) % KNOWN_LOOPS)
    }

    /// The first of [`Usual::slots`], which an unknown loop takes when all are in use.
    fn first_slot(key: u64) -> usize {
        (key >> 56) as usize % KNOWN_LOOPS
    }

    fn find(&self, key: u64) -> Option<usize> {
        Usual::slots(key).find(|&i| self.keys[i] == key && self.cost[i] > 0.0)
    }

    /// The loop's usual cost, if known.
    fn get(&self, key: u64) -> Option<f64> {
        self.find(key).map(|i| self.cost[i])
    }

    /// Moves the loop's usual cost toward `cost`; a loop not known takes an empty slot of
    /// its own, else its first one (evicting the loop there).
    fn learn(&mut self, key: u64, cost: f64, now: Instant) {
        if let Some(i) = self.find(key) {
            if self.moved[i].is_none_or(|t| now.saturating_duration_since(t) >= PROBE) {
                let weight = if self.samples[i] <= 1 {
                    1.0
                } else if cost < self.cost[i] {
                    FASTER_WEIGHT
                } else {
                    (1.0 / self.samples[i] as f64).max(USUAL_WEIGHT)
                };
                self.cost[i] += (cost - self.cost[i]) * weight;
                self.moved[i] = Some(now);
                self.samples[i] = (self.samples[i] + 1).min((1.0 / USUAL_WEIGHT) as u32);
            }
            return;
        }
        let i = Usual::slots(key).find(|&i| self.cost[i] <= 0.0).unwrap_or(Usual::first_slot(key));
        (self.keys[i], self.cost[i], self.moved[i], self.samples[i]) = (key, cost, Some(now), 1);
    }
}

/// Loops measured in one window: their count, their cost and their usual cost in the main
/// mode, in seconds.
#[derive(Clone, Copy)]
struct Window {
    loops: u64,
    cost: f64,
    usual: f64,
}

impl Window {
    const EMPTY: Window = Window { loops: 0, cost: 0.0, usual: 0.0 };

    fn add(&mut self, cost: f64, usual: f64) {
        self.loops += 1;
        self.cost += cost;
        self.usual += usual;
    }

    /// The window's cost over the main mode's usual cost of the same loops (1 for no
    /// loops).
    fn measure(&self) -> f64 {
        if self.usual > 0.0 { self.cost / self.usual } else { 1.0 }
    }
}

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

/// The mode loops run in now, and the phases that decide it.
pub(crate) struct Tuner {
    /// Whether loops run on the caller alone now.
    solo: AtomicBool,
    state: Mutex<State>,
}

/// Where the tuner is in its phases.
struct State {
    /// The mode of the main phases.
    main_solo: bool,
    /// Whether the current phase is a probe of the other mode.
    probing: bool,
    /// Whether the current phase measures the main mode again after a probe.
    confirming: bool,
    /// The last probe's loops.
    probe: Window,
    /// When the current phase began (`None` before the first loop).
    phase_start: Option<Instant>,
    /// The loops measured so far in the current window.
    window: Window,
    /// Whether the current window has begun (a main phase measures only its end).
    measuring: bool,
    /// The last main phase's window.
    reference: Window,
    /// The length of the current (or next) main phase.
    main_len: Duration,
    /// The measure the main mode was last found at (the end of the last main phase, or the
    /// probe that made it the main mode, against the usual costs of the time).
    baseline: Option<f64>,
    /// The current stretch of a main phase watched for a slowdown: when its first loop
    /// started, and its loops.
    watch: (Option<Instant>, Window),
    /// When the last loop ended: the next loop's cost runs from there, less the heavy loops
    /// run since (`heavy`).
    last_end: Option<Instant>,
    heavy: Duration,
    /// The last loop's key.
    prev_key: u64,
    /// Each loop's usual cost with helpers and alone.
    usual_team: Usual,
    usual_solo: Usual,
    /// Probes started so far.
    probes: u64,
}

impl State {
    /// Adds a main-phase loop to the stretch being watched, and says whether the stretch,
    /// [`PROBE`] long, ran [`SLOWDOWN`] slower than the main mode's baseline.
    fn watch_for_slowdown(&mut self, cost: f64, usual: f64, now: Instant) -> bool {
        let Some(baseline) = self.baseline else { return false };
        let (start, stretch) = &mut self.watch;
        let start = *start.get_or_insert(now);
        stretch.add(cost, usual);
        if stretch.loops < MIN_LOOPS || now.saturating_duration_since(start) < PROBE {
            return false;
        }
        let slowed = stretch.measure() > baseline * (1.0 + SLOWDOWN);
        if !slowed {
            self.watch = (None, Window::EMPTY);
        }
        slowed
    }

    /// The usual costs of the main mode (`main`) or of the other one.
    fn usual(&mut self, main: bool) -> &mut Usual {
        if main == self.main_solo { &mut self.usual_solo } else { &mut self.usual_team }
    }
}

impl Tuner {
    const fn new() -> Tuner {
        Tuner {
            solo: AtomicBool::new(false),
            state: Mutex::new(State {
                main_solo: false,
                probing: false,
                confirming: false,
                probe: Window::EMPTY,
                phase_start: None,
                window: Window::EMPTY,
                measuring: false,
                reference: Window::EMPTY,
                main_len: FIRST_MAIN,
                baseline: None,
                watch: (None, Window::EMPTY),
                last_end: None,
                heavy: Duration::ZERO,
                prev_key: 0,
                usual_team: Usual::new(),
                usual_solo: Usual::new(),
                probes: 0,
            }),
        }
    }

    /// Whether loops should run on the caller alone now.
    pub(crate) fn solo(&self) -> bool {
        self.solo.load(Ordering::Relaxed)
    }

    /// Records a heavy loop ([`super::team::Grain::Heavy`]) of `took`, which runs with
    /// helpers whatever the mode: its time is not part of the next measured loop's cost.
    pub(crate) fn record_heavy(&self, took: Duration) {
        // Heavy loops run from one thread at a time in practice; one missed is a sample off.
        if let Some(mut s) = self.state.try_lock() {
            s.heavy += took;
        }
    }

    /// Records loop `key` ([`loop_key`]) that took `took` of wall time and ended at `now`,
    /// and moves to the next phase when this one is over.
    pub(crate) fn record(&self, key: u64, took: Duration, now: Instant) {
        // Loops finishing at the same moment on other threads skip their record rather than
        // wait: the averages need a sample, not every loop.
        let Some(mut s) = self.state.try_lock() else { return };
        // The serial work since the last loop is this loop's too.
        let since = s.last_end.filter(|&t| t <= now).unwrap_or(now.checked_sub(took).unwrap_or(now));
        s.last_end = Some(now);
        let cost = now.saturating_duration_since(since).saturating_sub(std::mem::take(&mut s.heavy)).max(took);
        let cost = cost.as_secs_f64();
        // The loop before tells the loops of one call site apart by where they run in the
        // program (a layer norm after the attention, another after the feed-forward), with
        // different serial work before them.
        let key = key ^ std::mem::replace(&mut s.prev_key, key).rotate_left(29);
        let start = *s.phase_start.get_or_insert(now);
        let elapsed = now.saturating_duration_since(start);
        let main = s.main_len;
        let short = s.probing || s.confirming;
        let usual = s.usual(true).get(key);
        // Learned in the mode it ran in.
        let probing = s.probing;
        s.usual(!probing).learn(key, cost, now);
        if !short && !s.measuring && elapsed + PROBE >= main {
            s.measuring = true;
        }
        // Loops the main mode has not seen yet have nothing to be compared with.
        let Some(usual) = usual else { return };
        if s.measuring {
            s.window.add(cost, usual);
        }
        let slowed = !short && s.watch_for_slowdown(cost, usual, now);
        if slowed {
            // Measured over the stretch that slowed down: the probe is compared with that.
            s.window = s.watch.1;
            if setting() == "log" {
                eprintln!(
                    "ember thread tuning: loops slowed to {:.2}x their usual cost, probing now",
                    s.window.measure()
                );
            }
        }
        let window_done = slowed || s.window.loops >= MIN_LOOPS && elapsed >= if short { PROBE } else { main };
        if !window_done {
            return;
        }
        if s.probing {
            // Back to the main mode, measured once more before deciding: the program's own
            // work may have changed during the probe (training gives way to evaluation).
            s.probe = s.window;
            s.probing = false;
            s.confirming = true;
            s.measuring = true;
            self.solo.store(s.main_solo, Ordering::Relaxed);
        } else if s.confirming {
            let (before, probe, after) = (s.reference.measure(), s.probe.measure(), s.window.measure());
            // The probe must beat the main mode both before and after it.
            let switch = probe < before.min(after) * (1.0 - MARGIN);
            if setting() == "log" {
                let mode = |solo: bool| if solo { "caller alone" } else { "with helpers" };
                eprintln!(
                    "ember thread tuning: {} {:.2}x the usual cost ({} loops), {} {:.2}x then {:.2}x: {}",
                    mode(!s.main_solo),
                    probe,
                    s.probe.loops,
                    mode(s.main_solo),
                    before,
                    after,
                    mode(s.main_solo != switch)
                );
            }
            if switch {
                s.main_solo = !s.main_solo;
                s.main_len = MAIN;
                // Against the new main mode's usual costs, where it was measured.
                s.baseline = Some(1.0);
            } else {
                // Only phases with helpers grow (see the module's docs).
                s.main_len = if s.main_solo { MAIN } else { (s.main_len * 2).clamp(MAIN, LONGEST_MAIN) };
                s.baseline = Some(after);
            }
            s.watch = (None, Window::EMPTY);
            s.confirming = false;
            s.measuring = false;
            self.solo.store(s.main_solo, Ordering::Relaxed);
        } else {
            s.reference = s.window;
            s.probing = true;
            s.probes += 1;
            // A probe measures from its start.
            s.measuring = true;
            self.solo.store(!s.main_solo, Ordering::Relaxed);
        }
        s.phase_start = Some(now);
        s.window = Window::EMPTY;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        feed_loops(tuner, now, span, &[0], team, solo);
    }

    /// [`feed_with_gaps`] of loops `keys`, one after another, over and over.
    fn feed_loops(
        tuner: &Tuner,
        now: &mut Instant,
        span: Duration,
        keys: &[u64],
        team: (Duration, Duration),
        solo: (Duration, Duration),
    ) {
        let end = *now + span;
        for &key in keys.iter().cycle() {
            if *now >= end {
                break;
            }
            let (took, gap) = if tuner.solo() { solo } else { team };
            *now += gap + took;
            tuner.record(key, took, *now);
        }
    }

    /// Whether the tuner is in a main phase (not probing, not measuring again after one).
    fn in_main_phase(tuner: &Tuner) -> bool {
        let s = tuner.state.lock();
        !s.probing && !s.confirming
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
        assert_eq!(tuner.state.lock().main_len, LONGEST_MAIN);
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
        assert!(!tuner.solo() || tuner.state.lock().probing);
        assert!(!tuner.state.lock().main_solo);
        // The host takes the second core away: with helpers, loops now take 200 µs. The next
        // probe of solo running wins and the caller runs alone from then on.
        feed(&tuner, &mut now, LONGEST_MAIN * 3, us(200), us(160));
        assert!(tuner.state.lock().main_solo);
        // The cores come back: a probe of the team wins again.
        feed(&tuner, &mut now, LONGEST_MAIN * 3, us(100), us(160));
        assert!(!tuner.state.lock().main_solo);
    }

    #[test]
    fn confirmed_modes_are_probed_less_often_and_a_switch_resets_that() {
        let tuner = Tuner::new();
        let mut now = Instant::now();
        let us = Duration::from_micros;
        feed(&tuner, &mut now, LONGEST_MAIN * 4, us(100), us(160));
        assert_eq!(tuner.state.lock().main_len, LONGEST_MAIN);
        // The host takes a core away: the first probe after that switches, and the main
        // phases start again from a second.
        let mut fed = Duration::ZERO;
        while !tuner.state.lock().main_solo && fed < LONGEST_MAIN * 2 {
            feed(&tuner, &mut now, Duration::from_millis(1), us(200), us(160));
            fed += Duration::from_millis(1);
        }
        let s = tuner.state.lock();
        assert!(s.main_solo);
        assert_eq!(s.main_len, MAIN);
    }

    #[test]
    fn solo_main_phases_stay_short() {
        let tuner = Tuner::new();
        let mut now = Instant::now();
        let us = Duration::from_micros;
        // Helpers keep losing: the caller runs alone, and the helpers are still probed
        // every main phase's length, so their return is found within one.
        feed(&tuner, &mut now, LONGEST_MAIN * 4, us(200), us(160));
        let s = tuner.state.lock();
        assert!(s.main_solo);
        assert_eq!(s.main_len, MAIN);
    }

    #[test]
    fn the_first_probe_comes_early() {
        let tuner = Tuner::new();
        let mut now = Instant::now();
        let us = Duration::from_micros;
        // Started on a host where helpers slow loops down, the caller runs alone well
        // before the first full main phase would have ended.
        feed(&tuner, &mut now, FIRST_MAIN + PROBE * 3 + Duration::from_millis(2), us(200), us(160));
        assert!(tuner.state.lock().main_solo);
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
        assert!(tuner.state.lock().main_solo);
        // A steady main phase never ends early: no probe for a main phase's length.
        let tuner = settled_with_helpers(&mut now);
        let main_len = tuner.state.lock().main_len;
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
        assert!(tuner.state.lock().probing);
        feed(&tuner, &mut now, PROBE * 2 + ms(5), us(100), us(160));
        assert!(in_main_phase(&tuner));
        assert!(!tuner.state.lock().main_solo);
    }

    /// Counts the probes, and the switches to running alone, over `steps` training steps
    /// of 220 ms: 20 ms of short loops (100 µs with helpers, 160 alone), then 100 ms of loops
    /// 1 ms apart and 100 ms of loops 2.5 ms apart (large products between them), five loops
    /// of each kind, with helpers `slower` times slower than that.
    fn mixed_steps(tuner: &Tuner, now: &mut Instant, steps: usize, slower: f64) -> (u64, u64) {
        let us = |t: f64| Duration::from_secs_f64(t * 1e-6);
        let ms = Duration::from_millis;
        let (probes, mut switches) = (tuner.state.lock().probes, 0);
        for _ in 0..steps {
            let solo_before = tuner.state.lock().main_solo;
            for (i, (span, took)) in [(ms(20), 100.0), (ms(100), 1000.0), (ms(100), 2500.0)].into_iter().enumerate() {
                let keys: Vec<u64> = (0..5).map(|k| loop_key(i, k)).collect();
                feed_loops(tuner, now, span, &keys, (us(took * slower), us(0.0)), (us(took * 1.6), us(0.0)));
            }
            switches += u64::from(!solo_before && tuner.state.lock().main_solo);
        }
        (tuner.state.lock().probes - probes, switches)
    }

    #[test]
    fn a_step_of_mixed_loops_is_compared_loop_for_loop() {
        let mut now = Instant::now();
        let tuner = Tuner::new();
        // 22 s of steps whose stretches differ 25-fold: about one probe per main phase
        // (1, 2, then 4 s), none of them a switch.
        let (probes, switches) = mixed_steps(&tuner, &mut now, 100, 1.0);
        assert!(probes <= 10, "{probes} probes in 100 steps");
        assert_eq!(switches, 0);
        // The host takes a core away (helpers now slow every loop down 2.5 times past the
        // speed alone): the caller runs alone within a longest main phase and a step or two.
        let (probes, switches) = mixed_steps(&tuner, &mut now, 25, 4.0);
        assert!(probes >= 1 && switches == 1, "{probes} probes, {switches} switches");
        assert!(tuner.state.lock().main_solo);
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
        assert!(tuner.state.lock().main_solo);
        // Equal gaps leave the loops to decide: the helpers win again.
        feed_with_gaps(&tuner, &mut now, LONGEST_MAIN * 3, (us(100), us(20)), (us(160), us(20)));
        assert!(!tuner.state.lock().main_solo);
    }

    #[test]
    fn a_difference_within_the_margin_changes_nothing() {
        let tuner = Tuner::new();
        let mut now = Instant::now();
        let us = Duration::from_micros;
        feed(&tuner, &mut now, LONGEST_MAIN * 3, us(100), us(105));
        assert!(!tuner.state.lock().main_solo);
        feed(&tuner, &mut now, LONGEST_MAIN * 3, us(100), us(95));
        assert!(!tuner.state.lock().main_solo);
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
}
