//! Stochastic gradient descent with momentum, dampening, Nesterov momentum and L2 weight
//! decay (PyTorch's `torch.optim.SGD`).

use crate::builder::builder;
use crate::optimizer::{Optimizer, non_negative};
use crate::optimizer_state::{OptimizerState, Reader};
use crate::params::{Slot, check_params};
use ember_autograd::{NoGradGuard, Var};
use ember_tensor::ops::optim::SgdStep;
use ember_tensor::{Error, Result, Tensor};

const KIND: &str = "Sgd";

/// The settings of [`Sgd`]. The defaults are PyTorch's: plain SGD at `lr = 1e-3`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdConfig {
    /// Learning rate.
    pub lr: f64,
    /// Momentum factor; 0 turns momentum off.
    pub momentum: f64,
    /// Dampening of the gradient's contribution to the momentum buffer.
    pub dampening: f64,
    /// Nesterov momentum (needs `momentum > 0` and `dampening == 0`).
    pub nesterov: bool,
    /// L2 penalty added to the gradient: `g + weight_decay * p`.
    pub weight_decay: f64,
}

impl Default for SgdConfig {
    fn default() -> Self {
        SgdConfig { lr: 1e-3, momentum: 0.0, dampening: 0.0, nesterov: false, weight_decay: 0.0 }
    }
}

impl SgdConfig {
    fn validate(&self, op: &'static str) -> Result<()> {
        non_negative(op, "lr", self.lr)?;
        non_negative(op, "momentum", self.momentum)?;
        non_negative(op, "dampening", self.dampening)?;
        non_negative(op, "weight_decay", self.weight_decay)?;
        if self.nesterov && (self.momentum <= 0.0 || self.dampening != 0.0) {
            return Err(Error::invalid(
                op,
                format!(
                    "nesterov needs momentum > 0 and dampening == 0, got momentum {} and dampening {}",
                    self.momentum, self.dampening
                ),
            ));
        }
        Ok(())
    }
}

/// Stochastic gradient descent, with PyTorch's update rule. With `d = g + wd·p`:
///
/// - without momentum, `p -= lr·d`;
/// - with momentum, the buffer starts as `b = d` on a parameter's first step and then
///   follows `b = momentum·b + (1 - dampening)·d`; the step is `p -= lr·b`, or
///   `p -= lr·(d + momentum·b)` with Nesterov.
///
/// Each update is one fused pass over the parameter (and its momentum buffer), in place.
///
/// ```
/// use ember_autograd::Var;
/// use ember_optim::{Optimizer, Sgd};
/// use ember_tensor::Tensor;
/// let w = Var::param(Tensor::from_vec(vec![1.0f64, 2.0], [2])?);
/// let mut opt = Sgd::with_params(vec![w.clone()]).lr(0.1).momentum(0.9).build()?;
/// (&w * &w)?.sum_all().backward()?; // gradient 2w
/// opt.step()?;
/// assert_eq!(w.value().to_vec::<f64>()?, vec![0.8, 1.6]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub struct Sgd {
    params: Vec<Var>,
    config: SgdConfig,
    /// Momentum buffer of each parameter, made on its first update when momentum is on.
    buffers: Vec<Option<Tensor>>,
}

builder! {
    /// Builds an [`Sgd`] with chained settings; see [`Sgd::with_params`].
    SgdBuilder builds Sgd from SgdConfig {
        /// Learning rate.
        lr: f64,
        /// Momentum factor.
        momentum: f64,
        /// Dampening of the momentum buffer's gradient term.
        dampening: f64,
        /// Nesterov momentum.
        nesterov: bool,
        /// L2 penalty.
        weight_decay: f64,
    }
}

impl Sgd {
    /// SGD over `params` with `config`; fails on settings out of range and on an empty,
    /// duplicated or non-float parameter list.
    pub fn new(params: impl IntoIterator<Item = Var>, config: SgdConfig) -> Result<Sgd> {
        let op = "Sgd::new";
        config.validate(op)?;
        let params = check_params(op, params)?;
        let buffers = vec![None; params.len()];
        Ok(Sgd { params, config, buffers })
    }

    /// A builder over `params` (this optimizer owns exactly these, so several optimizers can
    /// share a model's parameters between them), with PyTorch's defaults.
    pub fn with_params(params: impl IntoIterator<Item = Var>) -> SgdBuilder {
        SgdBuilder::new(params)
    }

    /// The settings.
    pub fn config(&self) -> &SgdConfig {
        &self.config
    }
}

/// One parameter's update: one fused pass over the parameter, its gradient and its
/// momentum buffer.
fn update(slot: &Slot, buffer: &mut Option<Tensor>, c: &SgdConfig) -> Result<()> {
    if let Some(b) = buffer {
        slot.check_state("momentum_buffer", b)?;
    }
    let (p, g) = (&slot.value, &slot.grad);
    let mut hp = SgdStep {
        lr: c.lr,
        momentum: c.momentum,
        dampening: c.dampening,
        nesterov: c.nesterov,
        weight_decay: c.weight_decay,
        fresh_buffer: false,
    };
    if c.momentum == 0.0 {
        return p.sgd_step_(g, None, &hp);
    }
    // PyTorch starts the buffer at the (decayed) gradient itself, undampened.
    hp.fresh_buffer = buffer.is_none();
    let buf = buffer.get_or_insert_with(|| p.zeros_like());
    p.sgd_step_(g, Some(buf), &hp)
}

impl Optimizer for Sgd {
    fn step(&mut self) -> Result<()> {
        let op = "Sgd::step";
        let _no_grad = NoGradGuard::new();
        for (i, slot) in Slot::prepare_all(op, &self.params)? {
            update(&slot, &mut self.buffers[i], &self.config)?;
            slot.finish()?;
        }
        Ok(())
    }

    fn lr(&self) -> f64 {
        self.config.lr
    }

    fn set_lr(&mut self, lr: f64) {
        self.config.lr = lr;
    }

    fn params(&self) -> &[Var] {
        &self.params
    }

    fn state_dict(&self) -> OptimizerState {
        let c = &self.config;
        let mut d = OptimizerState::new(KIND, self.params.len());
        d.set("lr", c.lr);
        d.set("momentum", c.momentum);
        d.set("dampening", c.dampening);
        d.set_flag("nesterov", c.nesterov);
        d.set("weight_decay", c.weight_decay);
        for (i, b) in self.buffers.iter().enumerate() {
            if let Some(b) = b {
                d.set_state(i, "momentum_buffer", b);
            }
        }
        d
    }

    fn load_state_dict(&mut self, state: &OptimizerState) -> Result<()> {
        let mut r = Reader::new(state, KIND, self.params.len())?;
        let config = SgdConfig {
            lr: r.scalar("lr")?,
            momentum: r.scalar("momentum")?,
            dampening: r.scalar("dampening")?,
            nesterov: r.flag("nesterov")?,
            weight_decay: r.scalar("weight_decay")?,
        };
        config.validate("load_state_dict")?;
        let buffers = r.per_param(&self.params, |r, i, v| r.tensor(i, "momentum_buffer", v))?;
        r.finish()?;
        self.config = config;
        self.buffers = buffers;
        Ok(())
    }
}

impl std::fmt::Debug for Sgd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sgd").field("params", &self.params.len()).field("config", &self.config).finish()
    }
}
