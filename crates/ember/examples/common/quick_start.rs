//! The MNIST quick starts' program around a model: the command line, training with a
//! progress bar, test accuracy after every epoch, the checkpoint saved and reloaded into a
//! fresh model, the loss and accuracy curves as SVG, and optionally the model's graph;
//! with `--amp bf16|f16`, mixed precision (see [`super::amp`]).

use super::amp::{Amp, AmpArg};
use super::cli::Common;
use super::plot::{Panel, Series, save_svg};
use super::progress;
use clap::Parser;
use ember::mnist::{self, Data};
use ember::nn::{CrossEntropyOptions, cross_entropy};
use ember::nn::{Module, ModuleExt};
use ember::optim::{Adam, AdamConfig, CosineAnnealingLR, LrScheduler, Optimizer};
use ember::{Device, Error, Result, Tensor, Var};
use plotters::style::{BLUE, RED};
use std::path::Path;
use std::time::Instant;

/// The command line of a quick start.
#[derive(Parser)]
pub struct Args {
    /// Passes over the training set (default: the example's own, 3 for the MLP and the CNN).
    #[arg(long)]
    pub epochs: Option<usize>,
    /// Samples per optimisation step.
    #[arg(long, default_value_t = 64)]
    pub batch_size: usize,
    /// Adam's (peak) learning rate.
    #[arg(long, default_value_t = 1e-3)]
    pub lr: f64,
    /// How the learning rate evolves: cosine decay to zero over the run, or constant.
    #[arg(long, value_enum, default_value_t = Schedule::Cosine)]
    pub schedule: Schedule,
    /// `--seed`, `--data`, `--out` (default `runs/<example>`).
    #[command(flatten)]
    pub common: Common,
    /// Train on the first N training images only (all by default).
    #[arg(long)]
    pub train_images: Option<usize>,
    /// Evaluate on the first N test images only (all 10,000 by default).
    #[arg(long)]
    pub test_images: Option<usize>,
    /// Also write the model's graph (DOT and SVG).
    #[arg(long)]
    pub graph: bool,
    /// Where to train and evaluate: `cpu`, `cuda` or `cuda:N` (a GPU needs the `cuda`
    /// feature), or `torch-cpu` (PyTorch's CPU kernels, the `libtorch` feature). The checkpoint is written from a host copy and loads on any device.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// `--amp bf16|f16`.
    #[command(flatten)]
    pub amp: AmpArg,
}

/// How the learning rate evolves over the run.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Schedule {
    /// Cosine decay from `--lr` to zero, one step per batch.
    Cosine,
    /// `--lr` throughout.
    Constant,
}

/// What a quick start trains: its name (for files and messages), a description of the
/// model for the log, and how to build a fresh one.
pub struct Example<M> {
    /// The example's name: its output directory `runs/<name>`, `<name>_curves.svg`,
    /// `<name>_graph.dot`.
    pub name: &'static str,
    /// The checkpoint's file stem: `<checkpoint>.safetensors`.
    pub checkpoint: &'static str,
    /// The model in a few words, for the log.
    pub description: &'static str,
    /// Builds the model with fresh weights from the global generator.
    pub build: fn() -> Result<M>,
    /// The number of epochs when `--epochs` is not given.
    pub epochs: usize,
}

/// What a run printed and measured, for the caller to check.
pub struct Outcome {
    /// The final test accuracy, a fraction.
    pub accuracy: f64,
    /// The training loss of every step, in order.
    pub losses: Vec<f64>,
    /// Every line the run printed outside the progress bar, in order.
    pub log: Vec<String>,
}

/// Prints a line and keeps it in the run's log.
struct Log(Vec<String>);

impl Log {
    fn say(&mut self, line: String) {
        println!("{line}");
        self.0.push(line);
    }
}

struct History {
    /// `(fractional epoch, mean loss over the last stretch of steps)`.
    train_loss: Vec<(f64, f64)>,
    /// `(epoch, test accuracy in percent)`.
    test_accuracy: Vec<(f64, f64)>,
}

/// Parses the command line and runs the quick start; returns the final test accuracy.
pub fn main<M: Module>(example: Example<M>) -> Result<f64> {
    Ok(run(example, Args::parse())?.accuracy)
}

