//! `--amp bf16|f16`: mixed-precision training as PyTorch's recipe runs it. The forward pass
//! and the loss run under autocast with the chosen dtype while the parameters, their
//! gradients and the optimizer stay `f32`; with `f16` a [`GradScaler`] scales the loss
//! before backward and steps the optimizer only when the unscaled gradients are finite
//! (`f16`'s range is narrow: small gradients would underflow to zero), with `bf16` (the
//! range of `f32`) there is no scaler.

use ember::autograd::autocast::{DeviceType, autocast};
use ember::optim::{GradScaler, Optimizer};
use ember::tensor::storage::{memory_stats, reset_peak};
use ember::{DType, Device, Result, Var};

/// The lower-precision dtype that `--amp` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AmpDtype {
    /// bfloat16: `f32`'s range, 8 bits of precision; no loss scaling.
    Bf16,
    /// IEEE half precision: 11 bits of precision, largest finite 65504; with loss scaling.
    F16,
}

/// The `--amp` flag, flattened into an example's arguments.
#[derive(clap::Args, Clone, Copy, Debug)]
pub struct AmpArg {
    /// Mixed precision: forward and loss under autocast in this dtype, parameters and
    /// optimizer in f32; `f16` adds dynamic loss scaling (a GradScaler). Off by default.
    #[arg(long, value_enum)]
    pub amp: Option<AmpDtype>,
}

/// How a run computes: plain `f32`, or autocast with its dtype and, for `f16`, the scaler.
pub struct Amp {
    region: Option<(DeviceType, DType)>,
    scaler: Option<GradScaler>,
}

impl Amp {
    /// The mode `dtype` names for a model on `device` (plain `f32` for `None`).
    pub fn new(dtype: Option<AmpDtype>, device: Device) -> Amp {
        let region = dtype.map(|d| {
            let dtype = match d {
                AmpDtype::Bf16 => DType::BF16,
                AmpDtype::F16 => DType::F16,
            };
            (DeviceType::from(device), dtype)
        });
        let scaler = matches!(dtype, Some(AmpDtype::F16)).then(GradScaler::new);
        Amp { region, scaler }
    }

    /// The same mode without loss scaling (for benchmarks that time autocast's step alone).
    pub fn without_scaler(self) -> Amp {
        Amp { scaler: None, ..self }
    }

    /// The mode in a few words, for the run's header: `f32`, `bf16 autocast` or
    /// `f16 autocast, loss scale from 65536`.
    pub fn describe(&self) -> String {
        match (&self.region, &self.scaler) {
            (None, _) => "f32".to_string(),
            (Some((_, dtype)), None) => format!("{dtype} autocast"),
            (Some((_, dtype)), Some(s)) => format!("{dtype} autocast, loss scale from {}", s.get_scale()),
        }
    }

    /// The autocast dtype's name (`bf16`, `f16`), or `f32`.
    pub fn dtype_name(&self) -> String {
        self.region.map_or("f32".to_string(), |(_, dtype)| dtype.to_string())
    }

    /// The loss scale now, with `f16`.
    pub fn loss_scale(&self) -> Option<f64> {
        self.scaler.as_ref().map(GradScaler::get_scale)
    }

    /// Runs `body` (a forward pass and its loss, or an evaluation) under autocast in this
    /// mode's dtype, or as it is in `f32`.
    pub fn run<R>(&self, body: impl FnOnce() -> Result<R>) -> Result<R> {
        match self.region {
            Some((device, dtype)) => autocast(device, dtype, body)?,
            None => body(),
        }
    }

    /// Backward from `loss` and one step of `opt`, through the scaler with `f16`: the loss
    /// is scaled, the gradients unscaled, the step skipped if one of them is not finite and
    /// the scale updated. Returns whether the optimizer stepped.
    pub fn backward_and_step(&mut self, loss: &Var, opt: &mut dyn Optimizer) -> Result<bool> {
        opt.zero_grad();
        match &mut self.scaler {
            Some(scaler) => {
                scaler.scale(loss)?.backward()?;
                let stepped = scaler.step(opt)?;
                scaler.update()?;
                Ok(stepped)
            }
            None => {
                loss.backward()?;
                opt.step()?;
                Ok(true)
            }
        }
    }
}

/// The bytes of live tensors (of 4 KiB and more) that `step` adds at its peak: the peak of
/// [`memory_stats`]'s live bytes while it runs minus the live bytes before it. Called
/// between training steps, the baseline holds the parameters, the last gradients and the
/// optimizer's state, so the difference is what the step itself holds at its fullest.
pub fn activation_bytes(step: impl FnOnce() -> Result<()>) -> Result<usize> {
    reset_peak();
    let before = memory_stats().live_bytes;
    step()?;
    Ok(memory_stats().peak_bytes.saturating_sub(before))
}
