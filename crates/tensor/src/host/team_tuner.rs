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
//! and compares the wall time per loop in the probe with the same measure over the same
//! length of time at the end of the main phase and right after the probe, back in the main
//! mode: the probe must beat both, so a change of the program's own work during the probe
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
//! The wall time per loop runs from the start of a window's first loop to the end of its
//! last, divided by its loops: the program's serial work between the loops counts, not only
//! the loops. When the host runs both vCPUs on one core, helpers watching for the next loop
//! take that core's time from the caller's serial work too: the loops themselves then took
//! 138-142 µs with helpers against 129 µs alone (within the margin), while whole training
//! steps ran at 55,000 samples/s with helpers against 70,000 alone.
//!
//! The host's changes also come in stretches of a second or two, shorter than a main phase
//! (the MLP on 2 threads fell to about 50,000 samples/s for 1-2 s at a time, below the
//! 72,000 of one thread). So a main phase also watches its loops in stretches of a probe's
//! length: a stretch [`SLOWDOWN`] slower on average than the main mode was last measured at
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
    /// The last probe's loops and wall time.
    probe: (u64, Duration),
    /// When the current phase began (`None` before the first loop).
    phase_start: Option<Instant>,
    /// The loops measured so far in the current window, and the wall time from the start
    /// of the first to the end of the last, the program's work between them included.
    loops: u64,
    span: Duration,
    /// When the current window's first loop started.
    since: Option<Instant>,
    /// Whether the current window has begun (a main phase measures only its end).
    measuring: bool,
    /// The last main phase's window: loops and wall time.
    reference: (u64, Duration),
    /// The length of the current (or next) main phase.
    main_len: Duration,
    /// The average loop time the main mode was last measured at (the end of the last main
    /// phase, or the probe that made it the main mode), in seconds.
    baseline: Option<f64>,
    /// The current stretch of a main phase watched for a slowdown: when its first loop
    /// started, its loops and its wall time.
    watch: (Option<Instant>, u64, Duration),
}

impl State {
    /// Adds a main-phase loop to the stretch being watched, and says whether the stretch,
    /// [`PROBE`] long, ran [`SLOWDOWN`] slower than the main mode's baseline.
    fn watch_for_slowdown(&mut self, took: Duration, now: Instant) -> bool {
        let Some(baseline) = self.baseline else { return false };
        let (start, loops, span) = &mut self.watch;
        let start = *start.get_or_insert(now.checked_sub(took).unwrap_or(now));
        *loops += 1;
        *span = now.saturating_duration_since(start);
        if *loops < MIN_LOOPS || *span < PROBE {
            return false;
        }
        let slowed = span.as_secs_f64() / *loops as f64 > baseline * (1.0 + SLOWDOWN);
        if !slowed {
            self.watch = (None, 0, Duration::ZERO);
        }
        slowed
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
                probe: (0, Duration::ZERO),
                phase_start: None,
                loops: 0,
                span: Duration::ZERO,
                since: None,
                measuring: false,
                reference: (0, Duration::ZERO),
                main_len: FIRST_MAIN,
                baseline: None,
                watch: (None, 0, Duration::ZERO),
            }),
        }
    }

    /// Whether loops should run on the caller alone now.
    pub(crate) fn solo(&self) -> bool {
        self.solo.load(Ordering::Relaxed)
    }

    /// Records a loop that took `took` of wall time and ended at `now`, and moves to the
    /// next phase when this one is over.
    pub(crate) fn record(&self, took: Duration, now: Instant) {
        // Loops finishing at the same moment on other threads skip their record rather than
        // wait: the averages need a sample, not every loop.
        let Some(mut s) = self.state.try_lock() else { return };
        let start = *s.phase_start.get_or_insert(now);
        let elapsed = now.saturating_duration_since(start);
        let main = s.main_len;
        let short = s.probing || s.confirming;
        if !short && !s.measuring && elapsed + PROBE >= main {
            s.measuring = true;
        }
        if s.measuring {
            let since = *s.since.get_or_insert(now.checked_sub(took).unwrap_or(now));
            s.loops += 1;
            s.span = now.saturating_duration_since(since);
        }
        let slowed = !short && s.watch_for_slowdown(took, now);
        if slowed {
            // Measured over the stretch that slowed down: the probe is compared with that.
            let (_, loops, span) = s.watch;
            (s.loops, s.span) = (loops, span);
            if setting() == "log" {
                eprintln!(
                    "ember thread tuning: loops slowed to {:.1} us, probing now",
                    span.as_secs_f64() / loops as f64 * 1e6
                );
            }
        }
        let window_done = slowed || s.loops >= MIN_LOOPS && elapsed >= if short { PROBE } else { main };
        if !window_done {
            return;
        }
        if s.probing {
            // Back to the main mode, measured once more before deciding: the program's own
            // work may have changed during the probe (training gives way to evaluation).
            s.probe = (s.loops, s.span);
            s.probing = false;
            s.confirming = true;
            s.measuring = true;
            self.solo.store(s.main_solo, Ordering::Relaxed);
        } else if s.confirming {
            let avg = |(loops, span): (u64, Duration)| span.as_secs_f64() / loops.max(1) as f64;
            let (before, probe_avg, after) = (avg(s.reference), avg(s.probe), avg((s.loops, s.span)));
            // The probe must beat the main mode both before and after it.
            let switch = probe_avg < before.min(after) * (1.0 - MARGIN);
            if setting() == "log" {
                let mode = |solo: bool| if solo { "caller alone" } else { "with helpers" };
                eprintln!(
                    "ember thread tuning: {} {:.1} us/loop ({} loops), {} {:.1} then {:.1} us/loop: {}",
                    mode(!s.main_solo),
                    probe_avg * 1e6,
                    s.probe.0,
                    mode(s.main_solo),
                    before * 1e6,
                    after * 1e6,
                    mode(s.main_solo != switch)
                );
            }
            if switch {
                s.main_solo = !s.main_solo;
                s.main_len = MAIN;
                s.baseline = Some(probe_avg);
            } else {
                // Only phases with helpers grow (see the module's docs).
                s.main_len = if s.main_solo { MAIN } else { (s.main_len * 2).clamp(MAIN, LONGEST_MAIN) };
                s.baseline = Some(after);
            }
            s.watch = (None, 0, Duration::ZERO);
            s.confirming = false;
            s.measuring = false;
            self.solo.store(s.main_solo, Ordering::Relaxed);
        } else {
            s.reference = (s.loops, s.span);
            s.probing = true;
            // A probe measures from its start.
            s.measuring = true;
            self.solo.store(!s.main_solo, Ordering::Relaxed);
        }
        s.phase_start = Some(now);
        s.loops = 0;
        s.span = Duration::ZERO;
        s.since = None;
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
        let end = *now + span;
        while *now < end {
            let (took, gap) = if tuner.solo() { solo } else { team };
            *now += gap + took;
            tuner.record(took, *now);
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
