//! Learning-rate schedulers: [`StepLR`], [`CosineAnnealingLR`] and [`LambdaLR`], which set an
//! optimizer's learning rate once per epoch as PyTorch's schedulers of the same names do.
//!
//! A scheduler does not hold the optimizer (a training loop needs it mutably for its own
//! steps); it takes it on each call instead. Built over an optimizer, a scheduler records
//! the optimizer's current learning rate as its base and sets the epoch-0 rate; each
//! [`LrScheduler::step`] advances one epoch and sets that epoch's rate. Call it after the
//! epoch's optimizer steps, as in PyTorch:
//!
//! ```
//! use ember_autograd::Var;
//! use ember_optim::{LrScheduler, Optimizer, Sgd, StepLR};
//! use ember_tensor::Tensor;
//! let w = Var::param(Tensor::zeros([3], ember_tensor::DType::F32)?);
//! let mut opt = Sgd::with_params(vec![w]).lr(0.1).build()?;
//! let mut sched = StepLR::new(&mut opt, 2, 0.5)?;
//! let mut lrs = vec![];
//! for _epoch in 0..5 {
//!     lrs.push(opt.lr());
//!     // ... the epoch's forward, backward and opt.step() ...
//!     sched.step(&mut opt);
//! }
//! assert_eq!(lrs, vec![0.1, 0.1, 0.05, 0.05, 0.025]);
//! # Ok::<(), ember_tensor::Error>(())
//! ```
//!
//! Each scheduler computes its rate in closed form from the base rate and the epoch count,
//! so there is no drift from repeated multiplication; it agrees with PyTorch's recursive
//! updates whenever nothing else changes the rate between steps.

use crate::Optimizer;
use ember_tensor::{Error, Result};

/// A learning-rate schedule driving an optimizer epoch by epoch.
pub trait LrScheduler {
    /// Advances one epoch and sets the optimizer's learning rate for it.
    fn step(&mut self, optimizer: &mut dyn Optimizer);

    /// The learning rate of the current epoch, as last set on the optimizer (PyTorch's
    /// `get_last_lr()`).
    fn get_lr(&self) -> f64;

    /// Epochs stepped so far (0 right after construction).
    fn last_epoch(&self) -> usize;
}

/// The epoch counter and rates every scheduler keeps.
#[derive(Clone, Copy, Debug)]
struct Progress {
    base_lr: f64,
    last_epoch: usize,
    last_lr: f64,
}

impl Progress {
    /// Records the optimizer's rate as the base and applies the epoch-0 rate `lr_at(0)`.
    fn start(optimizer: &mut dyn Optimizer, lr_at: impl Fn(f64, usize) -> f64) -> Progress {
        let base_lr = optimizer.lr();
        let lr = lr_at(base_lr, 0);
        optimizer.set_lr(lr);
        Progress { base_lr, last_epoch: 0, last_lr: lr }
    }

    /// Moves to the next epoch and applies its rate.
    fn advance(&mut self, optimizer: &mut dyn Optimizer, lr_at: impl Fn(f64, usize) -> f64) {
        self.last_epoch += 1;
        self.last_lr = lr_at(self.base_lr, self.last_epoch);
        optimizer.set_lr(self.last_lr);
    }
}

/// Multiplies the learning rate by `gamma` every `step_size` epochs:
/// `lr = base_lr · gamma^⌊epoch / step_size⌋` (PyTorch's `StepLR`).
#[derive(Clone, Debug)]
pub struct StepLR {
    step_size: usize,
    gamma: f64,
    progress: Progress,
}

impl StepLR {
    /// A schedule over `optimizer`'s current learning rate; `step_size` must be positive and
    /// `gamma` finite.
    pub fn new(optimizer: &mut dyn Optimizer, step_size: usize, gamma: f64) -> Result<StepLR> {
        if step_size == 0 {
            return Err(Error::invalid("StepLR::new", "step_size must be positive"));
        }
        if !gamma.is_finite() {
            return Err(Error::invalid("StepLR::new", format!("gamma must be finite, got {gamma}")));
        }
        let lr_at = Self::rule(step_size, gamma);
        Ok(StepLR { step_size, gamma, progress: Progress::start(optimizer, lr_at) })
    }

    fn rule(step_size: usize, gamma: f64) -> impl Fn(f64, usize) -> f64 {
        // Python's `gamma ** (epoch // step_size)`: a float power of an integer exponent.
        move |base, epoch| base * gamma.powf((epoch / step_size) as f64)
    }
}