/// Trains `example`'s model as `args` say; returns the final test accuracy, the losses and
/// the log.
pub fn run<M: Module>(example: Example<M>, args: Args) -> Result<Outcome> {
    let mut log = Log(Vec::new());
    let name = example.name;
    let epochs = args.epochs.unwrap_or(example.epochs);
    if args.batch_size == 0 || epochs == 0 {
        return Err(ember::Error::invalid(name, "--epochs and --batch-size must be positive"));
    }
    let device: Device = args.device.parse().map_err(|e| ember::Error::invalid(name, format!("--device: {e}")))?;
    device.check_available().map_err(|e| ember::Error::invalid(name, format!("--device {device}: {e}")))?;
    let out = args.common.start(name)?;

    let mut train = mnist::load(&args.common.data, true)?;
    if let Some(n) = args.train_images {
        train = train.take(n)?;
    }
    let mut test = mnist::load(&args.common.data, false)?;
    if let Some(n) = args.test_images {
        test = test.take(n)?;
    }
    log.say(format!(
        "MNIST: {} training and {} test images from {}",
        train.len(),
        test.len(),
        args.common.data.display()
    ));

    let model = (example.build)()?;
    model.to_device(device)?;
    let mut amp = Amp::new(args.amp.amp, device);
    log.say(format!(
        "model: {} on {device}, {} parameters; Adam, lr {} ({}), batch {}; {}",
        example.description,
        model.num_parameters(),
        args.lr,
        match args.schedule {
            Schedule::Cosine => "cosine decay",
            Schedule::Constant => "constant",
        },
        args.batch_size,
        amp.describe()
    ));
    let mut opt = Adam::new(model.parameters(), AdamConfig { lr: args.lr, ..Default::default() })?;
    let loader = mnist::loader(&train, args.batch_size, args.common.seed)?;
    // Cosine decay from the peak rate to zero over the whole run, one step per batch.
    let mut cosine = CosineAnnealingLR::new(&mut opt, epochs * loader.len(), 0.0)?;

    let mut history = History { train_loss: Vec::new(), test_accuracy: Vec::new() };
    let steps = loader.len();
    let started = Instant::now();
    let mut accuracy = 0.0;
    let mut losses = Vec::new();
    for epoch in 1..=epochs {
        let bar = progress::bar(steps, format!("epoch {epoch}/{epochs}"))?;
        let epoch_start = Instant::now();
        let (mut window, mut window_n) = (0.0, 0usize);
        let schedule: Option<&mut dyn LrScheduler> = match args.schedule {
            Schedule::Cosine => Some(&mut cosine),
            Schedule::Constant => None,
        };
        train_epoch(&model, &mut opt, &mut amp, schedule, &loader, |step, loss| {
            losses.push(loss);
            window += loss;
            window_n += 1;
            // Every 50 steps, and every 10 at the start so that the bar never sits blank.
            if window_n == 50 || (step < 50 && window_n == 10) || step + 1 == steps {
                let rate = ((step + 1) * args.batch_size) as f64 / epoch_start.elapsed().as_secs_f64();
                bar.set_message(format!("loss {:.4}  {:.0} samples/s", window / window_n as f64, rate));
                history
                    .train_loss
                    .push((epoch as f64 - 1.0 + (step + 1) as f64 / steps as f64, window / window_n as f64));
                (window, window_n) = (0.0, 0);
            }
            bar.inc(1);
        })?;
        let secs = epoch_start.elapsed().as_secs_f64();
        bar.finish();
        let eval = amp.run(|| mnist::evaluate(&model, &test))?;
        accuracy = eval.accuracy;
        history.test_accuracy.push((epoch as f64, 100.0 * accuracy));
        let scale = amp.loss_scale().map(|s| format!(", loss scale {s}")).unwrap_or_default();
        log.say(format!(
            "epoch {epoch}: {:.1} s, {:.0} samples/s, test loss {:.4}, test accuracy {:.2}%{scale}",
            secs,
            train.len() as f64 / secs,
            eval.loss,
            100.0 * accuracy
        ));
    }
    log.say(format!("trained in {:.1} s", started.elapsed().as_secs_f64()));

    let model_path = out.join(format!("{}.safetensors", example.checkpoint));
    model.save(&model_path)?;
    let reloaded = (example.build)()?;
    reloaded.to_device(device)?;
    reloaded.load(&model_path)?;
    let again = amp.run(|| mnist::evaluate(&reloaded, &test))?.accuracy;
    log.say(format!(
        "saved {} (reloaded into a fresh model: {:.2}% test accuracy)",
        model_path.display(),
        100.0 * again
    ));

    let plot_path = out.join(format!("{name}_curves.svg"));
    plot(&plot_path, &history)?;
    log.say(format!("wrote {}", plot_path.display()));

    if args.graph {
        write_graph(&model, &test, &out, name)?;
    }
    log.say(format!("final test accuracy: {:.2}%", 100.0 * accuracy));
    // The data take 210 MiB (60,000 + 10,000 images of 784 f32); the rest is the program,
    // the model and the buffer pool (docs/design.md, "Memory").
    if let Some(peak) = ember::tensor::storage::peak_rss() {
        log.say(format!("peak resident memory: {:.0} MiB", peak as f64 / (1 << 20) as f64));
    }
    Ok(Outcome { accuracy, losses, log: log.0 })
}

