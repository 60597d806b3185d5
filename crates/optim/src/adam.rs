//! Adam and AdamW (PyTorch's `torch.optim.Adam` and `torch.optim.AdamW`), which differ only
//! in how weight decay enters: added to the gradient (Adam's L2 penalty) or applied to the
//! parameter directly (AdamW's decoupled decay).

use crate::builder::builder;
use crate::optimizer::{Optimizer, non_negative, unit_interval};
use crate::optimizer_state::{OptimizerState, Reader};
use crate::params::{Slot, check_params};
use ember_autograd::{NoGradGuard, Var};
use ember_tensor::ops::optim::AdamStep;
use ember_tensor::{Result, Tensor};

/// The settings of [`Adam`]. The defaults are PyTorch's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamConfig {
    /// Learning rate.
    pub lr: f64,
    /// Decay rates of the running averages of the gradient and of its square.
    pub betas: (f64, f64),
    /// Added to the denominator for numerical stability.
    pub eps: f64,
    /// L2 penalty added to the gradient: `g + weight_decay * p`.
    pub weight_decay: f64,
    /// Normalise by the running maximum of the second moment (AMSGrad).
    pub amsgrad: bool,
}

impl Default for AdamConfig {
    fn default() -> Self {
        AdamConfig { lr: 1e-3, betas: (0.9, 0.999), eps: 1e-8, weight_decay: 0.0, amsgrad: false }
    }
}

/// The settings of [`AdamW`]: those of Adam, with decoupled weight decay defaulting to
/// PyTorch's `1e-2`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWConfig {
    /// Learning rate.
    pub lr: f64,
    /// Decay rates of the running averages of the gradient and of its square.
    pub betas: (f64, f64),
    /// Added to the denominator for numerical stability.
    pub eps: f64,
    /// Decoupled weight decay: each step multiplies the parameter by `1 - lr * weight_decay`.
    pub weight_decay: f64,
    /// Normalise by the running maximum of the second moment (AMSGrad).
    pub amsgrad: bool,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        AdamWConfig { lr: 1e-3, betas: (0.9, 0.999), eps: 1e-8, weight_decay: 1e-2, amsgrad: false }
    }
}

impl From<AdamWConfig> for AdamConfig {
    fn from(c: AdamWConfig) -> AdamConfig {
        AdamConfig { lr: c.lr, betas: c.betas, eps: c.eps, weight_decay: c.weight_decay, amsgrad: c.amsgrad }
    }
}

impl From<AdamConfig> for AdamWConfig {
    fn from(c: AdamConfig) -> AdamWConfig {
        AdamWConfig { lr: c.lr, betas: c.betas, eps: c.eps, weight_decay: c.weight_decay, amsgrad: c.amsgrad }
    }
}

impl AdamConfig {
    fn validate(&self, op: &'static str) -> Result<()> {
        non_negative(op, "lr", self.lr)?;
        non_negative(op, "eps", self.eps)?;
        unit_interval(op, "beta1", self.betas.0)?;
        unit_interval(op, "beta2", self.betas.1)?;
        non_negative(op, "weight_decay", self.weight_decay)
    }
}

/// One parameter's Adam state.
struct AdamState {
    /// Updates so far; the bias corrections use it.
    step: u64,
    /// Running average of the gradient.
    exp_avg: Tensor,
    /// Running average of the squared gradient.
    exp_avg_sq: Tensor,
    /// Running maximum of `exp_avg_sq` (AMSGrad only).
    max_exp_avg_sq: Option<Tensor>,
}

/// What Adam and AdamW share: everything but the kind of weight decay.
struct AdamCore {
    kind: &'static str,
    params: Vec<Var>,
    config: AdamConfig,
    decoupled: bool,
    state: Vec<Option<AdamState>>,
}

impl AdamCore {
    fn new(
        kind: &'static str,
        params: impl IntoIterator<Item = Var>,
        config: AdamConfig,
        decoupled: bool,
    ) -> Result<Self> {
        let op = if decoupled { "AdamW::new" } else { "Adam::new" };
        config.validate(op)?;
        let params = check_params(op, params)?;
        let state = (0..params.len()).map(|_| None).collect();
        Ok(AdamCore { kind, params, config, decoupled, state })
    }