impl LrScheduler for StepLR {
    fn step(&mut self, optimizer: &mut dyn Optimizer) {
        self.progress.advance(optimizer, Self::rule(self.step_size, self.gamma));
    }

    fn get_lr(&self) -> f64 {
        self.progress.last_lr
    }

    fn last_epoch(&self) -> usize {
        self.progress.last_epoch
    }
}

/// Anneals the learning rate from its base to `eta_min` along half a cosine over `t_max`
/// epochs: `lr = eta_min + (base_lr - eta_min)·(1 + cos(π·epoch / t_max)) / 2`
/// (PyTorch's `CosineAnnealingLR`, in its closed form). Past `t_max` the cosine continues, so
/// the rate climbs back towards the base over the next `t_max` epochs, as in PyTorch.
#[derive(Clone, Debug)]
pub struct CosineAnnealingLR {
    t_max: usize,
    eta_min: f64,
    progress: Progress,
}

impl CosineAnnealingLR {
    /// A schedule over `optimizer`'s current learning rate; `t_max` must be positive and
    /// `eta_min` finite.
    pub fn new(optimizer: &mut dyn Optimizer, t_max: usize, eta_min: f64) -> Result<CosineAnnealingLR> {
        if t_max == 0 {
            return Err(Error::invalid("CosineAnnealingLR::new", "t_max must be positive"));
        }
        if !eta_min.is_finite() {
            return Err(Error::invalid("CosineAnnealingLR::new", format!("eta_min must be finite, got {eta_min}")));
        }
        let lr_at = Self::rule(t_max, eta_min);
        Ok(CosineAnnealingLR { t_max, eta_min, progress: Progress::start(optimizer, lr_at) })
    }

    fn rule(t_max: usize, eta_min: f64) -> impl Fn(f64, usize) -> f64 {
        move |base, epoch| {
            let phase = std::f64::consts::PI * epoch as f64 / t_max as f64;
            eta_min + (base - eta_min) * (1.0 + phase.cos()) / 2.0
        }
    }
}

impl LrScheduler for CosineAnnealingLR {
    fn step(&mut self, optimizer: &mut dyn Optimizer) {
        self.progress.advance(optimizer, Self::rule(self.t_max, self.eta_min));
    }

    fn get_lr(&self) -> f64 {
        self.progress.last_lr
    }

    fn last_epoch(&self) -> usize {
        self.progress.last_epoch
    }
}

/// Sets the learning rate to the base rate times a function of the epoch:
/// `lr = base_lr · f(epoch)` (PyTorch's `LambdaLR`). The epoch-0 rate is `base_lr · f(0)`.
///
/// ```
/// use ember_autograd::Var;
/// use ember_optim::{LambdaLR, LrScheduler, Optimizer, Sgd};
/// use ember_tensor::Tensor;
/// let w = Var::param(Tensor::zeros([1], ember_tensor::DType::F32)?);
/// let mut opt = Sgd::with_params(vec![w]).lr(1.0).build()?;
/// // Linear warm-up over 4 epochs.
/// let mut sched = LambdaLR::new(&mut opt, |epoch| ((epoch + 1) as f64 / 4.0).min(1.0));
/// assert_eq!(opt.lr(), 0.25);
/// sched.step(&mut opt);
/// assert_eq!(sched.get_lr(), 0.5);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub struct LambdaLR {
    factor: Box<dyn Fn(usize) -> f64 + Send + Sync>,
    progress: Progress,
}

impl LambdaLR {
    /// A schedule over `optimizer`'s current learning rate, scaled by `factor(epoch)`.
    pub fn new(optimizer: &mut dyn Optimizer, factor: impl Fn(usize) -> f64 + Send + Sync + 'static) -> LambdaLR {
        let progress = Progress::start(optimizer, |base, epoch| base * factor(epoch));
        LambdaLR { factor: Box::new(factor), progress }
    }
}

impl LrScheduler for LambdaLR {
    fn step(&mut self, optimizer: &mut dyn Optimizer) {
        let factor = &self.factor;
        self.progress.advance(optimizer, |base, epoch| base * factor(epoch));
    }

    fn get_lr(&self) -> f64 {
        self.progress.last_lr
    }

    fn last_epoch(&self) -> usize {
        self.progress.last_epoch
    }
}

impl std::fmt::Debug for LambdaLR {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LambdaLR").field("progress", &self.progress).finish_non_exhaustive()
    }
}
