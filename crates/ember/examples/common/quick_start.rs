//! The MNIST quick starts' program around a model: the command line, training with a
//! progress bar, test accuracy after every epoch, the checkpoint saved and reloaded into a
//! fresh model, the loss and accuracy curves as SVG, and optionally the model's graph.

use super::cli::Common;
use super::plot::{Panel, Series, save_svg};
use super::progress;
use clap::Parser;
use ember::mnist::{self, Data};
use ember::nn::{Module, ModuleExt};
use ember::optim::{Adam, AdamConfig, CosineAnnealingLR, LrScheduler};
use ember::{Device, Result, Var};
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
    /// Also write the model's graph (DOT and SVG).
    #[arg(long)]
    pub graph: bool,
    /// Where to train and evaluate: `cpu`, `cuda` or `cuda:N` (a GPU needs the `cuda`
    /// feature). The checkpoint is written from a host copy and loads on any device.
    #[arg(long, default_value = "cpu")]
    pub device: String,
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

struct History {
    /// `(fractional epoch, mean loss over the last stretch of steps)`.
    train_loss: Vec<(f64, f64)>,
    /// `(epoch, test accuracy in percent)`.
    test_accuracy: Vec<(f64, f64)>,
}

/// Parses the command line and runs the quick start; returns the final test accuracy.
pub fn main<M: Module>(example: Example<M>) -> Result<f64> {
    run(example, Args::parse())
}

/// Trains `example`'s model as `args` say; returns the final test accuracy.
pub fn run<M: Module>(example: Example<M>, args: Args) -> Result<f64> {
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
    let test = mnist::load(&args.common.data, false)?;
    println!("MNIST: {} training and {} test images from {}", train.len(), test.len(), args.common.data.display());

    let model = (example.build)()?;
    model.to_device(device)?;
    println!(
        "model: {} on {device}, {} parameters; Adam, lr {} ({}), batch {}",
        example.description,
        model.num_parameters(),
        args.lr,
        match args.schedule {
            Schedule::Cosine => "cosine decay",
            Schedule::Constant => "constant",
        },
        args.batch_size
    );
    let mut opt = Adam::new(model.parameters(), AdamConfig { lr: args.lr, ..Default::default() })?;
    let loader = mnist::loader(&train, args.batch_size, args.common.seed)?;
    // Cosine decay from the peak rate to zero over the whole run, one step per batch.
    let mut cosine = CosineAnnealingLR::new(&mut opt, epochs * loader.len(), 0.0)?;

    let mut history = History { train_loss: Vec::new(), test_accuracy: Vec::new() };
    let steps = loader.len();
    let started = Instant::now();
    let mut accuracy = 0.0;
    for epoch in 1..=epochs {
        let bar = progress::bar(steps, format!("epoch {epoch}/{epochs}"))?;
        let epoch_start = Instant::now();
        let (mut window, mut window_n) = (0.0, 0usize);
        let schedule: Option<&mut dyn LrScheduler> = match args.schedule {
            Schedule::Cosine => Some(&mut cosine),
            Schedule::Constant => None,
        };
        mnist::train_epoch(&model, &mut opt, schedule, &loader, |step, loss| {
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
        let eval = mnist::evaluate(&model, &test)?;
        accuracy = eval.accuracy;
        history.test_accuracy.push((epoch as f64, 100.0 * accuracy));
        println!(
            "epoch {epoch}: {:.1} s, {:.0} samples/s, test loss {:.4}, test accuracy {:.2}%",
            secs,
            train.len() as f64 / secs,
            eval.loss,
            100.0 * accuracy
        );
    }
    println!("trained in {:.1} s", started.elapsed().as_secs_f64());

    let model_path = out.join(format!("{}.safetensors", example.checkpoint));
    model.save(&model_path)?;
    let reloaded = (example.build)()?;
    reloaded.to_device(device)?;
    reloaded.load(&model_path)?;
    let again = mnist::evaluate(&reloaded, &test)?.accuracy;
    println!("saved {} (reloaded into a fresh model: {:.2}% test accuracy)", model_path.display(), 100.0 * again);

    let plot_path = out.join(format!("{name}_curves.svg"));
    plot(&plot_path, &history)?;
    println!("wrote {}", plot_path.display());

    if args.graph {
        write_graph(&model, &test, &out, name)?;
    }
    println!("final test accuracy: {:.2}%", 100.0 * accuracy);
    // The data take 210 MiB (60,000 + 10,000 images of 784 f32); the rest is the program,
    // the model and the buffer pool (docs/design.md, "Memory").
    if let Some(peak) = ember::tensor::storage::peak_rss() {
        println!("peak resident memory: {:.0} MiB", peak as f64 / (1 << 20) as f64);
    }
    Ok(accuracy)
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