    fn step(&mut self) -> Result<()> {
        let op = if self.decoupled { "AdamW::step" } else { "Adam::step" };
        let _no_grad = NoGradGuard::new();
        for (i, slot) in Slot::prepare_all(op, &self.params)? {
            let amsgrad = self.config.amsgrad;
            let st = self.state[i].get_or_insert_with(|| AdamState {
                step: 0,
                exp_avg: slot.value.zeros_like(),
                exp_avg_sq: slot.value.zeros_like(),
                max_exp_avg_sq: amsgrad.then(|| slot.value.zeros_like()),
            });
            update(&slot, st, &self.config, self.decoupled)?;
            slot.finish()?;
        }
        Ok(())
    }

    fn state_dict(&self) -> OptimizerState {
        let c = &self.config;
        let mut d = OptimizerState::new(self.kind, self.params.len());
        d.set("lr", c.lr);
        d.set("beta1", c.betas.0);
        d.set("beta2", c.betas.1);
        d.set("eps", c.eps);
        d.set("weight_decay", c.weight_decay);
        d.set_flag("amsgrad", c.amsgrad);
        for (i, st) in self.state.iter().enumerate() {
            let Some(st) = st else { continue };
            d.set(crate::optimizer_state::state_key(i, "step"), st.step as f64);
            d.set_state(i, "exp_avg", &st.exp_avg);
            d.set_state(i, "exp_avg_sq", &st.exp_avg_sq);
            if let Some(m) = &st.max_exp_avg_sq {
                d.set_state(i, "max_exp_avg_sq", m);
            }
        }
        d
    }

    fn load_state_dict(&mut self, dict: &OptimizerState) -> Result<()> {
        let mut r = Reader::new(dict, self.kind, self.params.len())?;
        let config = AdamConfig {
            lr: r.scalar("lr")?,
            betas: (r.scalar("beta1")?, r.scalar("beta2")?),
            eps: r.scalar("eps")?,
            weight_decay: r.scalar("weight_decay")?,
            amsgrad: r.flag("amsgrad")?,
        };
        config.validate("load_state_dict")?;
        let state = r.per_param(&self.params, |r, i, v| {
            Ok(AdamState {
                step: r.step(i)?,
                exp_avg: r.tensor(i, "exp_avg", v)?,
                exp_avg_sq: r.tensor(i, "exp_avg_sq", v)?,
                max_exp_avg_sq: r.tensor_if(config.amsgrad, i, "max_exp_avg_sq", v)?,
            })
        })?;
        r.finish()?;
        self.config = config;
        self.state = state;
        Ok(())
    }
}

/// One parameter's update: one fused pass over the parameter, its gradient and its state,
/// in place; nothing is allocated.
fn update(slot: &Slot, st: &mut AdamState, c: &AdamConfig, decoupled: bool) -> Result<()> {
    slot.check_state("exp_avg", &st.exp_avg)?;
    slot.check_state("exp_avg_sq", &st.exp_avg_sq)?;
    if let Some(m) = &st.max_exp_avg_sq {
        slot.check_state("max_exp_avg_sq", m)?;
    }
    // The count advances once the update has gone through.
    let step = st.step + 1;
    let hp = AdamStep {
        lr: c.lr,
        beta1: c.betas.0,
        beta2: c.betas.1,
        eps: c.eps,
        weight_decay: c.weight_decay,
        decoupled,
        amsgrad: c.amsgrad,
        step,
    };
    slot.value.adam_step_(&slot.grad, &st.exp_avg, &st.exp_avg_sq, st.max_exp_avg_sq.as_ref(), &hp)?;
    st.step = step;
    Ok(())
}

/// Adam (Kingma & Ba), with PyTorch's update rule and its optional AMSGrad variant.
///
/// With `d = g + weight_decay·p`, per parameter and step `t`:
/// `m = lerp(m, d, 1 - β1)`, `v = β2·v + (1 - β2)·d²`,
/// `p -= lr/(1 - β1^t) · m / (√v̂ / √(1 - β2^t) + eps)` where `v̂` is `v`, or its running
/// maximum with AMSGrad. The moments start at zero on a parameter's first update, and `t`
/// counts that parameter's own updates.
///
/// ```
/// use ember_autograd::Var;
/// use ember_optim::{Adam, AdamConfig, Optimizer};
/// use ember_tensor::Tensor;
/// let w = Var::param(Tensor::from_vec(vec![1.0f32, -2.0], [2])?);
/// let mut opt = Adam::new(vec![w.clone()], AdamConfig { lr: 0.1, ..Default::default() })?;
/// (&w * &w)?.sum_all().backward()?;
/// opt.step()?;
/// // Adam's first step moves every coordinate by about lr against its gradient's sign.
/// let v = w.value().to_vec::<f32>()?;
/// assert!((v[0] - 0.9).abs() < 1e-6 && (v[1] + 1.9).abs() < 1e-6);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub struct Adam {
    core: AdamCore,
}

