//! RMSprop (PyTorch's `torch.optim.RMSprop`), optionally centered and with momentum.

use crate::builder::builder;
use crate::kernel::{decayed, lerp, lerp_small};
use crate::optimizer::{Optimizer, non_negative};
use crate::params::{Slot, check_params};
use crate::state_dict::{Reader, StateDict, state_key};
use ember_autograd::{NoGradGuard, Var};
use ember_tensor::{DType, Error, FloatElement, Result, Tensor};

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

/// One parameter's update in element type `T`: one fused pass per state tensor and one for
/// the parameter, allocating nothing.
fn update<T: FloatElement>(slot: &Slot, st: &mut RmsPropState, c: &RmsPropConfig) -> Result<()> {
    slot.check_state("square_avg", &st.square_avg)?;
    for (name, t) in [("grad_avg", &st.grad_avg), ("momentum_buffer", &st.momentum_buffer)] {
        if let Some(t) = t {
            slot.check_state(name, t)?;
        }
    }
    let (p, g) = (&slot.value, &slot.grad);
    let decay = c.weight_decay != 0.0;
    let wd = T::from_f64(c.weight_decay);
    // The parameter's values are needed only for weight decay; else the gradient stands in.
    let p_src = if decay { p } else { g };

    // square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
    let (alpha, w) = (T::from_f64(c.alpha), T::from_f64(1.0 - c.alpha));
    st.square_avg.update_::<T, 2>([g, p_src], move |s, [g, p]| {
        let g = decayed(g, p, wd, decay);
        *s = *s * alpha + w * g * g;
    })?;

    // grad_avg.lerp_(grad, 1 - alpha)
    if let Some(ga) = &st.grad_avg {
        let small = lerp_small(w);
        ga.update_::<T, 2>([g, p_src], move |a, [g, p]| *a = lerp(*a, decayed(g, p, wd, decay), w, small))?;
    }

    // avg = square_avg.addcmul(grad_avg, grad_avg, value=-1).sqrt_().add_(eps) when
    // centered, else square_avg.sqrt().add_(eps). Without a grad_avg, square_avg stands in
    // as its operand (read, not used) so that one kernel serves both.
    let centered = st.grad_avg.is_some();
    let sq = &st.square_avg;
    let ga = st.grad_avg.as_ref().unwrap_or(sq);
    let eps = T::from_f64(c.eps);
    let avg = move |s: T, a: T| if centered { (s + -a * a).sqrt() + eps } else { s.sqrt() + eps };
    let neg_lr = T::from_f64(-c.lr);
    match &st.momentum_buffer {
        Some(buf) => {
            // buf.mul_(momentum).addcdiv_(grad, avg); param.add_(buf, alpha=-lr)
            let momentum = T::from_f64(c.momentum);
            buf.update_::<T, 4>([g, p_src, sq, ga], move |b, [g, p, s, a]| {
                *b = *b * momentum + decayed(g, p, wd, decay) / avg(s, a);
            })?;
            p.update_::<T, 1>([buf], move |p, [b]| *p = *p + neg_lr * b)?;
        }
        // param.addcdiv_(grad, avg, value=-lr)
        None => p.update_::<T, 3>([g, sq, ga], move |p, [g, s, a]| {
            *p = *p + neg_lr * decayed(g, *p, wd, decay) / avg(s, a);
        })?,
    }
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
            match slot.value.dtype() {
                DType::F32 => update::<f32>(&slot, st, c)?,
                // `Slot::prepare_all` admits only float values.
                _ => update::<f64>(&slot, st, c)?,
            }
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

    fn state_dict(&self) -> StateDict {
        let c = &self.config;
        let mut d = StateDict::new(KIND, self.params.len());
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

    fn load_state_dict(&mut self, dict: &StateDict) -> Result<()> {
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
