//! RMSprop (PyTorch's `torch.optim.RMSprop`), optionally centered and with momentum.

use crate::builder::builder;
use crate::optimizer::{Optimizer, non_negative};
use crate::optimizer_state::{OptimizerState, Reader, state_key};
use crate::params::{Slot, check_params};
use ember_autograd::{NoGradGuard, Var};
use ember_tensor::ops::optim::RmsPropStep;
use ember_tensor::{Error, Result, Tensor};

const KIND: &str = "RmsProp";

/// The settings of [`RmsProp`]. The defaults are PyTorch's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RmsPropConfig {
    /// Learning rate.
    pub lr: f64,
    /// Smoothing constant of the running averages.
    pub alpha: f64,
    /// Added to the denominator for numerical stability.
    pub eps: f64,
    /// L2 penalty added to the gradient: `g + weight_decay * p`.
    pub weight_decay: f64,
    /// Momentum factor; 0 turns momentum off.
    pub momentum: f64,
    /// Normalise by an estimate of the gradient's variance instead of its second moment.
    pub centered: bool,
}

impl Default for RmsPropConfig {
    fn default() -> Self {
        RmsPropConfig { lr: 1e-2, alpha: 0.99, eps: 1e-8, weight_decay: 0.0, momentum: 0.0, centered: false }
    }
}

impl RmsPropConfig {
    fn validate(&self, op: &'static str) -> Result<()> {
        non_negative(op, "lr", self.lr)?;
        non_negative(op, "eps", self.eps)?;
        non_negative(op, "momentum", self.momentum)?;
        non_negative(op, "weight_decay", self.weight_decay)?;
        // PyTorch accepts any alpha >= 0; above 1 the running average diverges, so refuse it.
        if !(0.0..=1.0).contains(&self.alpha) {
            return Err(Error::invalid(op, format!("alpha must be in [0, 1], got {}", self.alpha)));
        }
        Ok(())
    }
}

/// One parameter's RMSprop state.
struct RmsPropState {
    /// Updates so far (kept for checkpoints, as PyTorch does; the rule does not use it).
    step: u64,
    /// Running average of the squared gradient.
    square_avg: Tensor,
    /// Running average of the gradient (centered only).
    grad_avg: Option<Tensor>,
    /// Momentum buffer (momentum > 0 only).
    momentum_buffer: Option<Tensor>,
}

/// RMSprop (Hinton), with PyTorch's update rule.
///
/// With `d = g + weight_decay·p`: `s = α·s + (1 - α)·d²`; centered, also
/// `ḡ = lerp(ḡ, d, 1 - α)` and `a = √(s - ḡ²) + eps`, else `a = √s + eps`; then
/// `p -= lr·d/a`, or with momentum `b = momentum·b + d/a`, `p -= lr·b`. All state starts at
/// zero.
///
/// ```
/// use ember_autograd::Var;
/// use ember_optim::{Optimizer, RmsProp};
/// use ember_tensor::Tensor;
/// let w = Var::param(Tensor::from_vec(vec![3.0f64], [1])?);
/// let mut opt = RmsProp::with_params(vec![w.clone()]).lr(0.01).centered(true).build()?;
/// for _ in 0..100 {
///     opt.zero_grad();
///     (&w * &w)?.sum_all().backward()?;
///     opt.step()?;
/// }
/// assert!(w.value().to_vec::<f64>()?[0] < 3.0);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub struct RmsProp {
    params: Vec<Var>,
    config: RmsPropConfig,
    state: Vec<Option<RmsPropState>>,
}

builder! {
    /// Builds an [`RmsProp`] with chained settings; see [`RmsProp::with_params`].
    RmsPropBuilder builds RmsProp from RmsPropConfig {
        /// Learning rate.
        lr: f64,
        /// Smoothing constant.
        alpha: f64,
        /// Denominator term for numerical stability.
        eps: f64,
        /// L2 penalty.
        weight_decay: f64,
        /// Momentum factor.
        momentum: f64,
        /// Centered RMSprop.
        centered: bool,
    }
}

