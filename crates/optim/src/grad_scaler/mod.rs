//! Dynamic loss scaling (PyTorch's `torch.amp.GradScaler`): the loss is multiplied by a
//! large scale before backward so that small gradients survive in low precision, the
//! gradients are divided by it again before the optimizer steps, and a step whose gradients
//! overflowed is skipped and the scale lowered.

mod config;
mod state;

pub use config::{GradScalerBuilder, GradScalerConfig};
pub use state::GradScalerState;

use crate::Optimizer;
use ember_autograd::{NoGradGuard, Var};
use ember_tensor::{Error, Result, Tensor};

/// Where an optimizer is in the current iteration (PyTorch's `OptState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Its gradients were unscaled (by [`GradScaler::unscale_`] or by a step).
    Unscaled,
    /// [`GradScaler::step`] ran for it (and either stepped or skipped).
    Stepped,
}

/// What the scaler knows of one optimizer in the current iteration.
#[derive(Debug)]
struct Record {
    /// The optimizer's parameters, by [`Var::id`]: an optimizer owns its parameter list, so
    /// the list identifies it while it lives, wherever the optimizer value moves.
    params: Vec<usize>,
    stage: Stage,
    /// Whether one of its gradients held an infinite or NaN value.
    found_inf: bool,
    /// Whether it had any gradient to check (PyTorch's non-empty `found_inf_per_device`).
    checked: bool,
}

/// Gradient scaling for mixed-precision training, as PyTorch's `torch.amp.GradScaler`.
///
/// [`scale`](GradScaler::scale) multiplies the loss by the current scale, so that backward
/// produces scaled gradients, large enough not to underflow in `f16`.
/// [`step`](GradScaler::step) divides every gradient of the optimizer by the scale, checking
/// for infinite and NaN values in the same fused pass
/// ([`Tensor::non_finite_check_and_unscale_`]), and steps the optimizer only when there were
/// none; otherwise it leaves the parameters and the optimizer's state untouched.
/// [`update`](GradScaler::update) then lowers the scale by `backoff_factor` after a skipped
/// step, or raises it by `growth_factor` after `growth_interval` clean steps in a row. Call
/// [`unscale_`](GradScaler::unscale_) yourself before `step` to work on the true gradients
/// (clipping them, say); `step` then does not unscale again.
///
/// The arithmetic is PyTorch's, bit for bit: the scale is an `f32`, the inverse scale is
/// `(1 / scale as f64) as f32`, gradients are multiplied by it in `f32` (`f64` for `f64`
/// gradients; `f16` and `bf16` ones widened to `f32` and rounded back once), and a new scale
/// is computed in `f64` and rounded to `f32`, a growth that would overflow it being dropped.
/// A disabled scaler passes everything through: `scale` returns the loss, `step` steps.
///
/// Parameters that do not require grad are left alone, as ember's optimizers leave them
/// (their stale gradients are neither unscaled nor checked).
///
/// The training loop, as in PyTorch's documentation:
///
/// ```
/// use ember_autograd::Var;
/// use ember_optim::{GradScaler, Optimizer, Sgd};
/// use ember_tensor::Tensor;
///
/// let x = Tensor::from_vec(vec![-1.0f32, 0.0, 1.0, 2.0], [4, 1])?;
/// let y = Tensor::from_vec(vec![-3.0f32, -1.0, 1.0, 3.0], [4, 1])?;
/// let w = Var::param(Tensor::zeros([1, 1], ember_tensor::DType::F32)?);
/// let b = Var::param(Tensor::zeros([1], ember_tensor::DType::F32)?);
/// let mut opt = Sgd::with_params(vec![w.clone(), b.clone()]).lr(0.1).build()?;
/// let mut scaler = GradScaler::new();
///
/// for _epoch in 0..200 {
///     opt.zero_grad();
///     let pred = (Var::new(x.clone()).matmul(&w)? + &b)?;
///     let err = (&pred - &Var::new(y.clone()))?;
///     let loss = (&err * &err)?.mean_all();
///     scaler.scale(&loss)?.backward()?;
///     // Unscale first to clip the true gradients; `step` then does not unscale again.
///     scaler.unscale_(&opt)?;
///     ember_optim::clip_grad_norm_(opt.params(), 10.0, 2.0)?;
///     scaler.step(&mut opt)?; // skips the step if a gradient is infinite or NaN
///     scaler.update()?;
/// }
/// assert!((w.value().item()? - 2.0).abs() < 1e-3);
/// assert_eq!(scaler.get_scale(), 65536.0); // no overflow in f32, no growth within 2000 steps
/// # Ok::<(), ember_tensor::Error>(())
/// ```
#[derive(Debug)]
pub struct GradScaler {
    enabled: bool,
    scale: f32,
    growth_factor: f64,
    backoff_factor: f64,
    growth_interval: u64,
    /// Clean steps in a row since the scale last changed.
    growth_tracker: u64,
    /// The optimizers unscaled or stepped since the last update.
    records: Vec<Record>,
}

