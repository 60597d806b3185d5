//! The fuzz loop: read every corpus input as it is, then mutations of them, until an
//! iteration or time budget runs out; each input must be read without a panic, within a
//! time limit and within its allocation allowance, and a rejection must name the file.

use crate::alloc_count;
use crate::corpus;
use crate::rng::Rng;
use crate::target::{Input, Target, names_file_in};
use parking_lot::Mutex;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// The reader under test.
    pub target: Target,
    /// The seed of the mutation RNG; the same seed and budget give the same inputs.
    pub seed: u64,
    /// Stop after this many mutated inputs (the corpus inputs come on top).
    pub iterations: Option<u64>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// The longest one input may take before the run is declared hung.
    pub per_input_limit: Duration,
    /// The seed corpus root (holding `<target>/` folders).
    pub corpus: PathBuf,
    /// Where failing inputs are saved.
    pub failures: PathBuf,
}

impl Config {
    /// A run of `target` for `iterations` mutated inputs with the committed corpus.
    pub fn new(target: Target, iterations: u64) -> Config {
        Config {
            target,
            seed: 0x00e3_b3e2,
            iterations: Some(iterations),
            duration: None,
            per_input_limit: Duration::from_secs(20),
            corpus: corpus::default_dir(),
            failures: std::env::temp_dir().join("ember-fuzz-failures"),
        }
    }
}

/// Why an input failed.
#[derive(Clone, Debug)]
pub struct Failure {
    /// What went wrong: a panic message, an allocation figure or an unnamed error.
    pub what: String,
    /// The input, saved for replay (images then labels for MNIST).
    pub saved: PathBuf,
}

/// The outcome of a run.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Inputs read, corpus and mutated.
    pub inputs: u64,
    /// Inputs every reader accepted.
    pub accepted: u64,
    /// Inputs a reader rejected with an error.
    pub rejected: u64,
    /// Inputs that failed a check.
    pub failures: Vec<Failure>,
    /// The largest heap peak of one input, in bytes.
    pub max_peak: usize,
    /// How long the run took.
    pub elapsed: Duration,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} inputs ({} accepted, {} rejected), {} failures, largest heap peak {} KiB, {:.1} s",
            self.inputs,
            self.accepted,
            self.rejected,
            self.failures.len(),
            self.max_peak / 1024,
            self.elapsed.as_secs_f64()
        )
    }
}

/// Runs `config`; `Err` only for an unusable set-up (no corpus, no temp dir).
pub fn run(config: &Config) -> std::io::Result<Report> {
    let seeds = corpus::load(&config.corpus, config.target)?;
    let splice: Vec<Vec<u8>> = seeds.iter().map(|(_, s)| s.main.clone()).collect();
    let work = scratch_dir(config.target)?;
    let watchdog = Watchdog::start(config.per_input_limit, config.failures.clone(), config.target);
    alloc_count::track();
    let started = Instant::now();
    let mut report = Report::default();
    let mut rng = Rng::new(config.seed);
    let mut iteration = 0u64;
    let mut corpus_left = seeds.iter();
    loop {
        let input = match corpus_left.next() {
            Some((_, seed)) => seed.clone(),
            None => {
                let out_of_iterations = config.iterations.is_some_and(|n| iteration >= n);
                let out_of_time = config.duration.is_some_and(|d| started.elapsed() >= d);
                if out_of_iterations || out_of_time {
                    break;
                }
                iteration += 1;
                let (_, seed) = &seeds[rng.below(seeds.len())];
                config.target.mutate(&mut rng, seed, &splice)
            }
        };
        watchdog.arm(&input);
        check_one(config, &work, &input, &mut report)?;
        watchdog.disarm();
    }
    report.elapsed = started.elapsed();
    watchdog.stop();
    let _ = std::fs::remove_dir_all(&work);
    Ok(report)
}

/// Reads one input and records the outcome.
fn check_one(config: &Config, work: &Path, input: &Input, report: &mut Report) -> std::io::Result<()> {
    report.inputs += 1;
    alloc_count::reset();
    let outcome = catch_unwind(AssertUnwindSafe(|| config.target.read(work, input)));
    let peak = alloc_count::peak();
    report.max_peak = report.max_peak.max(peak);
    let problem = match outcome {
        Err(panic) => Some(format!("panic: {}", panic_message(&panic))),
        Ok(written) => match written? {
            Ok(()) => {
                report.accepted += 1;
                None
            }
            Err(e) if !names_file_in(&e, work) => Some(format!("error does not name the file: {e}")),
            Err(_) => {
                report.rejected += 1;
                None
            }
        },
    };
    let allowance = config.target.allowance(input);
    let problem = problem.or_else(|| {
        (alloc_count::installed() && peak > allowance)
            .then(|| format!("allocated {peak} bytes for a {}-byte input (allowance {allowance})", input.len()))
    });
    if let Some(what) = problem {
        let saved = save_failure(&config.failures, config.target, input)?;
        report.failures.push(Failure { what, saved });
    }
    Ok(())
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string payload)".to_string()
    }
}

/// Saves `input` under `dir` with a name derived from its content, and returns the path.
fn save_failure(dir: &Path, target: Target, input: &Input) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let bytes = input.concatenated();
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    let path = dir.join(format!("{}-{hash:016x}", target.name()));
    std::fs::write(&path, &bytes)?;
    Ok(path)
}

/// A fresh directory for the inputs of one run.
fn scratch_dir(target: Target) -> std::io::Result<PathBuf> {
    use std::sync::atomic::AtomicUsize;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("ember-fuzz-{}-{}-{n}", target.name(), std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Ends the process when one input runs past the limit: a hung reader cannot be
/// interrupted, so the input is saved and the run stops with its path.
struct Watchdog {
    current: Arc<Mutex<Option<(Instant, Input)>>>,
    done: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    fn start(limit: Duration, failures: PathBuf, target: Target) -> Watchdog {
        let current: Arc<Mutex<Option<(Instant, Input)>>> = Arc::new(Mutex::new(None));
        let done = Arc::new(AtomicBool::new(false));
        let (c, d) = (current.clone(), done.clone());
        let thread = std::thread::spawn(move || {
            while !d.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
                let guard = c.lock();
                if let Some((since, input)) = guard.as_ref()
                    && since.elapsed() > limit
                {
                    let saved = save_failure(&failures, target, input);
                    eprintln!("ember-fuzz: {} hung for over {limit:?} on an input saved as {saved:?}", target.name());
                    std::process::exit(2);
                }
            }
        });
        Watchdog { current, done, thread: Some(thread) }
    }

    fn arm(&self, input: &Input) {
        *self.current.lock() = Some((Instant::now(), input.clone()));
    }

    fn disarm(&self) {
        *self.current.lock() = None;
    }

    fn stop(mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