/// AdamW (Loshchilov & Hutter): Adam whose weight decay shrinks the parameter directly,
/// `p *= 1 - lr·weight_decay`, before the Adam step, instead of adding an L2 term to the
/// gradient.
///
/// ```
/// use ember_autograd::Var;
/// use ember_optim::{AdamW, Optimizer};
/// use ember_tensor::Tensor;
/// let w = Var::param(Tensor::from_vec(vec![1.0f64], [1])?);
/// let mut opt = AdamW::with_params(vec![w.clone()]).lr(0.1).weight_decay(0.5).build()?;
/// w.set_grad(Some(Tensor::from_vec(vec![0.0f64], [1])?))?;
/// opt.step()?; // a zero gradient: only the decay acts
/// assert_eq!(w.value().to_vec::<f64>()?, vec![0.95]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
pub struct AdamW {
    core: AdamCore,
}

builder! {
    /// Builds an [`Adam`] with chained settings; see [`Adam::with_params`].
    AdamBuilder builds Adam from AdamConfig {
        /// Learning rate.
        lr: f64,
        /// Decay rates of the moment estimates.
        betas: (f64, f64),
        /// Denominator term for numerical stability.
        eps: f64,
        /// L2 penalty.
        weight_decay: f64,
        /// AMSGrad.
        amsgrad: bool,
    }
}

builder! {
    /// Builds an [`AdamW`] with chained settings; see [`AdamW::with_params`].
    AdamWBuilder builds AdamW from AdamWConfig {
        /// Learning rate.
        lr: f64,
        /// Decay rates of the moment estimates.
        betas: (f64, f64),
        /// Denominator term for numerical stability.
        eps: f64,
        /// Decoupled weight decay.
        weight_decay: f64,
        /// AMSGrad.
        amsgrad: bool,
    }
}

impl Adam {
    /// Adam over `params` with `config`; fails on settings out of range and on an empty,
    /// duplicated or non-float parameter list.
    pub fn new(params: impl IntoIterator<Item = Var>, config: AdamConfig) -> Result<Adam> {
        Ok(Adam { core: AdamCore::new("Adam", params, config, false)? })
    }

    /// A builder over `params` (this optimizer owns exactly these, so several optimizers can
    /// share a model's parameters between them), with PyTorch's defaults.
    pub fn with_params(params: impl IntoIterator<Item = Var>) -> AdamBuilder {
        AdamBuilder::new(params)
    }

    /// The settings.
    pub fn config(&self) -> &AdamConfig {
        &self.core.config
    }
}

impl AdamW {
    /// AdamW over `params` with `config`; fails on settings out of range and on an empty,
    /// duplicated or non-float parameter list.
    pub fn new(params: impl IntoIterator<Item = Var>, config: AdamWConfig) -> Result<AdamW> {
        Ok(AdamW { core: AdamCore::new("AdamW", params, config.into(), true)? })
    }

    /// A builder over `params` (this optimizer owns exactly these, so several optimizers can
    /// share a model's parameters between them), with PyTorch's defaults.
    pub fn with_params(params: impl IntoIterator<Item = Var>) -> AdamWBuilder {
        AdamWBuilder::new(params)
    }

    /// The settings.
    pub fn config(&self) -> AdamWConfig {
        self.core.config.into()
    }
}

/// Implements [`Optimizer`] for a wrapper of [`AdamCore`].
macro_rules! delegate_optimizer {
    ($t:ty) => {
        impl Optimizer for $t {
            fn step(&mut self) -> Result<()> {
                self.core.step()
            }

            fn lr(&self) -> f64 {
                self.core.config.lr
            }

            fn set_lr(&mut self, lr: f64) {
                self.core.config.lr = lr;
            }

            fn params(&self) -> &[Var] {
                &self.core.params
            }

            fn state_dict(&self) -> OptimizerState {
                self.core.state_dict()
            }

            fn load_state_dict(&mut self, state: &OptimizerState) -> Result<()> {
                self.core.load_state_dict(state)
            }
        }

        impl std::fmt::Debug for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(self.core.kind)
                    .field("params", &self.core.params.len())
                    .field("config", &self.core.config)
                    .finish()
            }
        }
    };
}

delegate_optimizer!(Adam);
delegate_optimizer!(AdamW);