impl Default for GradScaler {
    fn default() -> Self {
        GradScaler::new()
    }
}

impl GradScaler {
    /// An enabled scaler with PyTorch's defaults ([`GradScalerConfig::default`]): scale
    /// 2^16, growth factor 2, backoff factor 0.5, growth interval 2000.
    pub fn new() -> GradScaler {
        GradScaler::from_valid(GradScalerConfig::default())
    }

    /// A scaler with `config`; fails, naming the setting, on a growth factor that is not a
    /// finite number above 1, a backoff factor outside `(0, 1)`, an initial scale that is not
    /// a positive number finite in `f32`, or a growth interval of 0 (a disabled scaler checks
    /// nothing).
    pub fn with_config(config: GradScalerConfig) -> Result<GradScaler> {
        config.validate("GradScaler::with_config")?;
        Ok(GradScaler::from_valid(config))
    }

    /// A builder with PyTorch's defaults and one setter per setting:
    /// `GradScaler::builder().init_scale(1024.0).growth_interval(100).build()?`.
    pub fn builder() -> GradScalerBuilder {
        GradScalerBuilder::default()
    }

    fn from_valid(c: GradScalerConfig) -> GradScaler {
        GradScaler {
            enabled: c.enabled,
            scale: c.init_scale as f32,
            growth_factor: c.growth_factor,
            backoff_factor: c.backoff_factor,
            growth_interval: c.growth_interval,
            growth_tracker: 0,
            records: Vec::new(),
        }
    }

    /// Whether the scaler scales; a disabled one passes everything through.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// The current scale, or 1 for a disabled scaler.
    pub fn get_scale(&self) -> f64 {
        if self.enabled { f64::from(self.scale) } else { 1.0 }
    }

    /// The growth factor.
    pub fn growth_factor(&self) -> f64 {
        self.growth_factor
    }

    /// The backoff factor.
    pub fn backoff_factor(&self) -> f64 {
        self.backoff_factor
    }

    /// The growth interval.
    pub fn growth_interval(&self) -> u64 {
        self.growth_interval
    }

    /// Clean steps in a row since the scale last changed (0 for a disabled scaler).
    pub fn growth_tracker(&self) -> u64 {
        if self.enabled { self.growth_tracker } else { 0 }
    }

    /// Sets the growth factor (a finite number above 1).
    pub fn set_growth_factor(&mut self, growth_factor: f64) -> Result<()> {
        config::growth_factor("GradScaler::set_growth_factor", growth_factor)?;
        self.growth_factor = growth_factor;
        Ok(())
    }

    /// Sets the backoff factor (in `(0, 1)`).
    pub fn set_backoff_factor(&mut self, backoff_factor: f64) -> Result<()> {
        config::backoff_factor("GradScaler::set_backoff_factor", backoff_factor)?;
        self.backoff_factor = backoff_factor;
        Ok(())
    }

    /// Sets the growth interval (at least 1).
    pub fn set_growth_interval(&mut self, growth_interval: u64) -> Result<()> {
        config::growth_interval("GradScaler::set_growth_interval", growth_interval)?;
        self.growth_interval = growth_interval;
        Ok(())
    }

    /// The loss times the current scale, recorded in the graph (its gradient with respect to
    /// the loss is the scale), so that backward from it gives scaled gradients. The scale is
    /// a 0-d `f32` tensor on the loss's device, so the result's dtype follows the promotion
    /// rules as PyTorch's `outputs * scale` does. A disabled scaler returns the loss itself.
    pub fn scale(&self, loss: &Var) -> Result<Var> {
        if !self.enabled {
            return Ok(loss.clone());
        }
        let scale = Tensor::from_vec(vec![self.scale], Vec::<usize>::new())?.to_device(loss.device())?;
        loss.mul(&Var::new(scale))
    }