/// One epoch over `loader` in training mode, each step's forward and loss in `amp`'s
/// precision; steps `schedule` (if any) after every batch, as PyTorch's recipe does whether
/// or not the scaler skipped the optimizer step, and calls `on_step(step, loss)`.
fn train_epoch(
    model: &dyn Module,
    opt: &mut dyn Optimizer,
    amp: &mut Amp,
    mut schedule: Option<&mut dyn LrScheduler>,
    loader: &ember::data::DataLoader<ember::data::TensorDataset>,
    mut on_step: impl FnMut(usize, f64),
) -> Result<()> {
    model.train();
    let device = mnist::device_of(model);
    for (step, batch) in loader.iter().enumerate() {
        let batch = batch?;
        let [x, y] = batch.as_slice() else {
            return Err(Error::invalid(
                "quick_start::train_epoch",
                format!("expected batches of (images, labels), got {} fields", batch.len()),
            ));
        };
        let (x, y): (Tensor, Tensor) = (x.to_device(device)?, y.to_device(device)?);
        let loss = amp.run(|| cross_entropy(&model.forward(&Var::new(x))?, &y, CrossEntropyOptions::default()))?;
        amp.backward_and_step(&loss, opt)?;
        if let Some(s) = schedule.as_deref_mut() {
            s.step(opt);
        }
        on_step(step, loss.item()?);
    }
    Ok(())
}

/// The graph of one forward and loss, for `--graph`.
fn write_graph(model: &dyn Module, data: &Data, out: &Path, name: &str) -> Result<()> {
    for (name, p) in model.named_parameters() {
        p.set_name(name);
    }
    let device = ember::mnist::device_of(model);
    let x = Var::new(data.images.narrow(0, 0, 8)?.to_device(device)?);
    x.set_name("images");
    let y = data.labels.narrow(0, 0, 8)?.to_device(device)?;
    let loss = ember::nn::cross_entropy(&model.forward(&x)?, &y, Default::default())?;
    loss.set_name("loss");
    let dot = out.join(format!("{name}_graph.dot"));
    ember::autograd::save_dot(&dot, &[&loss])?;
    ember::autograd::save_svg(out.join(format!("{name}_graph.svg")), &[&loss])?;
    println!("wrote {} and .svg", dot.display());
    Ok(())
}

fn plot(path: &Path, h: &History) -> Result<()> {
    let lo = h.test_accuracy.iter().map(|p| p.1).fold(100.0, f64::min).min(95.0).floor();
    let loss =
        Panel::new("training loss", "epoch", "cross-entropy", vec![Series::line("", h.train_loss.clone(), BLUE)]);
    let accuracy =
        Panel::new("test accuracy (%)", "epoch", "accuracy", vec![Series::dotted("", h.test_accuracy.clone(), RED)]);
    save_svg(path, &[loss, accuracy.y_range(lo, 100.0)])
}