impl RmsProp {
    /// RMSprop over `params` with `config`; fails on settings out of range and on an
    /// empty, duplicated or non-float parameter list.
    pub fn new(params: impl IntoIterator<Item = Var>, config: RmsPropConfig) -> Result<RmsProp> {
        let op = "RmsProp::new";
        config.validate(op)?;
        let params = check_params(op, params)?;
        let state = (0..params.len()).map(|_| None).collect();
        Ok(RmsProp { params, config, state })
    }

    /// A builder over `params` (this optimizer owns exactly these, so several optimizers can
    /// share a model's parameters between them), with PyTorch's defaults.
    pub fn with_params(params: impl IntoIterator<Item = Var>) -> RmsPropBuilder {
        RmsPropBuilder::new(params)
    }

    /// The settings.
    pub fn config(&self) -> &RmsPropConfig {
        &self.config
    }
}

/// One parameter's update: one fused pass over the parameter, its gradient and its state,
/// in place; nothing is allocated.
fn update(slot: &Slot, st: &mut RmsPropState, c: &RmsPropConfig) -> Result<()> {
    slot.check_state("square_avg", &st.square_avg)?;
    for (name, t) in [("grad_avg", &st.grad_avg), ("momentum_buffer", &st.momentum_buffer)] {
        if let Some(t) = t {
            slot.check_state(name, t)?;
        }
    }
    // The state was made (or loaded) for these settings, so the kernel finds exactly the
    // tensors they need.
    let hp = RmsPropStep {
        lr: c.lr,
        alpha: c.alpha,
        eps: c.eps,
        weight_decay: c.weight_decay,
        momentum: c.momentum,
        centered: c.centered,
    };
    let (ga, buf) = (st.grad_avg.as_ref(), st.momentum_buffer.as_ref());
    slot.value.rmsprop_step_(&slot.grad, &st.square_avg, ga, buf, &hp)?;
    st.step += 1;
    Ok(())
}

impl Optimizer for RmsProp {
    fn step(&mut self) -> Result<()> {
        let op = "RmsProp::step";
        let _no_grad = NoGradGuard::new();
        for (i, slot) in Slot::prepare_all(op, &self.params)? {
            let c = &self.config;
            let st = self.state[i].get_or_insert_with(|| RmsPropState {
                step: 0,
                square_avg: slot.value.zeros_like(),
                grad_avg: c.centered.then(|| slot.value.zeros_like()),
                momentum_buffer: (c.momentum > 0.0).then(|| slot.value.zeros_like()),
            });
            update(&slot, st, c)?;
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
        d.set("alpha", c.alpha);
        d.set("eps", c.eps);
        d.set("weight_decay", c.weight_decay);
        d.set("momentum", c.momentum);
        d.set_flag("centered", c.centered);
        for (i, st) in self.state.iter().enumerate() {
            let Some(st) = st else { continue };
            d.set(state_key(i, "step"), st.step as f64);
            d.set_state(i, "square_avg", &st.square_avg);
            if let Some(t) = &st.grad_avg {
                d.set_state(i, "grad_avg", t);
            }
            if let Some(t) = &st.momentum_buffer {
                d.set_state(i, "momentum_buffer", t);
            }
        }
        d
    }

    fn load_state_dict(&mut self, dict: &OptimizerState) -> Result<()> {
        let mut r = Reader::new(dict, KIND, self.params.len())?;
        let config = RmsPropConfig {
            lr: r.scalar("lr")?,
            alpha: r.scalar("alpha")?,
            eps: r.scalar("eps")?,
            weight_decay: r.scalar("weight_decay")?,
            momentum: r.scalar("momentum")?,
            centered: r.flag("centered")?,
        };
        config.validate("load_state_dict")?;
        let state = r.per_param(&self.params, |r, i, v| {
            Ok(RmsPropState {
                step: r.step(i)?,
                square_avg: r.tensor(i, "square_avg", v)?,
                grad_avg: r.tensor_if(config.centered, i, "grad_avg", v)?,
                momentum_buffer: r.tensor_if(config.momentum > 0.0, i, "momentum_buffer", v)?,
            })
        })?;
        r.finish()?;
        self.config = config;
        self.state = state;
        Ok(())
    }
}

impl std::fmt::Debug for RmsProp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RmsProp").field("params", &self.params.len()).field("config", &self.config).finish()
    }
}