    /// Divides the gradients of `optimizer`'s parameters by the scale in place, noting
    /// whether any was infinite or NaN, in one fused pass per gradient. Call it before
    /// [`step`](GradScaler::step) to work on the true gradients (to clip them, say); `step`
    /// then does not unscale again.
    ///
    /// Calling it twice for one optimizer before [`update`](GradScaler::update), or after
    /// `step`, is an error, as in PyTorch; so is a non-float gradient, which is found before
    /// any gradient changes. A gradient that shares its storage with a parameter or with
    /// another gradient of the optimizer, or that is a broadcast view, is replaced by an
    /// unscaled copy rather than written through. A disabled scaler does nothing.
    pub fn unscale_(&mut self, optimizer: &dyn Optimizer) -> Result<()> {
        const OP: &str = "GradScaler::unscale_";
        if !self.enabled {
            return Ok(());
        }
        let params: Vec<usize> = optimizer.params().iter().map(Var::id).collect();
        match self.records.iter().find(|r| r.params == params).map(|r| r.stage) {
            Some(Stage::Unscaled) => {
                return Err(Error::invalid(
                    OP,
                    "unscale_() has already been called on this optimizer since the last update()",
                ));
            }
            Some(Stage::Stepped) => return Err(Error::invalid(OP, "unscale_() is being called after step()")),
            None => {}
        }
        let (found_inf, checked) = self.unscale_grads(OP, optimizer.params())?;
        self.records.push(Record { params, stage: Stage::Unscaled, found_inf, checked });
        Ok(())
    }

    /// Unscales the gradients of `params` that take part in a step; whether one was not
    /// finite, and whether there was any.
    fn unscale_grads(&self, op: &'static str, params: &[Var]) -> Result<(bool, bool)> {
        let _no_grad = NoGradGuard::new();
        let mut grads: Vec<(&Var, Tensor)> = Vec::with_capacity(params.len());
        for (i, p) in params.iter().enumerate().filter(|(_, p)| p.requires_grad()) {
            let Some(g) = p.grad() else { continue };
            if !g.dtype().is_float() {
                return Err(Error::dtype(
                    op,
                    format!("the gradient of parameter {i} is {}; only float gradients can be unscaled", g.dtype()),
                ));
            }
            grads.push((p, g));
        }
        // PyTorch's in-place unscaling would unscale a shared storage twice, or a parameter
        // along with its gradient; those gradients are unscaled as copies, taken before any
        // gradient is written.
        let shared = |i: usize, g: &Tensor| {
            broadcast(g)
                || grads.iter().enumerate().any(|(j, (_, h))| j != i && h.shares_storage(g))
                || params.iter().any(|p| p.value().shares_storage(g))
        };
        let copies: Vec<Option<Tensor>> =
            grads.iter().enumerate().map(|(i, (_, g))| shared(i, g).then(|| g.copy())).collect();
        let inv_scale = (1.0 / f64::from(self.scale)) as f32;
        let mut found_inf = false;
        for ((p, g), copy) in grads.iter().zip(copies) {
            match copy {
                Some(c) => {
                    found_inf |= c.non_finite_check_and_unscale_(inv_scale)?;
                    p.set_grad(Some(c))?;
                }
                None => found_inf |= g.non_finite_check_and_unscale_(inv_scale)?,
            }
        }
        Ok((found_inf, !grads.is_empty()))
    }

