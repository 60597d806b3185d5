//! Long-run training with resident-memory sampling: the quick-start MLP (784-256-128-10)
//! trained with Adam on fixed synthetic batches, in variants that exercise what could leak
//! per step (retained graphs, hooks added and removed, checkpointed segments, saved-tensor
//! hooks). Shared by the `soak` example (10,000 steps) and the CI soak test (a few hundred).
//!
//! Memory is read from `/proc/self/statm` (Linux); growth is measured from the end of a
//! warm-up, after the allocator and the optimizer state reached their steady size.

use crate::autograd::{Var, checkpoint, saved_tensors_hooks};
use crate::mnist::{LAYERS, mlp};
use crate::nn::{CrossEntropyOptions, Module, Sequential, cross_entropy};
use crate::optim::{Adam, AdamConfig, Optimizer};
use crate::tensor::{Error, Result, Tensor};
use std::sync::Arc;

/// What each training step does besides forward, backward and the optimizer step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// A plain step.
    Plain,
    /// Backward with `retain_graph`, the graph dropped afterwards.
    RetainGraph,
    /// A gradient hook and a post-accumulate hook registered on every parameter before the
    /// step and removed after it.
    Hooks,
    /// The model's forward run as one checkpointed segment (recomputed in backward).
    Checkpoint,
    /// The forward run under saved-tensor hooks that pack a copy of each saved value.
    SavedTensorHooks,
}

impl Variant {
    /// Every variant.
    pub const ALL: [Variant; 5] =
        [Variant::Plain, Variant::RetainGraph, Variant::Hooks, Variant::Checkpoint, Variant::SavedTensorHooks];

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Plain => "plain",
            Variant::RetainGraph => "retain_graph",
            Variant::Hooks => "hooks",
            Variant::Checkpoint => "checkpoint",
            Variant::SavedTensorHooks => "saved_tensor_hooks",
        }
    }
}

/// A soak run's settings.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// What each step does.
    pub variant: Variant,
    /// Optimizer steps in all.
    pub steps: usize,
    /// Steps before the baseline sample.
    pub warmup: usize,
    /// Samples per batch.
    pub batch: usize,
    /// Steps between memory samples.
    pub sample_every: usize,
}

/// What a soak run measured.
#[derive(Clone, Debug)]
pub struct Report {
    /// Resident memory in bytes at the end of the warm-up.
    pub baseline: u64,
    /// The highest resident memory sampled after the warm-up.
    pub peak_after_warmup: u64,
    /// Resident memory at the last step.
    pub end: u64,
    /// `(step, resident bytes)` samples, warm-up included.
    pub samples: Vec<(usize, u64)>,
    /// The loss of the last step.
    pub final_loss: f64,
}

impl Report {
    /// Growth from the baseline to the highest later sample, in percent.
    pub fn growth_percent(&self) -> f64 {
        100.0 * (self.peak_after_warmup as f64 - self.baseline as f64) / self.baseline as f64
    }
}

/// The process's resident memory in bytes, from `/proc/self/statm` (in 4 KiB pages, the page
/// size of the Linux targets ember runs on; a ratio of two readings does not depend on it).
pub fn resident_bytes() -> Result<u64> {
    let path = "/proc/self/statm";
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let pages = text
        .split_whitespace()
        .nth(1)
        .and_then(|f| f.parse::<u64>().ok())
        .ok_or_else(|| Error::format(path, format!("no resident-page count in {text:?}")))?;
    Ok(pages * 4096)
}

/// Fixed batches of synthetic data: the same tensors every cycle, so that the data adds
/// nothing to the memory after the first pass.
fn batches(batch: usize) -> Result<Vec<(Tensor, Tensor)>> {
    (0..8)
        .map(|b| {
            let n = batch * LAYERS[0];
            let x: Vec<f32> = (0..n).map(|i| (((i * 7 + b * 13) % 29) as f32 - 14.0) / 14.0).collect();
            let y: Vec<i64> = (0..batch).map(|i| ((i * 3 + b) % LAYERS[3]) as i64).collect();
            Ok((Tensor::from_vec(x, [batch, LAYERS[0]])?, Tensor::from_vec(y, [batch])?))
        })
        .collect()
}

/// Trains a fresh MLP as `config` says and samples resident memory.
pub fn run(config: &Config) -> Result<Report> {
    if config.steps <= config.warmup || config.sample_every == 0 {
        return Err(Error::invalid("soak", format!("{config:?}: needs steps > warmup and sample_every > 0")));
    }
    let model = Arc::new(mlp()?);
    let mut opt = Adam::new(model.parameters(), AdamConfig { lr: 1e-3, ..Default::default() })?;
    let data = batches(config.batch)?;
    let mut samples = Vec::new();
    let mut final_loss = f64::NAN;
    for step in 0..config.steps {
        let (x, y) = &data[step % data.len()];
        final_loss = train_step(config.variant, &model, &mut opt, x, y)?;
        if step % config.sample_every == 0 || step + 1 == config.steps || step + 1 == config.warmup {
            samples.push((step + 1, resident_bytes()?));
        }
    }
    let baseline = samples.iter().find(|(s, _)| *s == config.warmup).map_or(0, |(_, b)| *b);
    let peak_after_warmup = samples.iter().filter(|(s, _)| *s > config.warmup).map(|(_, b)| *b).max().unwrap_or(0);
    let end = samples.last().map_or(0, |(_, b)| *b);
    Ok(Report { baseline, peak_after_warmup, end, samples, final_loss })
}

/// One optimizer step of `variant`; returns the loss.
fn train_step(variant: Variant, model: &Arc<Sequential>, opt: &mut Adam, x: &Tensor, y: &Tensor) -> Result<f64> {
    let input = Var::new(x.clone());
    let loss_of = |logits: &Var| cross_entropy(logits, y, CrossEntropyOptions::default());
    opt.zero_grad();
    let loss = match variant {
        Variant::Plain | Variant::RetainGraph | Variant::Hooks => loss_of(&model.forward(&input)?)?,
        Variant::Checkpoint => {
            let m = model.clone();
            loss_of(&checkpoint(move |xs| m.forward(&xs[0]), &[&input])?)?
        }
        Variant::SavedTensorHooks => saved_tensors_hooks(
            |t: &Tensor| t.copy(),
            |p: &Tensor| Ok(p.clone()),
            || model.forward(&input).and_then(|l| loss_of(&l)),
        )?,
    };
    let mut handles = Vec::new();
    if variant == Variant::Hooks {
        for p in model.parameters() {
            handles.push(p.register_hook(|g| Ok(Some(g.mul_scalar(1.0))))?);
            handles.push(p.register_post_accumulate_grad_hook(|_| Ok(()))?);
        }
    }
    loss.backward_with(None, variant == Variant::RetainGraph)?;
    for h in handles {
        h.remove();
    }
    opt.step()?;
    loss.item()
}