    /// Unscales the gradients (unless [`unscale_`](GradScaler::unscale_) already did) and
    /// steps `optimizer` when none of them was infinite or NaN; returns whether it stepped.
    /// A skipped step leaves the parameters and the optimizer's state (step counts, moments,
    /// momentum buffers) as they were.
    ///
    /// Stepping one optimizer twice before [`update`](GradScaler::update) is an error, as is
    /// an optimizer none of whose parameters has a gradient (PyTorch's "No inf checks were
    /// recorded for this optimizer"). A disabled scaler steps the optimizer and returns true.
    pub fn step(&mut self, optimizer: &mut dyn Optimizer) -> Result<bool> {
        const OP: &str = "GradScaler::step";
        if !self.enabled {
            optimizer.step()?;
            return Ok(true);
        }
        let params: Vec<usize> = optimizer.params().iter().map(Var::id).collect();
        let at = match self.records.iter().position(|r| r.params == params) {
            Some(at) if self.records[at].stage == Stage::Stepped => {
                return Err(Error::invalid(OP, "step() has already been called since the last update()"));
            }
            Some(at) => at,
            None => {
                let (found_inf, checked) = self.unscale_grads(OP, optimizer.params())?;
                self.records.push(Record { params, stage: Stage::Unscaled, found_inf, checked });
                self.records.len() - 1
            }
        };
        let record = &mut self.records[at];
        if !record.checked {
            return Err(Error::invalid(
                OP,
                "no inf checks were recorded for this optimizer: none of its parameters has a gradient",
            ));
        }
        let stepped = !record.found_inf;
        if stepped {
            optimizer.step()?;
        }
        record.stage = Stage::Stepped;
        Ok(stepped)
    }

    /// Updates the scale from this iteration's checks and starts the next iteration: the
    /// scale is multiplied by the backoff factor if any optimizer's gradients held an
    /// infinite or NaN value (and the count of clean steps restarts), and by the growth
    /// factor when this makes `growth_interval` clean steps in a row (a growth that would
    /// overflow `f32` is dropped). Call it once per iteration, after [`step`](GradScaler::step)
    /// for every optimizer; with no optimizer unscaled or stepped since the last update it is
    /// an error, as in PyTorch. A disabled scaler does nothing.
    pub fn update(&mut self) -> Result<()> {
        if !self.enabled {
            return Ok(());
        }
        if !self.records.iter().any(|r| r.checked) {
            return Err(Error::invalid(
                "GradScaler::update",
                "no inf checks were recorded prior to update(): call step() for the optimizers first",
            ));
        }
        if self.records.iter().any(|r| r.found_inf) {
            self.scale = (f64::from(self.scale) * self.backoff_factor) as f32;
            self.growth_tracker = 0;
        } else if self.growth_tracker + 1 == self.growth_interval {
            let grown = (f64::from(self.scale) * self.growth_factor) as f32;
            if grown.is_finite() {
                self.scale = grown;
            }
            self.growth_tracker = 0;
        } else {
            self.growth_tracker += 1;
        }
        self.records.clear();
        Ok(())
    }

    /// Sets the scale to `new_scale` (rounded to `f32`) and starts the next iteration, as
    /// PyTorch's `update(new_scale)`; the count of clean steps is kept. A scale that is not a
    /// positive number finite in `f32` is an error. A disabled scaler does nothing.
    pub fn update_to(&mut self, new_scale: f64) -> Result<()> {
        if !self.enabled {
            return Ok(());
        }
        self.scale = config::scale_value("GradScaler::update_to", "new_scale", new_scale)?;
        self.records.clear();
        Ok(())
    }

    /// The scale, the settings and the count of clean steps (PyTorch's
    /// `GradScaler.state_dict()`), or `None` for a disabled scaler, whose PyTorch state dict
    /// is empty. Take it after [`update`](GradScaler::update).
    pub fn state_dict(&self) -> Option<GradScalerState> {
        self.enabled.then_some(GradScalerState {
            scale: f64::from(self.scale),
            growth_factor: self.growth_factor,
            backoff_factor: self.backoff_factor,
            growth_interval: self.growth_interval,
            growth_tracker: self.growth_tracker,
        })
    }

    /// Replaces the scale, the settings and the count of clean steps with `state`'s (the
    /// scale rounded to `f32`). Values an enabled scaler cannot hold are an error, and then
    /// nothing changes. A disabled scaler ignores the state, as PyTorch's.
    pub fn load_state_dict(&mut self, state: &GradScalerState) -> Result<()> {
        if !self.enabled {
            return Ok(());
        }
        self.scale = state.checked_scale("GradScaler::load_state_dict")?;
        self.growth_factor = state.growth_factor;
        self.backoff_factor = state.backoff_factor;
        self.growth_interval = state.growth_interval;
        self.growth_tracker = state.growth_tracker;
        Ok(())
    }
}

/// Whether a write through `g`'s layout would reach one element more than once.
fn broadcast(g: &Tensor) -> bool {
    g.numel() > 0 && g.shape().iter().zip(g.strides()).any(|(&d, &s)| d > 1 && s == 0)
}
